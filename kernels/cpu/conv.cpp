#include <kernels/cpu/conv.h>

#include <algorithm>

namespace paralab::kernels::cpu {

namespace {
// The outputs o in [0, out) whose input index o*stride + offset lies in [0, size): [lo, hi).
// im2col copies that stretch and zero-fills the rest, so its inner loop has no bounds test.
struct ValidRange {
    int64_t lo, hi;
};
ValidRange valid_range(int64_t offset, int64_t stride, int64_t size, int64_t out) {
    int64_t lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
    int64_t hi = size - 1 - offset < 0 ? 0 : (size - 1 - offset) / stride + 1;
    lo = std::min(lo, out);
    hi = std::clamp(hi, lo, out);
    return {lo, hi};
}

// Stride 1 and an output the size of the input (2 * padding == kernel - 1, LeNet's 5x5 pad 2):
// row (c, ki, kj) of col is x's plane c shifted by (ki - p, kj - p) with zeros shifted in, so
// it is one contiguous copy of the plane and a fix-up of the |kj - p| edge columns of each
// row (which the shifted copy filled from the neighbouring row), instead of OH copies of OW
// elements (a library call each, most of im2col's time at OW = 14..28).
bool same_size(const Conv2dGeometry& g) {
    return g.stride == 1 && g.out_height() == g.height && g.out_width() == g.width;
}

template <class T>
void im2col_same(const Conv2dGeometry& g, const T* x, T* col) {
    const int64_t k = g.kernel, H = g.height, W = g.width, HW = H * W;
    for (int64_t r = 0; r < g.col_rows(); ++r) {
        const int64_t c = r / (k * k), dh = (r / k) % k - g.padding, dw = r % k - g.padding;
        const T* xc = x + c * HW;
        T* out = col + r * HW;
        const int64_t oh_lo = std::max<int64_t>(0, -dh), oh_hi = std::min(H, H - dh);
        if (oh_hi <= oh_lo) {
            std::fill(out, out + HW, T(0));
            continue;
        }
        std::fill(out, out + oh_lo * W, T(0));
        std::fill(out + oh_hi * W, out + HW, T(0));
        // out[i] = xc[i + dh*W + dw] over the valid rows, trimmed at both ends so that the
        // source stays inside the plane; the trimmed elements are edge columns, zeroed below.
        const int64_t left = std::max<int64_t>(0, -dw), right = std::max<int64_t>(0, dw);
        const int64_t i0 = oh_lo * W + left, i1 = oh_hi * W - right;
        if (i1 > i0) std::copy(xc + i0 + dh * W + dw, xc + i1 + dh * W + dw, out + i0);
        for (int64_t oh = oh_lo; oh < oh_hi; ++oh) {
            T* o = out + oh * W;
            for (int64_t ow = 0; ow < std::min(left, W); ++ow) o[ow] = T(0);
            for (int64_t ow = std::max<int64_t>(0, W - right); ow < W; ++ow) o[ow] = T(0);
        }
    }
}

// The adjoint of im2col_same, in the same order of additions as the general col2im.
template <class T>
void col2im_same(const Conv2dGeometry& g, const T* col, T* dx) {
    const int64_t k = g.kernel, H = g.height, W = g.width, HW = H * W;
    for (int64_t c = 0; c < g.channels; ++c) {
        T* dxc = dx + c * HW;
        std::fill(dxc, dxc + HW, T(0));
        for (int64_t ki = 0; ki < k; ++ki) {
            const int64_t dh = ki - g.padding;
            const int64_t oh_lo = std::max<int64_t>(0, -dh), oh_hi = std::min(H, H - dh);
            for (int64_t kj = 0; kj < k; ++kj) {
                const int64_t dw = kj - g.padding;
                const int64_t ow_lo = std::max<int64_t>(0, -dw), ow_hi = std::min(W, W - dw);
                const T* in = col + ((c * k + ki) * k + kj) * HW;
                const int64_t n = ow_hi - ow_lo;
                for (int64_t oh = oh_lo; oh < oh_hi; ++oh) {
                    T* __restrict dr = dxc + (oh + dh) * W + dw + ow_lo;
                    const T* __restrict i = in + oh * W + ow_lo;
#pragma omp simd
                    for (int64_t j = 0; j < n; ++j) dr[j] += i[j];
                }
            }
        }
    }
}
}  // namespace

// x: [C, H, W] -> col: [C*k*k, OH*OW]. Serial: a convolution layer splits its batch over the
// compute threads, one sample per call.
template <class T>
void im2col(const Conv2dGeometry& g, const T* x, T* col) {
    if (same_size(g)) return im2col_same(g, x, col);
    const int64_t k = g.kernel, s = g.stride, H = g.height, W = g.width;
    const int64_t OH = g.out_height(), OW = g.out_width(), rows = g.col_rows();
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t c = r / (k * k), ki = (r / k) % k, kj = r % k;
        const T* xc = x + c * H * W;
        T* out = col + r * OH * OW;
        const ValidRange rh = valid_range(ki - g.padding, s, H, OH);
        const ValidRange rw = valid_range(kj - g.padding, s, W, OW);
        std::fill(out, out + rh.lo * OW, T(0));
        for (int64_t oh = rh.lo; oh < rh.hi; ++oh) {
            const T* xr = xc + (oh * s + ki - g.padding) * W;
            const int64_t off = kj - g.padding;
            T* o = out + oh * OW;
            std::fill(o, o + rw.lo, T(0));
            if (s == 1) {
                std::copy(xr + rw.lo + off, xr + rw.hi + off, o + rw.lo);
            } else {
                for (int64_t ow = rw.lo; ow < rw.hi; ++ow) o[ow] = xr[ow * s + off];
            }
            std::fill(o + rw.hi, o + OW, T(0));
        }
        std::fill(out + rh.hi * OW, out + OH * OW, T(0));
    }
}

// col: [C*k*k, OH*OW] -> dx: [C, H, W]. Serial, like im2col. Each channel's k*k rows add
// into its plane in a fixed order.
template <class T>
void col2im(const Conv2dGeometry& g, const T* col, T* dx) {
    if (same_size(g)) return col2im_same(g, col, dx);
    const int64_t k = g.kernel, s = g.stride, H = g.height, W = g.width;
    const int64_t OH = g.out_height(), OW = g.out_width();
    for (int64_t c = 0; c < g.channels; ++c) {
        T* dxc = dx + c * H * W;
        std::fill(dxc, dxc + H * W, T(0));
        for (int64_t ki = 0; ki < k; ++ki) {
            for (int64_t kj = 0; kj < k; ++kj) {
                const T* in = col + ((c * k + ki) * k + kj) * OH * OW;
                const ValidRange rh = valid_range(ki - g.padding, s, H, OH);
                const ValidRange rw = valid_range(kj - g.padding, s, W, OW);
                for (int64_t oh = rh.lo; oh < rh.hi; ++oh) {
                    T* dr = dxc + (oh * s + ki - g.padding) * W;
                    const int64_t off = kj - g.padding;
                    const T* i = in + oh * OW;
                    for (int64_t ow = rw.lo; ow < rw.hi; ++ow) dr[ow * s + off] += i[ow];
                }
            }
        }
    }
}

// bias: [channels] -> y: [channels, plane]
template <class T>
void channel_broadcast(int64_t channels, int64_t plane, const T* bias, T* y) {
    for (int64_t c = 0; c < channels; ++c) std::fill(y + c * plane, y + (c + 1) * plane, bias[c]);
}

// dy: [channels, plane] -> sums: [channels] (+=)
template <class T>
void channel_sums_accumulate(int64_t channels, int64_t plane, const T* dy, T* sums) {
    for (int64_t c = 0; c < channels; ++c) {
        const T* row = dy + c * plane;
        T acc = T(0);
#pragma omp simd reduction(+ : acc)
        for (int64_t p = 0; p < plane; ++p) acc += row[p];
        sums[c] += acc;
    }
}

#define PARALAB_INSTANTIATE_CONV(T)                                     \
    template void im2col<T>(const Conv2dGeometry&, const T*, T*);       \
    template void col2im<T>(const Conv2dGeometry&, const T*, T*);       \
    template void channel_broadcast<T>(int64_t, int64_t, const T*, T*); \
    template void channel_sums_accumulate<T>(int64_t, int64_t, const T*, T*);

PARALAB_INSTANTIATE_CONV(float)
PARALAB_INSTANTIATE_CONV(double)
#undef PARALAB_INSTANTIATE_CONV

}  // namespace paralab::kernels::cpu
