// Row-wise classification kernels: fused softmax + cross-entropy and its gradient, and the
// row argmax that accuracy counts use. Matrices are row-major [rows, classes]; T = float or
// double; class ids are already validated int64 values in [0, classes).
#pragma once

#include <cstdint>

namespace paralab::kernels::cpu {

// logits: [rows, classes], targets: [rows] -> probs: [rows, classes] = softmax(logits) per row.
// Returns the sum over rows of -log softmax(logits)[r, targets[r]], computed from the
// max-subtracted logits (finite for any finite logits) and accumulated in double.
template <class T>
double softmax_cross_entropy_forward(int64_t rows, int64_t classes, const T* logits,
                                     const int64_t* targets, T* probs);

// dlogits[r, c] = scale * (probs[r, c] - [c == targets[r]]); dlogits may alias probs.
// scale is 1 / (the loss's denominator).
template <class T>
void softmax_cross_entropy_backward(int64_t rows, int64_t classes, const T* probs,
                                    const int64_t* targets, T scale, T* dlogits);

// out[r] = the index of the largest x[r, :], the first one on ties (as torch.argmax).
template <class T>
void argmax_rows(int64_t rows, int64_t cols, const T* x, int64_t* out);

}  // namespace paralab::kernels::cpu
