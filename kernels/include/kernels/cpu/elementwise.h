// Elementwise and row-broadcast CPU kernels: activations, bias rows, column sums, products,
// row gather/scatter (embeddings) and the squared error. Plain pointers to contiguous arrays;
// T = float or double. Every kernel is deterministic: results do not depend on the thread
// count (parallel loops split independent elements, never a reduction).
#pragma once

#include <cstdint>

namespace paralab::kernels::cpu {

// ---- activations: x, y, dy, dx hold n elements; dx may alias dy --------------------------

// y = max(x, 0)
template <class T>
void relu_forward(int64_t n, const T* x, T* y);
// dx = dy where x > 0, else 0 (the subgradient at 0 is 0, as in PyTorch)
template <class T>
void relu_backward(int64_t n, const T* x, const T* dy, T* dx);

// y = x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)): the exact GELU (PyTorch's default)
template <class T>
void gelu_forward(int64_t n, const T* x, T* y);
// dx = dy * (Phi(x) + x * phi(x)), phi the standard normal density
template <class T>
void gelu_backward(int64_t n, const T* x, const T* dy, T* dx);

// y = tanh(x)
template <class T>
void tanh_forward(int64_t n, const T* x, T* y);
// dx = dy * (1 - y^2), from the forward's output y
template <class T>
void tanh_backward(int64_t n, const T* y, const T* dy, T* dx);

// y = 1 / (1 + exp(-x))
template <class T>
void sigmoid_forward(int64_t n, const T* x, T* y);
// dx = dy * y * (1 - y), from the forward's output y
template <class T>
void sigmoid_backward(int64_t n, const T* y, const T* dy, T* dx);

// ---- rows and columns: matrices are row-major [rows, cols] -------------------------------

// y[r, c] = bias[c]: fills a GEMM output with the bias so that GEMM with beta = 1 adds the
// product on top (the bias add costs no extra pass over y).
template <class T>
void bias_broadcast_rows(int64_t rows, int64_t cols, const T* bias, T* y);
// y[r, c] += bias[c]
template <class T>
void bias_add_rows(int64_t rows, int64_t cols, const T* bias, T* y);
// sums[c] += sum over r of x[r, c] (a bias gradient); rows are added in order.
template <class T>
void column_sums_accumulate(int64_t rows, int64_t cols, const T* x, T* sums);

// y = a * b elementwise (dropout applies its scaled keep-mask this way); y may alias a or b.
template <class T>
void multiply_elementwise(int64_t n, const T* a, const T* b, T* y);

// out[i, :] = table[index[i], :] for i < n; table: [?, cols], out: [n, cols].
// Indices must be valid (the caller checks them).
template <class T>
void gather_rows(int64_t n, int64_t cols, const T* table, const int64_t* index, T* out);
// table[index[i], :] += src[i, :] for i < n, in order of i (repeated indices add up).
template <class T>
void scatter_add_rows(int64_t n, int64_t cols, const T* src, const int64_t* index, T* table);

// ---- squared error ------------------------------------------------------------------------

// sum over i of (pred[i] - target[i])^2, accumulated in double.
template <class T>
double squared_error_sum(int64_t n, const T* pred, const T* target);
// dpred[i] = scale * (pred[i] - target[i]); the caller folds 2 / (count) into scale.
template <class T>
void squared_error_backward(int64_t n, const T* pred, const T* target, T scale, T* dpred);

}  // namespace paralab::kernels::cpu
