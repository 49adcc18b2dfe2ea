// Gradient clipping by global norm, as torch.nn.utils.clip_grad_norm_ (1.13, L2 norm). The
// pieces are separate so that a data-parallel strategy can all-reduce the squared norm across
// devices and clip every shard with the same total:
//     total = sqrt(all_reduce_sum(grad_sq_norm(local)));  clip_grads_with_norm(local, total, max)
//
// Non-finite norms: torch would multiply every gradient by NaN; here a NaN or infinite norm
// leaves the gradients as they are and is returned, so that the caller can report the
// divergence (or skip the step) with the gradients still inspectable.
#pragma once

#include <vector>

#include "engine/nn/layer.h"

namespace paralab::optim {

// Sum of the squares of every gradient element, accumulated in double. Throws Error for a
// parameter without a gradient.
double grad_sq_norm(const std::vector<nn::Param*>& params);
// sqrt(grad_sq_norm(params)).
double global_grad_norm(const std::vector<nn::Param*>& params);
// t *= factor (t rounded to its dtype), on its GPU's queue or on the host.
void scale_in_place(const Tensor& t, double factor);
// Multiplies every gradient by `factor`.
void scale_grads(const std::vector<nn::Param*>& params, double factor);

// torch's coefficient min(1, max_norm / (total_norm + 1e-6)); 1 for a non-finite norm.
// The 1e-6 means a norm just below max_norm (within 1e-6) is still scaled, very slightly.
double clip_coefficient(double total_norm, double max_norm);
// Scales the gradients by clip_coefficient(total_norm, max_norm) when it is below 1, with
// total_norm computed by the caller (over every device's gradients). Returns the coefficient.
double clip_grads_with_norm(const std::vector<nn::Param*>& params, double total_norm,
                            double max_norm);
// Clips in place; returns the norm before clipping.
double clip_grad_norm(const std::vector<nn::Param*>& params, double max_norm);

}  // namespace paralab::optim
