// Batch and layer normalization on the CPU. Plain pointers to contiguous arrays; T = float or
// double; statistics accumulate in double whatever T is. Deterministic for any thread count:
// a channel's (or a row's) sums are made by one thread in a fixed order.
//
// Batch norm sees its input as [N, C, S]: N samples, C channels, S positions per channel
// (S = 1 for [B, C], L for [B, C, L], H*W for [B, C, H, W]). The statistics of a channel run
// over N and S. The sums are separate kernels from the formulas that use them so that a
// synchronised batch norm can all-reduce the sums between the two.
#pragma once

#include <cstdint>

namespace paralab::kernels::cpu {

// x: [N, C, S] -> sum[c] = sum of x[:, c, :], sumsq[c] = sum of x[:, c, :]^2 (overwritten).
template <class T>
void batchnorm_channel_sums(int64_t N, int64_t C, int64_t S, const T* x, double* sum,
                            double* sumsq);

// x: [N, C, S] -> y: [N, C, S] = (x - mean[c]) * scale[c] + shift[c]; the caller folds
// gamma / sqrt(var + eps) into scale and beta into shift. y may alias x.
template <class T>
void batchnorm_normalize(int64_t N, int64_t C, int64_t S, const T* x, const T* mean, const T* scale,
                         const T* shift, T* y);

// x, dy: [N, C, S] -> sum_dy[c] = sum of dy[:, c, :],
// sum_dy_xmu[c] = sum of dy[:, c, :] * (x[:, c, :] - mean[c]) (both overwritten).
template <class T>
void batchnorm_backward_sums(int64_t N, int64_t C, int64_t S, const T* x, const T* dy,
                             const T* mean, double* sum_dy, double* sum_dy_xmu);

// x, dy: [N, C, S] -> dx = scale[c] * (dy - mean_dy[c] - (x - mean[c]) * k[c]). With
// scale = gamma*invstd, mean_dy = sum_dy / n, k = invstd^2 * sum_dy_xmu / n this is the
// train-mode input gradient; with mean_dy = k = 0 it is the eval-mode one. dx may alias dy.
template <class T>
void batchnorm_backward_input(int64_t N, int64_t C, int64_t S, const T* x, const T* dy,
                              const T* mean, const T* scale, const T* mean_dy, const T* k, T* dx);

// ---- the per-channel formulas between the sums and the element-wise kernels, in double as
// PyTorch's batch norm computes them.

// stats: [2C + 1] = (sum x [C], sum x^2 [C], n) with n the elements per channel the sums came
// from (a double, so that a synchronised batch norm all-reduces it with the sums). Train:
//   mean = sum/n, var = max(sumsq/n - mean^2, 0), invstd = 1 / sqrt(var + eps),
//   running_mean = (1 - momentum) running_mean + momentum mean,
//   running_var = (1 - momentum) running_var + momentum var n / (n - 1)   (unbiased).
// Eval (stats unused, may be null): mean = running_mean, invstd = 1 / sqrt(running_var + eps),
// the running statistics untouched. Both: mean_out = T(mean), scale = T(gamma invstd),
// invstd_out = invstd (double, for the backward).
template <class T>
void batchnorm_stats(int64_t C, bool train, const double* stats, double eps, double momentum,
                     const T* gamma, T* running_mean, T* running_var, T* mean_out, T* scale,
                     double* invstd_out);

// sums: [2C] = (sum dy, sum dy (x - mean)) of this device's rows -> dgamma += T(sum_dy_xmu
// invstd), dbeta += T(sum_dy).
template <class T>
void batchnorm_param_grads(int64_t C, const double* sums, const double* invstd, T* dgamma,
                           T* dbeta);

// The input gradient's coefficients for batchnorm_backward_input: scale = T(gamma invstd);
// train, from sums [2C + 1] = (sum dy, sum dy (x - mean), n) (all-reduced when synchronised):
// mean_dy = T(sum_dy / n), k = T(invstd^2 sum_dy_xmu / n); eval: mean_dy = k = 0.
template <class T>
void batchnorm_backward_coeffs(int64_t C, bool train, const double* sums, const double* invstd,
                               const T* gamma, T* scale, T* mean_dy, T* k);

// x: [rows, D] -> y: [rows, D] = (x - mean) * rstd * gamma + beta over each row, with
// rstd = 1 / sqrt(biased var + eps); mean, rstd: [rows] saved for the backward. beta may be
// null (no shift).
template <class T>
void layernorm_forward(int64_t rows, int64_t D, double eps, const T* x, const T* gamma,
                       const T* beta, T* y, T* mean, T* rstd);

// x, dy: [rows, D], mean, rstd: [rows] from the forward -> dx: [rows, D] (overwritten; null
// to skip), dgamma, dbeta: [D] (accumulated, +=; dbeta null when the forward had no beta).
template <class T>
void layernorm_backward(int64_t rows, int64_t D, const T* x, const T* dy, const T* gamma,
                        const T* mean, const T* rstd, T* dx, T* dgamma, T* dbeta);

}  // namespace paralab::kernels::cpu
