// 2-D pooling on the GPU, the twin of kernels/cpu/pool.h: the same functions, geometry
// (cpu::Pool2dGeometry: B*C planes [H, W], square windows, no padding, floor mode) and results,
// plus the stream. Max pool equals the CPU bit for bit (values, argmax, gradient); the averages
// add in the CPU's order too, and global_avgpool_forward sums in double in a fixed tree order.
// Deterministic: no atomics; every backward is a gather (each input element adds, in window
// order, what the windows covering it send it), overlapping windows included. Device pointers;
// T = float or double; `stream` is an opaque cudaStream_t (nullptr: the legacy default stream).
#pragma once

#include <kernels/cpu/pool.h>

#include <cstdint>

namespace paralab::kernels::gpu {

// x: [planes, H, W] -> y: [planes, OH, OW], argmax: [planes, OH, OW] holding, for each
// window, the index h*W + w within its input plane of the value taken. Ties take the first
// in row-major window order; a NaN wins over numbers (and the first NaN over later ones).
template <class T>
void maxpool2d_forward(const cpu::Pool2dGeometry& g, const T* x, T* y, int32_t* argmax, void* stream);

// dy: [planes, OH, OW], argmax from the forward -> dx: [planes, H, W]; each dy goes to the
// position it was taken from, overlapping windows add (in window order). Overwrites dx.
template <class T>
void maxpool2d_backward(const cpu::Pool2dGeometry& g, const int32_t* argmax, const T* dy, T* dx, void* stream);

// x: [planes, H, W] -> y: [planes, OH, OW], the mean of each k x k window.
template <class T>
void avgpool2d_forward(const cpu::Pool2dGeometry& g, const T* x, T* y, void* stream);

// dy: [planes, OH, OW] -> dx: [planes, H, W]; each window spreads dy / (k*k) over its
// positions, overlapping windows add. Overwrites dx.
template <class T>
void avgpool2d_backward(const cpu::Pool2dGeometry& g, const T* dy, T* dx, void* stream);

// x: [planes, plane_size] -> y: [planes], the mean of each plane (summed in double).
template <class T>
void global_avgpool_forward(int64_t planes, int64_t plane_size, const T* x, T* y, void* stream);

// dy: [planes] -> dx: [planes, plane_size] = dy / plane_size.
template <class T>
void global_avgpool_backward(int64_t planes, int64_t plane_size, const T* dy, T* dx, void* stream);

}  // namespace paralab::kernels::gpu
