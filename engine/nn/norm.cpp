#include "engine/nn/norm.h"
#include "engine/nn/recompute.h"

#include <kernels/cpu/norm.h>
#include <kernels/cpu/rmsnorm.h>
#include <kernels/gpu/memory.h>
#include <kernels/gpu/norm.h>
#include <kernels/gpu/rmsnorm.h>

#include "engine/device/device.h"

namespace paralab::nn {

namespace kc = kernels::cpu;
namespace kg = kernels::gpu;

namespace {
// A device array of `count` doubles (the batch norm kernels' per-channel sums).
Tensor device_sums(Device& device, int64_t count) {
    return Tensor::empty(Shape{count}, DType::f64, device, MemCategory::workspace);
}

}  // namespace

// stats[2C] = n, the elements per channel of this device's sums: a host store, or on a GPU a
// copy ordered on its queue from a device double holding n, uploaded at the first use of n and
// kept (a recorded GPU graph copies from it, and may copy no host memory).
void BatchNorm::set_count(void* q, double* stats, int64_t n) {
    const double v = static_cast<double>(n);
    if (!q) {
        stats[2 * m_channels] = v;
        return;
    }
    auto it = m_counts_on_gpu.find(n);
    if (it == m_counts_on_gpu.end()) {
        Tensor t = device_sums(device(), 1);
        kg::copy_host_to_device_async(t.raw(), &v, sizeof v, q);  // from pageable memory: staged at once
        it = m_counts_on_gpu.emplace(n, std::move(t)).first;
    }
    kg::copy_device_to_device_async(stats + 2 * m_channels, it->second.raw(), sizeof v, q);
}

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

// x: [B, C, ...] -> y: [B, C, ...], seen as [N = B, C, S]. Train: (1) this device's sums and
// element count, (2) the hook (SyncBatchNorm sums both over the devices), (3) the per-channel
// formulas, (4) normalize. One body for both devices: the kernels' CPU twins, or the GPU
// launchers, which take the same arguments plus the queue `q` (nullptr on the CPU). On a GPU
// every step is a kernel on the queue, the hook's all-reduce included: nothing waits on the
// host.
Tensor BatchNorm::forward_impl(const Tensor& x, Mode mode) {
    const int64_t N = x.dim(0), C = m_channels, S = m_spatial;
    Tensor y = new_activation(x.shape());
    void* q = y.queue();
    m_mode = mode;
    const bool train = mode == Mode::train;
    // What backward needs: the mean as T and 1 / sqrt(var + eps) in double.
    m_mean = new_activation(Shape{C});
    m_invstd = Tensor::empty(Shape{C}, DType::f64, device(), MemCategory::activations);
    dispatch_float(x.dtype(), [&]<class T>() {
        Tensor stats;  // train: [2C + 1] = sums of x, of x^2, and the count
        if (train) {
            // Without a hook the count is this device's, known here. With one it is the sum over
            // the devices, each of which has rows (the strategies refuse a batch that leaves a
            // device none), so more than 1.
            if (!m_stats_reducer && N * S <= 1)
                throw Error(label() + ": expected more than 1 value per channel when training, got input " +
                            x.shape().to_string());
            stats = device_sums(device(), 2 * C + 1);
            double* d = stats.data<double>();
            if (q) kg::batchnorm_channel_sums<T>(N, C, S, x.data<T>(), d, d + C, q);
            else kc::batchnorm_channel_sums<T>(N, C, S, x.data<T>(), d, d + C);
            set_count(q, d, N * S);
            reduce_channel_stats(d, 2 * C + 1);
            if (!q) {
                m_count = static_cast<int64_t>(d[2 * C]);
                if (m_count <= 1)
                    throw Error(label() + ": expected more than 1 value per channel when training, got input " +
                                x.shape().to_string() + " over all devices");
            }
        }
        Tensor scale = new_workspace(Shape{C});
        const double* st = train ? stats.data<double>() : nullptr;
        const T* gamma = m_weight->value.data<T>();
        T* rm = m_running_mean.data<T>();
        T* rv = m_running_var.data<T>();
        // A recomputed forward (nn/recompute.h) moves the running statistics into scratch
        // copies: they moved once, in the forward it repeats.
        Tensor rm_scratch, rv_scratch;
        if (train && recomputing()) {
            rm_scratch = m_running_mean.clone(MemCategory::workspace);
            rv_scratch = m_running_var.clone(MemCategory::workspace);
            rm = rm_scratch.data<T>();
            rv = rv_scratch.data<T>();
        }
        if (q) {
            kg::batchnorm_stats<T>(C, train, st, m_eps, m_momentum, gamma, rm, rv, m_mean.data<T>(),
                                   scale.data<T>(), m_invstd.data<double>(), q);
            kg::batchnorm_normalize<T>(N, C, S, x.data<T>(), m_mean.data<T>(), scale.data<T>(),
                                       m_bias->value.data<T>(), y.data<T>(), q);
        } else {
            kc::batchnorm_stats<T>(C, train, st, m_eps, m_momentum, gamma, rm, rv, m_mean.data<T>(),
                                   scale.data<T>(), m_invstd.data<double>());
            kc::batchnorm_normalize<T>(N, C, S, x.data<T>(), m_mean.data<T>(), scale.data<T>(),
                                       m_bias->value.data<T>(), y.data<T>());
        }
    });
    m_x = x;
    return y;
}

// dy: [B, C, ...] -> dx: [B, C, ...]. Train mode differentiates through the batch statistics:
// dx = gamma*invstd * (dy - mean(dy) - xhat * mean(dy * xhat)); eval mode is affine:
// dx = gamma*invstd * dy. dgamma += sum dy * xhat, dbeta += sum dy. (1) this device's sums,
// (2) the parameter gradients from them (the gradient all-reduce of data parallelism sums
// those), (3) the hook, (4) the input gradient's coefficients and dx.
Tensor BatchNorm::backward_impl(const Tensor& dy) {
    PARALAB_CHECK(m_x.defined(), label() + ": a second backward after one forward");
    const int64_t N = dy.dim(0), C = m_channels, S = m_spatial;
    void* q = dy.queue();
    Tensor dx;
    if (needs_input_grad()) dx = new_activation(dy.shape());
    const bool train = m_mode == Mode::train;
    dispatch_float(dy.dtype(), [&]<class T>() {
        const Tensor sums = device_sums(device(), 2 * C + 1);  // sum dy, sum dy (x - mean), count
        double* d = sums.data<double>();
        const double* invstd = m_invstd.data<double>();
        const T* mean = m_mean.data<T>();
        if (q) {
            kg::batchnorm_backward_sums<T>(N, C, S, m_x.data<T>(), dy.data<T>(), mean, d, d + C, q);
            kg::batchnorm_param_grads<T>(C, d, invstd, m_weight->grad.data<T>(), m_bias->grad.data<T>(), q);
        } else {
            kc::batchnorm_backward_sums<T>(N, C, S, m_x.data<T>(), dy.data<T>(), mean, d, d + C);
            kc::batchnorm_param_grads<T>(C, d, invstd, m_weight->grad.data<T>(), m_bias->grad.data<T>());
        }
        if (!dx.defined()) return;
        if (train) {
            set_count(q, d, N * S);
            reduce_channel_stats(d, 2 * C + 1);
            if (!q)
                PARALAB_CHECK(static_cast<int64_t>(d[2 * C]) == m_count,
                              label() + ": backward reduced a different count");
        }
        const Tensor coeffs = new_workspace(Shape{3 * C});  // [scale, mean_dy, k]
        T* cf = coeffs.data<T>();
        const T* gamma = m_weight->value.data<T>();
        if (q) {
            kg::batchnorm_backward_coeffs<T>(C, train, d, invstd, gamma, cf, cf + C, cf + 2 * C, q);
            kg::batchnorm_backward_input<T>(N, C, S, m_x.data<T>(), dy.data<T>(), mean, cf, cf + C,
                                            cf + 2 * C, dx.data<T>(), q);
        } else {
            kc::batchnorm_backward_coeffs<T>(C, train, d, invstd, gamma, cf, cf + C, cf + 2 * C);
            kc::batchnorm_backward_input<T>(N, C, S, m_x.data<T>(), dy.data<T>(), mean, cf, cf + C,
                                            cf + 2 * C, dx.data<T>());
        }
    });
    m_x = m_mean = m_invstd = Tensor();
    return dx;
}

// Per element: 2 for the statistics (add, multiply-add), 2 to normalize (subtract, multiply-add).
int64_t BatchNorm::flops_impl() const {
    return 4 * input_shape().numel();
}

// ---- LayerNorm ---------------------------------------------------------------------------

// input: [..., D] -> the same shape
Shape LastDimNorm::build_impl(const Shape& input) {
    if (input.rank() < 1 || input.numel() == 0) shape_error("an input [..., D]", input);
    m_dim = input.back();
    m_weight = &add_param("weight", Shape{m_dim});
    m_bias = m_has_bias ? &add_param("bias", Shape{m_dim}) : nullptr;
    m_weight->value.fill(1.0);
    return input;
}

void LastDimNorm::reset_parameters_impl(Rng& rng) {
    (void)rng;
    m_weight->value.fill(1.0);
    if (m_bias) m_bias->value.zero();
}

LayerNorm::LayerNorm(double eps, bool bias) : LastDimNorm("layernorm", eps, bias) {
    if (!(eps > 0))
        throw ConfigError("layernorm: eps must be positive, got " + std::to_string(eps));
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
                                     m_bias ? m_bias->value.data<T>() : nullptr, y.data<T>(), m_mean.data<T>(),
                                     m_rstd.data<T>(), q);
            return;
        }
        kc::layernorm_forward<T>(rows, m_dim, m_eps, x.data<T>(), m_weight->value.data<T>(),
                                 m_bias ? m_bias->value.data<T>() : nullptr, y.data<T>(), m_mean.data<T>(),
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
                                      m_weight->grad.data<T>(), m_bias ? m_bias->grad.data<T>() : nullptr, q);
            return;
        }
        kc::layernorm_backward<T>(rows, m_dim, m_x.data<T>(), dy.data<T>(),
                                  m_weight->value.data<T>(), m_mean.data<T>(), m_rstd.data<T>(),
                                  dx.defined() ? dx.data<T>() : nullptr, m_weight->grad.data<T>(),
                                  m_bias ? m_bias->grad.data<T>() : nullptr);
    });
    m_x = m_mean = m_rstd = Tensor();
    return dx;
}

// Per element: 3 for the statistics (add; subtract, multiply-add), 4 to normalize and scale
// (3 without the shift).
int64_t LayerNorm::flops_impl() const {
    return (m_has_bias ? 7 : 6) * input_shape().numel();
}

// ---- RMSNorm -----------------------------------------------------------------------------

RMSNorm::RMSNorm(double eps, bool bias) : LastDimNorm("rmsnorm", eps, bias) {
    if (!(eps > 0))
        throw ConfigError("eps", "expected a positive number, got " + std::to_string(eps));
}

// x: [B, ..., D] -> y: [B, ..., D], seen as [rows, D]; the input and its row rstd kept for backward.
Tensor RMSNorm::forward_impl(const Tensor& x, Mode mode) {
    (void)mode;
    const int64_t rows = x.numel() / m_dim;
    Tensor y = new_activation(x.shape());
    m_rstd = new_activation(Shape{rows});
    dispatch_float(x.dtype(), [&]<class T>() {
        const T* beta = m_bias ? m_bias->value.data<T>() : nullptr;
        if (void* q = y.queue())
            kg::rmsnorm_forward<T>(rows, m_dim, m_eps, x.data<T>(), m_weight->value.data<T>(), beta, y.data<T>(),
                                   m_rstd.data<T>(), q);
        else
            kc::rmsnorm_forward<T>(rows, m_dim, m_eps, x.data<T>(), m_weight->value.data<T>(), beta, y.data<T>(),
                                   m_rstd.data<T>());
    });
    m_x = x;
    return y;
}

// dy: [B, ..., D] -> dx: [B, ..., D]
Tensor RMSNorm::backward_impl(const Tensor& dy) {
    PARALAB_CHECK(m_x.defined(), label() + ": a second backward after one forward");
    const int64_t rows = dy.numel() / m_dim;
    Tensor dx;
    if (needs_input_grad()) dx = new_activation(dy.shape());
    dispatch_float(dy.dtype(), [&]<class T>() {
        T* dxp = dx.defined() ? dx.data<T>() : nullptr;
        T* dbeta = m_bias ? m_bias->grad.data<T>() : nullptr;
        if (void* q = dy.queue())
            kg::rmsnorm_backward<T>(rows, m_dim, m_x.data<T>(), dy.data<T>(), m_weight->value.data<T>(),
                                    m_rstd.data<T>(), dxp, m_weight->grad.data<T>(), dbeta, q);
        else
            kc::rmsnorm_backward<T>(rows, m_dim, m_x.data<T>(), dy.data<T>(), m_weight->value.data<T>(),
                                    m_rstd.data<T>(), dxp, m_weight->grad.data<T>(), dbeta);
    });
    m_x = m_rstd = Tensor();
    return dx;
}

// Per element: 2 for the statistic (square, add), 2 to normalize and scale (1 more to shift).
int64_t RMSNorm::flops_impl() const {
    return (m_has_bias ? 5 : 4) * input_shape().numel();
}

}  // namespace paralab::nn
