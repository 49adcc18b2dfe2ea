// Gradient clipping by global norm (torch.nn.utils.clip_grad_norm_). The pieces are separate
// so that a data-parallel strategy can all-reduce the squared norm across devices first.
#pragma once

#include <vector>

#include "engine/nn/layer.h"

namespace paralab::optim {

// Sum of squares of every gradient element, accumulated in double.
double grad_sq_norm(const std::vector<nn::Param*>& params);
// Multiplies every gradient by `factor`.
void scale_grads(const std::vector<nn::Param*>& params, double factor);
// The factor torch applies for a total norm: max_norm / (norm + 1e-6) when norm > max_norm,
// 1 otherwise (also 1 when the norm is not finite: the caller reports the divergence).
double clip_factor(double total_norm, double max_norm);
double global_grad_norm(const std::vector<nn::Param*>& params);
// Clips in place; returns the norm before clipping (non-finite norms leave grads as they are).
double clip_grad_norm(const std::vector<nn::Param*>& params, double max_norm);

}  // namespace paralab::optim
