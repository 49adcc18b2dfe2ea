#include "engine/nn/moe.h"
#include "engine/nn/checked_count.h"

#include <kernels/cpu/moe.h>

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
    for (size_t e = 0; e < m_experts.size(); ++e) out.push_back("experts." + std::to_string(e));
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
    m_routed.assign(m_experts.size(), Routed{});
    return input;
}

void MoE::reset_parameters_impl(Rng& rng) {
    for (Layer* c : children()) {
        Rng r = rng.split();
        c->reset_parameters(r);
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

// x: [B, ..., D] (N = B * rows tokens) -> logits, probs [N, E] -> each expert e on its n_e
// gathered rows [n_e, D] -> y [N, D] = sum of weight * expert rows + the shared experts.
Tensor MoE::forward_impl(const Tensor& x, Mode mode) {
    const int64_t B = x.dim(0), N = B * m_rows, D = m_D, E = m_options.experts, k = m_options.top_k;
    const Tensor xf = x.reshape(Shape{N, D});
    const Tensor logits = m_router->forward(xf, mode);
    m_probs = new_activation(Shape{N, E});
    m_lse = new_activation(Shape{N});
    m_weight = new_activation(Shape{N, k});
    m_choice.assign(static_cast<size_t>(N * k), 0);
    Tensor y = new_activation(Shape{N, D});
    y.zero();
    dispatch_float(x.dtype(), [&]<class T>() {
        kc::moe_route_forward<T>(N, E, k, logits.data<T>(), m_probs.data<T>(), m_lse.data<T>(), m_choice.data(),
                                 m_weight.data<T>());
    });

    // Assignments in token order, each expert up to its capacity.
    const int64_t cap = capacity(N);
    std::vector<int64_t> routed(static_cast<size_t>(E), 0), kept(static_cast<size_t>(E), 0);
    for (Routed& r : m_routed) r = Routed{};
    int64_t dropped = 0;
    for (int64_t s = 0; s < N * k; ++s) {
        const auto e = static_cast<size_t>(m_choice[static_cast<size_t>(s)]);
        ++routed[e];
        if (kept[e] >= cap) {
            ++dropped;
            continue;
        }
        ++kept[e];
        m_routed[e].rows.push_back(s / k);
        m_routed[e].assignment.push_back(s);
    }

    for (size_t e = 0; e < m_routed.size(); ++e) {
        Routed& r = m_routed[e];
        const auto n = static_cast<int64_t>(r.rows.size());
        if (n == 0) continue;  // no rows: the expert computes nothing and gets no gradient
        Tensor xe = new_activation(Shape{n, D});
        r.weight = new_activation(Shape{n});
        dispatch_float(x.dtype(), [&]<class T>() {
            for (int64_t i = 0; i < n; ++i) r.weight.data<T>()[i] = m_weight.data<T>()[r.assignment[static_cast<size_t>(i)]];
            kc::moe_gather_rows<T>(n, D, xf.data<T>(), r.rows.data(), nullptr, xe.data<T>());
        });
        r.out = m_experts[e]->forward(xe, mode);
        dispatch_float(x.dtype(), [&]<class T>() {
            kc::moe_scatter_add_rows<T>(n, D, r.out.data<T>(), r.rows.data(), r.weight.data<T>(), y.data<T>());
        });
    }
    for (auto& shared : m_shared) {
        const Tensor ys = shared->forward(xf, mode);
        dispatch_float(x.dtype(), [&]<class T>() { ops_for(y).add<T>(N * D, y.data<T>(), ys.data<T>(), y.data<T>()); });
    }

    // The auxiliary losses of this forward's tokens.
    m_fraction.assign(static_cast<size_t>(E), 0.0);
    double balance = 0, z = 0;
    dispatch_float(x.dtype(), [&]<class T>() {
        std::vector<double> mean_prob(static_cast<size_t>(E), 0.0);
        const T* p = m_probs.data<T>();
        for (int64_t t = 0; t < N; ++t)
            for (int64_t e = 0; e < E; ++e) mean_prob[static_cast<size_t>(e)] += static_cast<double>(p[t * E + e]);
        for (int64_t e = 0; e < E; ++e) {
            const auto ue = static_cast<size_t>(e);
            m_fraction[ue] = static_cast<double>(routed[ue]) / static_cast<double>(N * k);
            balance += m_fraction[ue] * mean_prob[ue] / static_cast<double>(N);
        }
        balance *= static_cast<double>(E);
        for (int64_t t = 0; t < N; ++t) z += static_cast<double>(m_lse.data<T>()[t]) * static_cast<double>(m_lse.data<T>()[t]);
        z /= static_cast<double>(N);
    });
    m_loss_weight = m_per_row > 0 ? m_per_row * static_cast<double>(B) : 1.0;
    const double aux = m_loss_weight * m_options.aux_loss * balance;
    const double zl = m_loss_weight * m_options.router_z_loss * z;
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
    for (auto& shared : m_shared) {
        const Tensor dxs = shared->backward(dy);
        if (dx.defined())
            dispatch_float(dy.dtype(), [&]<class T>() { ops_for(dx).add<T>(N * D, dx.data<T>(), dxs.data<T>(), dx.data<T>()); });
    }
    // d(aux_loss * E sum_e f_e P_e) / d p_{t,e} = aux_loss * E f_e / N (f_e counts, a constant);
    // d(router_z_loss * mean_t lse_t^2) / d lse_t = router_z_loss * 2 lse_t / N.
    const double g = m_loss_weight * m_grad_scale;
    Tensor dlogits = new_activation(Shape{N, E});
    dispatch_float(dy.dtype(), [&]<class T>() {
        std::vector<T> dprobs(static_cast<size_t>(E));
        for (int64_t e = 0; e < E; ++e)
            dprobs[static_cast<size_t>(e)] = static_cast<T>(g * m_options.aux_loss * static_cast<double>(E) *
                                                            m_fraction[static_cast<size_t>(e)] / static_cast<double>(N));
        const T z_scale = static_cast<T>(g * m_options.router_z_loss * 2.0 / static_cast<double>(N));
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

}  // namespace paralab::nn
