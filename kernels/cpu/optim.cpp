#include <kernels/cpu/optim.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "parallel_ranges.h"
#include "simd_clones.h"

namespace paralab::kernels::cpu {

namespace {
// Memory-bound loops: threads pay only on arrays well past the L2 cache.
constexpr int64_t kParallelMin = int64_t{1} << 16;
// sum_of_squares adds blocks of this many elements; block boundaries do not depend on the
// thread count, so neither does the rounding of the total.
constexpr int64_t kSumBlock = 4096;

// The element loop of adam_family_update (below), as a function of its own so that the f32 one
// is compiled for AVX-512 and AVX2 as well (simd_clones.h): its square root and two divisions
// an element are what the optimizer step costs.
template <class T, bool Decoupled>
inline void adam_elements(int64_t lo, int64_t hi, T* p, const T* g, T* m, T* v, T neg_step_size, T bc2_sqrt,
                          T b1, T c1, T b2, T c2, T e, T wd, T decay) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) {
        T d = g[i];
        if constexpr (Decoupled) p[i] *= decay;
        else d += wd * p[i];
        m[i] = b1 * m[i] + c1 * d;
        v[i] = b2 * v[i] + c2 * d * d;
        const T denom = std::sqrt(v[i]) / bc2_sqrt + e;
        p[i] += neg_step_size * m[i] / denom;
    }
}

PARALAB_SIMD_CLONES void adam_f32(int64_t lo, int64_t hi, float* p, const float* g, float* m, float* v,
                                  float neg_step_size, float bc2_sqrt, float b1, float c1, float b2, float c2,
                                  float e, float wd, float decay) {
    adam_elements<float, false>(lo, hi, p, g, m, v, neg_step_size, bc2_sqrt, b1, c1, b2, c2, e, wd, decay);
}
PARALAB_SIMD_CLONES void adamw_f32(int64_t lo, int64_t hi, float* p, const float* g, float* m, float* v,
                                   float neg_step_size, float bc2_sqrt, float b1, float c1, float b2, float c2,
                                   float e, float wd, float decay) {
    adam_elements<float, true>(lo, hi, p, g, m, v, neg_step_size, bc2_sqrt, b1, c1, b2, c2, e, wd, decay);
}

// Torch's expression order (addcmul: v + c*g*g; addcdiv: p + s*m/denom) so that f32 results
// round the way torch's do.
template <class T, bool Decoupled>
void adam_family_update(int64_t n, T* p, const T* g, T* m, T* v, double lr, double beta1,
                        double beta2, double eps, double weight_decay, int64_t step) {
    const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(step));
    const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(step));
    const T neg_step_size = static_cast<T>(-lr / bc1);
    const T bc2_sqrt = static_cast<T>(std::sqrt(bc2));
    const T b1 = static_cast<T>(beta1), c1 = static_cast<T>(1.0 - beta1);
    const T b2 = static_cast<T>(beta2), c2 = static_cast<T>(1.0 - beta2);
    const T e = static_cast<T>(eps);
    const T wd = static_cast<T>(weight_decay);
    const T decay = static_cast<T>(1.0 - lr * weight_decay);
    parallel_ranges(n, kParallelMin, [=](int64_t lo, int64_t hi) {
        if constexpr (std::is_same_v<T, float>)
            (Decoupled ? adamw_f32 : adam_f32)(lo, hi, p, g, m, v, neg_step_size, bc2_sqrt, b1, c1, b2, c2, e, wd,
                                               decay);
        else
            adam_elements<T, Decoupled>(lo, hi, p, g, m, v, neg_step_size, bc2_sqrt, b1, c1, b2, c2, e, wd, decay);
    });
}
}  // namespace

// p, g: [n]
template <class T>
void sgd_update(int64_t n, T* p, const T* g, double lr, double weight_decay) {
    const T neg_lr = static_cast<T>(-lr), wd = static_cast<T>(weight_decay);
    parallel_ranges(n, kParallelMin, [=](int64_t lo, int64_t hi) {
#pragma omp simd
        for (int64_t i = lo; i < hi; ++i) p[i] += neg_lr * (g[i] + wd * p[i]);
    });
}

// p, g, buf: [n]
template <class T>
void sgd_momentum_update(int64_t n, T* p, const T* g, T* buf, double lr, double momentum,
                         double weight_decay, bool nesterov, bool first_step) {
    const T neg_lr = static_cast<T>(-lr), wd = static_cast<T>(weight_decay);
    const T mu = static_cast<T>(momentum);
    // The flags are hoisted out of the loop so that each variant is a straight loop.
    auto run = [&]<bool Nesterov, bool First>() {
        parallel_ranges(n, kParallelMin, [=](int64_t lo, int64_t hi) {
#pragma omp simd
            for (int64_t i = lo; i < hi; ++i) {
                const T d = g[i] + wd * p[i];
                const T b = First ? d : mu * buf[i] + d;
                buf[i] = b;
                p[i] += neg_lr * (Nesterov ? d + mu * b : b);
            }
        });
    };
    if (nesterov && first_step) run.template operator()<true, true>();
    else if (nesterov) run.template operator()<true, false>();
    else if (first_step) run.template operator()<false, true>();
    else run.template operator()<false, false>();
}

// p, g, m, v: [n]
template <class T>
void adam_update(int64_t n, T* p, const T* g, T* m, T* v, double lr, double beta1, double beta2,
                 double eps, double weight_decay, int64_t step) {
    adam_family_update<T, false>(n, p, g, m, v, lr, beta1, beta2, eps, weight_decay, step);
}

// p, g, m, v: [n]
template <class T>
void adamw_update(int64_t n, T* p, const T* g, T* m, T* v, double lr, double beta1, double beta2,
                  double eps, double weight_decay, int64_t step) {
    adam_family_update<T, true>(n, p, g, m, v, lr, beta1, beta2, eps, weight_decay, step);
}

// x: [n] -> scalar
template <class T>
double sum_of_squares(int64_t n, const T* x) {
    const int64_t blocks = (n + kSumBlock - 1) / kSumBlock;
    std::vector<double> partial(static_cast<size_t>(blocks));
#pragma omp parallel for if (n >= kParallelMin)
    for (int64_t b = 0; b < blocks; ++b) {
        const int64_t end = std::min(n, (b + 1) * kSumBlock);
        double s = 0;
        for (int64_t i = b * kSumBlock; i < end; ++i) s += static_cast<double>(x[i]) * x[i];
        partial[static_cast<size_t>(b)] = s;
    }
    double total = 0;
    for (double s : partial) total += s;
    return total;
}

// x: [n]
template <class T>
void scale_in_place(int64_t n, T* x, double factor) {
    const T f = static_cast<T>(factor);
    parallel_ranges(n, kParallelMin, [=](int64_t lo, int64_t hi) {
#pragma omp simd
        for (int64_t i = lo; i < hi; ++i) x[i] *= f;
    });
}

#define PARALAB_INSTANTIATE(T)                                                                   \
    template void sgd_update<T>(int64_t, T*, const T*, double, double);                          \
    template void sgd_momentum_update<T>(int64_t, T*, const T*, T*, double, double, double, bool, \
                                         bool);                                                  \
    template void adam_update<T>(int64_t, T*, const T*, T*, T*, double, double, double, double,   \
                                 double, int64_t);                                               \
    template void adamw_update<T>(int64_t, T*, const T*, T*, T*, double, double, double, double,  \
                                  double, int64_t);                                              \
    template double sum_of_squares<T>(int64_t, const T*);                                        \
    template void scale_in_place<T>(int64_t, T*, double);
PARALAB_INSTANTIATE(float)
PARALAB_INSTANTIATE(double)
#undef PARALAB_INSTANTIATE

}  // namespace paralab::kernels::cpu
