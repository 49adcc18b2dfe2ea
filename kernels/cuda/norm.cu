// Batch norm's sums and formulas and layer norm's forward and backward (kernels/gpu/norm.h),
// after kernels/cpu/norm.cpp.
#include <kernels/gpu/norm.h>
#include <kernels/gpu/detail/op_lists.h>

#include <climits>

#include "column_sums.cuh"
#include "launch.cuh"

namespace paralab::kernels::gpu {

namespace {

using namespace detail;

__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }

// Batch norm's per-channel sums: block c walks channel c's N*S entries, each thread a fixed
// share of them, then block_sum's fixed tree. Rows of S >= 32 positions are walked row by row
// (coalesced); shorter ones as one flat range of N*S, so that a [N, C] input (S = 1) still
// spreads over the block's threads. visit(e) gets the index into x of each entry the thread owns.
template <class Visit>
__device__ __forceinline__ void for_channel_entries(int64_t N, int64_t C, int64_t S, int64_t c, Visit visit) {
    if (S >= 32) {
        for (int64_t n = 0; n < N; ++n) {
            const int64_t row = (n * C + c) * S;
            for (int64_t i = threadIdx.x; i < S; i += blockDim.x) visit(row + i);
        }
    } else {
        const int64_t count = N * S;
        for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
            const int64_t n = j / S, i = j - n * S;
            visit((n * C + c) * S + i);
        }
    }
}

// x: [N, C, S] -> sum, sumsq: [C] (overwritten); block c does channel c.
template <class T>
__global__ void __launch_bounds__(kRowBlock)
    batchnorm_channel_sums_kernel(int64_t N, int64_t C, int64_t S, const T* x, double* sum, double* sumsq) {
    __shared__ double shared[32];
    const int64_t c = blockIdx.x;
    double s = 0, sq = 0;
    for_channel_entries(N, C, S, c, [&](int64_t e) {
        const double v = static_cast<double>(x[e]);
        s += v;
        sq += v * v;
    });
    s = detail::block_sum(s, shared);
    sq = detail::block_sum(sq, shared);
    if (threadIdx.x == 0) {
        sum[c] = s;
        sumsq[c] = sq;
    }
}

// x, dy: [N, C, S], mean: [C] -> sum_dy, sum_dy_xmu: [C] (overwritten); block c does channel c.
template <class T>
__global__ void __launch_bounds__(kRowBlock)
    batchnorm_backward_sums_kernel(int64_t N, int64_t C, int64_t S, const T* x, const T* dy, const T* mean,
                                   double* sum_dy, double* sum_dy_xmu) {
    __shared__ double shared[32];
    const int64_t c = blockIdx.x;
    const double m = static_cast<double>(mean[c]);
    double s = 0, sx = 0;
    for_channel_entries(N, C, S, c, [&](int64_t e) {
        const double g = static_cast<double>(dy[e]);
        s += g;
        sx += g * (static_cast<double>(x[e]) - m);
    });
    s = detail::block_sum(s, shared);
    sx = detail::block_sum(sx, shared);
    if (threadIdx.x == 0) {
        sum_dy[c] = s;
        sum_dy_xmu[c] = sx;
    }
}

// y = (x - mean[c]) * scale[c] + shift[c], each operation rounded as on the CPU. y may alias x.
template <class T>
__global__ void batchnorm_normalize_kernel(int64_t total, int64_t C, int64_t S, const T* x, const T* mean,
                                           const T* scale, const T* shift, T* y) {
    PARALAB_GRID_STRIDE_LOOP(i, total) {
        const int64_t c = (i / S) % C;
        y[i] = mul_rn(x[i] - mean[c], scale[c]) + shift[c];
    }
}

// dx = scale[c] * (dy - mean_dy[c] - (x - mean[c]) * k[c]), rounded as on the CPU. dx may
// alias dy.
template <class T>
__global__ void batchnorm_backward_input_kernel(int64_t total, int64_t C, int64_t S, const T* x, const T* dy,
                                                const T* mean, const T* scale, const T* mean_dy, const T* k,
                                                T* dx) {
    PARALAB_GRID_STRIDE_LOOP(i, total) {
        const int64_t c = (i / S) % C;
        const T g = dy[i];
        dx[i] = mul_rn(scale[c], (g - mean_dy[c]) - mul_rn(x[i] - mean[c], k[c]));
    }
}

// x: [rows, D] -> y: [rows, D], mean, rstd: [rows]; block r normalises row r.
template <class T>
__global__ void __launch_bounds__(kRowBlock)
    layernorm_forward_kernel(int64_t D, double eps, const T* x, const T* gamma, const T* beta, T* y,
                             T* mean, T* rstd) {
    __shared__ double shared[32];
    const int64_t r = blockIdx.x;
    const T* xr = x + r * D;
    T* yr = y + r * D;
    // Two passes over the row: the centered variance has no cancellation.
    double s = 0;
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) s += static_cast<double>(xr[i]);
    const double m = detail::block_sum(s, shared) / static_cast<double>(D);
    double sq = 0;
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
        const double d = static_cast<double>(xr[i]) - m;
        sq += d * d;
    }
    sq = detail::block_sum(sq, shared);
    const double inv = 1.0 / sqrt(sq / static_cast<double>(D) + eps);
    const T mt = static_cast<T>(m), it = static_cast<T>(inv);
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x)
        yr[i] = beta ? (xr[i] - mt) * it * gamma[i] + beta[i] : (xr[i] - mt) * it * gamma[i];
    if (threadIdx.x == 0) {
        mean[r] = mt;
        rstd[r] = it;
    }
}

// x, dy: [rows, D] -> dx: [rows, D]; block r does row r.
template <class T>
__global__ void __launch_bounds__(kRowBlock)
    layernorm_backward_input_kernel(int64_t D, const T* x, const T* dy, const T* gamma, const T* mean,
                                    const T* rstd, T* dx) {
    __shared__ double shared[32];
    const int64_t r = blockIdx.x;
    const T* xr = x + r * D;
    const T* gr = dy + r * D;
    T* dr = dx + r * D;
    const T m = mean[r], is = rstd[r];
    // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * gamma.
    double sg = 0, sgx = 0;
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
        const double g = static_cast<double>(gr[i]) * gamma[i];
        sg += g;
        sgx += g * ((xr[i] - m) * is);
    }
    sg = detail::block_sum(sg, shared);
    sgx = detail::block_sum(sgx, shared);
    const T mg = static_cast<T>(sg / static_cast<double>(D));
    const T mgx = static_cast<T>(sgx / static_cast<double>(D));
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
        const T xhat = (xr[i] - m) * is;
        dr[i] = is * (gr[i] * gamma[i] - mg - xhat * mgx);
    }
}

// dgamma's term: dy[r, i] * xhat[r, i], in T as the CPU forms it.
template <class T>
struct GammaGradTerm {
    const T* x;
    const T* dy;
    const T* mean;
    const T* rstd;
    int64_t D;
    __device__ double operator()(int64_t r, int64_t i) const {
        const int64_t k = r * D + i;
        return static_cast<double>(dy[k] * (x[k] - mean[r]) * rstd[r]);
    }
};

// The per-channel formulas (one thread per channel), kernels/cpu/norm.cpp's operation for
// operation: every product, quotient, sum and square root through its _rn intrinsic, so that
// nvcc fuses nothing and each rounds as on the CPU.
template <class T>
__global__ void batchnorm_stats_kernel(int64_t C, bool train, const double* stats, double eps, double momentum,
                                       const T* gamma, T* running_mean, T* running_var, T* mean_out, T* scale,
                                       double* invstd_out) {
    PARALAB_GRID_STRIDE_LOOP(c, C) {
        double mean, invstd;
        if (train) {
            const double n = stats[2 * C];
            mean = __ddiv_rn(stats[c], n);
            double var = __dsub_rn(__ddiv_rn(stats[C + c], n), __dmul_rn(mean, mean));
            if (var < 0.0) var = 0.0;
            invstd = __ddiv_rn(1.0, __dsqrt_rn(__dadd_rn(var, eps)));
            const double keep = __dsub_rn(1.0, momentum);
            running_mean[c] = static_cast<T>(
                __dadd_rn(__dmul_rn(keep, static_cast<double>(running_mean[c])), __dmul_rn(momentum, mean)));
            running_var[c] = static_cast<T>(__dadd_rn(__dmul_rn(keep, static_cast<double>(running_var[c])),
                                                      __ddiv_rn(__dmul_rn(__dmul_rn(momentum, var), n), __dsub_rn(n, 1.0))));
        } else {
            mean = static_cast<double>(running_mean[c]);
            invstd = __ddiv_rn(1.0, __dsqrt_rn(__dadd_rn(static_cast<double>(running_var[c]), eps)));
        }
        invstd_out[c] = invstd;
        mean_out[c] = static_cast<T>(mean);
        scale[c] = static_cast<T>(__dmul_rn(static_cast<double>(gamma[c]), invstd));
    }
}

template <class T>
__global__ void batchnorm_param_grads_kernel(int64_t C, const double* sums, const double* invstd, T* dgamma,
                                             T* dbeta) {
    PARALAB_GRID_STRIDE_LOOP(c, C) {
        dgamma[c] = dgamma[c] + static_cast<T>(__dmul_rn(sums[C + c], invstd[c]));
        dbeta[c] = dbeta[c] + static_cast<T>(sums[c]);
    }
}

template <class T>
__global__ void batchnorm_backward_coeffs_kernel(int64_t C, bool train, const double* sums, const double* invstd,
                                                 const T* gamma, T* scale, T* mean_dy, T* k) {
    PARALAB_GRID_STRIDE_LOOP(c, C) {
        scale[c] = static_cast<T>(__dmul_rn(static_cast<double>(gamma[c]), invstd[c]));
        if (train) {
            const double n = sums[2 * C];
            mean_dy[c] = static_cast<T>(__ddiv_rn(sums[c], n));
            k[c] = static_cast<T>(__ddiv_rn(__dmul_rn(__dmul_rn(invstd[c], invstd[c]), sums[C + c]), n));
        } else {
            mean_dy[c] = T(0);
            k[c] = T(0);
        }
    }
}

}  // namespace

using detail::check_batchnorm_sizes;

// x: [N, C, S] -> sum, sumsq: [C] (device, overwritten)
template <class T>
void batchnorm_channel_sums(int64_t N, int64_t C, int64_t S, const T* x, double* sum, double* sumsq,
                            void* stream) {
    check_batchnorm_sizes(N, C, S, "batchnorm_channel_sums");
    if (C == 0) return;
    batchnorm_channel_sums_kernel<T><<<static_cast<unsigned>(C), kRowBlock, 0, as_stream(stream)>>>(N, C, S, x, sum,
                                                                                                    sumsq);
    PARALAB_GPU_CHECK_LAUNCH("batchnorm_channel_sums_kernel");
}

// x: [N, C, S] -> y: [N, C, S]
template <class T>
void batchnorm_normalize(int64_t N, int64_t C, int64_t S, const T* x, const T* mean, const T* scale,
                         const T* shift, T* y, void* stream) {
    check_batchnorm_sizes(N, C, S, "batchnorm_normalize");
    const int64_t total = N * C * S;
    if (total == 0) return;
    batchnorm_normalize_kernel<T><<<grid_for(total), kBlock, 0, as_stream(stream)>>>(total, C, S, x, mean, scale,
                                                                                      shift, y);
    PARALAB_GPU_CHECK_LAUNCH("batchnorm_normalize_kernel");
}

// x, dy: [N, C, S] -> sum_dy, sum_dy_xmu: [C] (device, overwritten)
template <class T>
void batchnorm_backward_sums(int64_t N, int64_t C, int64_t S, const T* x, const T* dy, const T* mean,
                             double* sum_dy, double* sum_dy_xmu, void* stream) {
    check_batchnorm_sizes(N, C, S, "batchnorm_backward_sums");
    if (C == 0) return;
    batchnorm_backward_sums_kernel<T><<<static_cast<unsigned>(C), kRowBlock, 0, as_stream(stream)>>>(
        N, C, S, x, dy, mean, sum_dy, sum_dy_xmu);
    PARALAB_GPU_CHECK_LAUNCH("batchnorm_backward_sums_kernel");
}

// x, dy: [N, C, S] -> dx: [N, C, S]
template <class T>
void batchnorm_backward_input(int64_t N, int64_t C, int64_t S, const T* x, const T* dy, const T* mean,
                              const T* scale, const T* mean_dy, const T* k, T* dx, void* stream) {
    check_batchnorm_sizes(N, C, S, "batchnorm_backward_input");
    const int64_t total = N * C * S;
    if (total == 0) return;
    batchnorm_backward_input_kernel<T><<<grid_for(total), kBlock, 0, as_stream(stream)>>>(total, C, S, x, dy, mean,
                                                                                           scale, mean_dy, k, dx);
    PARALAB_GPU_CHECK_LAUNCH("batchnorm_backward_input_kernel");
}

// The per-channel formulas: [C] device arrays (see kernels/gpu/norm.h).
template <class T>
void batchnorm_stats(int64_t C, bool train, const double* stats, double eps, double momentum, const T* gamma,
                     T* running_mean, T* running_var, T* mean_out, T* scale, double* invstd_out, void* stream) {
    check_batchnorm_sizes(0, C, 0, "batchnorm_stats");
    if (C == 0) return;
    batchnorm_stats_kernel<T><<<grid_for(C), kBlock, 0, as_stream(stream)>>>(
        C, train, stats, eps, momentum, gamma, running_mean, running_var, mean_out, scale, invstd_out);
    PARALAB_GPU_CHECK_LAUNCH("batchnorm_stats_kernel");
}

template <class T>
void batchnorm_param_grads(int64_t C, const double* sums, const double* invstd, T* dgamma, T* dbeta,
                           void* stream) {
    check_batchnorm_sizes(0, C, 0, "batchnorm_param_grads");
    if (C == 0) return;
    batchnorm_param_grads_kernel<T><<<grid_for(C), kBlock, 0, as_stream(stream)>>>(C, sums, invstd, dgamma, dbeta);
    PARALAB_GPU_CHECK_LAUNCH("batchnorm_param_grads_kernel");
}

template <class T>
void batchnorm_backward_coeffs(int64_t C, bool train, const double* sums, const double* invstd, const T* gamma,
                               T* scale, T* mean_dy, T* k, void* stream) {
    check_batchnorm_sizes(0, C, 0, "batchnorm_backward_coeffs");
    if (C == 0) return;
    batchnorm_backward_coeffs_kernel<T><<<grid_for(C), kBlock, 0, as_stream(stream)>>>(C, train, sums, invstd,
                                                                                        gamma, scale, mean_dy, k);
    PARALAB_GPU_CHECK_LAUNCH("batchnorm_backward_coeffs_kernel");
}

// x: [rows, D] -> y: [rows, D], mean, rstd: [rows]
template <class T>
void layernorm_forward(int64_t rows, int64_t D, double eps, const T* x, const T* gamma,
                       const T* beta, T* y, T* mean, T* rstd, void* stream) {
    require(rows >= 0 && rows <= INT32_MAX, "layernorm_forward", "rows out of range");
    require(D > 0, "layernorm_forward", "D must be positive");
    if (rows == 0) return;
    layernorm_forward_kernel<T><<<static_cast<unsigned>(rows), kRowBlock, 0, as_stream(stream)>>>(
        D, eps, x, gamma, beta, y, mean, rstd);
    PARALAB_GPU_CHECK_LAUNCH("layernorm_forward_kernel");
}

// x, dy: [rows, D], mean, rstd: [rows] -> dx: [rows, D]; dgamma, dbeta: [D] (+=)
template <class T>
void layernorm_backward(int64_t rows, int64_t D, const T* x, const T* dy, const T* gamma,
                        const T* mean, const T* rstd, T* dx, T* dgamma, T* dbeta, void* stream) {
    require(rows >= 0 && rows <= INT32_MAX, "layernorm_backward", "rows out of range");
    require(D > 0, "layernorm_backward", "D must be positive");
    if (rows == 0) return;
    const cudaStream_t s = as_stream(stream);
    detail::launch_column_sums_of(rows, D, GammaGradTerm<T>{x, dy, mean, rstd, D}, dgamma, s);
    if (dbeta) detail::launch_column_sums(rows, D, dy, dbeta, s);
    if (!dx) return;
    layernorm_backward_input_kernel<T><<<static_cast<unsigned>(rows), kRowBlock, 0, s>>>(D, x, dy, gamma, mean,
                                                                                       rstd, dx);
    PARALAB_GPU_CHECK_LAUNCH("layernorm_backward_input_kernel");
}

PARALAB_GPU_INSTANTIATE_FLOAT_TYPES(PARALAB_GPU_NORM_OPS)


}  // namespace paralab::kernels::gpu
