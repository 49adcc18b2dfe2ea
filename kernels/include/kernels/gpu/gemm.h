// GEMM on the GPU through cuBLAS, row-major like kernels/cpu/gemm.h: transposes by flag, not by
// copy. Device pointers; `stream` is an opaque cudaStream_t. cuBLAS handles are made lazily,
// one per (current device, stream), and live until release_gemm_handles(stream): the calling
// thread must have made the stream's device current (Device::make_current). Throws
// std::invalid_argument for a bad size or leading dimension, GpuError when cuBLAS fails.
#pragma once

#include <cstdint>

namespace paralab::kernels::gpu {

// How float GEMMs multiply: fp32 (full precision, the CPU's answer to rounding) or tf32 (tensor
// cores, inputs rounded to 10 mantissa bits, accumulation in fp32: ~8x faster on an H100,
// relative error ~1e-3; opt-in).
enum class GemmMath { fp32, tf32 };

// C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C[M,N], all row-major. op(A) = A when
// !trans_a (A is M x K, lda >= K), A^T otherwise (A stored K x M, lda >= M); likewise B.
// T = float (math picks fp32 or tf32) or double (math is ignored).
template <class T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc, void* stream,
          GemmMath math = GemmMath::fp32);

// Dense row-major operands: leading dimensions from the shapes.
template <class T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          const T* B, T beta, T* C, void* stream, GemmMath math = GemmMath::fp32) {
    gemm<T>(trans_a, trans_b, M, N, K, alpha, A, trans_a ? M : K, B, trans_b ? K : N, beta, C, N,
            stream, math);
}

// Half-precision inputs (bit patterns in uint16_t, kernels/gpu/cast.h), fp32 accumulation and
// an fp32 C, on tensor cores: the GEMM of bf16 / fp16 mixed precision. Shapes as gemm above.
enum class HalfType { bf16, fp16 };
void gemm_half(HalfType type, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
               float alpha, const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb,
               float beta, float* C, int64_t ldc, void* stream);

// Destroys the cuBLAS handles made for `stream` (on every device): call before destroying the
// stream. Returns how many were destroyed.
int release_gemm_handles(void* stream);

}  // namespace paralab::kernels::gpu
