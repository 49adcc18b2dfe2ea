#include "engine/nn/recurrent.h"
#include "engine/nn/checked_count.h"

#include "engine/nn/ops.h"

#include <kernels/cpu/recurrent.h>

#include <algorithm>
#include <cmath>

namespace paralab::nn {

RecurrentLayer::RecurrentLayer(std::string type, int64_t gates, int64_t hidden, int64_t num_layers,
                               bool return_sequence)
    : Layer(type),
      m_gates(gates),
      m_hidden(hidden),
      m_num_layers(num_layers),
      m_return_sequence(return_sequence) {
    if (hidden < 1)
        throw ConfigError(type + ": hidden must be a positive integer, got " + std::to_string(hidden));
    if (num_layers < 1)
        throw ConfigError(type + ": num_layers must be a positive integer, got " +
                          std::to_string(num_layers));
}

// input: [T, F] -> [H] or [T, H]
Shape RecurrentLayer::build_impl(const Shape& input) {
    if (input.rank() != 2 || input[0] < 1 || input[1] < 1)
        shape_error("an input [T, features]", input);
    m_steps = input[0];
    m_features = input[1];
    const int64_t G = m_gates * m_hidden;
    m_weights.clear();
    for (int64_t l = 0; l < m_num_layers; ++l) {
        const std::string s = "_l" + std::to_string(l);
        RecurrentWeights w;
        w.w_ih = &add_param("weight_ih" + s, Shape{G, l == 0 ? m_features : m_hidden});
        w.w_hh = &add_param("weight_hh" + s, Shape{G, m_hidden});
        w.b_ih = &add_param("bias_ih" + s, Shape{G});
        w.b_hh = &add_param("bias_hh" + s, Shape{G});
        m_weights.push_back(w);
    }
    m_forward_loops.clear();
    m_backward_loops.clear();
    m_forward_loops.resize(static_cast<size_t>(m_num_layers));
    m_backward_loops.resize(static_cast<size_t>(m_num_layers));
    m_loop_slots.assign(static_cast<size_t>(m_num_layers), std::vector<std::vector<Tensor>>(kRoles));
    return m_return_sequence ? Shape{m_steps, m_hidden} : Shape{m_hidden};
}

void RecurrentLayer::reset_parameters_impl(Rng& rng) {
    // PyTorch: every weight and bias uniform(-1/sqrt(H), 1/sqrt(H)), in parameter order.
    const double bound = 1.0 / std::sqrt(static_cast<double>(m_hidden));
    for (Param& p : m_params) {
        dispatch_float(p.value.dtype(), [&]<class T>() {
            for (T& v : p.value.span<T>()) v = static_cast<T>(rng.uniform(-bound, bound));
        });
    }
}

Tensor RecurrentLayer::layer_output(const Tensor& top) const {
    if (m_return_sequence) return top;
    const int64_t B = top.dim(0), H = m_hidden;
    Tensor y = new_activation(Shape{B, H});
    dispatch_float(top.dtype(), [&]<class T>() {
        ops_for(top).strided_rows_copy<T>(B, H, top.data<T>() + (m_steps - 1) * H, m_steps * H,
                                           y.data<T>(), H);
    });
    return y;
}

Tensor RecurrentLayer::loop_buffer(int64_t layer, LoopRole role, const Shape& shape, bool activation) {
    if (!device().is_gpu()) return activation ? new_activation(shape) : new_workspace(shape);
    std::vector<Tensor>& kept = m_loop_slots[static_cast<size_t>(layer)][role];
    auto it = std::find_if(kept.begin(), kept.end(), [&](const Tensor& t) { return t.shape() == shape; });
    if (it == kept.end()) {
        if (kept.size() == kShapesKept) kept.pop_back();  // the least recently used shape
        kept.insert(kept.begin(), activation ? new_activation(shape) : new_workspace(shape));
    } else {
        std::rotate(kept.begin(), it, it + 1);
    }
    return kept.front();
}

Tensor RecurrentLayer::output_gradient(const Tensor& dy) {
    const int64_t B = dy.dim(0), H = m_hidden;
    Tensor dh = loop_buffer(m_num_layers - 1, kGradOut, Shape{B, m_steps, H}, false);
    if (m_return_sequence) {
        dh.copy_from(dy);
        return dh;
    }
    dh.zero();
    dispatch_float(dy.dtype(), [&]<class T>() {
        ops_for(dy).strided_rows_copy<T>(B, H, dy.data<T>(), H, dh.data<T>() + (m_steps - 1) * H,
                                           m_steps * H);
    });
    return dh;
}

// 2 per multiply-add of the input and recurrent GEMMs, per step and stacked layer.
int64_t RecurrentLayer::flops_impl() const {
    if (!built()) return 0;
    int64_t flops = 0;
    for (int64_t l = 0; l < m_num_layers; ++l) {
        const int64_t in = l == 0 ? m_features : m_hidden;
        flops = checked_sum(flops, checked_product({2, m_steps, m_gates, m_hidden, in + m_hidden}, "FLOPs"), "FLOPs");
    }
    return flops;
}

template <class T>
void RecurrentLayer::finish_layer_backward(const Ops& ops, int64_t l, int64_t B,
                                           const Tensor& input, const T* dg_ih, const T* dg_hh,
                                           const T* h, Tensor& dh, Tensor& dx) {
    const RecurrentWeights& w = m_weights[static_cast<size_t>(l)];
    const int64_t steps = m_steps, H = m_hidden, G = m_gates * H, F = input.dim(2);
    ops.gemm<T>(true, false, G, F, B * steps, T(1), dg_ih, input.data<T>(), T(1),
                w.w_ih->grad.data<T>());
    ops.recurrent_weight_grad_accumulate<T>(B, steps, G, H, dg_hh, h, w.w_hh->grad.data<T>());
    ops.column_sums_accumulate<T>(B * steps, G, dg_ih, w.b_ih->grad.data<T>());
    ops.column_sums_accumulate<T>(B * steps, G, dg_hh, w.b_hh->grad.data<T>());
    if (l > 0 || needs_input_grad()) {
        Tensor d_in = l > 0 ? loop_buffer(l - 1, kGradOut, Shape{B, steps, F}, false)
                            : new_activation(Shape{B, steps, F});
        ops.gemm<T>(false, false, B * steps, F, G, T(1), dg_ih, w.w_ih->value.data<T>(), T(0),
                    d_in.data<T>());
        (l > 0 ? dh : dx) = d_in;
    }
}

template void RecurrentLayer::finish_layer_backward<float>(const Ops&, int64_t, int64_t,
                                                           const Tensor&, const float*,
                                                           const float*, const float*, Tensor&,
                                                           Tensor&);
template void RecurrentLayer::finish_layer_backward<double>(const Ops&, int64_t, int64_t,
                                                            const Tensor&, const double*,
                                                            const double*, const double*, Tensor&,
                                                            Tensor&);

}  // namespace paralab::nn
