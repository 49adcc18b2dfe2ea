// GEMM, row-major, transposes by flag rather than by copy: single precision through oneDNN's
// sgemm where the build has oneDNN, OpenBLAS (cblas) otherwise and for double precision.
#pragma once

#include <cstdint>
#include <string>

namespace paralab::kernels::cpu {

// C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C[M,N], all row-major.
// op(A) = A when !trans_a (A is M x K, leading dimension lda >= K), A^T otherwise
// (A stored K x M, lda >= M); likewise for B. T = float (sgemm) or double (dgemm).
template <class T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc);

// Convenience for dense row-major operands: leading dimensions from the shapes.
template <class T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          const T* B, T beta, T* C) {
    gemm<T>(trans_a, trans_b, M, N, K, alpha, A, trans_a ? M : K, B, trans_b ? K : N, beta, C, N);
}

// What runs the single-precision GEMMs, for benchmark tables: "oneDNN 2.6.3 sgemm (ISA
// avx512_core_bf16)" or "OpenBLAS sgemm (kernel Haswell)".
std::string gemm_library();

}  // namespace paralab::kernels::cpu
