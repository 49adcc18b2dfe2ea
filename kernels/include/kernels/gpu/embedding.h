// Embedding rows on the GPU, the twins of gather_rows / scatter_add_rows in
// kernels/cpu/elementwise.h. Device arrays; indices are int64 and already validated by the
// caller; T = float or double; `stream` is an opaque cudaStream_t.
#pragma once

#include <cstdint>

namespace paralab::kernels::gpu {

// table: [?, cols], index: [n] -> out: [n, cols], out[i, :] = table[index[i], :].
template <class T>
void gather_rows(int64_t n, int64_t cols, const T* table, const int64_t* index, T* out,
                 void* stream);

// src: [n, cols], index: [n] -> table[index[i], :] += src[i, :] (atomicAdd). Repeated indices
// add up, in an order that may differ from run to run: the sum is exact to rounding, not
// bit-reproducible where an id repeats (the CPU adds in order of i).
template <class T>
void scatter_add_rows(int64_t n, int64_t cols, const T* src, const int64_t* index, T* table,
                      void* stream);

}  // namespace paralab::kernels::gpu
