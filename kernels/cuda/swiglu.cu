// The SwiGLU product and its backward on the GPU (kernels/gpu/swiglu.h), the loop bodies of
// kernels/cpu/swiglu.cpp.
#include <kernels/gpu/swiglu.h>
#include <kernels/gpu/detail/op_lists.h>

#include "launch.cuh"

namespace paralab::kernels::gpu {

namespace {

using namespace detail;

__device__ __forceinline__ float exp_of(float v) { return expf(v); }
__device__ __forceinline__ double exp_of(double v) { return exp(v); }

// gate, up: [n] -> h: [n], grid-stride.
template <class T>
__global__ void swiglu_forward_kernel(int64_t n, const T* gate, const T* up, T* h) {
    PARALAB_GRID_STRIDE_LOOP(i, n) {
        const T g = gate[i];
        h[i] = g / (T(1) + exp_of(-g)) * up[i];
    }
}

// gate, up, dh: [n] -> dgate, dup: [n], grid-stride.
template <class T>
__global__ void swiglu_backward_kernel(int64_t n, const T* gate, const T* up, const T* dh, T* dgate, T* dup) {
    PARALAB_GRID_STRIDE_LOOP(i, n) {
        const T g = gate[i];
        const T s = T(1) / (T(1) + exp_of(-g));
        dgate[i] = dh[i] * up[i] * (s * (T(1) + g * (T(1) - s)));
        dup[i] = dh[i] * (g * s);
    }
}

}  // namespace

template <class T>
void swiglu_forward(int64_t n, const T* gate, const T* up, T* h, void* stream) {
    require(n >= 0, "swiglu_forward", "negative size");
    if (n == 0) return;
    swiglu_forward_kernel<T><<<grid_for(n), kBlock, 0, as_stream(stream)>>>(n, gate, up, h);
    PARALAB_GPU_CHECK_LAUNCH("swiglu_forward_kernel");
}

template <class T>
void swiglu_backward(int64_t n, const T* gate, const T* up, const T* dh, T* dgate, T* dup, void* stream) {
    require(n >= 0, "swiglu_backward", "negative size");
    if (n == 0) return;
    swiglu_backward_kernel<T><<<grid_for(n), kBlock, 0, as_stream(stream)>>>(n, gate, up, dh, dgate, dup);
    PARALAB_GPU_CHECK_LAUNCH("swiglu_backward_kernel");
}

PARALAB_GPU_INSTANTIATE_FLOAT_TYPES(PARALAB_GPU_SWIGLU_OPS)

}  // namespace paralab::kernels::gpu
