// The SwiGLU product on the GPU, the twin of kernels/cpu/swiglu.h (read it for the formulas).
// Device pointers; T = float or double; `stream` is an opaque cudaStream_t.
#pragma once

#include <cstdint>

namespace paralab::kernels::gpu {

// gate, up: [n] -> h = silu(gate) * up.
template <class T>
void swiglu_forward(int64_t n, const T* gate, const T* up, T* h, void* stream);

// gate, up, dh: [n] -> dgate, dup (overwritten).
template <class T>
void swiglu_backward(int64_t n, const T* gate, const T* up, const T* dh, T* dgate, T* dup, void* stream);

}  // namespace paralab::kernels::gpu
