#include <kernels/cpu/conv.h>

#include <algorithm>

namespace paralab::kernels::cpu {

namespace {
// Below this many col elements a parallel region costs more than the copy it splits.
constexpr int64_t kParallelMin = int64_t{1} << 15;

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
}  // namespace

// x: [C, H, W] -> col: [C*k*k, OH*OW]
template <class T>
void im2col(const Conv2dGeometry& g, const T* x, T* col) {
    const int64_t k = g.kernel, s = g.stride, H = g.height, W = g.width;
    const int64_t OH = g.out_height(), OW = g.out_width(), rows = g.col_rows();
#pragma omp parallel for if (rows * OH * OW >= kParallelMin)
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

// col: [C*k*k, OH*OW] -> dx: [C, H, W]
template <class T>
void col2im(const Conv2dGeometry& g, const T* col, T* dx) {
    const int64_t k = g.kernel, s = g.stride, H = g.height, W = g.width;
    const int64_t OH = g.out_height(), OW = g.out_width();
    // One task per channel: the k*k rows of a channel all add into the same plane, so a
    // channel's sums are made by one thread in a fixed order.
#pragma omp parallel for if (g.col_rows() * OH * OW >= kParallelMin)
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
