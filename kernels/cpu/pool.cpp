#include <kernels/cpu/pool.h>

#include <algorithm>
#include <cmath>

namespace paralab::kernels::cpu {

namespace {
// Below this many input elements a parallel region costs more than the pass it splits.
constexpr int64_t kParallelMin = int64_t{1} << 15;
}  // namespace

// x: [planes, H, W] -> y, argmax: [planes, OH, OW]
template <class T>
void maxpool2d_forward(const Pool2dGeometry& g, const T* x, T* y, int32_t* argmax) {
    const int64_t H = g.height, W = g.width, OH = g.out_height(), OW = g.out_width();
    const int64_t k = g.kernel, s = g.stride;
#pragma omp parallel for if (g.planes * H * W >= kParallelMin)
    for (int64_t p = 0; p < g.planes; ++p) {
        const T* xp = x + p * H * W;
        for (int64_t oh = 0; oh < OH; ++oh) {
            for (int64_t ow = 0; ow < OW; ++ow) {
                int64_t best = oh * s * W + ow * s;
                T best_value = xp[best];
                for (int64_t i = 0; i < k; ++i) {
                    for (int64_t j = 0; j < k; ++j) {
                        const int64_t at = (oh * s + i) * W + ow * s + j;
                        const T v = xp[at];
                        // Strict > keeps the first of equal values; a NaN is taken once, then
                        // nothing compares greater than it.
                        if (v > best_value || (std::isnan(v) && !std::isnan(best_value))) {
                            best = at;
                            best_value = v;
                        }
                    }
                }
                const int64_t out = (p * OH + oh) * OW + ow;
                y[out] = best_value;
                argmax[out] = static_cast<int32_t>(best);
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
