// RMS normalization's forward and backward on the GPU (kernels/gpu/rmsnorm.h), after
// kernels/cpu/rmsnorm.cpp.
#include <kernels/gpu/rmsnorm.h>
#include <kernels/gpu/detail/op_lists.h>

#include <climits>

#include "column_sums.cuh"
#include "launch.cuh"

namespace paralab::kernels::gpu {

namespace {

using namespace detail;

// x: [rows, D] -> y: [rows, D], rstd: [rows]; block r normalises row r.
template <class T>
__global__ void __launch_bounds__(kRowBlock)
    rmsnorm_forward_kernel(int64_t D, double eps, const T* x, const T* gamma, const T* beta, T* y, T* rstd) {
    __shared__ double shared[32];
    const int64_t r = blockIdx.x;
    const T* xr = x + r * D;
    T* yr = y + r * D;
    double sq = 0;
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) sq += static_cast<double>(xr[i]) * xr[i];
    sq = detail::block_sum(sq, shared);
    const T it = static_cast<T>(1.0 / sqrt(sq / static_cast<double>(D) + eps));
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x)
        yr[i] = beta ? xr[i] * it * gamma[i] + beta[i] : xr[i] * it * gamma[i];
    if (threadIdx.x == 0) rstd[r] = it;
}

// x, dy: [rows, D] -> dx: [rows, D]; block r does row r.
template <class T>
__global__ void __launch_bounds__(kRowBlock)
    rmsnorm_backward_input_kernel(int64_t D, const T* x, const T* dy, const T* gamma, const T* rstd, T* dx) {
    __shared__ double shared[32];
    const int64_t r = blockIdx.x;
    const T* xr = x + r * D;
    const T* gr = dy + r * D;
    T* dr = dx + r * D;
    const T is = rstd[r];
    double sgx = 0;
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) sgx += static_cast<double>(gr[i]) * gamma[i] * xr[i];
    sgx = detail::block_sum(sgx, shared);
    const T k = static_cast<T>(sgx / static_cast<double>(D)) * is * is;
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) dr[i] = is * (gr[i] * gamma[i] - xr[i] * k);
}

// dgamma's term: dy[r, i] * x[r, i] * rstd[r], in T as the CPU forms it.
template <class T>
struct RmsGammaGradTerm {
    const T* x;
    const T* dy;
    const T* rstd;
    int64_t D;
    __device__ double operator()(int64_t r, int64_t i) const {
        const int64_t k = r * D + i;
        return static_cast<double>(dy[k] * x[k] * rstd[r]);
    }
};

}  // namespace

// x: [rows, D] -> y: [rows, D], rstd: [rows]
template <class T>
void rmsnorm_forward(int64_t rows, int64_t D, double eps, const T* x, const T* gamma, const T* beta, T* y,
                     T* rstd, void* stream) {
    require(rows >= 0 && rows <= INT32_MAX, "rmsnorm_forward", "rows out of range");
    require(D > 0, "rmsnorm_forward", "D must be positive");
    if (rows == 0) return;
    rmsnorm_forward_kernel<T><<<static_cast<unsigned>(rows), kRowBlock, 0, as_stream(stream)>>>(D, eps, x, gamma,
                                                                                               beta, y, rstd);
    PARALAB_GPU_CHECK_LAUNCH("rmsnorm_forward_kernel");
}

// x, dy: [rows, D], rstd: [rows] -> dx: [rows, D]; dgamma, dbeta: [D] (+=)
template <class T>
void rmsnorm_backward(int64_t rows, int64_t D, const T* x, const T* dy, const T* gamma, const T* rstd, T* dx,
                      T* dgamma, T* dbeta, void* stream) {
    require(rows >= 0 && rows <= INT32_MAX, "rmsnorm_backward", "rows out of range");
    require(D > 0, "rmsnorm_backward", "D must be positive");
    if (rows == 0) return;
    const cudaStream_t s = as_stream(stream);
    detail::launch_column_sums_of(rows, D, RmsGammaGradTerm<T>{x, dy, rstd, D}, dgamma, s);
    if (dbeta) detail::launch_column_sums(rows, D, dy, dbeta, s);
    if (!dx) return;
    rmsnorm_backward_input_kernel<T><<<static_cast<unsigned>(rows), kRowBlock, 0, s>>>(D, x, dy, gamma, rstd, dx);
    PARALAB_GPU_CHECK_LAUNCH("rmsnorm_backward_input_kernel");
}

PARALAB_GPU_INSTANTIATE_FLOAT_TYPES(PARALAB_GPU_RMSNORM_OPS)

}  // namespace paralab::kernels::gpu
