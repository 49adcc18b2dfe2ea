// The mixture-of-experts MLP (docs/experiment-format.md, "Today's models", `mlp: "moe"`): its
// gradients against finite differences (dropless, with a capacity that drops, with the
// auxiliary losses), its forward against a token-by-token reference, the capacity and the
// statistics it counts, its parameter count, FLOPs and weight names, and the errors a file can
// cause, at their JSON paths.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

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
