// Scaled dot-product attention's four passes (kernels/gpu/attention.h), after
// kernels/cpu/attention.cpp: the products are strided-batched cuBLAS GEMMs, one call per
// sequence b over its H heads (head h's q, k, v and out start Dh columns after head h-1's, its
// probabilities T*T entries after), and the softmax, its backward and the causal mask are row
// kernels, one block per row of probabilities.
//
// The GEMMs are dense: with `causal` they compute the masked upper triangle of scores and dprobs
// too (the row kernels then overwrite it with 0), and the products with probs read its masked
// entries, which therefore must hold 0, as the softmax and dropout leave them. (The CPU twin
// skips only whole masked blocks and reads the masked entries of its diagonal blocks as well.)
#include <kernels/gpu/attention.h>
#include <kernels/gpu/detail/op_lists.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "cublas_api.cuh"
#include "launch.cuh"

namespace paralab::kernels::gpu {

namespace {

using namespace detail;

// Rows of T_ entries get one block of a multiple of 32 threads (block_sum), at most kRowBlock,
// fewer for short rows.
int row_threads(int64_t T_) {
    return static_cast<int>(std::clamp<int64_t>((T_ + 31) / 32 * 32, 32, kRowBlock));
}

// scores: [B*H*T, T] row r = (b, h, i) holding q_i . k_j (unscaled), overwritten by
// softmax(scale * scores) over j < n (n = i + 1 under the causal mask, T otherwise), 0 after.
// The max and the exponentials in T, their sum in double (as softmax.cu).
template <class T>
__global__ void __launch_bounds__(kRowBlock)
    attention_softmax_rows_kernel(int64_t T_, bool causal, T scale, T* probs) {
    __shared__ double shared[32];
    const int64_t r = blockIdx.x;
    const int64_t n = causal ? r % T_ + 1 : T_;
    T* p = probs + r * T_;
    double local_max = -INFINITY;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
        local_max = fmax(local_max, static_cast<double>(p[j] * scale));
    const T max = static_cast<T>(block_max(local_max, shared));
    double sum = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        const T e = exp(p[j] * scale - max);
        p[j] = e;
        sum += static_cast<double>(e);
    }
    sum = block_sum(sum, shared);
    const double inv = 1.0 / sum;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) p[j] = static_cast<T>(p[j] * inv);
    for (int64_t j = n + threadIdx.x; j < T_; j += blockDim.x) p[j] = T(0);
}

// probs, dprobs: [B*H*T, T] -> dprobs overwritten by dS = P (dP - rowsum(dP P)) scale over
// j < n, 0 after (n as in the softmax). Each thread reads and writes only its own entries.
template <class T>
__global__ void __launch_bounds__(kRowBlock)
    attention_softmax_backward_rows_kernel(int64_t T_, bool causal, T scale, const T* probs,
                                           T* dprobs) {
    __shared__ double shared[32];
    const int64_t r = blockIdx.x;
    const int64_t n = causal ? r % T_ + 1 : T_;
    const T* p = probs + r * T_;
    T* d = dprobs + r * T_;
    double local = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
        local += static_cast<double>(p[j]) * static_cast<double>(d[j]);
    const T dot = static_cast<T>(block_sum(local, shared));
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) d[j] = p[j] * (d[j] - dot) * scale;
    for (int64_t j = n + threadIdx.x; j < T_; j += blockDim.x) d[j] = T(0);
}

// x: [B*H*T, T] -> the entries j > i of row r = (b, h, i) set to 0.
template <class T>
__global__ void __launch_bounds__(kRowBlock) attention_causal_zero_kernel(int64_t T_, T* x) {
    const int64_t r = blockIdx.x;
    T* row = x + r * T_;
    for (int64_t j = r % T_ + 1 + threadIdx.x; j < T_; j += blockDim.x) row[j] = T(0);
}

cublasOperation_t op(bool trans) {
    return trans ? CUBLAS_OP_T : CUBLAS_OP_N;
}

// For h < batch, row-major C_h[M, N] = op(A_h) op(B_h) with X_h = X + h * stride_x (overwritten),
// swapped into cuBLAS's column-major as gemm.cu does. The sizes were checked to fit an int.
template <class T>
void gemm_heads(cublasHandle_t handle, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                const T* A, int64_t lda, int64_t stride_a, const T* B, int64_t ldb,
                int64_t stride_b, T* C, int64_t ldc, int64_t stride_c, int64_t batch) {
    const T one = 1, zero = 0;
    if constexpr (std::is_same_v<T, float>) {
        PARALAB_GPU_CHECK(cublas().sgemm_strided_batched(
            handle, op(trans_b), op(trans_a), static_cast<int>(N), static_cast<int>(M),
            static_cast<int>(K), &one, B, static_cast<int>(ldb), stride_b, A, static_cast<int>(lda),
            stride_a, &zero, C, static_cast<int>(ldc), stride_c, static_cast<int>(batch)));
    } else {
        static_assert(std::is_same_v<T, double>, "attention: T = float or double");
        PARALAB_GPU_CHECK(cublas().dgemm_strided_batched(
            handle, op(trans_b), op(trans_a), static_cast<int>(N), static_cast<int>(M),
            static_cast<int>(K), &one, B, static_cast<int>(ldb), stride_b, A, static_cast<int>(lda),
            stride_a, &zero, C, static_cast<int>(ldc), stride_c, static_cast<int>(batch)));
    }
}

// Where sequence b's arrays start: part 0, 1, 2 (q, k, v) of qkv [B, T, 3D], out [B, T, D] and
// probs [B, H, T, T]; head h is Dh columns (of qkv, out) or T*T entries (of probs) further on.
struct Geometry {
    int64_t T, H, Dh, D;
    template <class P>
    P* part(P* qkv, int64_t b, int part_index) const {
        return qkv + b * T * 3 * D + part_index * D;
    }
    template <class P>
    P* rows(P* out, int64_t b) const {
        return out + b * T * D;
    }
    template <class P>
    P* scores(P* probs, int64_t b) const {
        return probs + b * H * T * T;
    }
};

template <class T>
T inverse_sqrt(int64_t Dh) {
    return static_cast<T>(1.0 / std::sqrt(static_cast<double>(Dh)));
}

}  // namespace

// qkv: [B, T, 3D] -> probs: [B, H, T, T]
template <class T>
void attention_scores_softmax(int64_t B, int64_t T_, int64_t H, int64_t Dh, bool causal,
                              const T* qkv, T* probs, void* stream) {
    check_attention_sizes("attention_scores_softmax", B, T_, H, Dh);
    if (B == 0 || T_ == 0 || H == 0) return;
    const Geometry g{T_, H, Dh, H * Dh};
    const cublasHandle_t handle = cublas_handle_for(stream);
    for (int64_t b = 0; b < B; ++b)  // scores = q k^T
        gemm_heads<T>(handle, false, true, T_, T_, Dh, g.part(qkv, b, 0), 3 * g.D, Dh,
                      g.part(qkv, b, 1), 3 * g.D, Dh, g.scores(probs, b), T_, T_ * T_, H);
    attention_softmax_rows_kernel<T>
        <<<static_cast<unsigned>(B * H * T_), row_threads(T_), 0, as_stream(stream)>>>(
            T_, causal, inverse_sqrt<T>(Dh), probs);
    PARALAB_GPU_CHECK_LAUNCH("attention_softmax_rows_kernel");
}

// probs: [B, H, T, T], qkv: [B, T, 3D] -> out: [B, T, D]
template <class T>
void attention_apply(int64_t B, int64_t T_, int64_t H, int64_t Dh, bool /*causal*/, const T* probs,
                     const T* qkv, T* out, void* stream) {
    check_attention_sizes("attention_apply", B, T_, H, Dh);
    if (B == 0 || T_ == 0 || H == 0) return;
    const Geometry g{T_, H, Dh, H * Dh};
    const cublasHandle_t handle = cublas_handle_for(stream);
    for (int64_t b = 0; b < B; ++b)  // out = P v
        gemm_heads<T>(handle, false, false, T_, Dh, T_, g.scores(probs, b), T_, T_ * T_,
                      g.part(qkv, b, 2), 3 * g.D, Dh, g.rows(out, b), g.D, Dh, H);
}

// probs: [B, H, T, T], qkv: [B, T, 3D], dout: [B, T, D] -> dprobs: [B, H, T, T], the v part of
// dqkv: [B, T, 3D]
template <class T>
void attention_backward_values(int64_t B, int64_t T_, int64_t H, int64_t Dh, bool causal,
                               const T* probs, const T* qkv, const T* dout, T* dprobs, T* dqkv,
                               void* stream) {
    check_attention_sizes("attention_backward_values", B, T_, H, Dh);
    if (B == 0 || T_ == 0 || H == 0) return;
    const Geometry g{T_, H, Dh, H * Dh};
    const cublasHandle_t handle = cublas_handle_for(stream);
    for (int64_t b = 0; b < B; ++b) {
        // dP = dout v^T
        gemm_heads<T>(handle, false, true, T_, T_, Dh, g.rows(dout, b), g.D, Dh, g.part(qkv, b, 2),
                      3 * g.D, Dh, g.scores(dprobs, b), T_, T_ * T_, H);
        // dv = P^T dout
        gemm_heads<T>(handle, true, false, T_, Dh, T_, g.scores(probs, b), T_, T_ * T_,
                      g.rows(dout, b), g.D, Dh, g.part(dqkv, b, 2), 3 * g.D, Dh, H);
    }
    if (causal && T_ > 1) {
        const unsigned rows = static_cast<unsigned>(B * H * T_);
        attention_causal_zero_kernel<T>
            <<<rows, row_threads(T_), 0, as_stream(stream)>>>(T_, dprobs);
        PARALAB_GPU_CHECK_LAUNCH("attention_causal_zero_kernel");
    }
}

// probs, dprobs: [B, H, T, T], qkv: [B, T, 3D] -> dS over dprobs, the q and k parts of dqkv
template <class T>
void attention_backward_scores(int64_t B, int64_t T_, int64_t H, int64_t Dh, bool causal,
                               const T* probs, const T* qkv, T* dprobs, T* dqkv, void* stream) {
    check_attention_sizes("attention_backward_scores", B, T_, H, Dh);
    if (B == 0 || T_ == 0 || H == 0) return;
    const Geometry g{T_, H, Dh, H * Dh};
    attention_softmax_backward_rows_kernel<T>
        <<<static_cast<unsigned>(B * H * T_), row_threads(T_), 0, as_stream(stream)>>>(
            T_, causal, inverse_sqrt<T>(Dh), probs, dprobs);
    PARALAB_GPU_CHECK_LAUNCH("attention_softmax_backward_rows_kernel");
    const cublasHandle_t handle = cublas_handle_for(stream);
    for (int64_t b = 0; b < B; ++b) {
        // dq = dS k
        gemm_heads<T>(handle, false, false, T_, Dh, T_, g.scores(dprobs, b), T_, T_ * T_,
                      g.part(qkv, b, 1), 3 * g.D, Dh, g.part(dqkv, b, 0), 3 * g.D, Dh, H);
        // dk = dS^T q
        gemm_heads<T>(handle, true, false, T_, Dh, T_, g.scores(dprobs, b), T_, T_ * T_,
                      g.part(qkv, b, 0), 3 * g.D, Dh, g.part(dqkv, b, 1), 3 * g.D, Dh, H);
    }
}

PARALAB_GPU_INSTANTIATE_FLOAT_TYPES(PARALAB_GPU_ATTENTION_OPS)

}  // namespace paralab::kernels::gpu
