#include "engine/nn/conv2d.h"
#include "engine/nn/checked_count.h"

#include <kernels/cpu/gemm.h>
#include <kernels/cpu/threads.h>

#include "engine/device/device.h"

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
// produce [K, B*OH*OW] and need a transposing copy. The batch is split into one contiguous
// chunk of samples per compute thread (kc::parallel_chunks), each with its own col buffer and
// single-threaded GEMMs: one parallel region per pass, not one per sample and kernel.
const kc::DnnlConv2dPlan* Conv2d::dnnl_plan(const Tensor& x) {
    if (x.dtype() != DType::f32 || m_dnnl_refused || !kc::dnnl_conv_available()) return nullptr;
    const int64_t batch = x.dim(0);
    for (const auto& plan : m_plans)
        if (plan->batch() == batch) return plan.get();
    try {
        // A training run uses one batch size, plus its last partial batch and the evaluation
        // batch: keep the most recent few.
        constexpr size_t kKeep = 4;
        if (m_plans.size() == kKeep) m_plans.erase(m_plans.begin());
        m_plans.push_back(std::make_unique<kc::DnnlConv2dPlan>(m_geometry, batch,
                                                               m_out_channels, m_has_bias));
        return m_plans.back().get();
    } catch (const std::runtime_error&) {
        m_dnnl_refused = true;  // the im2col path computes the same convolution
        return nullptr;
    }
}

// The cuDNN plan for x's batch size on x's GPU (made on first use; a run uses a few sizes).
const kernels::gpu::CudnnConv2dPlan& Conv2d::cudnn_plan(const Tensor& x) {
    const int64_t batch = x.dim(0);
    for (const auto& plan : m_gpu_plans)
        if (plan->batch() == batch) return *plan;
    constexpr size_t kKeep = 4;
    if (m_gpu_plans.size() == kKeep) m_gpu_plans.erase(m_gpu_plans.begin());
    m_gpu_plans.push_back(std::make_unique<kernels::gpu::CudnnConv2dPlan>(
        x.device().id().index, m_geometry, batch, m_out_channels, m_has_bias, x.dtype() == DType::f64));
    return *m_gpu_plans.back();
}

// cuDNN's workspace as a tensor of this layer's dtype, so the device's accounting sees it.
static Tensor workspace_bytes(const Tensor& like, size_t bytes) {
    const auto elems = static_cast<int64_t>((bytes + dtype_size(like.dtype()) - 1) / dtype_size(like.dtype()));
    return Tensor::empty(Shape{std::max<int64_t>(elems, 1)}, like.dtype(), like.device(), MemCategory::workspace);
}

Tensor Conv2d::forward_cudnn(const Tensor& x) {
    const auto& plan = cudnn_plan(x);
    Tensor y = new_activation(output_shape().with_batch(x.dim(0)));
    Tensor ws = workspace_bytes(x, plan.forward_workspace_bytes());
    plan.forward(x.raw(), m_weight->value.raw(), m_bias ? m_bias->value.raw() : nullptr, y.raw(),
                 ws.raw(), x.queue());
    m_x = x;
    return y;
}

Tensor Conv2d::backward_cudnn(const Tensor& dy) {
    const auto& plan = cudnn_plan(dy);
    Tensor dx;
    if (needs_input_grad()) dx = new_activation(input_shape().with_batch(dy.dim(0)));
    Tensor ws = workspace_bytes(dy, plan.backward_workspace_bytes());
    plan.backward(m_x.raw(), dy.raw(), m_weight->value.raw(), dx.defined() ? dx.raw() : nullptr,
                  m_weight->grad.raw(), m_bias ? m_bias->grad.raw() : nullptr, ws.raw(), dy.queue());
    m_x = Tensor();
    return dx;
}

Tensor Conv2d::forward_impl(const Tensor& x, Mode mode) {
    (void)mode;
    if (x.on_gpu()) return forward_cudnn(x);
    const kc::DnnlConv2dPlan* plan = dnnl_plan(x);
    if (!plan) return forward_im2col(x);
    Tensor y = new_activation(output_shape().with_batch(x.dim(0)));
    const auto words = static_cast<int64_t>((plan->forward_workspace_bytes() + 3) / 4);
    Tensor ws = new_workspace(Shape{std::max<int64_t>(words, 1)});
    plan->forward(x.data<float>(), m_weight->value.data<float>(),
                  m_bias ? m_bias->value.data<float>() : nullptr, y.data<float>(), ws.raw());
    m_x = x;
    return y;
}

Tensor Conv2d::backward_impl(const Tensor& dy) {
    PARALAB_CHECK(m_x.defined(), label() + ": a second backward after one forward");
    if (dy.on_gpu()) return backward_cudnn(dy);
    const kc::DnnlConv2dPlan* plan = dnnl_plan(dy);
    if (!plan) return backward_im2col(dy);
    Tensor dx;
    if (needs_input_grad()) dx = new_activation(input_shape().with_batch(dy.dim(0)));
    const auto words = static_cast<int64_t>((plan->backward_workspace_bytes() + 3) / 4);
    Tensor ws = new_workspace(Shape{std::max<int64_t>(words, 1)});
    plan->backward(m_x.data<float>(), dy.data<float>(), m_weight->value.data<float>(),
                   dx.defined() ? dx.data<float>() : nullptr, m_weight->grad.data<float>(),
                   m_bias ? m_bias->grad.data<float>() : nullptr, ws.raw());
    m_x = Tensor();  // the saved input is dead once its gradients are out
    return dx;
}

Tensor Conv2d::forward_im2col(const Tensor& x) {
    const kc::Conv2dGeometry& g = m_geometry;
    const int64_t batch = x.dim(0), K = m_out_channels;
    const int64_t rows = g.col_rows(), plane = g.col_cols();
    const int64_t in_size = input_shape().numel(), out_size = K * plane;
    const int chunks = kc::chunk_count(batch);
    Tensor y = new_activation(output_shape().with_batch(batch));
    // A pointwise conv reads x directly: its col would be a copy of x.
    Tensor col = g.is_pointwise() ? Tensor() : new_workspace(Shape{chunks, rows, plane});
    dispatch_float(x.dtype(), [&]<class T>() {
        const T* w = m_weight->value.data<T>();
        const T* bias = m_bias ? m_bias->value.data<T>() : nullptr;
        T* cols = col.defined() ? col.data<T>() : nullptr;
        kc::parallel_chunks(batch, [&](int64_t lo, int64_t hi, int chunk) {
            for (int64_t b = lo; b < hi; ++b) {
                const T* xb = x.data<T>() + b * in_size;
                T* yb = y.data<T>() + b * out_size;
                const T* cb = xb;
                if (cols) {
                    T* own = cols + chunk * rows * plane;
                    kc::im2col<T>(g, xb, own);
                    cb = own;
                }
                T beta = T(0);
                if (bias) {
                    kc::channel_broadcast<T>(K, plane, bias, yb);
                    beta = T(1);
                }
                kc::gemm<T>(false, false, K, plane, rows, T(1), w, cb, beta, yb);
            }
        });
    });
    m_x = x;
    return y;
}

// dy: [B, K, OH, OW] -> dx: [B, C, H, W]. Per sample: dW [K, C*k*k] += dy_b · col_b^T,
// db += row sums of dy_b, dcol_b = W^T · dy_b, dx_b = col2im(dcol_b). col_b is rebuilt from x
// rather than kept from the forward: B columns buffers would cost k*k times the input. The
// batch is split over the compute threads as in the forward; chunk 0 adds into dW and db, the
// others into partials that are added after, in chunk order (deterministic for a thread count).
Tensor Conv2d::backward_im2col(const Tensor& dy) {
    const kc::Conv2dGeometry& g = m_geometry;
    const int64_t batch = dy.dim(0), K = m_out_channels;
    const int64_t rows = g.col_rows(), plane = g.col_cols();
    const int64_t in_size = input_shape().numel(), out_size = K * plane;
    const bool pointwise = g.is_pointwise();
    const int chunks = kc::chunk_count(batch);
    const int64_t part_size = K * rows + K;  // one chunk's dW then db
    Tensor dx, col, dcol, parts;
    if (needs_input_grad()) {
        dx = new_activation(input_shape().with_batch(batch));
        if (!pointwise) dcol = new_workspace(Shape{chunks, rows, plane});
    }
    if (!pointwise) col = new_workspace(Shape{chunks, rows, plane});
    if (chunks > 1) {
        parts = new_workspace(Shape{chunks - 1, part_size});
        parts.zero();
    }
    dispatch_float(dy.dtype(), [&]<class T>() {
        const T* w = m_weight->value.data<T>();
        T* dw = m_weight->grad.data<T>();
        T* db = m_bias ? m_bias->grad.data<T>() : nullptr;
        T* cols = col.defined() ? col.data<T>() : nullptr;
        T* dcols = dcol.defined() ? dcol.data<T>() : nullptr;
        kc::parallel_chunks(batch, [&](int64_t lo, int64_t hi, int chunk) {
            T* dw_c = chunk == 0 ? dw : parts.data<T>() + (chunk - 1) * part_size;
            T* db_c = chunk == 0 ? db : parts.data<T>() + (chunk - 1) * part_size + K * rows;
            for (int64_t b = lo; b < hi; ++b) {
                const T* xb = m_x.data<T>() + b * in_size;
                const T* gb = dy.data<T>() + b * out_size;
                const T* cb = xb;
                if (cols) {
                    T* own = cols + chunk * rows * plane;
                    kc::im2col<T>(g, xb, own);
                    cb = own;
                }
                kc::gemm<T>(false, true, K, rows, plane, T(1), gb, cb, T(1), dw_c);
                if (db) kc::channel_sums_accumulate<T>(K, plane, gb, db_c);
                if (!dx.defined()) continue;
                T* dxb = dx.data<T>() + b * in_size;
                if (pointwise) {
                    kc::gemm<T>(true, false, rows, plane, K, T(1), w, gb, T(0), dxb);
                } else {
                    T* own = dcols + chunk * rows * plane;
                    kc::gemm<T>(true, false, rows, plane, K, T(1), w, gb, T(0), own);
                    kc::col2im<T>(g, own, dxb);
                }
            }
        });
        for (int c = 1; c < chunks; ++c) {
            const T* part = parts.data<T>() + (c - 1) * part_size;
            for (int64_t i = 0; i < K * rows; ++i) dw[i] += part[i];
            if (db)
                for (int64_t i = 0; i < K; ++i) db[i] += part[K * rows + i];
        }
    });
    m_x = Tensor();  // the saved input is dead once its gradients are out
    return dx;
}

// 2 per multiply-add of the GEMM, 1 per bias add.
int64_t Conv2d::flops_impl() const {
    return checked_product({m_out_channels, m_geometry.col_cols(), 2 * m_geometry.col_rows() + (m_has_bias ? 1 : 0)},
                           "FLOPs");
}

}  // namespace paralab::nn
