#include "engine/nn/linear.h"
#include "engine/nn/checked_count.h"

#include "engine/nn/ops.h"


#include <cmath>

namespace paralab::nn {


Linear::Linear(int64_t out, bool bias) : Layer("linear"), m_out(out), m_has_bias(bias) {
    if (out < 1)
        throw ConfigError("linear: out must be a positive integer, got " + std::to_string(out));
}

void Linear::set_out(int64_t out) {
    PARALAB_CHECK(!built() && out >= 1, label() + ": set_out after build or with a width below 1");
    m_out = out;
}

void Linear::set_shard(LinearShard shard) {
    PARALAB_CHECK(!built() && shard.all_reduce && shard.blocks >= 1,
                  label() + ": set_shard after build or without an all-reduce");
    m_shard = std::move(shard);
}

// input: [..., in] -> [..., out]
Shape Linear::build_impl(const Shape& input) {
    if (input.rank() == 0 || input.back() < 1)
        shape_error("an input [..., features] with at least one feature", input);
    m_in = input.back();
    m_weight = &add_param("weight", Shape{m_out, m_in});
    m_bias = m_has_bias ? &add_param("bias", Shape{m_out}) : nullptr;
    Shape output = input;
    output[output.rank() - 1] = m_out;
    return output;
}

void Linear::reset_parameters_impl(Rng& rng) {
    // kaiming_uniform(a = sqrt 5) on the weight reduces to this bound, the bias uses it too.
    const double bound = 1.0 / std::sqrt(static_cast<double>(m_in));
    for (Param* p : {m_weight, m_bias}) {
        if (!p) continue;
        dispatch_float(p->value.dtype(), [&]<class T>() {
            for (T& v : p->value.span<T>()) v = static_cast<T>(rng.uniform(-bound, bound));
        });
    }
}

// x: [B, ..., in] -> y: [B, ..., out]; the leading dims fold into the GEMM's rows.
Tensor Linear::forward_impl(const Tensor& x, Mode mode) {
    (void)mode;
    const int64_t rows = x.numel() / m_in;
    Tensor y = new_activation(output_shape().with_batch(x.dim(0)));
    const Ops ops = ops_for(y);
    // A row-parallel shard's output is a partial sum: the bias goes on after the all-reduce.
    const bool partial = m_shard && m_shard->split == LinearShard::Split::row;
    dispatch_float(x.dtype(), [&]<class T>() {
        T beta = T(0);
        if (m_bias && !partial) {
            // y starts as the bias rows and the GEMM adds x W^T to them: one pass over y.
            ops.bias_broadcast_rows<T>(rows, m_out, m_bias->value.data<T>(), y.data<T>());
            beta = T(1);
        }
        ops.gemm<T>(false, true, rows, m_out, m_in, T(1), x.data<T>(), m_weight->value.data<T>(),
                    beta, y.data<T>());
        if (partial) {
            m_shard->all_reduce(y);
            if (m_bias) ops.bias_add_rows<T>(rows, m_out, m_bias->value.data<T>(), y.data<T>());
        }
    });
    m_x = x;
    return y;
}

// dy: [B, ..., out] -> dx: [B, ..., in]; dW += dy^T x, db += column sums of dy.
Tensor Linear::backward_impl(const Tensor& dy) {
    PARALAB_CHECK(m_x.defined(), label() + ": a second backward after one forward");
    const int64_t rows = dy.numel() / m_out;
    Tensor dx;
    if (needs_input_grad()) dx = new_activation(input_shape().with_batch(dy.dim(0)));
    const Ops ops = ops_for(dy);
    dispatch_float(dy.dtype(), [&]<class T>() {
        const T* g = dy.data<T>();
        ops.gemm<T>(true, false, m_out, m_in, rows, T(1), g, m_x.data<T>(), T(1),
                    m_weight->grad.data<T>());
        if (m_bias) ops.column_sums_accumulate<T>(rows, m_out, g, m_bias->grad.data<T>());
        if (dx.defined())
            ops.gemm<T>(false, false, rows, m_in, m_out, T(1), g, m_weight->value.data<T>(), T(0),
                        dx.data<T>());
    });
    m_x = Tensor();  // the saved input is dead once its gradients are out
    // A column-parallel shard's input gradient is this shard's part of the sum.
    if (dx.defined() && m_shard && m_shard->split == LinearShard::Split::column) m_shard->all_reduce(dx);
    return dx;
}

// 2 per multiply-add of x W^T, 1 per bias add; per output row, times the rows of a sample.
int64_t Linear::flops_impl() const {
    if (!built()) return 0;
    const int64_t rows_per_sample = input_shape().numel() / m_in;
    return checked_product({rows_per_sample, m_out, 2 * m_in + (m_has_bias ? 1 : 0)}, "FLOPs");
}

}  // namespace paralab::nn
