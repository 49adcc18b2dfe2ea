// 2-D pooling (kernels/gpu/pool.h), after kernels/cpu/pool.cpp: the same comparisons, the same
// order of additions and the same roundings, so that max pool and the window averages equal
// the CPU bit for bit. Every backward gathers: thread i owns input element i and adds, in the
// windows' row-major order (the CPU's order of scattering), what the windows covering it
// send; no atomics, so reruns repeat bit for bit, overlapping windows (stride < kernel)
// included. Products go through __fmul_rn / __dmul_rn so that nvcc cannot fuse them with the
// addition that follows (the CPU kernels are built with -ffp-contract=off).
#include <kernels/gpu/pool.h>
#include <kernels/gpu/detail/op_lists.h>

#include <climits>

#include "launch.cuh"

namespace paralab::kernels::gpu {

namespace {

using detail::as_stream;
using detail::grid_for;
using detail::require;

__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }

// The windows covering input row (or column) h: o in [lo, hi] with o*s <= h < o*s + k and
// 0 <= o < count. Empty (lo > hi) for a row below the last window (floor mode drops it).
__device__ __forceinline__ void covering(int64_t h, int64_t k, int64_t s, int64_t count, int64_t& lo,
                                         int64_t& hi) {
    lo = h < k ? 0 : (h - k) / s + 1;  // the first o with o*s + k > h
    hi = h / s;
    if (hi > count - 1) hi = count - 1;
}

// One thread per output element o = (p, oh, ow): the CPU's scan of the window in row-major
// order, keeping the first of equal values and the first NaN.
template <class T>
__global__ void maxpool2d_forward_kernel(int64_t total, int64_t H, int64_t W, int64_t OH, int64_t OW, int64_t k,
                                         int64_t s, const T* x, T* y, int32_t* argmax) {
    PARALAB_GRID_STRIDE_LOOP(o, total) {
        const int64_t ow = o % OW, t = o / OW;
        const int64_t oh = t % OH, p = t / OH;
        const T* xp = x + p * H * W;
        const int64_t first = oh * s * W + ow * s;
        T best = xp[first];
        int64_t at = first;
        for (int64_t i = 0; i < k; ++i) {
            for (int64_t j = i == 0 ? 1 : 0; j < k; ++j) {
                const int64_t idx = first + i * W + j;
                const T v = xp[idx];
                // take v over best: strict > keeps the first of equal values; a NaN is taken
                // once (v != v), then nothing compares greater than it.
                if (v > best || (v != v && best == best)) {
                    best = v;
                    at = idx;
                }
            }
        }
        y[o] = best;
        argmax[o] = static_cast<int32_t>(at);
    }
}

// One thread per input element i = (p, h, w): the dy of every window that took it, in window
// order, added to 0 as the CPU's scatter does.
template <class T>
__global__ void maxpool2d_backward_kernel(int64_t total, int64_t H, int64_t W, int64_t OH, int64_t OW, int64_t k,
                                          int64_t s, const int32_t* argmax, const T* dy, T* dx) {
    PARALAB_GRID_STRIDE_LOOP(i, total) {
        const int64_t w = i % W, t = i / W;
        const int64_t h = t % H, p = t / H;
        const int32_t self = static_cast<int32_t>(h * W + w);
        int64_t oh_lo, oh_hi, ow_lo, ow_hi;
        covering(h, k, s, OH, oh_lo, oh_hi);
        covering(w, k, s, OW, ow_lo, ow_hi);
        const int64_t base = p * OH * OW;
        T acc = T(0);
        for (int64_t oh = oh_lo; oh <= oh_hi; ++oh)
            for (int64_t ow = ow_lo; ow <= ow_hi; ++ow) {
                const int64_t o = base + oh * OW + ow;
                if (argmax[o] == self) acc += dy[o];
            }
        dx[i] = acc;
    }
}

// One thread per output element: the window's sum in T, row-major, times 1 / (k*k).
template <class T>
__global__ void avgpool2d_forward_kernel(int64_t total, int64_t H, int64_t W, int64_t OH, int64_t OW, int64_t k,
                                         int64_t s, T inv_area, const T* x, T* y) {
    PARALAB_GRID_STRIDE_LOOP(o, total) {
        const int64_t ow = o % OW, t = o / OW;
        const int64_t oh = t % OH, p = t / OH;
        const T* xw = x + p * H * W + oh * s * W + ow * s;
        T acc = T(0);
        for (int64_t i = 0; i < k; ++i)
            for (int64_t j = 0; j < k; ++j) acc += xw[i * W + j];
        y[o] = mul_rn(acc, inv_area);
    }
}

// One thread per input element: dy / (k*k) of every window covering it, in window order.
template <class T>
__global__ void avgpool2d_backward_kernel(int64_t total, int64_t H, int64_t W, int64_t OH, int64_t OW, int64_t k,
                                          int64_t s, T inv_area, const T* dy, T* dx) {
    PARALAB_GRID_STRIDE_LOOP(i, total) {
        const int64_t w = i % W, t = i / W;
        const int64_t h = t % H, p = t / H;
        int64_t oh_lo, oh_hi, ow_lo, ow_hi;
        covering(h, k, s, OH, oh_lo, oh_hi);
        covering(w, k, s, OW, ow_lo, ow_hi);
        const T* dyp = dy + p * OH * OW;
        T acc = T(0);
        for (int64_t oh = oh_lo; oh <= oh_hi; ++oh)
            for (int64_t ow = ow_lo; ow <= ow_hi; ++ow) acc += mul_rn(dyp[oh * OW + ow], inv_area);
        dx[i] = acc;
    }
}

// Block p: plane p's sum in double (a fixed tree), divided by its size.
template <class T>
__global__ void __launch_bounds__(detail::kRowBlock)
    global_avgpool_forward_kernel(int64_t plane_size, const T* x, T* y) {
    __shared__ double shared[32];
    const int64_t p = blockIdx.x;
    const T* xp = x + p * plane_size;
    double acc = 0;
    for (int64_t i = threadIdx.x; i < plane_size; i += blockDim.x) acc += static_cast<double>(xp[i]);
    acc = detail::block_sum(acc, shared);
    if (threadIdx.x == 0) y[p] = static_cast<T>(acc / static_cast<double>(plane_size));
}

template <class T>
__global__ void global_avgpool_backward_kernel(int64_t total, int64_t plane_size, T inv_size, const T* dy, T* dx) {
    PARALAB_GRID_STRIDE_LOOP(i, total) dx[i] = mul_rn(dy[i / plane_size], inv_size);
}

}  // namespace

// x: [planes, H, W] -> y, argmax: [planes, OH, OW]
template <class T>
void maxpool2d_forward(const cpu::Pool2dGeometry& g, const T* x, T* y, int32_t* argmax, void* stream) {
    detail::check_pool_geometry(g, "maxpool2d_forward");
    const int64_t total = g.planes * g.out_height() * g.out_width();
    if (total == 0) return;
    maxpool2d_forward_kernel<T><<<grid_for(total), detail::kBlock, 0, as_stream(stream)>>>(
        total, g.height, g.width, g.out_height(), g.out_width(), g.kernel, g.stride, x, y, argmax);
    PARALAB_GPU_CHECK_LAUNCH("maxpool2d_forward_kernel");
}

// dy: [planes, OH, OW] -> dx: [planes, H, W]
template <class T>
void maxpool2d_backward(const cpu::Pool2dGeometry& g, const int32_t* argmax, const T* dy, T* dx, void* stream) {
    detail::check_pool_geometry(g, "maxpool2d_backward");
    const int64_t total = g.planes * g.height * g.width;
    if (total == 0) return;
    maxpool2d_backward_kernel<T><<<grid_for(total), detail::kBlock, 0, as_stream(stream)>>>(
        total, g.height, g.width, g.out_height(), g.out_width(), g.kernel, g.stride, argmax, dy, dx);
    PARALAB_GPU_CHECK_LAUNCH("maxpool2d_backward_kernel");
}

// x: [planes, H, W] -> y: [planes, OH, OW]
template <class T>
void avgpool2d_forward(const cpu::Pool2dGeometry& g, const T* x, T* y, void* stream) {
    detail::check_pool_geometry(g, "avgpool2d_forward");
    const int64_t total = g.planes * g.out_height() * g.out_width();
    if (total == 0) return;
    const T inv_area = T(1) / static_cast<T>(g.kernel * g.kernel);
    avgpool2d_forward_kernel<T><<<grid_for(total), detail::kBlock, 0, as_stream(stream)>>>(
        total, g.height, g.width, g.out_height(), g.out_width(), g.kernel, g.stride, inv_area, x, y);
    PARALAB_GPU_CHECK_LAUNCH("avgpool2d_forward_kernel");
}

// dy: [planes, OH, OW] -> dx: [planes, H, W]
template <class T>
void avgpool2d_backward(const cpu::Pool2dGeometry& g, const T* dy, T* dx, void* stream) {
    detail::check_pool_geometry(g, "avgpool2d_backward");
    const int64_t total = g.planes * g.height * g.width;
    if (total == 0) return;
    const T inv_area = T(1) / static_cast<T>(g.kernel * g.kernel);
    avgpool2d_backward_kernel<T><<<grid_for(total), detail::kBlock, 0, as_stream(stream)>>>(
        total, g.height, g.width, g.out_height(), g.out_width(), g.kernel, g.stride, inv_area, dy, dx);
    PARALAB_GPU_CHECK_LAUNCH("avgpool2d_backward_kernel");
}

// x: [planes, plane_size] -> y: [planes]
template <class T>
void global_avgpool_forward(int64_t planes, int64_t plane_size, const T* x, T* y, void* stream) {
    require(planes >= 0 && planes <= INT32_MAX, "global_avgpool_forward", "planes out of range");
    require(plane_size >= 1, "global_avgpool_forward", "plane_size must be >= 1");
    if (planes == 0) return;
    global_avgpool_forward_kernel<T>
        <<<static_cast<unsigned>(planes), detail::kRowBlock, 0, as_stream(stream)>>>(plane_size, x, y);
    PARALAB_GPU_CHECK_LAUNCH("global_avgpool_forward_kernel");
}

// dy: [planes] -> dx: [planes, plane_size]
template <class T>
void global_avgpool_backward(int64_t planes, int64_t plane_size, const T* dy, T* dx, void* stream) {
    require(planes >= 0, "global_avgpool_backward", "planes must be >= 0");
    require(plane_size >= 1, "global_avgpool_backward", "plane_size must be >= 1");
    const int64_t total = planes * plane_size;
    if (total == 0) return;
    const T inv_size = T(1) / static_cast<T>(plane_size);
    global_avgpool_backward_kernel<T>
        <<<grid_for(total), detail::kBlock, 0, as_stream(stream)>>>(total, plane_size, inv_size, dy, dx);
    PARALAB_GPU_CHECK_LAUNCH("global_avgpool_backward_kernel");
}

PARALAB_GPU_INSTANTIATE_FLOAT_TYPES(PARALAB_GPU_POOL_OPS)

}  // namespace paralab::kernels::gpu
