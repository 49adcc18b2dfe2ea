// Grouped-query key/value heads and rotary position embedding on the GPU, the twins of
// kernels/cpu/rope.h (read it for the layouts and the rotation). One thread per number of the
// output; the angles in double, as on the CPU. Device pointers; T = float or double; `stream`
// is an opaque cudaStream_t. Throws std::invalid_argument for a bad size.
#pragma once

#include <cstdint>

namespace paralab::kernels::gpu {

template <class T>
void qkv_expand_rope(int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t Dh, bool rope, double theta,
                     const T* compact, T* full, void* stream);

template <class T>
void qkv_expand_rope_backward(int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t Dh, bool rope,
                              double theta, const T* dfull, T* dcompact, void* stream);

}  // namespace paralab::kernels::gpu
