// Row-wise classification kernels on the GPU, the twins of kernels/cpu/softmax.h: fused softmax
// + cross-entropy and its gradient, and the row argmax. Matrices are row-major
// [rows, classes] device arrays; targets are int64 class ids already validated in
// [0, classes); T = float or double; `stream` is an opaque cudaStream_t.
#pragma once

#include <cstdint>

namespace paralab::kernels::gpu {

// logits: [rows, classes], targets: [rows] -> probs: [rows, classes] = softmax(logits) per row,
// row_loss: [rows] doubles = -log softmax(logits)[r, targets[r]] (from the max-subtracted
// logits, as the CPU), *loss_sum = their sum (a device double, overwritten; added in a fixed
// tree, so deterministic). Exponentials in T, their row sum in double, as the CPU.
template <class T>
void softmax_cross_entropy_forward(int64_t rows, int64_t classes, const T* logits,
                                   const int64_t* targets, T* probs, double* row_loss,
                                   double* loss_sum, void* stream);

// dlogits[r, c] = scale * probs[r, c] - (c == targets[r] ? scale : 0); dlogits may alias probs.
template <class T>
void softmax_cross_entropy_backward(int64_t rows, int64_t classes, const T* probs,
                                    const int64_t* targets, T scale, T* dlogits, void* stream);

// out[r] = the index of the largest x[r, :], the first one on ties; NaN as std::max_element
// (the CPU): a NaN at column 0 gives 0, a NaN elsewhere is never taken.
template <class T>
void argmax_rows(int64_t rows, int64_t cols, const T* x, int64_t* out, void* stream);

}  // namespace paralab::kernels::gpu
