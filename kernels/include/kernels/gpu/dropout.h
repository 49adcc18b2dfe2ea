// Dropout on the GPU with the CPU's masks, bit for bit. The engine's Dropout layer
// (engine/nn/dropout.cpp) draws element i of a batch as hash_uniform(key, first + i) >= p from
// engine/util/rng.h, a counter-based hash of (key, global element index) with key derived from
// (seed, layer label, step): no generator state, so the GPU recomputes the same draw from the
// same key and counter, and a run on a GPU drops the elements its CPU twin drops. The key stays
// the engine's business (kernels do not see rng.h); these launchers take it as computed there.
// Device arrays; T = float or double; `stream` is an opaque cudaStream_t.
#pragma once

#include <cstdint>

namespace paralab::kernels::gpu {

// x: [n] -> mask: [n] = (hash_uniform(key, first + i) >= p ? 1 / (1 - p) : 0) (the scale
// rounded to T, as the CPU), y: [n] = x * mask. Throws std::invalid_argument unless
// 0 <= p < 1.
template <class T>
void dropout_forward(int64_t n, uint64_t key, uint64_t first, double p, const T* x, T* mask, T* y,
                     void* stream);

// dy, mask: [n] -> dx: [n] = dy * mask; dx may alias dy.
template <class T>
void dropout_backward(int64_t n, const T* dy, const T* mask, T* dx, void* stream);

}  // namespace paralab::kernels::gpu
