// RMS normalization on the GPU, the twin of kernels/cpu/rmsnorm.h: the same functions and
// argument lists plus the stream. Row sums in double; deterministic (fixed reduction trees, no
// atomics). Device pointers; T = float or double; `stream` is an opaque cudaStream_t.
#pragma once

#include <cstdint>

namespace paralab::kernels::gpu {

// x: [rows, D] -> y = x * rstd * gamma (+ beta; beta may be null), rstd: [rows]. One block a row.
template <class T>
void rmsnorm_forward(int64_t rows, int64_t D, double eps, const T* x, const T* gamma, const T* beta,
                     T* y, T* rstd, void* stream);

// x, dy: [rows, D], rstd: [rows] -> dx (overwritten; null to skip), dgamma, dbeta (+=; dbeta
// may be null), as kernels/cpu/rmsnorm.h.
template <class T>
void rmsnorm_backward(int64_t rows, int64_t D, const T* x, const T* dy, const T* gamma, const T* rstd,
                      T* dx, T* dgamma, T* dbeta, void* stream);

}  // namespace paralab::kernels::gpu
