#include <kernels/cpu/norm.h>

#include <algorithm>
#include <cmath>

namespace paralab::kernels::cpu {

namespace {
// Below this many elements a parallel region costs more than the pass it splits.
constexpr int64_t kParallelMin = int64_t{1} << 15;
}  // namespace

// x: [N, C, S] -> sum, sumsq: [C]
template <class T>
void batchnorm_channel_sums(int64_t N, int64_t C, int64_t S, const T* x, double* sum,
                            double* sumsq) {
    if (S == 1) {
        // [N, C]: channels are contiguous, so the inner loop runs over them (vectorized).
        std::fill(sum, sum + C, 0.0);
        std::fill(sumsq, sumsq + C, 0.0);
        for (int64_t n = 0; n < N; ++n) {
            const T* row = x + n * C;
            for (int64_t c = 0; c < C; ++c) {
                const double v = row[c];
                sum[c] += v;
                sumsq[c] += v * v;
            }
        }
        return;
    }
#pragma omp parallel for if (N * C * S >= kParallelMin)
    for (int64_t c = 0; c < C; ++c) {
        double s = 0, sq = 0;
        for (int64_t n = 0; n < N; ++n) {
            const T* xc = x + (n * C + c) * S;
            for (int64_t i = 0; i < S; ++i) {
                const double v = xc[i];
                s += v;
                sq += v * v;
            }
        }
        sum[c] = s;
        sumsq[c] = sq;
    }
}

// x: [N, C, S] -> y: [N, C, S]
template <class T>
void batchnorm_normalize(int64_t N, int64_t C, int64_t S, const T* x, const T* mean, const T* scale,
                         const T* shift, T* y) {
#pragma omp parallel for if (N * C * S >= kParallelMin)
    for (int64_t nc = 0; nc < N * C; ++nc) {
        const int64_t c = nc % C;
        const T m = mean[c], a = scale[c], b = shift[c];
        const T* xc = x + nc * S;
        T* yc = y + nc * S;
        for (int64_t i = 0; i < S; ++i) yc[i] = (xc[i] - m) * a + b;
    }
}

// x, dy: [N, C, S] -> sum_dy, sum_dy_xmu: [C]
template <class T>
void batchnorm_backward_sums(int64_t N, int64_t C, int64_t S, const T* x, const T* dy,
                             const T* mean, double* sum_dy, double* sum_dy_xmu) {
    if (S == 1) {
        std::fill(sum_dy, sum_dy + C, 0.0);
        std::fill(sum_dy_xmu, sum_dy_xmu + C, 0.0);
        for (int64_t n = 0; n < N; ++n) {
            const T* xr = x + n * C;
            const T* gr = dy + n * C;
            for (int64_t c = 0; c < C; ++c) {
                const double g = gr[c];
                sum_dy[c] += g;
                sum_dy_xmu[c] += g * (static_cast<double>(xr[c]) - mean[c]);
            }
        }
        return;
    }
#pragma omp parallel for if (N * C * S >= kParallelMin)
    for (int64_t c = 0; c < C; ++c) {
        const double m = mean[c];
        double s = 0, sx = 0;
        for (int64_t n = 0; n < N; ++n) {
            const T* xc = x + (n * C + c) * S;
            const T* gc = dy + (n * C + c) * S;
            for (int64_t i = 0; i < S; ++i) {
                const double g = gc[i];
                s += g;
                sx += g * (static_cast<double>(xc[i]) - m);
            }
        }
        sum_dy[c] = s;
        sum_dy_xmu[c] = sx;
    }
}

// x, dy: [N, C, S] -> dx: [N, C, S]
template <class T>
void batchnorm_backward_input(int64_t N, int64_t C, int64_t S, const T* x, const T* dy,
                              const T* mean, const T* scale, const T* mean_dy, const T* k, T* dx) {
#pragma omp parallel for if (N * C * S >= kParallelMin)
    for (int64_t nc = 0; nc < N * C; ++nc) {
        const int64_t c = nc % C;
        const T m = mean[c], a = scale[c], md = mean_dy[c], kc = k[c];
        const T* xc = x + nc * S;
        const T* gc = dy + nc * S;
        T* dc = dx + nc * S;
        for (int64_t i = 0; i < S; ++i) dc[i] = a * (gc[i] - md - (xc[i] - m) * kc);
    }
}

// The per-channel formulas, in double, each operation rounded on its own (the kernels build
// with -ffp-contract=off); kernels/cuda/norm.cu repeats them operation for operation.
template <class T>
void batchnorm_stats(int64_t C, bool train, const double* stats, double eps, double momentum,
                     const T* gamma, T* running_mean, T* running_var, T* mean_out, T* scale,
                     double* invstd_out) {
    for (int64_t c = 0; c < C; ++c) {
        double mean, invstd;
        if (train) {
            const double n = stats[2 * C];
            mean = stats[c] / n;
            double var = stats[C + c] / n - mean * mean;
            if (var < 0.0) var = 0.0;  // rounding below zero
            invstd = 1.0 / std::sqrt(var + eps);
            running_mean[c] = static_cast<T>((1 - momentum) * running_mean[c] + momentum * mean);
            running_var[c] = static_cast<T>((1 - momentum) * running_var[c] + momentum * var * n / (n - 1));
        } else {
            mean = static_cast<double>(running_mean[c]);
            invstd = 1.0 / std::sqrt(static_cast<double>(running_var[c]) + eps);
        }
        invstd_out[c] = invstd;
        mean_out[c] = static_cast<T>(mean);
        scale[c] = static_cast<T>(gamma[c] * invstd);
    }
}

template <class T>
void batchnorm_param_grads(int64_t C, const double* sums, const double* invstd, T* dgamma, T* dbeta) {
    for (int64_t c = 0; c < C; ++c) {
        dgamma[c] += static_cast<T>(sums[C + c] * invstd[c]);
        dbeta[c] += static_cast<T>(sums[c]);
    }
}

template <class T>
void batchnorm_backward_coeffs(int64_t C, bool train, const double* sums, const double* invstd,
                               const T* gamma, T* scale, T* mean_dy, T* k) {
    for (int64_t c = 0; c < C; ++c) {
        scale[c] = static_cast<T>(gamma[c] * invstd[c]);
        if (train) {
            const double n = sums[2 * C];
            mean_dy[c] = static_cast<T>(sums[c] / n);
            k[c] = static_cast<T>(invstd[c] * invstd[c] * sums[C + c] / n);
        } else {
            mean_dy[c] = T(0);
            k[c] = T(0);
        }
    }
}

// x: [rows, D] -> y: [rows, D], mean, rstd: [rows]
template <class T>
void layernorm_forward(int64_t rows, int64_t D, double eps, const T* x, const T* gamma,
                       const T* beta, T* y, T* mean, T* rstd) {
#pragma omp parallel for if (rows * D >= kParallelMin)
    for (int64_t r = 0; r < rows; ++r) {
        const T* xr = x + r * D;
        T* yr = y + r * D;
        // Two passes over a row that is in cache: the centered variance has no cancellation.
        // The sums run in vector lanes (a fixed order for a given D, whatever the threads).
        double s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < D; ++i) s += xr[i];
        const double m = s / static_cast<double>(D);
        double sq = 0;
#pragma omp simd reduction(+ : sq)
        for (int64_t i = 0; i < D; ++i) {
            const double d = xr[i] - m;
            sq += d * d;
        }
        const double inv = 1.0 / std::sqrt(sq / static_cast<double>(D) + eps);
        const T mt = static_cast<T>(m), it = static_cast<T>(inv);
        if (beta) {
#pragma omp simd
            for (int64_t i = 0; i < D; ++i) yr[i] = (xr[i] - mt) * it * gamma[i] + beta[i];
        } else {
#pragma omp simd
            for (int64_t i = 0; i < D; ++i) yr[i] = (xr[i] - mt) * it * gamma[i];
        }
        mean[r] = mt;
        rstd[r] = it;
    }
}

// x, dy: [rows, D] -> dx: [rows, D]; dgamma, dbeta: [D] (+=)
template <class T>
void layernorm_backward(int64_t rows, int64_t D, const T* x, const T* dy, const T* gamma,
                        const T* mean, const T* rstd, T* dx, T* dgamma, T* dbeta) {
    // Parameter gradients sum over rows: one serial pass in row order (the inner loop over D
    // vectorizes), so the sums do not depend on the thread count.
    for (int64_t r = 0; r < rows; ++r) {
        const T* xr = x + r * D;
        const T* gr = dy + r * D;
        const T m = mean[r], is = rstd[r];
#pragma omp simd
        for (int64_t i = 0; i < D; ++i) dgamma[i] += gr[i] * (xr[i] - m) * is;
        if (dbeta) {
#pragma omp simd
            for (int64_t i = 0; i < D; ++i) dbeta[i] += gr[i];
        }
    }
    // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * gamma.
    if (!dx) return;
#pragma omp parallel for if (rows * D >= kParallelMin)
    for (int64_t r = 0; r < rows; ++r) {
        const T* xr = x + r * D;
        const T* gr = dy + r * D;
        T* dr = dx + r * D;
        const T m = mean[r], is = rstd[r];
        double sg = 0, sgx = 0;
#pragma omp simd reduction(+ : sg, sgx)
        for (int64_t i = 0; i < D; ++i) {
            const double g = static_cast<double>(gr[i]) * gamma[i];
            sg += g;
            sgx += g * ((xr[i] - m) * is);
        }
        const T mg = static_cast<T>(sg / static_cast<double>(D));
        const T mgx = static_cast<T>(sgx / static_cast<double>(D));
#pragma omp simd
        for (int64_t i = 0; i < D; ++i) {
            const T xhat = (xr[i] - m) * is;
            dr[i] = is * (gr[i] * gamma[i] - mg - xhat * mgx);
        }
    }
}

#define PARALAB_INSTANTIATE_NORM(T)                                                                \
    template void batchnorm_channel_sums<T>(int64_t, int64_t, int64_t, const T*, double*,          \
                                            double*);                                              \
    template void batchnorm_normalize<T>(int64_t, int64_t, int64_t, const T*, const T*, const T*,  \
                                         const T*, T*);                                            \
    template void batchnorm_backward_sums<T>(int64_t, int64_t, int64_t, const T*, const T*,        \
                                             const T*, double*, double*);                          \
    template void batchnorm_backward_input<T>(int64_t, int64_t, int64_t, const T*, const T*,       \
                                              const T*, const T*, const T*, const T*, T*);         \
    template void batchnorm_stats<T>(int64_t, bool, const double*, double, double, const T*, T*,   \
                                     T*, T*, T*, double*);                                         \
    template void batchnorm_param_grads<T>(int64_t, const double*, const double*, T*, T*);         \
    template void batchnorm_backward_coeffs<T>(int64_t, bool, const double*, const double*,        \
                                               const T*, T*, T*, T*);                              \
    template void layernorm_forward<T>(int64_t, int64_t, double, const T*, const T*, const T*, T*, \
                                       T*, T*);                                                    \
    template void layernorm_backward<T>(int64_t, int64_t, const T*, const T*, const T*, const T*,  \
                                        const T*, T*, T*, T*);

PARALAB_INSTANTIATE_NORM(float)
PARALAB_INSTANTIATE_NORM(double)
#undef PARALAB_INSTANTIATE_NORM

}  // namespace paralab::kernels::cpu
