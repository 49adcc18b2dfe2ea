// Dropout (kernels/gpu/dropout.h): the engine's counter-based draw, recomputed per element.
#include <kernels/gpu/dropout.h>

#include <cmath>

#include "launch.cuh"

namespace paralab::kernels::gpu {

namespace {

using detail::as_stream;
using detail::grid_for;
using detail::kBlock;
using detail::require;

// engine/util/rng.h's splitmix64, unchanged: integer arithmetic gives the same bits on any
// processor.
__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// The CPU keeps element i when u = k * 2^-53 >= p with k = splitmix64(key ^ splitmix64(i)) >> 11.
// u and p * 2^53 are exact doubles (scaling by a power of two), so for the integer k that test
// is k >= ceil(p * 2^53): the same decision in integers, without double arithmetic per element.
uint64_t keep_threshold(double p) { return static_cast<uint64_t>(std::ceil(std::ldexp(p, 53))); }

// x: [n] -> mask, y: [n]
template <class T>
__global__ void dropout_forward_kernel(int64_t n, uint64_t key, uint64_t first, uint64_t threshold,
                                       T scale, const T* x, T* mask, T* y) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        const uint64_t k = splitmix64(key ^ splitmix64(first + static_cast<uint64_t>(i))) >> 11;
        const T m = k >= threshold ? scale : T(0);
        mask[i] = m;
        y[i] = x[i] * m;
    }
}

template <class T>
__global__ void dropout_backward_kernel(int64_t n, const T* dy, const T* mask, T* dx) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
        dx[i] = dy[i] * mask[i];
}

}  // namespace

// x: [n] -> mask, y: [n]
template <class T>
void dropout_forward(int64_t n, uint64_t key, uint64_t first, double p, const T* x, T* mask, T* y,
                     void* stream) {
    require(n >= 0, "dropout_forward", "negative size");
    require(p >= 0.0 && p < 1.0, "dropout_forward", "p must be in [0, 1)");
    if (n == 0) return;
    const T scale = static_cast<T>(1.0 / (1.0 - p));
    dropout_forward_kernel<T><<<grid_for(n), kBlock, 0, as_stream(stream)>>>(n, key, first, keep_threshold(p),
                                                                            scale, x, mask, y);
    PARALAB_GPU_CHECK_LAUNCH("dropout_forward_kernel");
}

// dy, mask: [n] -> dx: [n]
template <class T>
void dropout_backward(int64_t n, const T* dy, const T* mask, T* dx, void* stream) {
    require(n >= 0, "dropout_backward", "negative size");
    if (n == 0) return;
    dropout_backward_kernel<T><<<grid_for(n), kBlock, 0, as_stream(stream)>>>(n, dy, mask, dx);
    PARALAB_GPU_CHECK_LAUNCH("dropout_backward_kernel");
}

#define PARALAB_INSTANTIATE_DROPOUT(T)                                                           \
    template void dropout_forward<T>(int64_t, uint64_t, uint64_t, double, const T*, T*, T*, void*); \
    template void dropout_backward<T>(int64_t, const T*, const T*, T*, void*);
PARALAB_INSTANTIATE_DROPOUT(float)
PARALAB_INSTANTIATE_DROPOUT(double)
#undef PARALAB_INSTANTIATE_DROPOUT

}  // namespace paralab::kernels::gpu
