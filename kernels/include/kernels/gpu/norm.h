// Batch and layer normalization on the GPU, the twins of kernels/cpu/norm.h: the same functions
// and argument lists plus the stream. Statistics in double; deterministic (fixed reduction
// trees, no atomics), so reruns repeat bit for bit. Device pointers, the double sums of batch
// norm included (the CPU writes those to host memory); T = float or double; `stream` is an
// opaque cudaStream_t (nullptr: the legacy default stream).
#pragma once

#include <cstdint>

namespace paralab::kernels::gpu {

// ---- batch norm: the input as [N, C, S] (N samples, C channels, S positions per channel);
// a channel's statistics run over N and S. The sums are kernels apart from the formulas that
// use them, so that a synchronised batch norm can all-reduce them in between.

// x: [N, C, S] -> sum[c] = sum of x[:, c, :], sumsq[c] = sum of x[:, c, :]^2, both DEVICE
// arrays of C doubles (overwritten). One block per channel, in double; not the CPU's order of
// additions, so equal to it up to double rounding.
template <class T>
void batchnorm_channel_sums(int64_t N, int64_t C, int64_t S, const T* x, double* sum, double* sumsq,
                            void* stream);

// x: [N, C, S] -> y = (x - mean[c]) * scale[c] + shift[c] (mean, scale, shift: device [C]);
// the caller folds gamma / sqrt(var + eps) into scale and beta into shift. y may alias x.
// Rounded as the CPU rounds (no fused multiply-add): the CPU's bits.
template <class T>
void batchnorm_normalize(int64_t N, int64_t C, int64_t S, const T* x, const T* mean, const T* scale,
                         const T* shift, T* y, void* stream);

// x, dy: [N, C, S], mean: device [C] -> sum_dy[c] = sum of dy[:, c, :],
// sum_dy_xmu[c] = sum of dy[:, c, :] * (x[:, c, :] - mean[c]), both DEVICE arrays of C doubles
// (overwritten).
template <class T>
void batchnorm_backward_sums(int64_t N, int64_t C, int64_t S, const T* x, const T* dy, const T* mean,
                             double* sum_dy, double* sum_dy_xmu, void* stream);

// x, dy: [N, C, S] -> dx = scale[c] * (dy - mean_dy[c] - (x - mean[c]) * k[c]) (mean, scale,
// mean_dy, k: device [C]; see kernels/cpu/norm.h for the train and eval forms). dx may alias dy.
// Rounded as the CPU rounds: the CPU's bits.
template <class T>
void batchnorm_backward_input(int64_t N, int64_t C, int64_t S, const T* x, const T* dy, const T* mean,
                              const T* scale, const T* mean_dy, const T* k, T* dx, void* stream);

// ---- the per-channel formulas between the sums and the element-wise kernels, one thread per
// channel, in double, rounded as the CPU twins (kernels/cpu/norm.h) round: the CPU's bits.
// Device arrays, so that a step waits for nothing on the host.

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
                     double* invstd_out, void* stream);

// sums: [2C] = (sum dy, sum dy (x - mean)) of this device's rows -> dgamma += T(sum_dy_xmu
// invstd), dbeta += T(sum_dy).
template <class T>
void batchnorm_param_grads(int64_t C, const double* sums, const double* invstd, T* dgamma,
                           T* dbeta, void* stream);

// The input gradient's coefficients for batchnorm_backward_input: scale = T(gamma invstd);
// train, from sums [2C + 1] = (sum dy, sum dy (x - mean), n) (all-reduced when synchronised):
// mean_dy = T(sum_dy / n), k = T(invstd^2 sum_dy_xmu / n); eval: mean_dy = k = 0.
template <class T>
void batchnorm_backward_coeffs(int64_t C, bool train, const double* sums, const double* invstd,
                               const T* gamma, T* scale, T* mean_dy, T* k, void* stream);

// ---- layer norm

// x: [rows, D] -> y: [rows, D] = (x - mean) * rstd * gamma + beta per row, rstd =
// 1 / sqrt(biased var + eps); mean, rstd: [rows] saved for the backward. One block per row;
// beta may be null (no shift).
template <class T>
void layernorm_forward(int64_t rows, int64_t D, double eps, const T* x, const T* gamma,
                       const T* beta, T* y, T* mean, T* rstd, void* stream);

// x, dy: [rows, D], mean, rstd: [rows] -> dx: [rows, D] (overwritten; nullptr to skip),
// dgamma, dbeta: [D] (+=, deterministic column sums; dbeta null when the forward had no beta).
template <class T>
void layernorm_backward(int64_t rows, int64_t D, const T* x, const T* dy, const T* gamma,
                        const T* mean, const T* rstd, T* dx, T* dgamma, T* dbeta, void* stream);

}  // namespace paralab::kernels::gpu
