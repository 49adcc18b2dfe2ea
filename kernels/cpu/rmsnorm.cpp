#include <kernels/cpu/rmsnorm.h>

#include <cmath>

namespace paralab::kernels::cpu {

namespace {
// Below this many elements a parallel region costs more than the pass it splits.
constexpr int64_t kParallelMin = int64_t{1} << 15;
}  // namespace

// x: [rows, D] -> y: [rows, D], rstd: [rows]
template <class T>
void rmsnorm_forward(int64_t rows, int64_t D, double eps, const T* x, const T* gamma, const T* beta,
                     T* y, T* rstd) {
#pragma omp parallel for if (rows * D >= kParallelMin)
    for (int64_t r = 0; r < rows; ++r) {
        const T* xr = x + r * D;
        T* yr = y + r * D;
        double sq = 0;
#pragma omp simd reduction(+ : sq)
        for (int64_t i = 0; i < D; ++i) sq += static_cast<double>(xr[i]) * xr[i];
        const T it = static_cast<T>(1.0 / std::sqrt(sq / static_cast<double>(D) + eps));
        if (beta) {
#pragma omp simd
            for (int64_t i = 0; i < D; ++i) yr[i] = xr[i] * it * gamma[i] + beta[i];
        } else {
#pragma omp simd
            for (int64_t i = 0; i < D; ++i) yr[i] = xr[i] * it * gamma[i];
        }
        rstd[r] = it;
    }
}

// x, dy: [rows, D], rstd: [rows] -> dx: [rows, D]; dgamma, dbeta: [D] (+=)
template <class T>
void rmsnorm_backward(int64_t rows, int64_t D, const T* x, const T* dy, const T* gamma, const T* rstd,
                      T* dx, T* dgamma, T* dbeta) {
    // Parameter gradients sum over rows: one serial pass in row order (the inner loop over D
    // vectorizes), so the sums do not depend on the thread count.
    for (int64_t r = 0; r < rows; ++r) {
        const T* xr = x + r * D;
        const T* gr = dy + r * D;
        const T is = rstd[r];
#pragma omp simd
        for (int64_t i = 0; i < D; ++i) dgamma[i] += gr[i] * xr[i] * is;
        if (dbeta) {
#pragma omp simd
            for (int64_t i = 0; i < D; ++i) dbeta[i] += gr[i];
        }
    }
    if (!dx) return;
#pragma omp parallel for if (rows * D >= kParallelMin)
    for (int64_t r = 0; r < rows; ++r) {
        const T* xr = x + r * D;
        const T* gr = dy + r * D;
        T* dr = dx + r * D;
        const T is = rstd[r];
        double sgx = 0;
#pragma omp simd reduction(+ : sgx)
        for (int64_t i = 0; i < D; ++i) sgx += static_cast<double>(gr[i]) * gamma[i] * xr[i];
        const T k = static_cast<T>(sgx / static_cast<double>(D)) * is * is;
#pragma omp simd
        for (int64_t i = 0; i < D; ++i) dr[i] = is * (gr[i] * gamma[i] - xr[i] * k);
    }
}

#define PARALAB_INSTANTIATE_RMSNORM(T)                                                                    \
    template void rmsnorm_forward<T>(int64_t, int64_t, double, const T*, const T*, const T*, T*, T*); \
    template void rmsnorm_backward<T>(int64_t, int64_t, const T*, const T*, const T*, const T*, T*, T*, T*);

PARALAB_INSTANTIATE_RMSNORM(float)
PARALAB_INSTANTIATE_RMSNORM(double)
#undef PARALAB_INSTANTIATE_RMSNORM

}  // namespace paralab::kernels::cpu
