// Fused multi-tensor optimizer steps (kernels/gpu/optim.h). Each update is the loop body of
// kernels/cpu/optim.cpp; the host rounds the hyper-parameters to T exactly as the CPU does.
#include <kernels/gpu/optim.h>
#include <kernels/gpu/detail/op_lists.h>
#include <kernels/gpu/detail/single_tensor_forms.h>

#include <array>
#include <cmath>
#include <type_traits>

#include "launch.cuh"
#include "multi_tensor.cuh"

namespace paralab::kernels::gpu {

namespace {

using namespace detail;

template <class T>
struct SgdStep {
    T neg_lr, wd;
    __device__ void operator()(T* const* x, int64_t i) const {
        T* p = x[0];
        const T* g = x[1];
        p[i] += neg_lr * (g[i] + wd * p[i]);
    }
};

template <class T, bool Nesterov, bool First>
struct MomentumStep {
    T neg_lr, wd, mu;
    __device__ void operator()(T* const* x, int64_t i) const {
        T* p = x[0];
        const T* g = x[1];
        T* buf = x[2];
        const T d = g[i] + wd * p[i];
        const T b = First ? d : mu * buf[i] + d;
        buf[i] = b;
        p[i] += neg_lr * (Nesterov ? d + mu * b : b);
    }
};

template <class T, bool Decoupled>
struct AdamStep {
    T neg_step_size, bc2_sqrt, b1, c1, b2, c2, e, wd, decay;
    __device__ void operator()(T* const* x, int64_t i) const {
        T* p = x[0];
        const T* g = x[1];
        T* m = x[2];
        T* v = x[3];
        T d = g[i];
        if constexpr (Decoupled) p[i] *= decay;
        else d += wd * p[i];
        const T mi = b1 * m[i] + c1 * d;
        const T vi = b2 * v[i] + c2 * d * d;
        m[i] = mi;
        v[i] = vi;
        const T denom = sqrt(vi) / bc2_sqrt + e;
        p[i] += neg_step_size * mi / denom;
    }
};

// Block b updates elements [chunk*block_chunk[b], ...) of tensor block_tensor[b] of the lists.
template <class T, int Depth, class Step>
__global__ void __launch_bounds__(kTensorChunkBlock) multi_tensor_step_kernel(TensorList<Depth> list, Step step) {
    const int k = list.block_tensor[blockIdx.x];
    T* x[Depth];
#pragma unroll
    for (int d = 0; d < Depth; ++d) x[d] = static_cast<T*>(list.ptr[d][k]);
    const int64_t begin = static_cast<int64_t>(list.block_chunk[blockIdx.x]) * kTensorChunk;
    const int64_t end = min(begin + kTensorChunk, list.size[k]);
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) step(x, i);
}

template <class T, int Depth, class Step>
void launch_multi(const char* name, int64_t count, const std::array<void* const*, Depth>& lists,
                  const int64_t* sizes, Step step, void* stream) {
    require_tensor_sizes(name, count, sizes);
    const cudaStream_t s = as_stream(stream);
    detail::for_each_tensor_chunk<Depth>(count, lists, sizes, kTensorChunk, [&](const TensorList<Depth>& list, int blocks) {
        multi_tensor_step_kernel<T, Depth><<<blocks, kTensorChunkBlock, 0, s>>>(list, step);
        PARALAB_GPU_CHECK_LAUNCH("multi_tensor_step_kernel");
    });
}

// A host array of device pointers as the untyped list multi_tensor.cuh packs (the kernel
// casts each back to T*; read-only lists are only read).
template <class P>
void* const* untyped(P* const* list) {
    return reinterpret_cast<void* const*>(const_cast<std::remove_const_t<P>* const*>(list));
}

template <class T, bool Decoupled>
AdamStep<T, Decoupled> adam_step(double lr, double beta1, double beta2, double eps,
                                 double weight_decay, int64_t step) {
    require(step >= 1, "adam_update", "step must be >= 1");
    const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(step));
    const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(step));
    return {static_cast<T>(-lr / bc1),           static_cast<T>(std::sqrt(bc2)),
            static_cast<T>(beta1),               static_cast<T>(1.0 - beta1),
            static_cast<T>(beta2),               static_cast<T>(1.0 - beta2),
            static_cast<T>(eps),                 static_cast<T>(weight_decay),
            static_cast<T>(1.0 - lr * weight_decay)};
}

}  // namespace

// p[k], g[k]: [sizes[k]]
template <class T>
void sgd_update_multi(int64_t count, T* const* p, const T* const* g, const int64_t* sizes,
                      double lr, double weight_decay, void* stream) {
    const SgdStep<T> step{static_cast<T>(-lr), static_cast<T>(weight_decay)};
    launch_multi<T, 2>("sgd_update", count, {untyped(p), untyped(g)}, sizes, step, stream);
}

// p[k], g[k], buf[k]: [sizes[k]]
template <class T>
void sgd_momentum_update_multi(int64_t count, T* const* p, const T* const* g, T* const* buf,
                               const int64_t* sizes, double lr, double momentum,
                               double weight_decay, bool nesterov, bool first_step, void* stream) {
    const T neg_lr = static_cast<T>(-lr), wd = static_cast<T>(weight_decay), mu = static_cast<T>(momentum);
    const std::array<void* const*, 3> lists{untyped(p), untyped(g), untyped(buf)};
    const char* name = "sgd_momentum_update";
    // The flags pick a kernel, as the CPU hoists them out of its loop.
    if (nesterov && first_step)
        launch_multi<T, 3>(name, count, lists, sizes, MomentumStep<T, true, true>{neg_lr, wd, mu}, stream);
    else if (nesterov)
        launch_multi<T, 3>(name, count, lists, sizes, MomentumStep<T, true, false>{neg_lr, wd, mu}, stream);
    else if (first_step)
        launch_multi<T, 3>(name, count, lists, sizes, MomentumStep<T, false, true>{neg_lr, wd, mu}, stream);
    else
        launch_multi<T, 3>(name, count, lists, sizes, MomentumStep<T, false, false>{neg_lr, wd, mu}, stream);
}

// p[k], g[k], m[k], v[k]: [sizes[k]]
template <class T>
void adam_update_multi(int64_t count, T* const* p, const T* const* g, T* const* m, T* const* v,
                       const int64_t* sizes, double lr, double beta1, double beta2, double eps,
                       double weight_decay, int64_t step, void* stream) {
    launch_multi<T, 4>("adam_update", count, {untyped(p), untyped(g), untyped(m), untyped(v)}, sizes,
                       adam_step<T, false>(lr, beta1, beta2, eps, weight_decay, step), stream);
}

// p[k], g[k], m[k], v[k]: [sizes[k]]
template <class T>
void adamw_update_multi(int64_t count, T* const* p, const T* const* g, T* const* m, T* const* v,
                        const int64_t* sizes, double lr, double beta1, double beta2, double eps,
                        double weight_decay, int64_t step, void* stream) {
    launch_multi<T, 4>("adamw_update", count, {untyped(p), untyped(g), untyped(m), untyped(v)}, sizes,
                       adam_step<T, true>(lr, beta1, beta2, eps, weight_decay, step), stream);
}

// ---- one tensor: a list of one (kernels/gpu/detail/single_tensor_forms.h)

PARALAB_GPU_INSTANTIATE_FLOAT_TYPES(PARALAB_GPU_OPTIM_OPS)

}  // namespace paralab::kernels::gpu
