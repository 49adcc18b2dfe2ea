// 2-D pooling on the CPU over planes: a batch of [B, C, H, W] is B*C independent [H, W]
// planes. Square windows, no padding, windows that would run past the edge are dropped (floor
// mode, PyTorch's default). Plain pointers to contiguous arrays; T = float or double.
// Deterministic for any thread count: each plane is one task.
#pragma once

#include <cstdint>

namespace paralab::kernels::cpu {

struct Pool2dGeometry {
    int64_t planes = 0, height = 0, width = 0;
    int64_t kernel = 2, stride = 2;

    int64_t out_height() const { return (height - kernel) / stride + 1; }
    int64_t out_width() const { return (width - kernel) / stride + 1; }
};

// x: [planes, H, W] -> y: [planes, OH, OW], argmax: [planes, OH, OW] holding, for each
// window, the index h*W + w within its input plane of the value taken. Ties take the first
// in row-major window order; a NaN wins over numbers (and the first NaN over later ones), as
// in PyTorch.
template <class T>
void maxpool2d_forward(const Pool2dGeometry& g, const T* x, T* y, int32_t* argmax);

// dy: [planes, OH, OW], argmax from the forward -> dx: [planes, H, W]; each dy goes to the
// position it was taken from, overlapping windows add. Overwrites dx.
template <class T>
void maxpool2d_backward(const Pool2dGeometry& g, const int32_t* argmax, const T* dy, T* dx);

// x: [planes, H, W] -> y: [planes, OH, OW], the mean of each k x k window.
template <class T>
void avgpool2d_forward(const Pool2dGeometry& g, const T* x, T* y);

// dy: [planes, OH, OW] -> dx: [planes, H, W]; each window spreads dy / (k*k) over its
// positions, overlapping windows add. Overwrites dx.
template <class T>
void avgpool2d_backward(const Pool2dGeometry& g, const T* dy, T* dx);

// x: [planes, plane_size] -> y: [planes], the mean of each plane.
template <class T>
void global_avgpool_forward(int64_t planes, int64_t plane_size, const T* x, T* y);

// dy: [planes] -> dx: [planes, plane_size] = dy / plane_size.
template <class T>
void global_avgpool_backward(int64_t planes, int64_t plane_size, const T* dy, T* dx);

}  // namespace paralab::kernels::cpu
