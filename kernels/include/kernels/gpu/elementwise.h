// Elementwise and row-broadcast GPU kernels, the CUDA twins of kernels/cpu/elementwise.h with
// the same semantics (NaN included): activations, bias rows, column sums, products and the
// squared error. Plain device pointers to contiguous arrays; T = float or double; `stream` is
// a cudaStream_t passed opaquely (nullptr: the default stream). Launchers are asynchronous and
// throw std::invalid_argument on a bad size, GpuError when the launch fails.
#pragma once

#include <cstdint>

namespace paralab::kernels::gpu {

// ---- activations: x, y, dy, dx hold n elements; dx may alias dy --------------------------

// y = max(x, 0); NaN stays NaN
template <class T>
void relu_forward(int64_t n, const T* x, T* y, void* stream);
// dx = dy where x > 0, else 0 (also where x is NaN)
template <class T>
void relu_backward(int64_t n, const T* x, const T* dy, T* dx, void* stream);

// y = 0.5 x (1 + erf(x / sqrt 2)), the exact GELU
template <class T>
void gelu_forward(int64_t n, const T* x, T* y, void* stream);
// dx = dy * (Phi(x) + x * phi(x))
template <class T>
void gelu_backward(int64_t n, const T* x, const T* dy, T* dx, void* stream);

// y = tanh(x)
template <class T>
void tanh_forward(int64_t n, const T* x, T* y, void* stream);
// dx = dy * (1 - y^2), from the forward's output y
template <class T>
void tanh_backward(int64_t n, const T* y, const T* dy, T* dx, void* stream);

// y = 1 / (1 + exp(-x))
template <class T>
void sigmoid_forward(int64_t n, const T* x, T* y, void* stream);
// dx = dy * y * (1 - y), from the forward's output y
template <class T>
void sigmoid_backward(int64_t n, const T* y, const T* dy, T* dx, void* stream);

// ---- rows and columns: matrices are row-major [rows, cols] -------------------------------

// y[r, c] = bias[c]
template <class T>
void bias_broadcast_rows(int64_t rows, int64_t cols, const T* bias, T* y, void* stream);
// y[r, c] += bias[c]
template <class T>
void bias_add_rows(int64_t rows, int64_t cols, const T* bias, T* y, void* stream);
// sums[c] += sum over r of x[r, c] (a bias gradient). Deterministic: the order of the additions
// is a fixed function of rows (no atomics), though not the CPU's row-by-row order.
template <class T>
void column_sums_accumulate(int64_t rows, int64_t cols, const T* x, T* sums, void* stream);

// y = a * b elementwise; y may alias a or b.
template <class T>
void multiply_elementwise(int64_t n, const T* a, const T* b, T* y, void* stream);

// ---- squared error ------------------------------------------------------------------------

// *sum = sum over i of (pred[i] - target[i])^2 in double (device scalar, overwritten).
// scratch: kReduceScratch doubles of device memory (kernels/gpu/reduce.h), not shared with a
// reduction running at the same time on another stream.
template <class T>
void squared_error_sum(int64_t n, const T* pred, const T* target, double* sum, double* scratch,
                       void* stream);
// dpred[i] = scale * (pred[i] - target[i]); dpred may alias pred.
template <class T>
void squared_error_backward(int64_t n, const T* pred, const T* target, T scale, T* dpred,
                            void* stream);

}  // namespace paralab::kernels::gpu
