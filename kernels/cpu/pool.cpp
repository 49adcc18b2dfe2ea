#include <kernels/cpu/pool.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace paralab::kernels::cpu {

namespace {
// Below this many input elements a parallel region costs more than the pass it splits.
constexpr int64_t kParallelMin = int64_t{1} << 15;
}  // namespace

// x: [planes, H, W] -> y, argmax: [planes, OH, OW]. Each output row starts as the windows'
// first elements and takes every later window element with a select over the whole row, so
// the inner loop has no branch (a compare-and-branch per element, half mispredicted on random
// data, was most of its time) and runs over ow, the long dimension.
template <class T>
void maxpool2d_forward(const Pool2dGeometry& g, const T* x, T* y, int32_t* argmax) {
    const int64_t H = g.height, W = g.width, OH = g.out_height(), OW = g.out_width();
    const int64_t k = g.kernel, s = g.stride;
    // take v over best: strict > keeps the first of equal values; a NaN is taken once
    // (v != v), then nothing compares greater than it.
    auto take = [](T v, T best) { return v > best || (v != v && best == best); };
    if (k == 2 && s == 2) {  // the common case, one pass over both input rows
#pragma omp parallel for if (g.planes * H * W >= kParallelMin)
        for (int64_t p = 0; p < g.planes; ++p) {
            const T* xp = x + p * H * W;
            for (int64_t oh = 0; oh < OH; ++oh) {
                const T* __restrict r0 = xp + 2 * oh * W;
                const T* __restrict r1 = r0 + W;
                T* __restrict yr = y + (p * OH + oh) * OW;
                int32_t* __restrict ar = argmax + (p * OH + oh) * OW;
                const int32_t top = static_cast<int32_t>(2 * oh * W);
#pragma omp simd
                for (int64_t ow = 0; ow < OW; ++ow) {
                    T best = r0[2 * ow];
                    int32_t at = top + static_cast<int32_t>(2 * ow);
                    T v = r0[2 * ow + 1];
                    bool t = take(v, best);
                    best = t ? v : best;
                    at = t ? top + static_cast<int32_t>(2 * ow + 1) : at;
                    v = r1[2 * ow];
                    t = take(v, best);
                    best = t ? v : best;
                    at = t ? top + static_cast<int32_t>(W + 2 * ow) : at;
                    v = r1[2 * ow + 1];
                    t = take(v, best);
                    best = t ? v : best;
                    at = t ? top + static_cast<int32_t>(W + 2 * ow + 1) : at;
                    yr[ow] = best;
                    ar[ow] = at;
                }
            }
        }
        return;
    }
#pragma omp parallel for if (g.planes * H * W >= kParallelMin)
    for (int64_t p = 0; p < g.planes; ++p) {
        const T* xp = x + p * H * W;
        for (int64_t oh = 0; oh < OH; ++oh) {
            T* __restrict yr = y + (p * OH + oh) * OW;
            int32_t* __restrict ar = argmax + (p * OH + oh) * OW;
            const T* x0 = xp + oh * s * W;
            for (int64_t ow = 0; ow < OW; ++ow) {
                yr[ow] = x0[ow * s];
                ar[ow] = static_cast<int32_t>(oh * s * W + ow * s);
            }
            for (int64_t i = 0; i < k; ++i) {
                for (int64_t j = i == 0 ? 1 : 0; j < k; ++j) {
                    const int64_t base = (oh * s + i) * W + j;
                    const T* __restrict xr = xp + base;
#pragma omp simd
                    for (int64_t ow = 0; ow < OW; ++ow) {
                        const T v = xr[ow * s], best = yr[ow];
                        const bool t = take(v, best);
                        yr[ow] = t ? v : best;
                        ar[ow] = t ? static_cast<int32_t>(base + ow * s) : ar[ow];
                    }
                }
            }
        }
    }
}

// dy: [planes, OH, OW] -> dx: [planes, H, W]
template <class T>
void maxpool2d_backward(const Pool2dGeometry& g, const int32_t* argmax, const T* dy, T* dx) {
    const int64_t HW = g.height * g.width, OHW = g.out_height() * g.out_width();
#pragma omp parallel for if (g.planes * HW >= kParallelMin)
    for (int64_t p = 0; p < g.planes; ++p) {
        T* dxp = dx + p * HW;
        std::fill(dxp, dxp + HW, T(0));
        for (int64_t o = 0; o < OHW; ++o) dxp[argmax[p * OHW + o]] += dy[p * OHW + o];
    }
}

// x: [planes, H, W] -> y: [planes, OH, OW]
template <class T>
void avgpool2d_forward(const Pool2dGeometry& g, const T* x, T* y) {
    const int64_t H = g.height, W = g.width, OH = g.out_height(), OW = g.out_width();
    const int64_t k = g.kernel, s = g.stride;
    const T inv_area = T(1) / static_cast<T>(k * k);
#pragma omp parallel for if (g.planes * H * W >= kParallelMin)
    for (int64_t p = 0; p < g.planes; ++p) {
        const T* xp = x + p * H * W;
        for (int64_t oh = 0; oh < OH; ++oh) {
            for (int64_t ow = 0; ow < OW; ++ow) {
                T acc = T(0);
                for (int64_t i = 0; i < k; ++i) {
                    const T* row = xp + (oh * s + i) * W + ow * s;
                    for (int64_t j = 0; j < k; ++j) acc += row[j];
                }
                y[(p * OH + oh) * OW + ow] = acc * inv_area;
            }
        }
    }
}

// dy: [planes, OH, OW] -> dx: [planes, H, W]
template <class T>
void avgpool2d_backward(const Pool2dGeometry& g, const T* dy, T* dx) {
    const int64_t H = g.height, W = g.width, OH = g.out_height(), OW = g.out_width();
    const int64_t k = g.kernel, s = g.stride;
    const T inv_area = T(1) / static_cast<T>(k * k);
#pragma omp parallel for if (g.planes * H * W >= kParallelMin)
    for (int64_t p = 0; p < g.planes; ++p) {
        T* dxp = dx + p * H * W;
        std::fill(dxp, dxp + H * W, T(0));
        for (int64_t oh = 0; oh < OH; ++oh) {
            for (int64_t ow = 0; ow < OW; ++ow) {
                const T share = dy[(p * OH + oh) * OW + ow] * inv_area;
                for (int64_t i = 0; i < k; ++i) {
                    T* row = dxp + (oh * s + i) * W + ow * s;
                    for (int64_t j = 0; j < k; ++j) row[j] += share;
                }
            }
        }
    }
}

// x: [planes, plane_size] -> y: [planes]
template <class T>
void global_avgpool_forward(int64_t planes, int64_t plane_size, const T* x, T* y) {
#pragma omp parallel for if (planes * plane_size >= kParallelMin)
    for (int64_t p = 0; p < planes; ++p) {
        const T* xp = x + p * plane_size;
        double acc = 0;  // double: a plane can be large, and the f32 mean should not drift
        for (int64_t i = 0; i < plane_size; ++i) acc += xp[i];
        y[p] = static_cast<T>(acc / static_cast<double>(plane_size));
    }
}

// dy: [planes] -> dx: [planes, plane_size]
template <class T>
void global_avgpool_backward(int64_t planes, int64_t plane_size, const T* dy, T* dx) {
    const T inv_size = T(1) / static_cast<T>(plane_size);
#pragma omp parallel for if (planes * plane_size >= kParallelMin)
    for (int64_t p = 0; p < planes; ++p)
        std::fill(dx + p * plane_size, dx + (p + 1) * plane_size, dy[p] * inv_size);
}

#define PARALAB_INSTANTIATE_POOL(T)                                                           \
    template void maxpool2d_forward<T>(const Pool2dGeometry&, const T*, T*, int32_t*);        \
    template void maxpool2d_backward<T>(const Pool2dGeometry&, const int32_t*, const T*, T*); \
    template void avgpool2d_forward<T>(const Pool2dGeometry&, const T*, T*);                  \
    template void avgpool2d_backward<T>(const Pool2dGeometry&, const T*, T*);                 \
    template void global_avgpool_forward<T>(int64_t, int64_t, const T*, T*);                  \
    template void global_avgpool_backward<T>(int64_t, int64_t, const T*, T*);

PARALAB_INSTANTIATE_POOL(float)
PARALAB_INSTANTIATE_POOL(double)
#undef PARALAB_INSTANTIATE_POOL

}  // namespace paralab::kernels::cpu
