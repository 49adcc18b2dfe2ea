#include "engine/nn/moe.h"
#include "engine/nn/checked_count.h"

#include <kernels/cpu/moe.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "engine/nn/ops.h"
#include "engine/nn/recompute.h"

namespace paralab::nn {

namespace kc = kernels::cpu;

MoE::MoE(const MoEOptions& o) : Layer("moe"), m_options(o) {
    const auto positive = [](const char* key, int64_t v) {
        if (v < 1) throw ConfigError(key, "expected a positive integer, got " + std::to_string(v));
    };
    positive("experts", o.experts);
    positive("top_k", o.top_k);
    positive("expert_ffn", o.expert_ffn);
    if (o.top_k > o.experts)
        throw ConfigError("top_k", "expected at most experts = " + std::to_string(o.experts) +
                                       " (each token goes to top_k different experts), got " + std::to_string(o.top_k));
    if (o.shared_experts < 0)
        throw ConfigError("shared_experts", "expected a non-negative integer, got " + std::to_string(o.shared_experts));
    if (!(o.capacity_factor >= 0) || !std::isfinite(o.capacity_factor))
        throw ConfigError("capacity_factor", "expected a positive number (or null: dropless), got " +
                                                 std::to_string(o.capacity_factor));
    if (!(o.aux_loss >= 0) || !std::isfinite(o.aux_loss))
        throw ConfigError("aux_loss", "expected a non-negative number, got " + std::to_string(o.aux_loss));
    if (!(o.router_z_loss >= 0) || !std::isfinite(o.router_z_loss))
        throw ConfigError("router_z_loss", "expected a non-negative number, got " + std::to_string(o.router_z_loss));
    m_router = std::make_unique<Linear>(o.experts, false);
    for (int64_t e = 0; e < o.experts; ++e) m_experts.push_back(std::make_unique<SwiGLU>(o.expert_ffn, false));
    for (int64_t s = 0; s < o.shared_experts; ++s) m_shared.push_back(std::make_unique<SwiGLU>(o.expert_ffn, false));
}

std::vector<Layer*> MoE::children() {
    std::vector<Layer*> out{m_router.get()};
    for (auto& e : m_experts) out.push_back(e.get());
    for (auto& s : m_shared) out.push_back(s.get());
    return out;
}

std::vector<std::string> MoE::child_names() const {
    std::vector<std::string> out{"router"};
    for (size_t e = 0; e < m_experts.size(); ++e)
        out.push_back("experts." + std::to_string(m_first + static_cast<int64_t>(e)));
    for (size_t s = 0; s < m_shared.size(); ++s) out.push_back("shared." + std::to_string(s));
    return out;
}

int64_t MoE::capacity(int64_t tokens) const {
    if (m_options.capacity_factor == 0) return std::numeric_limits<int64_t>::max();
    const double c = std::ceil(m_options.capacity_factor * static_cast<double>(tokens) *
                               static_cast<double>(m_options.top_k) / static_cast<double>(m_options.experts));
    return c >= 9.0e18 ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(c);
}

void MoE::set_shard(int rank, int world, std::function<void(const Tensor&)> all_reduce) {
    PARALAB_CHECK(!built(), label() + ": set_shard after build");
    m_counts = rank == 0;
    if (m_options.expert_ffn % world != 0) {
        const std::string key = path().empty() ? "expert_ffn" : path() + ".expert_ffn";
        throw ConfigError(key, std::to_string(m_options.expert_ffn) + " expert_ffn do not divide over " +
                                   std::to_string(world) +
                                   " devices (tensor_parallel gives every device an equal share of each expert)");
    }
    for (auto& e : m_experts) e->set_shard(world, all_reduce, {});
    for (auto& s : m_shared) s->set_shard(world, all_reduce, {});
}

void MoE::set_expert_shard(ExpertShard shard) {
    PARALAB_CHECK(!built(), label() + ": set_expert_shard after build");
    PARALAB_CHECK(experts_held() == m_options.experts, label() + ": a second set_expert_shard");
    if (shard.world < 1 || shard.rank < 0 || shard.rank >= shard.world)
        throw Error(label() + ": expert rank " + std::to_string(shard.rank) + " of a group of " +
                    std::to_string(shard.world) + " devices");
    if (shard.on() && !shard.all_to_all) throw Error(label() + ": an expert group of " + std::to_string(shard.world) +
                                                     " devices without an all_to_all");
    const int64_t E = m_options.experts;
    if (E % shard.world != 0) {
        const std::string key = path().empty() ? "experts" : path() + ".experts";
        throw ConfigError(key, std::to_string(E) + " experts do not divide over " + std::to_string(shard.world) +
                                   " expert-parallel devices (strategy.ep: each device holds an equal block of them)");
    }
    const int64_t held = E / shard.world;
    m_first = shard.rank * held;
    std::vector<std::unique_ptr<SwiGLU>> mine;
    for (int64_t e = 0; e < held; ++e) mine.push_back(std::move(m_experts[static_cast<size_t>(m_first + e)]));
    m_experts = std::move(mine);
    m_expert = std::move(shard);
}

int64_t MoE::exchange_per_sample() const {
    if (!m_expert.on() || !built()) return 0;
    return checked_product({2, m_options.top_k, m_rows, m_D}, "activations");
}

namespace {

thread_local std::vector<MoEStats> t_step_stats;  // take_moe_step_stats'

MoEStats& step_stats_of(const std::string& layer, int64_t experts) {
    for (MoEStats& s : t_step_stats)
        if (s.layer == layer) return s;
    MoEStats& s = t_step_stats.emplace_back();
    s.layer = layer;
    s.tokens_per_expert.assign(static_cast<size_t>(experts), 0);
    return s;
}

}  // namespace

std::vector<MoEStats> take_moe_step_stats() { return std::exchange(t_step_stats, {}); }

// input: [..., D] -> [..., D]; the children are built for one token [D].
Shape MoE::build_impl(const Shape& input) {
    if (input.rank() == 0 || input.back() < 1) shape_error("an input [..., features] with at least one feature", input);
    m_D = input.back();
    m_rows = input.numel() / m_D;
    const std::vector<Layer*> parts = children();
    const std::vector<std::string> names = child_names();
    for (size_t i = 0; i < parts.size(); ++i) {
        parts[i]->set_label(label() + "." + names[i], path());
        parts[i]->set_needs_input_grad(needs_input_grad());
        parts[i]->build(Shape{m_D}, dtype(), device());
    }
    m_routed.assign(static_cast<size_t>(m_options.experts), Routed{});
    return input;
}

// One stream split per child of the whole layer, in its order, so that an expert held under
// expert parallelism starts as the same expert on one device.
void MoE::reset_parameters_impl(Rng& rng) {
    Rng router = rng.split();
    m_router->reset_parameters(router);
    for (int64_t e = 0; e < m_options.experts; ++e) {
        Rng r = rng.split();
        const int64_t held = e - m_first;
        if (held >= 0 && held < experts_held()) m_experts[static_cast<size_t>(held)]->reset_parameters(r);
    }
    for (auto& shared : m_shared) {
        Rng r = rng.split();
        shared->reset_parameters(r);
    }
}

void MoE::set_needs_input_grad_impl(bool needs) {
    for (Layer* c : children())
        if (c) c->set_needs_input_grad(needs);
}

void MoE::release_saved_impl() {
    m_probs = m_lse = m_weight = Tensor();
    m_choice.clear();
    for (Routed& r : m_routed) r = Routed{};
}

MoE::GroupRouting MoE::group_routing(int64_t N, const std::vector<int64_t>& routed,
                                     const std::vector<double>& prob_sum, double lse_squares) const {
    const int64_t E = m_options.experts;
    const auto uE = static_cast<size_t>(E);
    GroupRouting g;
    if (!m_expert.on()) {
        g.tokens = N;
        g.routed = routed;
        g.prob_sum = prob_sum;
        g.lse_squares = lse_squares;
        g.kept = routed;
        const int64_t cap = capacity(N);
        for (int64_t& n : g.kept) n = std::min(n, cap);
        return g;
    }
    // Every member's counts and sums to every member (an all-gather as an all-to-all), as
    // doubles: [routed (E), prob_sum (E), lse_squares].
    const int W = m_expert.world;
    const auto per = static_cast<int64_t>(2 * uE + 1);
    std::vector<double> mine(static_cast<size_t>(per) * static_cast<size_t>(W)), all(mine.size());
    for (int q = 0; q < W; ++q) {
        double* m = mine.data() + static_cast<size_t>(q * per);
        for (size_t e = 0; e < uE; ++e) {
            m[e] = static_cast<double>(routed[e]);
            m[uE + e] = prob_sum[e];
        }
        m[2 * uE] = lse_squares;
    }
    const std::vector<int64_t> counts(static_cast<size_t>(W), per);
    m_expert.all_to_all(mine.data(), counts, all.data(), counts, DType::f64);
    g.routed.assign(uE, 0);
    g.prob_sum.assign(uE, 0.0);
    g.kept.assign(static_cast<size_t>(W) * uE, 0);
    int64_t assignments = 0;
    for (int q = 0; q < W; ++q) {
        const double* m = all.data() + static_cast<size_t>(q * per);
        for (size_t e = 0; e < uE; ++e) {
            const auto n = static_cast<int64_t>(m[e]);
            g.kept[static_cast<size_t>(q) * uE + e] = n;  // made kept below
            g.routed[e] += n;
            g.prob_sum[e] += m[uE + e];
            assignments += n;
        }
        g.lse_squares += m[2 * uE];
    }
    g.tokens = assignments / m_options.top_k;
    // Capacity over the group's tokens, taken member by member (the group's token order).
    const int64_t cap = capacity(g.tokens);
    for (size_t e = 0; e < uE; ++e) {
        int64_t before = 0;
        for (int q = 0; q < W; ++q) {
            int64_t& n = g.kept[static_cast<size_t>(q) * uE + e];
            const int64_t routed_here = n;
            n = std::clamp(cap - before, int64_t{0}, routed_here);
            before += routed_here;
        }
    }
    return g;
}

std::pair<int64_t, int64_t> MoE::dispatch_counts(std::vector<int64_t>& send, std::vector<int64_t>& recv) const {
    const int W = m_expert.world;
    const int64_t held = experts_held(), E = m_options.experts;
    send.assign(static_cast<size_t>(W), 0);
    recv.assign(static_cast<size_t>(W), 0);
    for (int64_t e = 0; e < E; ++e)
        send[static_cast<size_t>(e / held)] += static_cast<int64_t>(m_routed[static_cast<size_t>(e)].rows.size()) * m_D;
    for (int q = 0; q < W; ++q)
        for (int64_t e = m_first; e < m_first + held; ++e)
            recv[static_cast<size_t>(q)] += m_kept[static_cast<size_t>(q * E + e)] * m_D;
    int64_t sent = 0, received = 0;
    for (int q = 0; q < W; ++q) {
        sent += send[static_cast<size_t>(q)] / m_D;
        received += recv[static_cast<size_t>(q)] / m_D;
    }
    return {sent, received};
}

std::vector<std::pair<int64_t, int64_t>> MoE::held_rows(int64_t e, const std::vector<int64_t>& recv_counts) const {
    const int64_t E = m_options.experts;
    std::vector<std::pair<int64_t, int64_t>> out;
    int64_t member = 0;  // member q's first row in the received layout
    for (int q = 0; q < m_expert.world; ++q) {
        int64_t before = 0;  // q's rows of the held experts before e
        for (int64_t p = m_first; p < e; ++p) before += m_kept[static_cast<size_t>(q * E + p)];
        out.emplace_back(member + before, m_kept[static_cast<size_t>(q * E + e)]);
        member += recv_counts[static_cast<size_t>(q)] / m_D;
    }
    return out;
}

Tensor MoE::new_exchange(int64_t rows) const {
    return Tensor::empty(Shape{std::max<int64_t>(rows, 1), m_D}, dtype(), device(), MemCategory::communication);
}

// Layouts: a device sends its rows expert by expert (0..E-1, each in token order), which is
// member by member since the blocks are contiguous; it receives member by member, each member's
// rows of its held experts expert by expert. Its expert e runs on the rows of e of every member
// in member order: the group's token order.
void MoE::expert_parallel_forward(const Tensor& xf, Mode mode) {
    const int64_t D = m_D, E = m_options.experts, held = experts_held();
    std::vector<int64_t> send_counts, recv_counts;
    const auto [sent, received] = dispatch_counts(send_counts, recv_counts);
    // Each expert's rows' offset in this device's send layout.
    std::vector<int64_t> offset(static_cast<size_t>(E) + 1, 0);
    for (int64_t e = 0; e < E; ++e)
        offset[static_cast<size_t>(e) + 1] = offset[static_cast<size_t>(e)] +
                                              static_cast<int64_t>(m_routed[static_cast<size_t>(e)].rows.size());
    Tensor back = new_activation(Shape{std::max<int64_t>(sent, 1), D});  // the outputs, kept for backward
    dispatch_float(xf.dtype(), [&]<class T>() {
        Tensor outputs = new_exchange(received);
        {
            Tensor rows = new_exchange(sent), in = new_exchange(received);
            for (int64_t e = 0; e < E; ++e) {
                const Routed& r = m_routed[static_cast<size_t>(e)];
                if (!r.rows.empty())
                    kc::moe_gather_rows<T>(static_cast<int64_t>(r.rows.size()), D, xf.data<T>(), r.rows.data(), nullptr,
                                           rows.data<T>() + offset[static_cast<size_t>(e)] * D);
            }
            m_expert.all_to_all(rows.raw(), send_counts, in.raw(), recv_counts, dtype_of<T>());
            rows = Tensor();
            // The held experts on their rows; their outputs back in the received layout.
            for (int64_t j = 0; j < held; ++j) {
                const auto blocks = held_rows(m_first + j, recv_counts);
                int64_t n = 0;
                for (const auto& [from, count] : blocks) n += count;
                if (n == 0) continue;  // no rows: the expert computes nothing and gets no gradient
                Tensor xe = new_activation(Shape{n, D});
                int64_t at = 0;
                for (const auto& [from, count] : blocks) {
                    std::copy_n(in.data<T>() + from * D, count * D, xe.data<T>() + at * D);
                    at += count;
                }
                const Tensor out = m_experts[static_cast<size_t>(j)]->forward(xe, mode);
                at = 0;
                for (const auto& [to, count] : blocks) {
                    std::copy_n(out.data<T>() + at * D, count * D, outputs.data<T>() + to * D);
                    at += count;
                }
            }
        }
        m_expert.all_to_all(outputs.raw(), recv_counts, back.raw(), send_counts, dtype_of<T>());
    });
    for (int64_t e = 0; e < E; ++e) {
        Routed& r = m_routed[static_cast<size_t>(e)];
        const auto n = static_cast<int64_t>(r.rows.size());
        if (n > 0) r.out = back.view(offset[static_cast<size_t>(e)] * D, Shape{n, D});
    }
}

// x: [B, ..., D] (N = B * rows tokens) -> logits, probs [N, E] -> each expert e on its n_e
// gathered rows [n_e, D] -> y [N, D] = sum of weight * expert rows + the shared experts.
Tensor MoE::forward_impl(const Tensor& x, Mode mode) {
    const int64_t B = x.dim(0), N = B * m_rows, D = m_D, E = m_options.experts, k = m_options.top_k;
    const auto uE = static_cast<size_t>(E);
    const Tensor xf = x.reshape(Shape{N, D});
    const Tensor logits = m_router->forward(xf, mode);
    m_probs = new_activation(Shape{N, E});
    m_lse = new_activation(Shape{N});
    m_weight = new_activation(Shape{N, k});
    m_choice.assign(static_cast<size_t>(N * k), 0);
    Tensor y = new_activation(Shape{N, D});
    y.zero();
    std::vector<int64_t> routed(uE, 0);
    std::vector<double> prob_sum(uE, 0.0);
    double lse_squares = 0;
    dispatch_float(x.dtype(), [&]<class T>() {
        kc::moe_route_forward<T>(N, E, k, logits.data<T>(), m_probs.data<T>(), m_lse.data<T>(), m_choice.data(),
                                 m_weight.data<T>());
        const T* p = m_probs.data<T>();
        for (int64_t t = 0; t < N; ++t) {
            for (size_t e = 0; e < uE; ++e) prob_sum[e] += static_cast<double>(p[static_cast<size_t>(t) * uE + e]);
            lse_squares += static_cast<double>(m_lse.data<T>()[t]) * static_cast<double>(m_lse.data<T>()[t]);
        }
    });
    for (int64_t s = 0; s < N * k; ++s) ++routed[static_cast<size_t>(m_choice[static_cast<size_t>(s)])];

    // Assignments in token order, each expert up to this device's share of its capacity (on one
    // device, the capacity).
    const GroupRouting group = group_routing(N, routed, prob_sum, lse_squares);
    const size_t me = static_cast<size_t>(m_expert.rank);
    std::vector<int64_t> kept(uE, 0);
    for (Routed& r : m_routed) r = Routed{};
    int64_t dropped = 0;
    for (int64_t s = 0; s < N * k; ++s) {
        const auto e = static_cast<size_t>(m_choice[static_cast<size_t>(s)]);
        if (kept[e] >= group.kept[me * uE + e]) {
            ++dropped;
            continue;
        }
        ++kept[e];
        m_routed[e].rows.push_back(s / k);
        m_routed[e].assignment.push_back(s);
    }
    for (Routed& r : m_routed) {
        const auto n = static_cast<int64_t>(r.rows.size());
        if (n == 0) continue;
        r.weight = new_activation(Shape{n});
        dispatch_float(x.dtype(), [&]<class T>() {
            for (int64_t i = 0; i < n; ++i) r.weight.data<T>()[i] = m_weight.data<T>()[r.assignment[static_cast<size_t>(i)]];
        });
    }

    if (m_expert.on()) {
        m_kept = group.kept;
        expert_parallel_forward(xf, mode);
    } else {
        for (size_t e = 0; e < m_routed.size(); ++e) {
            Routed& r = m_routed[e];
            const auto n = static_cast<int64_t>(r.rows.size());
            if (n == 0) continue;  // no rows: the expert computes nothing and gets no gradient
            Tensor xe = new_activation(Shape{n, D});
            dispatch_float(x.dtype(), [&]<class T>() {
                kc::moe_gather_rows<T>(n, D, xf.data<T>(), r.rows.data(), nullptr, xe.data<T>());
            });
            r.out = m_experts[e]->forward(xe, mode);
        }
    }
    for (Routed& r : m_routed) {
        const auto n = static_cast<int64_t>(r.rows.size());
        if (n == 0) continue;
        dispatch_float(x.dtype(), [&]<class T>() {
            kc::moe_scatter_add_rows<T>(n, D, r.out.data<T>(), r.rows.data(), r.weight.data<T>(), y.data<T>());
        });
    }
    for (auto& shared : m_shared) {
        const Tensor ys = shared->forward(xf, mode);
        dispatch_float(x.dtype(), [&]<class T>() { ops_for(y).add<T>(N * D, y.data<T>(), ys.data<T>(), y.data<T>()); });
    }

    // The auxiliary losses of the group's tokens; this device adds its rows' share of them.
    const double NG = static_cast<double>(group.tokens);
    m_group_tokens = group.tokens;
    m_fraction.assign(uE, 0.0);
    double balance = 0;
    for (size_t e = 0; e < uE; ++e) {
        m_fraction[e] = static_cast<double>(group.routed[e]) / (NG * static_cast<double>(k));
        balance += m_fraction[e] * group.prob_sum[e] / NG;
    }
    balance *= static_cast<double>(E);
    const double z = group.lse_squares / NG;
    const double share = m_per_row > 0 ? m_per_row * static_cast<double>(B) : static_cast<double>(N) / NG;
    m_loss_weight = m_per_row > 0 ? m_per_row * NG / static_cast<double>(m_rows) : 1.0;
    const double aux = share * m_options.aux_loss * balance;
    const double zl = share * m_options.router_z_loss * z;
    m_added_loss = aux + zl;
    if (mode == Mode::train && m_counts && !recomputing()) {
        MoEStats& st = step_stats_of(label(), E);
        for (size_t e = 0; e < kept.size(); ++e) st.tokens_per_expert[e] += kept[e];
        st.dropped_tokens += dropped;
        st.aux_loss += aux;
        st.router_z_loss += zl;
    }
    return y.reshape(x.shape());
}

void MoE::expert_parallel_backward(const Tensor& dy, const Tensor& dweight, const Tensor& dx) {
    const int64_t D = m_D, held = experts_held();
    std::vector<int64_t> send_counts, recv_counts;
    const auto [sent, received] = dispatch_counts(send_counts, recv_counts);
    const bool input_grad = dx.defined();
    dispatch_float(dy.dtype(), [&]<class T>() {
        // The weighted output gradients in the dispatch layout, and the weights' gradients.
        Tensor rows = new_exchange(sent), in = new_exchange(received);
        int64_t at = 0;
        for (Routed& r : m_routed) {
            const auto n = static_cast<int64_t>(r.rows.size());
            if (n == 0) continue;
            std::vector<T> dots(static_cast<size_t>(n));
            kc::moe_row_dots<T>(n, D, dy.data<T>(), r.rows.data(), r.out.data<T>(), dots.data());
            for (int64_t i = 0; i < n; ++i) dweight.data<T>()[r.assignment[static_cast<size_t>(i)]] = dots[static_cast<size_t>(i)];
            kc::moe_gather_rows<T>(n, D, dy.data<T>(), r.rows.data(), r.weight.data<T>(), rows.data<T>() + at * D);
            at += n;
        }
        m_expert.all_to_all(rows.raw(), send_counts, in.raw(), recv_counts, dtype_of<T>());
        // The held experts' backward; their input gradients back in the received layout.
        Tensor grads = input_grad ? new_exchange(received) : Tensor();
        for (int64_t j = 0; j < held; ++j) {
            const auto blocks = held_rows(m_first + j, recv_counts);
            int64_t n = 0;
            for (const auto& [from, count] : blocks) n += count;
            if (n == 0) continue;
            Tensor dye = new_activation(Shape{n, D});
            int64_t row = 0;
            for (const auto& [from, count] : blocks) {
                std::copy_n(in.data<T>() + from * D, count * D, dye.data<T>() + row * D);
                row += count;
            }
            const Tensor dxe = m_experts[static_cast<size_t>(j)]->backward(dye);
            if (!input_grad) continue;
            row = 0;
            for (const auto& [to, count] : blocks) {
                std::copy_n(dxe.data<T>() + row * D, count * D, grads.data<T>() + to * D);
                row += count;
            }
        }
        if (!input_grad) return;
        in = Tensor();
        m_expert.all_to_all(grads.raw(), recv_counts, rows.raw(), send_counts, dtype_of<T>());
        at = 0;
        for (const Routed& r : m_routed) {
            const auto n = static_cast<int64_t>(r.rows.size());
            if (n == 0) continue;
            kc::moe_scatter_add_rows<T>(n, D, rows.data<T>() + at * D, r.rows.data(), nullptr, dx.data<T>());
            at += n;
        }
    });
    for (Routed& r : m_routed) r = Routed{};
}

// dy: [B, ..., D] -> each expert's output rows' gradient (weight * dy rows) and its weight's
// (dy . expert rows) -> the router's logits gradient, the auxiliary losses' added -> dx: the
// experts' input rows scattered back, the shared experts' and the router's added.
Tensor MoE::backward_impl(const Tensor& dy_in) {
    PARALAB_CHECK(m_probs.defined(), label() + ": a second backward after one forward");
    const int64_t B = dy_in.dim(0), N = B * m_rows, D = m_D, E = m_options.experts, k = m_options.top_k;
    const Tensor dy = dy_in.reshape(Shape{N, D});
    Tensor dx;
    if (needs_input_grad()) {
        dx = new_activation(Shape{N, D});
        dx.zero();
    }
    Tensor dweight = new_activation(Shape{N, k});
    dweight.zero();
    if (m_expert.on()) {
        expert_parallel_backward(dy, dweight, dx);
    } else {
        for (size_t e = 0; e < m_routed.size(); ++e) {
            Routed& r = m_routed[e];
            const auto n = static_cast<int64_t>(r.rows.size());
            if (n == 0) continue;
            Tensor dye = new_activation(Shape{n, D});
            dispatch_float(dy.dtype(), [&]<class T>() {
                std::vector<T> dots(static_cast<size_t>(n));
                kc::moe_row_dots<T>(n, D, dy.data<T>(), r.rows.data(), r.out.data<T>(), dots.data());
                for (int64_t i = 0; i < n; ++i) dweight.data<T>()[r.assignment[static_cast<size_t>(i)]] = dots[static_cast<size_t>(i)];
                kc::moe_gather_rows<T>(n, D, dy.data<T>(), r.rows.data(), r.weight.data<T>(), dye.data<T>());
            });
            const Tensor dxe = m_experts[e]->backward(dye);
            if (dx.defined())
                dispatch_float(dy.dtype(), [&]<class T>() {
                    kc::moe_scatter_add_rows<T>(n, D, dxe.data<T>(), r.rows.data(), nullptr, dx.data<T>());
                });
            r = Routed{};
        }
    }
    for (auto& shared : m_shared) {
        const Tensor dxs = shared->backward(dy);
        if (dx.defined())
            dispatch_float(dy.dtype(), [&]<class T>() { ops_for(dx).add<T>(N * D, dx.data<T>(), dxs.data<T>(), dx.data<T>()); });
    }
    // d(aux_loss * E sum_e f_e P_e) / d p_{t,e} = aux_loss * E f_e / N (f_e counts, a constant);
    // d(router_z_loss * mean_t lse_t^2) / d lse_t = router_z_loss * 2 lse_t / N, N the group's.
    const double g = m_loss_weight * m_grad_scale;
    const double NG = static_cast<double>(m_group_tokens);
    Tensor dlogits = new_activation(Shape{N, E});
    dispatch_float(dy.dtype(), [&]<class T>() {
        std::vector<T> dprobs(static_cast<size_t>(E));
        for (int64_t e = 0; e < E; ++e)
            dprobs[static_cast<size_t>(e)] =
                static_cast<T>(g * m_options.aux_loss * static_cast<double>(E) * m_fraction[static_cast<size_t>(e)] / NG);
        const T z_scale = static_cast<T>(g * m_options.router_z_loss * 2.0 / NG);
        kc::moe_route_backward<T>(N, E, k, m_probs.data<T>(), m_lse.data<T>(), m_choice.data(), m_weight.data<T>(),
                                  dweight.data<T>(), dprobs.data(), z_scale, dlogits.data<T>());
    });
    release_saved_impl();
    const Tensor dxr = m_router->backward(dlogits);
    if (!dx.defined()) return Tensor();
    dispatch_float(dy.dtype(), [&]<class T>() { ops_for(dx).add<T>(N * D, dx.data<T>(), dxr.data<T>(), dx.data<T>()); });
    return dx.reshape(dy_in.shape());
}

// Per token: the router's linear and softmax (3 per expert: exp, sum, divide), top_k experts'
// and every shared expert's SwiGLU, and the weighted sum (2 per number of each used expert).
int64_t MoE::flops_impl() const {
    if (!built()) return 0;
    const int64_t k = m_options.top_k, S = m_options.shared_experts;
    const int64_t expert = m_experts.front()->flops_per_sample();
    const int64_t per_token =
        checked_sum(checked_sum(m_router->flops_per_sample(), checked_product({3, m_options.experts}, "FLOPs"), "FLOPs"),
                    checked_sum(checked_product({k + S, expert}, "FLOPs"), checked_product({2, k, m_D}, "FLOPs"),
                                "FLOPs"),
                    "FLOPs");
    return checked_product({m_rows, per_token}, "FLOPs");
}

// Per token: the router's input, probabilities, log-sum-exp and k weights ([D] + [E] + 1 + [k]),
// and for each of its k experts and each shared expert what that SwiGLU keeps for one row, plus
// each used expert's output row (dropless: every token's k rows).
int64_t MoE::activations_impl() {
    const int64_t k = m_options.top_k, S = m_options.shared_experts;
    const int64_t expert = m_experts.front()->activations_per_sample();
    const int64_t per_token = checked_sum(
        checked_sum(m_router->activations_per_sample(), m_options.experts + 1 + k, "activations"),
        checked_sum(checked_product({k + S, expert}, "activations"), checked_product({k, m_D}, "activations"),
                    "activations"),
        "activations");
    return checked_product({m_rows, per_token}, "activations");
}

namespace {

template <class F>
void each_moe(Layer& layer, const F& f) {
    if (auto* m = dynamic_cast<MoE*>(&layer)) f(*m);
    for (Layer* c : layer.children()) each_moe(*c, f);
}

}  // namespace

void set_moe_loss_weight(Layer& root, double per_row) {
    each_moe(root, [&](MoE& m) { m.set_loss_weight(per_row); });
}

void set_moe_grad_scale(Layer& root, double grad_scale) {
    each_moe(root, [&](MoE& m) { m.set_grad_scale(grad_scale); });
}

void set_moe_expert_shard(Layer& root, const ExpertShard& shard) {
    each_moe(root, [&](MoE& m) { m.set_expert_shard(shard); });
}

}  // namespace paralab::nn
