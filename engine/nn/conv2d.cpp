#include "engine/nn/conv2d.h"

#include <kernels/cpu/gemm.h>

#include <algorithm>
#include <cmath>

namespace paralab::nn {

namespace kc = kernels::cpu;

Conv2d::Conv2d(int64_t out_channels, int64_t kernel, int64_t stride, int64_t padding, bool bias)
    : Layer("conv2d"),
      m_out_channels(out_channels),
      m_kernel(kernel),
      m_stride(stride),
      m_padding(padding),
      m_has_bias(bias) {
    auto require = [](bool ok, const char* what, int64_t got) {
        if (!ok) throw ConfigError(std::string("conv2d: ") + what + ", got " + std::to_string(got));
    };
    require(out_channels >= 1, "out_channels must be a positive integer", out_channels);
    require(kernel >= 1, "kernel must be a positive integer", kernel);
    require(stride >= 1, "stride must be a positive integer", stride);
    require(padding >= 0, "padding must be a non-negative integer", padding);
}

// input: [C, H, W] -> [K, OH, OW]
Shape Conv2d::build_impl(const Shape& input) {
    const std::string window =
        "kernel " + std::to_string(m_kernel) + ", padding " + std::to_string(m_padding);
    if (input.rank() != 3) shape_error("an input [C, H, W] (" + window + ")", input);
    m_geometry = kc::Conv2dGeometry{input[0], input[1], input[2], m_kernel, m_stride, m_padding};
    const int64_t min_side = std::max<int64_t>(1, m_kernel - 2 * m_padding);
    if (input[0] < 1 || input[1] < min_side || input[2] < min_side)
        shape_error("an input [C, H, W] with C >= 1 and H, W >= " + std::to_string(min_side) +
                        " (" + window + ")",
                    input);
    m_weight = &add_param("weight", Shape{m_out_channels, input[0], m_kernel, m_kernel});
    m_bias = m_has_bias ? &add_param("bias", Shape{m_out_channels}) : nullptr;
    return Shape{m_out_channels, m_geometry.out_height(), m_geometry.out_width()};
}

void Conv2d::reset_parameters_impl(Rng& rng) {
    // kaiming_uniform(a = sqrt 5) on the weight reduces to 1/sqrt(fan_in); the bias uses it too.
    const double bound = 1.0 / std::sqrt(static_cast<double>(m_geometry.col_rows()));
    for (Param* p : {m_weight, m_bias}) {
        if (!p) continue;
        dispatch_float(p->value.dtype(), [&]<class T>() {
            for (T& v : p->value.span<T>()) v = static_cast<T>(rng.uniform(-bound, bound));
        });
    }
}

// x: [B, C, H, W] -> y: [B, K, OH, OW]; per sample y_b [K, OH*OW] = W [K, C*k*k] · col_b
// [C*k*k, OH*OW] (+ bias). One GEMM per sample writes y_b in place, where a batched GEMM would
// produce [K, B*OH*OW] and need a transposing copy.
Tensor Conv2d::forward_impl(const Tensor& x, Mode mode) {
    (void)mode;
    const kc::Conv2dGeometry& g = m_geometry;
    const int64_t batch = x.dim(0), K = m_out_channels;
    const int64_t rows = g.col_rows(), plane = g.col_cols();
    const int64_t in_size = input_shape().numel(), out_size = K * plane;
    Tensor y = new_activation(output_shape().with_batch(batch));
    // A pointwise conv reads x directly: its col would be a copy of x.
    Tensor col = g.is_pointwise() ? Tensor() : new_workspace(Shape{rows, plane});
    dispatch_float(x.dtype(), [&]<class T>() {
        const T* w = m_weight->value.data<T>();
        for (int64_t b = 0; b < batch; ++b) {
            const T* xb = x.data<T>() + b * in_size;
            T* yb = y.data<T>() + b * out_size;
            const T* cb = xb;
            if (col.defined()) {
                kc::im2col<T>(g, xb, col.data<T>());
                cb = col.data<T>();
            }
            T beta = T(0);
            if (m_bias) {
                kc::channel_broadcast<T>(K, plane, m_bias->value.data<T>(), yb);
                beta = T(1);
            }
            kc::gemm<T>(false, false, K, plane, rows, T(1), w, cb, beta, yb);
        }
    });
    m_x = x;
    return y;
}

// dy: [B, K, OH, OW] -> dx: [B, C, H, W]. Per sample: dW [K, C*k*k] += dy_b · col_b^T,
// db += row sums of dy_b, dcol_b = W^T · dy_b, dx_b = col2im(dcol_b). col_b is rebuilt from x
// rather than kept from the forward: B columns buffers would cost k*k times the input.
Tensor Conv2d::backward_impl(const Tensor& dy) {
    PARALAB_CHECK(m_x.defined(), label() + ": a second backward after one forward");
    const kc::Conv2dGeometry& g = m_geometry;
    const int64_t batch = dy.dim(0), K = m_out_channels;
    const int64_t rows = g.col_rows(), plane = g.col_cols();
    const int64_t in_size = input_shape().numel(), out_size = K * plane;
    const bool pointwise = g.is_pointwise();
    Tensor dx, col, dcol;
    if (needs_input_grad()) {
        dx = new_activation(input_shape().with_batch(batch));
        if (!pointwise) dcol = new_workspace(Shape{rows, plane});
    }
    if (!pointwise) col = new_workspace(Shape{rows, plane});
    dispatch_float(dy.dtype(), [&]<class T>() {
        const T* w = m_weight->value.data<T>();
        T* dw = m_weight->grad.data<T>();
        for (int64_t b = 0; b < batch; ++b) {
            const T* xb = m_x.data<T>() + b * in_size;
            const T* gb = dy.data<T>() + b * out_size;
            const T* cb = xb;
            if (col.defined()) {
                kc::im2col<T>(g, xb, col.data<T>());
                cb = col.data<T>();
            }
            kc::gemm<T>(false, true, K, rows, plane, T(1), gb, cb, T(1), dw);
            if (m_bias) kc::channel_sums_accumulate<T>(K, plane, gb, m_bias->grad.data<T>());
            if (!dx.defined()) continue;
            T* dxb = dx.data<T>() + b * in_size;
            if (pointwise) {
                kc::gemm<T>(true, false, rows, plane, K, T(1), w, gb, T(0), dxb);
            } else {
                kc::gemm<T>(true, false, rows, plane, K, T(1), w, gb, T(0), dcol.data<T>());
                kc::col2im<T>(g, dcol.data<T>(), dxb);
            }
        }
    });
    m_x = Tensor();  // the saved input is dead once its gradients are out
    return dx;
}

// 2 per multiply-add of the GEMM, 1 per bias add.
int64_t Conv2d::flops_impl() const {
    const int64_t outputs = m_out_channels * m_geometry.col_cols();
    return outputs * (2 * m_geometry.col_rows() + (m_has_bias ? 1 : 0));
}

}  // namespace paralab::nn
