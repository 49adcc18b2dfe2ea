#include "engine/nn/norm.h"

#include <kernels/cpu/norm.h>
#include <kernels/gpu/elementwise.h>
#include <kernels/gpu/norm.h>

#include <algorithm>
#include <cmath>

#include "engine/device/device.h"
#include "engine/device/gpu_values.h"

namespace paralab::nn {

namespace kc = kernels::cpu;
namespace kg = kernels::gpu;

namespace {
std::vector<double> to_doubles(const Tensor& t_anywhere) {
    const Tensor t = gpu::on_host(t_anywhere);
    return dispatch_float(t.dtype(), [&]<class T>() {
        auto s = t.span<T>();
        return std::vector<double>(s.begin(), s.end());
    });
}

template <class T>
std::vector<T> to_type(const std::vector<double>& v) {
    return std::vector<T>(v.begin(), v.end());
}

// A device array of `count` doubles (the batch norm kernels' per-channel sums).
Tensor device_sums(Device& device, int64_t count) {
    return Tensor::empty(Shape{count}, DType::f64, device, MemCategory::workspace);
}

}  // namespace

// ---- BatchNorm ---------------------------------------------------------------------------

BatchNorm::BatchNorm(double eps, double momentum)
    : Layer("batchnorm"), m_eps(eps), m_momentum(momentum) {
    if (!(eps > 0))
        throw ConfigError("batchnorm: eps must be positive, got " + std::to_string(eps));
    if (!(momentum >= 0 && momentum <= 1))
        throw ConfigError("batchnorm: momentum must be in [0, 1], got " + std::to_string(momentum));
}

// input: [C], [C, L] or [C, H, W] -> the same shape
Shape BatchNorm::build_impl(const Shape& input) {
    if (input.rank() < 1 || input.rank() > 3 || input.numel() == 0)
        shape_error("an input [C], [C, L] or [C, H, W]", input);
    m_channels = input[0];
    m_spatial = input.numel() / m_channels;
    m_weight = &add_param("weight", Shape{m_channels});
    m_bias = &add_param("bias", Shape{m_channels});
    // Copies share storage with the buffers, which must be valid before any reset.
    m_running_mean = add_buffer(Shape{m_channels});
    m_running_var = add_buffer(Shape{m_channels});
    m_running_var.fill(1.0);
    m_weight->value.fill(1.0);
    return input;
}

void BatchNorm::reset_parameters_impl(Rng& rng) {
    (void)rng;
    m_weight->value.fill(1.0);
    m_bias->value.zero();
    m_running_mean.zero();
    m_running_var.fill(1.0);
}

void BatchNorm::set_stats_reducer(StatsReducer reducer) {
    m_stats_reducer = std::move(reducer);
}

// x: [B, C, ...] -> y: [B, C, ...], seen as [N = B, C, S]. On a GPU the per-channel sums are
// kernels whose results are read back (one small synchronisation); the per-channel formulas
// and the running statistics are the CPU's host code, then the normalisation is a kernel.
Tensor BatchNorm::forward_impl(const Tensor& x, Mode mode) {
    const int64_t N = x.dim(0), C = m_channels, S = m_spatial;
    Tensor y = new_activation(x.shape());
    void* q = y.queue();
    m_mode = mode;
    dispatch_float(x.dtype(), [&]<class T>() {
        if (mode == Mode::train) {
            // (1) local sums, (2) the hook, (3) mean and variance, (4) normalize.
            std::vector<double> stats(2 * C);
            if (q) {
                const Tensor sums = device_sums(device(), 2 * C);
                double* d = sums.data<double>();
                kg::batchnorm_channel_sums<T>(N, C, S, x.data<T>(), d, d + C, q);
                stats = gpu::read_doubles(d, 2 * C, q);
            } else {
                kc::batchnorm_channel_sums<T>(N, C, S, x.data<T>(), stats.data(), stats.data() + C);
            }
            int64_t count = N * S;
            reduce_channel_stats(stats, count);
            if (count <= 1)
                throw Error(label() + ": expected more than 1 value per channel when training, " +
                            "got input " + x.shape().to_string());
            m_count = count;
            m_mean.assign(C, 0.0);
            m_invstd.assign(C, 0.0);
            const double n = static_cast<double>(count);
            // On the CPU these are the buffers themselves; on a GPU host copies written back.
            const Tensor rm_host = gpu::on_host(m_running_mean);
            const Tensor rv_host = gpu::on_host(m_running_var);
            T* rm = rm_host.data<T>();
            T* rv = rv_host.data<T>();
            for (int64_t c = 0; c < C; ++c) {
                const double mean = stats[c] / n;
                // E[x^2] - mean^2 in double; the max guards rounding below zero.
                const double var = std::max(stats[C + c] / n - mean * mean, 0.0);
                m_mean[c] = mean;
                m_invstd[c] = 1.0 / std::sqrt(var + m_eps);
                rm[c] = static_cast<T>((1 - m_momentum) * rm[c] + m_momentum * mean);
                rv[c] = static_cast<T>((1 - m_momentum) * rv[c] + m_momentum * var * n / (n - 1));
            }
            if (q) {
                m_running_mean.copy_from(rm_host);
                m_running_var.copy_from(rv_host);
            }
        } else {
            m_mean = to_doubles(m_running_mean);
            m_invstd = to_doubles(m_running_var);
            for (double& v : m_invstd) v = 1.0 / std::sqrt(v + m_eps);
        }
        const Tensor gamma_host = gpu::on_host(m_weight->value);
        const T* gamma = gamma_host.data<T>();
        std::vector<T> scale(C);
        for (int64_t c = 0; c < C; ++c) scale[c] = static_cast<T>(gamma[c] * m_invstd[c]);
        const std::vector<T> mean = to_type<T>(m_mean);
        if (q) {
            std::vector<T> packed(mean);  // [mean, scale]
            packed.insert(packed.end(), scale.begin(), scale.end());
            const Tensor d = gpu::upload(packed, device());
            kg::batchnorm_normalize<T>(N, C, S, x.data<T>(), d.data<T>(), d.data<T>() + C,
                                       m_bias->value.data<T>(), y.data<T>(), q);
            return;
        }
        kc::batchnorm_normalize<T>(N, C, S, x.data<T>(), mean.data(), scale.data(),
                                   m_bias->value.data<T>(), y.data<T>());
    });
    m_x = x;
    return y;
}

// dy: [B, C, ...] -> dx: [B, C, ...]. Train mode differentiates through the batch statistics:
// dx = gamma*invstd * (dy - mean(dy) - xhat * mean(dy * xhat)); eval mode is affine:
// dx = gamma*invstd * dy. dgamma += sum dy * xhat, dbeta += sum dy. On a GPU the sums are read
// back as in forward and the per-channel values go up again for the input-gradient kernel.
Tensor BatchNorm::backward_impl(const Tensor& dy) {
    PARALAB_CHECK(m_x.defined(), label() + ": a second backward after one forward");
    const int64_t N = dy.dim(0), C = m_channels, S = m_spatial;
    void* q = dy.queue();
    Tensor dx;
    if (needs_input_grad()) dx = new_activation(dy.shape());
    dispatch_float(dy.dtype(), [&]<class T>() {
        const std::vector<T> mean = to_type<T>(m_mean);
        // (1) local sums, (2) parameter gradients from them, (3) the hook, (4) dx.
        std::vector<double> sums(2 * C);
        Tensor mean_dev;  // on a GPU: `mean` on the device
        if (q) {
            mean_dev = gpu::upload(mean, device());
            const Tensor d_sums = device_sums(device(), 2 * C);
            double* d = d_sums.data<double>();
            kg::batchnorm_backward_sums<T>(N, C, S, m_x.data<T>(), dy.data<T>(), mean_dev.data<T>(),
                                           d, d + C, q);
            sums = gpu::read_doubles(d, 2 * C, q);
        } else {
            kc::batchnorm_backward_sums<T>(N, C, S, m_x.data<T>(), dy.data<T>(), mean.data(),
                                           sums.data(), sums.data() + C);
        }
        double* sum_dy = sums.data();
        double* sum_dy_xmu = sums.data() + C;
        if (q) {
            // The CPU's increments, rounded to T on the host, added on the device (y += b).
            std::vector<T> delta(2 * C);  // [dgamma, dbeta]
            for (int64_t c = 0; c < C; ++c) {
                delta[c] = static_cast<T>(sum_dy_xmu[c] * m_invstd[c]);
                delta[C + c] = static_cast<T>(sum_dy[c]);
            }
            const Tensor d = gpu::upload(delta, device());
            kg::bias_add_rows<T>(1, C, d.data<T>(), m_weight->grad.data<T>(), q);
            kg::bias_add_rows<T>(1, C, d.data<T>() + C, m_bias->grad.data<T>(), q);
        } else {
            T* dgamma = m_weight->grad.data<T>();
            T* dbeta = m_bias->grad.data<T>();
            for (int64_t c = 0; c < C; ++c) {
                dgamma[c] += static_cast<T>(sum_dy_xmu[c] * m_invstd[c]);
                dbeta[c] += static_cast<T>(sum_dy[c]);
            }
        }
        if (!dx.defined()) return;
        const Tensor gamma_host = gpu::on_host(m_weight->value);
        const T* gamma = gamma_host.data<T>();
        std::vector<T> scale(C), mean_dy(C, T(0)), k(C, T(0));
        for (int64_t c = 0; c < C; ++c) scale[c] = static_cast<T>(gamma[c] * m_invstd[c]);
        if (m_mode == Mode::train) {
            int64_t count = N * S;
            reduce_channel_stats(sums, count);
            PARALAB_CHECK(count == m_count, label() + ": backward reduced a different count");
            const double n = static_cast<double>(count);
            for (int64_t c = 0; c < C; ++c) {
                mean_dy[c] = static_cast<T>(sum_dy[c] / n);
                k[c] = static_cast<T>(m_invstd[c] * m_invstd[c] * sum_dy_xmu[c] / n);
            }
        }
        if (q) {
            std::vector<T> packed(scale);  // [scale, mean_dy, k]
            packed.insert(packed.end(), mean_dy.begin(), mean_dy.end());
            packed.insert(packed.end(), k.begin(), k.end());
            const Tensor d = gpu::upload(packed, device());
            kg::batchnorm_backward_input<T>(N, C, S, m_x.data<T>(), dy.data<T>(), mean_dev.data<T>(),
                                            d.data<T>(), d.data<T>() + C, d.data<T>() + 2 * C,
                                            dx.data<T>(), q);
            return;
        }
        kc::batchnorm_backward_input<T>(N, C, S, m_x.data<T>(), dy.data<T>(), mean.data(),
                                        scale.data(), mean_dy.data(), k.data(), dx.data<T>());
    });
    m_x = Tensor();
    return dx;
}

// Per element: 2 for the statistics (add, multiply-add), 2 to normalize (subtract, multiply-add).
int64_t BatchNorm::flops_impl() const {
    return 4 * input_shape().numel();
}

// ---- LayerNorm ---------------------------------------------------------------------------

LayerNorm::LayerNorm(double eps) : Layer("layernorm"), m_eps(eps) {
    if (!(eps > 0))
        throw ConfigError("layernorm: eps must be positive, got " + std::to_string(eps));
}

// input: [..., D] -> the same shape
Shape LayerNorm::build_impl(const Shape& input) {
    if (input.rank() < 1 || input.numel() == 0) shape_error("an input [..., D]", input);
    m_dim = input.back();
    m_weight = &add_param("weight", Shape{m_dim});
    m_bias = &add_param("bias", Shape{m_dim});
    m_weight->value.fill(1.0);
    return input;
}

void LayerNorm::reset_parameters_impl(Rng& rng) {
    (void)rng;
    m_weight->value.fill(1.0);
    m_bias->value.zero();
}

// x: [B, ..., D] -> y: [B, ..., D], seen as [rows, D]; the row statistics are kept for backward.
Tensor LayerNorm::forward_impl(const Tensor& x, Mode mode) {
    (void)mode;
    const int64_t rows = x.numel() / m_dim;
    Tensor y = new_activation(x.shape());
    m_mean = new_activation(Shape{rows});
    m_rstd = new_activation(Shape{rows});
    dispatch_float(x.dtype(), [&]<class T>() {
        if (void* q = y.queue()) {
            kg::layernorm_forward<T>(rows, m_dim, m_eps, x.data<T>(), m_weight->value.data<T>(),
                                     m_bias->value.data<T>(), y.data<T>(), m_mean.data<T>(),
                                     m_rstd.data<T>(), q);
            return;
        }
        kc::layernorm_forward<T>(rows, m_dim, m_eps, x.data<T>(), m_weight->value.data<T>(),
                                 m_bias->value.data<T>(), y.data<T>(), m_mean.data<T>(),
                                 m_rstd.data<T>());
    });
    m_x = x;
    return y;
}

// dy: [B, ..., D] -> dx: [B, ..., D]
Tensor LayerNorm::backward_impl(const Tensor& dy) {
    PARALAB_CHECK(m_x.defined(), label() + ": a second backward after one forward");
    const int64_t rows = dy.numel() / m_dim;
    Tensor dx;
    if (needs_input_grad()) dx = new_activation(dy.shape());
    dispatch_float(dy.dtype(), [&]<class T>() {
        if (void* q = dy.queue()) {
            kg::layernorm_backward<T>(rows, m_dim, m_x.data<T>(), dy.data<T>(),
                                      m_weight->value.data<T>(), m_mean.data<T>(),
                                      m_rstd.data<T>(), dx.defined() ? dx.data<T>() : nullptr,
                                      m_weight->grad.data<T>(), m_bias->grad.data<T>(), q);
            return;
        }
        kc::layernorm_backward<T>(rows, m_dim, m_x.data<T>(), dy.data<T>(),
                                  m_weight->value.data<T>(), m_mean.data<T>(), m_rstd.data<T>(),
                                  dx.defined() ? dx.data<T>() : nullptr, m_weight->grad.data<T>(),
                                  m_bias->grad.data<T>());
    });
    m_x = m_mean = m_rstd = Tensor();
    return dx;
}

// Per element: 3 for the statistics (add; subtract, multiply-add), 4 to normalize and scale.
int64_t LayerNorm::flops_impl() const {
    return 7 * input_shape().numel();
}

}  // namespace paralab::nn
