// Dynamic loss scaling for mixed precision, the two device-side steps of PyTorch's GradScaler
// (torch._amp_foreach_non_finite_check_and_unscale_ and torch._amp_update_scale_), so that a
// step never waits on the host to learn whether its gradients overflowed:
//   1. every gradient *= inv_scale, and *found_inf = 1 if any gradient held a NaN or an inf;
//   2. on overflow, scale *= backoff and the step is skipped; after growth_interval clean
//      steps in a row, scale *= growth.
// Scalars are device floats (an int32 for the tracker). T = float or double (the gradients of
// fp32 master weights); `stream` is an opaque cudaStream_t.
#pragma once

#include <cstdint>

namespace paralab::kernels::gpu {

// grads[k]: [sizes[k]] for k < count (host array of device pointers). grads *= *inv_scale;
// *found_inf = 1.0f when any element (before unscaling) is NaN or +-inf. found_inf is only ever
// set, never cleared: zero it before the first call of a step.
template <class T>
void non_finite_check_and_unscale_multi(int64_t count, T* const* grads, const int64_t* sizes,
                                        float* found_inf, const float* inv_scale, void* stream);
template <class T>
void non_finite_check_and_unscale(int64_t n, T* grad, float* found_inf, const float* inv_scale,
                                  void* stream);

// scale: the current loss scale (in/out); growth_tracker: clean steps so far (in/out);
// found_inf: from step 1. Overflow: scale *= backoff_factor, tracker = 0. Otherwise ++tracker,
// and when it reaches growth_interval: scale *= growth_factor (kept only if finite), tracker = 0.
// Throws std::invalid_argument unless growth_factor > 1, 0 < backoff_factor < 1 and
// growth_interval >= 1.
void update_loss_scale(float* scale, int32_t* growth_tracker, const float* found_inf,
                       double growth_factor, double backoff_factor, int32_t growth_interval,
                       void* stream);

}  // namespace paralab::kernels::gpu
