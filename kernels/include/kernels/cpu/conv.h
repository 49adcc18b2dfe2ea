// Convolution lowered to GEMM on the CPU, one sample at a time: im2col lays out every kernel
// window of x [C, H, W] as a column of col [C*k*k, OH*OW], so that y = W [K, C*k*k] · col;
// col2im is its adjoint and turns the column gradient back into dx. Plain pointers to
// contiguous row-major arrays; T = float or double. im2col and col2im run on the calling thread:
// a layer splits its batch over the compute threads (kernels/cpu/threads.h, parallel_chunks).
#pragma once

#include <cstdint>

namespace paralab::kernels::cpu {

// A square-kernel 2-D convolution over one sample [channels, height, width], zero padding
// on every side. Row r of col is (c, ki, kj) with r = (c*k + ki)*k + kj, the order of a
// weight [K, C, k, k] flattened to [K, C*k*k].
struct Conv2dGeometry {
    int64_t channels = 0, height = 0, width = 0;
    int64_t kernel = 1, stride = 1, padding = 0;

    int64_t out_height() const { return (height + 2 * padding - kernel) / stride + 1; }
    int64_t out_width() const { return (width + 2 * padding - kernel) / stride + 1; }
    int64_t col_rows() const { return channels * kernel * kernel; }
    int64_t col_cols() const { return out_height() * out_width(); }
    // A 1x1 kernel, stride 1, no padding: col is x itself, no copy needed.
    bool is_pointwise() const { return kernel == 1 && stride == 1 && padding == 0; }
};

// x: [C, H, W] -> col: [C*k*k, OH*OW]; positions in the padding read as 0. Overwrites col.
template <class T>
void im2col(const Conv2dGeometry& g, const T* x, T* col);

// col: [C*k*k, OH*OW] -> dx: [C, H, W], the adjoint of im2col: each input position receives
// the sum of the col entries that read it. Overwrites dx.
template <class T>
void col2im(const Conv2dGeometry& g, const T* col, T* dx);

// y: [channels, plane] with y[c, p] = bias[c]: a conv output initialised with its bias so that
// the GEMM with beta = 1 adds the product on top.
template <class T>
void channel_broadcast(int64_t channels, int64_t plane, const T* bias, T* y);

// sums[c] += sum over p of dy[c, p] for dy: [channels, plane] (the conv bias gradient of one
// sample).
template <class T>
void channel_sums_accumulate(int64_t channels, int64_t plane, const T* dy, T* sums);

}  // namespace paralab::kernels::cpu
