// Layer norm forward and backward (kernels/gpu/norm.h), after kernels/cpu/norm.cpp.
#include <kernels/gpu/norm.h>
#include <kernels/gpu/detail/op_lists.h>

#include "column_sums.cuh"
#include "launch.cuh"

namespace paralab::kernels::gpu {

namespace {

using namespace detail;

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
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) yr[i] = (xr[i] - mt) * it * gamma[i] + beta[i];
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

}  // namespace

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
    detail::launch_column_sums(rows, D, dy, dbeta, s);
    if (!dx) return;
    layernorm_backward_input_kernel<T><<<static_cast<unsigned>(rows), kRowBlock, 0, s>>>(D, x, dy, gamma, mean,
                                                                                       rstd, dx);
    PARALAB_GPU_CHECK_LAUNCH("layernorm_backward_input_kernel");
}

PARALAB_GPU_INSTANTIATE_FLOAT_TYPES(PARALAB_GPU_NORM_OPS)

}  // namespace paralab::kernels::gpu
