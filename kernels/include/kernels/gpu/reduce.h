// Reductions on the GPU: sums and sums of squares (a gradient's share of the global norm that
// clipping needs), one tensor or many in one launch, and the in-place scale that applies a
// clipping coefficient. Results are device doubles, so that a norm feeds the next kernel
// without a trip to the host. Deterministic: every partial sum covers a range fixed by the
// sizes alone and the partials are added in a fixed tree, so a rerun gives the same bits.
// T = float or double; `stream` is an opaque cudaStream_t.
#pragma once

#include <cstdint>

namespace paralab::kernels::gpu {

// Device doubles of scratch every reduction takes (per-block partial sums). Two reductions
// running at the same time, on two streams, need two scratch buffers.
constexpr int64_t kReduceScratch = 1024;

// x: [n] -> *result = sum of x[i], accumulated in double (overwritten).
template <class T>
void sum(int64_t n, const T* x, double* result, double* scratch, void* stream);

// x: [n] -> *result = sum of x[i]^2 in double (overwritten). NaN or inf in x gives a
// non-finite result, as the CPU's sum_of_squares.
template <class T>
void sum_of_squares(int64_t n, const T* x, double* result, double* scratch, void* stream);

// count tensors: xs[k] (device pointers, in a host array) of sizes[k] elements ->
// *result = sum over k and i of xs[k][i]^2 in double: the squared global norm of a model's
// gradients in one pass, without a launch per parameter.
template <class T>
void sum_of_squares_multi(int64_t count, const T* const* xs, const int64_t* sizes, double* result,
                          double* scratch, void* stream);

// *coef = min(1, max_norm / (sqrt(*sq_norm) + 1e-6)), or 1 when the norm is not finite: the
// CPU's clip coefficient (engine/optim/clip.cpp), computed where the norm is. Throws
// std::invalid_argument unless max_norm is finite and >= 0.
void clip_coefficient(const double* sq_norm, double max_norm, double* coef, void* stream);

// x: [n]. x *= factor (rounded to T on the host, as the CPU's scale_in_place).
template <class T>
void scale_in_place(int64_t n, T* x, double factor, void* stream);

// x: [n]. x *= (T) *factor, a device scalar (a clipping coefficient computed on the GPU).
template <class T>
void scale_in_place_by_device_scalar(int64_t n, T* x, const double* factor, void* stream);

}  // namespace paralab::kernels::gpu
