// The SwiGLU product of a gated MLP (Shazeer 2020; Llama's MLP) on the CPU, elementwise:
// h = silu(gate) * up, silu(g) = g * sigmoid(g). T = float or double; contiguous arrays of n.
#pragma once

#include <cstdint>

namespace paralab::kernels::cpu {

// gate, up: [n] -> h: [n] = silu(gate) * up (overwritten).
template <class T>
void swiglu_forward(int64_t n, const T* gate, const T* up, T* h);

// gate, up, dh: [n] -> dgate = dh * up * silu'(gate), dup = dh * silu(gate) (both overwritten),
// silu'(g) = s (1 + g (1 - s)) with s = sigmoid(g).
template <class T>
void swiglu_backward(int64_t n, const T* gate, const T* up, const T* dh, T* dgate, T* dup);

}  // namespace paralab::kernels::cpu
