#include <kernels/cpu/swiglu.h>

#include <cmath>

#include "parallel_ranges.h"

namespace paralab::kernels::cpu {

namespace {
constexpr int64_t kParallelMin = int64_t{1} << 14;
}  // namespace

// gate, up: [n] -> h: [n]
template <class T>
void swiglu_forward(int64_t n, const T* gate, const T* up, T* h) {
    parallel_ranges(n, kParallelMin, [=](int64_t lo, int64_t hi) {
#pragma omp simd
        for (int64_t i = lo; i < hi; ++i) {
            const T g = gate[i];
            h[i] = g / (T(1) + std::exp(-g)) * up[i];
        }
    });
}

// gate, up, dh: [n] -> dgate, dup: [n]
template <class T>
void swiglu_backward(int64_t n, const T* gate, const T* up, const T* dh, T* dgate, T* dup) {
    parallel_ranges(n, kParallelMin, [=](int64_t lo, int64_t hi) {
#pragma omp simd
        for (int64_t i = lo; i < hi; ++i) {
            const T g = gate[i];
            const T s = T(1) / (T(1) + std::exp(-g));
            dgate[i] = dh[i] * up[i] * (s * (T(1) + g * (T(1) - s)));
            dup[i] = dh[i] * (g * s);
        }
    });
}

#define PARALAB_INSTANTIATE_SWIGLU(T)                                          \
    template void swiglu_forward<T>(int64_t, const T*, const T*, T*); \
    template void swiglu_backward<T>(int64_t, const T*, const T*, const T*, T*, T*);

PARALAB_INSTANTIATE_SWIGLU(float)
PARALAB_INSTANTIATE_SWIGLU(double)
#undef PARALAB_INSTANTIATE_SWIGLU

}  // namespace paralab::kernels::cpu
