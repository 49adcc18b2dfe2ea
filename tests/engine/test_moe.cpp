// The mixture-of-experts MLP (docs/experiment-format.md, "Today's models", `mlp: "moe"`): its
// gradients against finite differences (dropless, with a capacity that drops, with the
// auxiliary losses), its forward against a token-by-token reference, the capacity and the
// statistics it counts, its parameter count, FLOPs and weight names, and the errors a file can
// cause, at their JSON paths. Expert parallelism (ep 2 and 4 threads over a LocalGroup) against
// the single device: outputs, input gradients, every parameter gradient, the records, and the
// bytes each all-to-all moves.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/device/device.h"
#include "engine/io/weights.h"
#include "engine/nn/attention.h"
#include "engine/nn/factory.h"
#include "engine/nn/model.h"
#include "engine/nn/moe.h"
#include "engine/run/experiment_file.h"
#include "gradcheck.h"
#include "file_errors.h"
#include "layer_fixture.h"

using namespace paralab;
using nn::Mode;
namespace pt = paralab::testing;
using pt::GradCase;
using pt::make;
using json = nlohmann::json;

namespace {

nn::MoEOptions moe(int64_t experts, int64_t top_k, int64_t ffn, int64_t shared = 0, double capacity = 0,
                   double aux = 0, double z = 0) {
    return nn::MoEOptions{experts, top_k, ffn, shared, capacity, aux, z};
}

// Every mixture of experts in `layer` (itself or nested).
void each_moe(nn::Layer& layer, const std::function<void(nn::MoE&)>& f) {
    if (auto* m = dynamic_cast<nn::MoE*>(&layer)) f(*m);
    for (nn::Layer* c : layer.children()) each_moe(*c, f);
}

double added_loss(nn::Layer& layer) {
    double sum = 0;
    each_moe(layer, [&](nn::MoE& m) { sum += m.added_loss(); });
    return sum;
}

nn::AttentionOptions attn(int64_t heads) { return nn::AttentionOptions{heads, 0, true, 0.0, true, 10000.0, false}; }

nn::BlockOptions moe_block(const nn::MoEOptions& o) {
    nn::BlockOptions b{0, true, false, true};
    b.experts = o;
    return b;
}

// ---- gradients ------------------------------------------------------------------------------

class MoEGrad : public ::testing::TestWithParam<GradCase> {};
TEST_P(MoEGrad, MatchesFiniteDifferences) { pt::check_layer_gradients(GetParam()); }
INSTANTIATE_TEST_SUITE_P(
    Grad, MoEGrad,
    ::testing::Values(
        GradCase{"dropless_E4_k2", make<nn::MoE>(moe(4, 2, 3)), Shape{5, 4}},
        GradCase{"top1", make<nn::MoE>(moe(3, 1, 4)), Shape{4, 3}},
        // 20 assignments, capacity ceil(0.5 * 10 * 2 / 4) = 3 each: at least 8 dropped.
        GradCase{"capacity_drops", make<nn::MoE>(moe(4, 2, 3, 0, 0.5)), Shape{5, 4}},
        GradCase{"shared_aux_and_z_losses", make<nn::MoE>(moe(4, 2, 3, 1, 0, 0.3, 0.2)), Shape{5, 4}, 2,
                 Mode::train, 0, 1e-5, 1e-6, added_loss},
        GradCase{"all_experts_capacity_aux", make<nn::MoE>(moe(3, 3, 2, 2, 0.7, 0.5, 0.1)), Shape{4, 3}, 2,
                 Mode::train, 0, 1e-5, 1e-6, added_loss},
        GradCase{"block_moe", make<nn::TransformerBlock>(attn(2), moe_block(moe(4, 2, 6, 1, 0, 0.2, 0.05))),
                 Shape{4, 8}, 2, Mode::train, 0, 1e-5, 1e-6, added_loss}),
    pt::GradCaseName{});

class MoELayer : public pt::LayerFixture {};

// The forward against its definition token by token: softmax of the router's row, the k largest,
// renormalised, each expert on that one row.
TEST_F(MoELayer, ForwardIsTheWeightedSumOfTheChosenExperts) {
    const int64_t T = 6, D = 4, E = 5, k = 2;
    auto layer = built(std::make_unique<nn::MoE>(moe(E, k, 3, 1)), Shape{T, D});
    const Tensor x = random(Shape{2, T, D}, 7);
    const Tensor y = layer->forward(x, Mode::eval);
    auto parts = layer->children();
    const double* router = parts[0]->parameters()[0]->value.data<double>();  // [E, D]
    for (int64_t t = 0; t < 2 * T; ++t) {
        const Tensor row = x.reshape(Shape{2 * T, D}).view(t * D, Shape{1, D});
        std::vector<double> p(E);
        double sum = 0;
        for (int64_t e = 0; e < E; ++e) {
            double z = 0;
            for (int64_t i = 0; i < D; ++i) z += router[e * D + i] * row.data<double>()[i];
            sum += (p[e] = std::exp(z));
        }
        for (double& v : p) v /= sum;
        std::vector<int64_t> order{0, 1, 2, 3, 4};
        std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
        const double chosen = p[order[0]] + p[order[1]];
        std::vector<double> want(D, 0.0);
        for (int64_t j = 0; j < k; ++j) {
            const Tensor out = parts[1 + order[j]]->forward(row, Mode::eval);
            for (int64_t i = 0; i < D; ++i) want[i] += p[order[j]] / chosen * out.data<double>()[i];
        }
        const Tensor shared = parts[1 + E]->forward(row, Mode::eval);
        for (int64_t i = 0; i < D; ++i) want[i] += shared.data<double>()[i];
        for (int64_t i = 0; i < D; ++i) EXPECT_NEAR(y.data<double>()[t * D + i], want[i], 1e-12) << t << "," << i;
    }
}

// Capacity ceil(c N k / E) per forward, assignments past it dropped in token order and counted;
// the statistics count training forwards only, and taking them clears them.
TEST_F(MoELayer, CapacityDropsAndCountsAssignments) {
    const int64_t T = 8, D = 4, E = 4, k = 2;
    nn::take_moe_step_stats();
    auto layer = built(std::make_unique<nn::MoE>(moe(E, k, 3, 0, 0.75, 0.01)), Shape{T, D});
    auto& m = static_cast<nn::MoE&>(*layer);
    EXPECT_EQ(m.capacity(16), 6);  // ceil(0.75 * 16 * 2 / 4)
    EXPECT_EQ(m.capacity(3), 2);   // ceil(1.125)
    m.forward(random(Shape{2, T, D}, 3), Mode::eval);
    EXPECT_TRUE(nn::take_moe_step_stats().empty());  // an evaluation is not counted
    m.forward(random(Shape{2, T, D}, 3), Mode::train);
    const auto stats = nn::take_moe_step_stats();
    ASSERT_EQ(stats.size(), 1u);
    const nn::MoEStats& s = stats[0];
    EXPECT_EQ(s.layer, layer->label());
    int64_t kept = 0;
    for (int64_t n : s.tokens_per_expert) {
        EXPECT_LE(n, 6);
        kept += n;
    }
    EXPECT_EQ(kept + s.dropped_tokens, 2 * T * k);
    EXPECT_GT(s.dropped_tokens, 0);
    EXPECT_GT(s.aux_loss, 0.0);
    EXPECT_TRUE(nn::take_moe_step_stats().empty());
    // Dropless takes every assignment; two forwards add up.
    auto dropless = built(std::make_unique<nn::MoE>(moe(E, k, 3)), Shape{T, D});
    dropless->forward(random(Shape{2, T, D}, 3), Mode::train);
    dropless->forward(random(Shape{1, T, D}, 4), Mode::train);
    const auto all = nn::take_moe_step_stats();
    ASSERT_EQ(all.size(), 1u);
    EXPECT_EQ(all[0].dropped_tokens, 0);
    kept = 0;
    for (int64_t n : all[0].tokens_per_expert) kept += n;
    EXPECT_EQ(kept, 3 * T * k);
}

// A perfectly balanced router (all logits equal: a zero router) makes f_e = P_e = 1 / E, so
// E * sum f_e P_e = 1; its z-loss is log(E)^2. Weighted by set_loss_weight's rows share.
TEST_F(MoELayer, AuxiliaryLossesOfABalancedRouter) {
    const int64_t T = 4, D = 3, E = 4;
    auto layer = built(std::make_unique<nn::MoE>(moe(E, 1, 2, 0, 0, 0.5, 0.25)), Shape{T, D});
    layer->parameters()[0]->value.zero();
    // Ties go to the lower index: every token to expert 0, so f = (1, 0, 0, 0), P = 1/4 each.
    layer->forward(random(Shape{2, T, D}, 1), Mode::train);
    auto& m = static_cast<nn::MoE&>(*layer);
    EXPECT_NEAR(m.added_loss(), 0.5 * 4 * (1.0 * 0.25) + 0.25 * std::log(4.0) * std::log(4.0), 1e-12);
    m.set_loss_weight(0.125);  // 2 rows of a batch of 16
    layer->forward(random(Shape{2, T, D}, 1), Mode::train);
    EXPECT_NEAR(m.added_loss(), 0.25 * (0.5 + 0.25 * std::log(4.0) * std::log(4.0)), 1e-12);
}

// ---- expert parallelism ----------------------------------------------------------------------

// One training forward and backward of a mixture of experts on its rows of a batch, and what it
// gave: its output and input gradient rows, each parameter's gradient by name
// ("<child name>.<index>"), its routing record, its added loss and the bytes of each all-to-all.
struct Pass {
    std::vector<double> y, dx;
    std::map<std::string, std::vector<double>> grads, values;
    nn::MoEStats stats;
    double added = 0;
    std::vector<int64_t> exchanges;
};

std::vector<double> values_of(const Tensor& t) {
    if (t.dtype() == DType::f32) {
        const auto v = t.span<float>();
        return {v.begin(), v.end()};
    }
    const auto v = t.span<double>();
    return {v.begin(), v.end()};
}

// x, dy: [ep * b, T, D]; member r of ep takes rows [r b, (r + 1) b). ep 1: the single device.
// router_setup, when given, overwrites the router's weight [E, D] after the seeded reset.
// input_grad false: the layer is built without an input gradient (a model's first layer). x and
// dy are f64; the layer runs in `dtype`.
std::vector<Pass> run_moe(const nn::MoEOptions& o, int ep, const Tensor& x, const Tensor& dy,
                          const std::function<void(Tensor&)>& router_setup = {}, bool input_grad = true,
                          DType dtype = DType::f64) {
    const int64_t B = x.dim(0), b = B / ep, T = x.dim(1), D = x.dim(2);
    comm::LocalGroup group(ep);
    std::vector<Pass> out(static_cast<size_t>(ep));
    std::mutex mutex;
    std::vector<std::string> errors;
    std::vector<std::thread> threads;
    for (int r = 0; r < ep; ++r)
        threads.emplace_back([&, r] {
            try {
                Pass& pass = out[static_cast<size_t>(r)];
                auto device = make_cpu_device(r);
                nn::MoE m(o);
                m.set_label("model.layers[1] (moe)", "model.layers[1]");
                comm::Communicator& c = group.rank(r);
                if (ep > 1)
                    m.set_expert_shard({r, ep, [&](const void* send, const std::vector<int64_t>& send_counts, void* recv,
                                                   const std::vector<int64_t>& recv_counts, DType dtype) {
                                            pass.exchanges.push_back(
                                                c.all_to_all(send, send_counts, recv, recv_counts, dtype).bytes);
                                        }});
                m.set_needs_input_grad(input_grad);
                m.build(Shape{T, D}, dtype, *device);
                Rng rng(3);
                m.reset_parameters(rng);
                if (router_setup) router_setup(m.parameters()[0]->value);
                m.zero_grad();
                m.set_loss_weight(1.0 / static_cast<double>(B));
                const int64_t rows = b * T * D;
                Tensor xr = Tensor::empty(Shape{b, T, D}, dtype, *device, MemCategory::activations);
                Tensor dyr = Tensor::empty(Shape{b, T, D}, dtype, *device, MemCategory::activations);
                dispatch_float(dtype, [&]<class V>() {
                    std::copy_n(x.data<double>() + r * rows, rows, xr.data<V>());
                    std::copy_n(dy.data<double>() + r * rows, rows, dyr.data<V>());
                });
                nn::take_moe_step_stats();
                pass.y = values_of(m.forward(xr, Mode::train));
                pass.added = m.added_loss();
                const auto stats = nn::take_moe_step_stats();
                if (stats.size() == 1) pass.stats = stats[0];
                const Tensor dx = m.backward(dyr);
                if (dx.defined()) pass.dx = values_of(dx);
                const auto children = m.children();
                const auto names = m.child_names();
                for (size_t i = 0; i < children.size(); ++i) {
                    const auto params = children[i]->parameters();
                    for (size_t p = 0; p < params.size(); ++p) {
                        const std::string key = names[i] + "." + std::to_string(p);
                        pass.grads[key] = values_of(params[p]->grad);
                        pass.values[key] = values_of(params[p]->value);
                    }
                }
            } catch (const std::exception& e) {
                {
                    std::lock_guard lock(mutex);
                    errors.push_back("member " + std::to_string(r) + ": " + e.what());
                }
                group.abort("member " + std::to_string(r) + " failed");
            }
        });
    for (auto& t : threads) t.join();
    for (const auto& e : errors) ADD_FAILURE() << e;
    return out;
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]) / (1 + std::fabs(want[i])));
    EXPECT_LE(worst, 1e-5) << what;
}
// Each held expert's gradients are the single device's same expert's (and it is held once in
// the group, seeded as that expert), the replicated parts' summed over the group the single
// device's.
void expect_gradients_of_one_device(const Pass& one, const std::vector<Pass>& group, int64_t held) {
    for (const auto& [key, want] : one.grads) {
        SCOPED_TRACE(key);
        if (key.starts_with("experts.")) {
            const int64_t e = std::stoll(key.substr(8));
            const Pass& holder = group[static_cast<size_t>(e / held)];
            ASSERT_TRUE(holder.grads.count(key));
            EXPECT_EQ(holder.values.at(key), one.values.at(key));  // the same expert, seeded alike
            expect_near_all(holder.grads.at(key), want, "held expert");
            for (const Pass& p : group)
                if (&p != &holder) {
                    EXPECT_FALSE(p.grads.count(key));  // held once in the group
                }
        } else {
            std::vector<double> sum(want.size(), 0.0);
            for (const Pass& p : group)
                for (size_t i = 0; i < sum.size(); ++i) sum[i] += p.grads.at(key)[i];
            expect_near_all(sum, want, "replicated, summed");
        }
    }
}

struct EpCase {
    const char* name;
    nn::MoEOptions options;
    DType dtype = DType::f64;
};

void PrintTo(const EpCase& c, std::ostream* os) {
    *os << c.name;
}

class MoEExpertParallel : public ::testing::TestWithParam<std::tuple<int, EpCase>> {};

// Each member routes its own rows; the group's outputs and input gradients are the single
// device's rows, each held expert's gradients are the single device's same expert's, and the
// router's and shared experts' summed over the group are the single device's (as data
// parallelism sums them). The records and the added losses sum to the single device's, and each
// dispatch and combine moves exactly the rows routed across members.
TEST_P(MoEExpertParallel, MatchesTheSingleDevice) {
    const auto [ep, c] = GetParam();
    const nn::MoEOptions& o = c.options;
    const int64_t b = 2, T = 5, D = 6, E = o.experts, held = E / ep;
    const auto device = make_cpu_device(0);
    const auto random = [&](uint64_t seed) {
        Rng rng(seed);
        Tensor t = Tensor::empty(Shape{ep * b, T, D}, DType::f64, *device, MemCategory::activations);
        for (double& v : t.span<double>()) v = rng.normal();
        return t;
    };
    const Tensor x = random(11), dy = random(12);
    const Pass one = run_moe(o, 1, x, dy, {}, true, c.dtype)[0];
    const std::vector<Pass> group = run_moe(o, ep, x, dy, {}, true, c.dtype);
    ASSERT_EQ(static_cast<int>(group.size()), ep);
    std::vector<double> y, dx;
    for (const Pass& p : group) {
        y.insert(y.end(), p.y.begin(), p.y.end());
        dx.insert(dx.end(), p.dx.begin(), p.dx.end());
    }
    expect_near_all(y, one.y, "outputs");
    expect_near_all(dx, one.dx, "input gradients");
    expect_gradients_of_one_device(one, group, held);

    double added = 0, aux = 0, z = 0;
    int64_t dropped = 0;
    std::vector<int64_t> tokens(static_cast<size_t>(E), 0);
    for (const Pass& p : group) {
        added += p.added;
        aux += p.stats.aux_loss;
        z += p.stats.router_z_loss;
        dropped += p.stats.dropped_tokens;
        ASSERT_EQ(p.stats.tokens_per_expert.size(), static_cast<size_t>(E));
        for (int64_t e = 0; e < E; ++e) tokens[static_cast<size_t>(e)] += p.stats.tokens_per_expert[static_cast<size_t>(e)];
    }
    EXPECT_EQ(tokens, one.stats.tokens_per_expert);
    EXPECT_EQ(dropped, one.stats.dropped_tokens);
    if (o.capacity_factor > 0 && o.capacity_factor < 1) {
        EXPECT_GT(dropped, 0);  // the same assignments drop
    }
    // f32: the router's GEMM over a member's rows rounds unlike one over the whole batch.
    const double tol = c.dtype == DType::f32 ? 1e-6 : 1e-12;
    EXPECT_NEAR(added, one.added, tol * (1 + one.added));
    EXPECT_NEAR(aux, one.stats.aux_loss, tol * (1 + one.stats.aux_loss));
    EXPECT_NEAR(z, one.stats.router_z_loss, tol * (1 + one.stats.router_z_loss));
    if (o.aux_loss > 0) {
        EXPECT_GT(added, 0.0);
    }
    // Five all-to-alls: the counts (2E + 1 doubles to every other member), dispatch, combine,
    // then the output gradients to the experts and their input gradients back. A member sends
    // in a dispatch its kept rows of the others' experts, in a combine the others' rows of its
    // own, D numbers each.
    for (int r = 0; r < ep; ++r) {
        SCOPED_TRACE("member " + std::to_string(r));
        const Pass& p = group[static_cast<size_t>(r)];
        ASSERT_EQ(p.exchanges.size(), 5u);
        int64_t out = 0, back = 0;
        for (int64_t e = 0; e < E; ++e) {
            const bool mine = e / held == r;
            for (int q = 0; q < ep; ++q) {
                const int64_t rows = group[static_cast<size_t>(q)].stats.tokens_per_expert[static_cast<size_t>(e)];
                if (q == r && !mine) out += rows;
                if (q != r && mine) back += rows;
            }
        }
        const auto number = static_cast<int64_t>(dtype_size(c.dtype));
        EXPECT_EQ(p.exchanges[0], (2 * E + 1) * 8 * (ep - 1));
        EXPECT_EQ(p.exchanges[1], out * D * number);
        EXPECT_EQ(p.exchanges[2], back * D * number);
        EXPECT_EQ(p.exchanges[3], out * D * number);
        EXPECT_EQ(p.exchanges[4], back * D * number);
    }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, MoEExpertParallel,
    ::testing::Combine(
        ::testing::Values(2, 4),
        ::testing::Values(EpCase{"dropless_aux_z", moe(8, 2, 3, 1, 0, 0.3, 0.2)},
                          EpCase{"capacity_drops_nothing_aux", moe(8, 2, 3, 0, 4.0, 0.1, 0)},
                          EpCase{"capacity_drops_aux_z", moe(8, 2, 3, 1, 0.5, 0.2, 0.1)},
                          EpCase{"top1_dropless", moe(4, 1, 4, 0)},
                          EpCase{"f32_dropless_aux_z", moe(8, 2, 3, 1, 0, 0.3, 0.2), DType::f32})),
    [](const auto& info) {
        return std::string(std::get<1>(info.param).name) + "_ep" + std::to_string(std::get<0>(info.param));
    });

// Balanced routing: a router that sends token t to experts t mod E and t + 1 mod E (E = D, its
// weight 10 I, the token's features 1 and 0.5 there) gives every expert the same rows from every
// member, and each dispatch and combine moves tokens · top_k · D · (ep − 1) / ep numbers of each.
TEST(MoEExpertParallelBytes, BalancedRoutingMovesTheFormula) {
    const int64_t E = 4, D = 4, k = 2, b = 2, T = 4;
    const auto device = make_cpu_device(0);
    for (int ep : {2, 4}) {
        SCOPED_TRACE("ep " + std::to_string(ep));
        Tensor x = Tensor::empty(Shape{ep * b, T, D}, DType::f64, *device, MemCategory::activations);
        Tensor dy = Tensor::empty(Shape{ep * b, T, D}, DType::f64, *device, MemCategory::activations);
        x.zero();
        Rng rng(5);
        for (double& v : dy.span<double>()) v = rng.normal();
        for (int64_t t = 0; t < ep * b * T; ++t) {
            x.data<double>()[t * D + t % E] = 1.0;
            x.data<double>()[t * D + (t + 1) % E] = 0.5;
        }
        const auto diagonal = [](Tensor& w) {
            w.zero();
            for (int64_t e = 0; e < E; ++e) w.data<double>()[e * D + e] = 10.0;
        };
        const auto group = run_moe(moe(E, k, 3, 0, 1.0), ep, x, dy, diagonal);
        const Pass one = run_moe(moe(E, k, 3, 0, 1.0), 1, x, dy, diagonal)[0];
        EXPECT_EQ(one.stats.dropped_tokens, 0);  // capacity 1.0 is exact on balanced routing
        const int64_t tokens = b * T;            // per member
        for (const Pass& p : group) {
            ASSERT_EQ(p.exchanges.size(), 5u);
            for (size_t i = 1; i < 5; ++i) EXPECT_EQ(p.exchanges[i], tokens * k * D * (ep - 1) / ep * 8) << "call " << i;
            for (int64_t n : p.stats.tokens_per_expert) EXPECT_EQ(n, tokens * k / E);
        }
        std::vector<double> y;
        for (const Pass& p : group) y.insert(y.end(), p.y.begin(), p.y.end());
        expect_near_all(y, one.y, "outputs");
    }
}

// Without an input gradient (a model's first layer) backward sends the output gradients to the
// experts but not their input gradients back: four all-to-alls, the same parameter gradients.
TEST(MoEExpertParallelBytes, WithoutAnInputGradientTheExpertsSendNothingBack) {
    const nn::MoEOptions o = moe(8, 2, 3, 1, 0, 0.2, 0.1);
    const auto device = make_cpu_device(0);
    Tensor x = Tensor::empty(Shape{4, 3, 6}, DType::f64, *device, MemCategory::activations);
    Tensor dy = Tensor::empty(Shape{4, 3, 6}, DType::f64, *device, MemCategory::activations);
    Rng rng(9);
    for (double& v : x.span<double>()) v = rng.normal();
    for (double& v : dy.span<double>()) v = rng.normal();
    const Pass one = run_moe(o, 1, x, dy, {}, false)[0];
    const auto group = run_moe(o, 2, x, dy, {}, false);
    for (const Pass& p : group) {
        EXPECT_EQ(p.exchanges.size(), 4u);
        EXPECT_TRUE(p.dx.empty());
    }
    expect_gradients_of_one_device(one, group, 4);
}

// A shard holds its block of experts, named by their index in the whole layer; its parameters
// are the router's, the block's and the shared experts'. ep must divide the experts.
TEST_F(MoELayer, AnExpertShardHoldsItsBlock) {
    const int64_t T = 5, D = 8, E = 8, k = 2, ffn = 12, S = 1;
    auto shard = std::make_unique<nn::MoE>(moe(E, k, ffn, S));
    const auto no_op = [](const void*, const std::vector<int64_t>&, void*, const std::vector<int64_t>&, DType) {};
    shard->set_expert_shard({1, 4, no_op});
    auto layer = built(std::move(shard), Shape{T, D});
    auto& m = static_cast<nn::MoE&>(*layer);
    EXPECT_EQ(m.first_expert(), 2);
    EXPECT_EQ(m.experts_held(), 2);
    EXPECT_EQ(m.child_names(), (std::vector<std::string>{"router", "experts.2", "experts.3", "shared.0"}));
    EXPECT_EQ(layer->parameter_count(), E * D + (2 + S) * 3 * D * ffn);
    EXPECT_EQ(m.exchange_per_sample(), 2 * k * T * D);
    auto whole = built(std::make_unique<nn::MoE>(moe(E, k, ffn, S)), Shape{T, D});
    EXPECT_EQ(static_cast<nn::MoE&>(*whole).exchange_per_sample(), 0);
    // Balanced routing: per token of the device, the same activations and FLOPs as one device.
    EXPECT_EQ(layer->activations_per_sample(), whole->activations_per_sample());
    EXPECT_EQ(layer->flops_per_sample(), whole->flops_per_sample());

    // A whole block's mixtures of experts, before its build.
    auto block = std::make_unique<nn::TransformerBlock>(attn(2), moe_block(moe(E, k, ffn, S)));
    nn::set_moe_expert_shard(*block, {3, 4, no_op});
    auto built_block = built(std::move(block), Shape{T, D});
    int64_t blocks_held = 0;
    each_moe(*built_block, [&](nn::MoE& inner) {
        EXPECT_EQ(inner.first_expert(), 6);
        blocks_held += inner.experts_held();
    });
    EXPECT_EQ(blocks_held, 2);

    nn::MoE odd(moe(6, 2, 4));
    odd.set_label("model.layers[1] (moe)", "model.layers[1]");
    try {
        odd.set_expert_shard({0, 4, no_op});
        ADD_FAILURE() << "6 experts over 4 devices accepted";
    } catch (const ConfigError& e) {
        EXPECT_EQ(e.path(), "model.layers[1].experts");
        EXPECT_NE(std::string(e.what()).find("6 experts do not divide over 4 expert-parallel devices"), std::string::npos)
            << e.what();
    }
    nn::MoE lonely(moe(4, 2, 4));
    EXPECT_THROW(lonely.set_expert_shard({0, 2, {}}), Error);  // a group without its all_to_all
    EXPECT_THROW(lonely.set_expert_shard({2, 2, no_op}), Error);
}

// ---- counts and names ------------------------------------------------------------------------

// Parameters: router E D, (E + S) experts of 3 D ffn; FLOPs per token: router 2 D E + 3 E, k + S
// SwiGLUs (3 * 2 D ffn + 2 ffn), the weighted sum 2 k D.
TEST_F(MoELayer, CountsParametersAndActiveFlops) {
    const int64_t T = 5, D = 8, E = 6, k = 2, ffn = 12, S = 1;
    auto layer = built(std::make_unique<nn::MoE>(moe(E, k, ffn, S)), Shape{T, D});
    EXPECT_EQ(layer->parameter_count(), E * D + (E + S) * 3 * D * ffn);
    EXPECT_EQ(layer->flops_per_sample(), T * (2 * D * E + 3 * E + (k + S) * (6 * D * ffn + 2 * ffn) + 2 * k * D));
}

// resources/examples/moe-char.paralab.json counted by hand: D 64, 4 heads of 16 with 2 key/value
// heads. A block: two rmsnorms 2 * 64, qkv (4 + 2 * 2) * 16 * 64 = 8,192, proj 4,096, router
// 8 * 64 = 512, 8 experts and 1 shared expert of 3 * 64 * 96 = 18,432: 178,816. Embedding
// 16,384, two blocks, the final rmsnorm 64, the output layer 16,384: 390,464. The MLP's FLOPs
// per token count the 2 routed experts and the shared one, not the 6 others.
TEST(MoEModel, TheExampleHasTheHandCountedParametersAndActiveFlops) {
    auto e = run::load_experiment(std::string(PARALAB_EXAMPLES_DIR) + "/moe-char.paralab.json");
    const auto s = nn::summarize(e.layers, *e.input, e.loss);
    EXPECT_EQ(s.parameters, 16'384 + 2 * 178'816 + 64 + 16'384);
    EXPECT_EQ(s.parameters, 390'464);
    bool found = false;
    for (const nn::LayerSummary& row : s.layers)
        if (row.type == "transformer_block") {
            found = true;
            EXPECT_EQ(row.parameters, 2 * 178'816);
            EXPECT_EQ(row.copies, 2);
        }
    EXPECT_TRUE(found);
    nn::LayerSpec one = e.layers[1];
    one.repeat = 1;
    auto block = nn::make_layer(one);
    auto dev = make_cpu_device(0);
    block->build(Shape{64, 64}, DType::f32, *dev);
    int64_t moe_layers = 0;
    each_moe(*block, [&](nn::MoE& m) {
        ++moe_layers;
        const int64_t T = 64, per_token = 2 * 64 * 8 + 3 * 8 + 3 * (6 * 64 * 96 + 2 * 96) + 2 * 2 * 64;
        EXPECT_EQ(m.parameter_count(), 512 + 9 * 18'432);
        EXPECT_EQ(m.flops_per_sample(), T * per_token);
    });
    EXPECT_EQ(moe_layers, 1);
}

json moe_file() {
    return json::parse(R"({
      "paralab": 1, "name": "t",
      "data": {"dataset": "text", "seq_len": 16, "batch_size": 2},
      "model": {"input": [16], "layers": [
        {"type": "embedding", "vocab": 256, "dim": 32},
        {"type": "transformer_block", "heads": 4, "kv_heads": 2, "position": "rope", "norm": "rmsnorm",
         "mlp": "moe", "experts": 4, "top_k": 2, "expert_ffn": 48, "shared_experts": 1, "bias": false},
        {"type": "rmsnorm"},
        {"type": "linear", "out": 256, "bias": false}],
        "loss": "cross_entropy"},
      "devices": ["cpu:0"], "strategy": {"type": "single"}, "optimizer": {"type": "adamw", "lr": 0.001}
    })");
}

TEST(MoEModel, NamesItsWeightsAsTheFileFormatSays) {
    const auto e = run::parse_experiment(moe_file());
    auto dev = make_cpu_device(0);
    nn::Model m(e.layers, *e.input, e.loss, DType::f32, *dev);
    const auto names = io::parameter_names(m);
    const std::string mlp = "layers.1.layers.1.layers.1.";
    std::vector<std::string> want{mlp + "router.weight"};
    for (const char* part : {"experts.0", "experts.1", "experts.2", "experts.3", "shared.0"})
        for (const char* linear : {"gate", "up", "down"}) want.push_back(mlp + part + "." + linear + ".weight");
    ASSERT_EQ(names.size(), 1 + 4 + want.size() + 2);
    for (size_t k = 0; k < want.size(); ++k) EXPECT_EQ(names[5 + k], want[k]);
    EXPECT_EQ(m.parameters()[5]->value.shape(), (Shape{4, 32}));   // router [E, D]
    EXPECT_EQ(m.parameters()[6]->value.shape(), (Shape{48, 32}));  // gate [expert_ffn, D]
    EXPECT_EQ(m.parameters()[8]->value.shape(), (Shape{32, 48}));  // down [D, expert_ffn]
}

// ---- errors at their JSON paths -------------------------------------------------------------

using paralab::testing::error_of;

TEST(MoEErrors, TheFileParsesBuildsAndRoundTrips) {
    EXPECT_EQ(error_of(moe_file()), "");
    const auto e = run::parse_experiment(moe_file());
    EXPECT_EQ(e.layers[1].experts, 4);
    EXPECT_EQ(e.layers[1].capacity_factor, 0.0);
    EXPECT_EQ(e.layers[1].aux_loss, 0.01);
    EXPECT_EQ(run::to_json(run::parse_experiment(run::to_json(e))), run::to_json(e));
    EXPECT_TRUE(run::to_json(e)["model"]["layers"][1]["capacity_factor"].is_null());
    json with_capacity = moe_file();
    with_capacity["model"]["layers"][1]["capacity_factor"] = 1.25;
    EXPECT_EQ(run::parse_experiment(with_capacity).layers[1].capacity_factor, 1.25);
}

using paralab::testing::BadCase;

class MoEBadFile : public ::testing::TestWithParam<BadCase> {};
TEST_P(MoEBadFile, IsRefusedAtItsPath) {
    json j = moe_file();
    GetParam().edit(j["model"]["layers"]);
    std::string path;
    const std::string what = error_of(j, &path);
    EXPECT_EQ(path, GetParam().path) << what;
    EXPECT_NE(what.find(GetParam().says), std::string::npos) << what;
}
INSTANTIATE_TEST_SUITE_P(
    Errors, MoEBadFile,
    ::testing::Values(
        BadCase{"top_k_above_experts", [](json& l) { l[1]["top_k"] = 5; }, "model.layers[1].top_k",
                "expected at most experts = 4"},
        BadCase{"without_experts", [](json& l) { l[1].erase("experts"); }, "model.layers[1].experts",
                "missing; \"mlp\": \"moe\" needs the number of experts"},
        BadCase{"without_expert_ffn", [](json& l) { l[1].erase("expert_ffn"); }, "model.layers[1].expert_ffn",
                "missing"},
        BadCase{"zero_experts", [](json& l) { l[1]["experts"] = 0; }, "model.layers[1].experts",
                "expected a positive integer"},
        BadCase{"negative_top_k", [](json& l) { l[1]["top_k"] = -1; }, "model.layers[1].top_k",
                "expected a positive integer"},
        BadCase{"zero_expert_ffn", [](json& l) { l[1]["expert_ffn"] = 0; }, "model.layers[1].expert_ffn",
                "expected a positive integer"},
        BadCase{"negative_shared_experts", [](json& l) { l[1]["shared_experts"] = -2; },
                "model.layers[1].shared_experts", "expected a non-negative integer"},
        BadCase{"zero_capacity_factor", [](json& l) { l[1]["capacity_factor"] = 0; },
                "model.layers[1].capacity_factor", "expected a positive number"},
        BadCase{"negative_capacity_factor", [](json& l) { l[1]["capacity_factor"] = -1.5; },
                "model.layers[1].capacity_factor", "expected a positive number"},
        BadCase{"negative_aux_loss", [](json& l) { l[1]["aux_loss"] = -0.1; }, "model.layers[1].aux_loss",
                "expected a non-negative number"},
        BadCase{"ffn_with_moe", [](json& l) { l[1]["ffn"] = 64; }, "model.layers[1].ffn", "expert_ffn"},
        BadCase{"experts_without_moe",
                [](json& l) {
                    l[1]["mlp"] = "swiglu";
                    l[1]["ffn"] = 64;
                },
                "model.layers[1].experts", "needs \"mlp\": \"moe\""}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
