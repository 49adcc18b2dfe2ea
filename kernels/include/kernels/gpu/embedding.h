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

// src: [n, cols], index: [n] of values in [0, rows) -> table: [rows, cols], table[index[i], :] +=
// src[i, :]. Repeated indices add up in order of i, onto the table's value, as the CPU's twin
// does: the same float additions, so the result repeats from run to run (no atomics).
template <class T>
void scatter_add_rows(int64_t n, int64_t rows, int64_t cols, const T* src, const int64_t* index, T* table,
                      void* stream);

}  // namespace paralab::kernels::gpu
