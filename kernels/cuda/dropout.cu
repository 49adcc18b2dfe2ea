// Dropout (kernels/gpu/dropout.h): the engine's counter-based draw, recomputed per element.
#include <kernels/gpu/dropout.h>
#include <kernels/gpu/detail/op_lists.h>

#include "dropout_draw.cuh"
#include "launch.cuh"

namespace paralab::kernels::gpu {

namespace {

using namespace detail;

// x: [n] -> mask, y: [n]
template <class T>
__global__ void dropout_forward_kernel(int64_t n, uint64_t key, uint64_t first, uint64_t threshold,
                                       T scale, const T* x, T* mask, T* y) {
    PARALAB_GRID_STRIDE_LOOP(i, n) {
        const T m = detail::dropout_keeps(key, first + static_cast<uint64_t>(i), threshold) ? scale : T(0);
        mask[i] = m;
        y[i] = x[i] * m;
    }
}

template <class T>
__global__ void dropout_backward_kernel(int64_t n, const T* dy, const T* mask, T* dx) {
    PARALAB_GRID_STRIDE_LOOP(i, n)
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
    dropout_forward_kernel<T><<<grid_for(n), kBlock, 0, as_stream(stream)>>>(n, key, first, detail::dropout_keep_threshold(p),
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

PARALAB_GPU_INSTANTIATE_FLOAT_TYPES(PARALAB_GPU_DROPOUT_OPS)

}  // namespace paralab::kernels::gpu
