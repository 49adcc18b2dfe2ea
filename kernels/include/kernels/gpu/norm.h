// Layer normalization on the GPU, the twin of layernorm_forward / layernorm_backward in
// kernels/cpu/norm.h: statistics in double, two passes over a row. Batch normalization will go
// through cuDNN. Device pointers; T = float or double; `stream` is an opaque cudaStream_t.
#pragma once

#include <cstdint>

namespace paralab::kernels::gpu {

// x: [rows, D] -> y: [rows, D] = (x - mean) * rstd * gamma + beta per row, rstd =
// 1 / sqrt(biased var + eps); mean, rstd: [rows] saved for the backward. One block per row.
template <class T>
void layernorm_forward(int64_t rows, int64_t D, double eps, const T* x, const T* gamma,
                       const T* beta, T* y, T* mean, T* rstd, void* stream);

// x, dy: [rows, D], mean, rstd: [rows] -> dx: [rows, D] (overwritten; nullptr to skip),
// dgamma, dbeta: [D] (+=, deterministic column sums).
template <class T>
void layernorm_backward(int64_t rows, int64_t D, const T* x, const T* dy, const T* gamma,
                        const T* mean, const T* rstd, T* dx, T* dgamma, T* dbeta, void* stream);

}  // namespace paralab::kernels::gpu
