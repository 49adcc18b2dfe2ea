// RMS normalization over the last dimension on the CPU (Zhang & Sennrich 2019; Llama's norm):
// y = x / sqrt(mean(x^2) + eps) * gamma (+ beta when given). Plain pointers to contiguous
// arrays; T = float or double; the row sums accumulate in double. Deterministic for any thread
// count: a row's sums and each parameter gradient are made in a fixed order.
#pragma once

#include <cstdint>

namespace paralab::kernels::cpu {

// x: [rows, D] -> y: [rows, D] = x * rstd * gamma (+ beta; beta may be null), with
// rstd = 1 / sqrt(mean of the row's squares + eps); rstd: [rows], saved for the backward.
template <class T>
void rmsnorm_forward(int64_t rows, int64_t D, double eps, const T* x, const T* gamma, const T* beta,
                     T* y, T* rstd);

// x, dy: [rows, D], rstd: [rows] from the forward -> with g = dy * gamma,
// dx = rstd * (g - x * rstd^2 * mean(g * x)) (overwritten; null to skip); dgamma += the column
// sums of dy * x * rstd, dbeta += those of dy (dbeta may be null: no bias).
template <class T>
void rmsnorm_backward(int64_t rows, int64_t D, const T* x, const T* dy, const T* gamma, const T* rstd,
                      T* dx, T* dgamma, T* dbeta);

}  // namespace paralab::kernels::cpu
