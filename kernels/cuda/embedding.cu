// Embedding gather and scatter-add (kernels/gpu/embedding.h): one thread per element of the
// [n, cols] side, so that a warp reads or adds 32 consecutive columns of one row.
#include <kernels/gpu/embedding.h>
#include <kernels/gpu/detail/op_lists.h>

#include "launch.cuh"

namespace paralab::kernels::gpu {

namespace {

using detail::as_stream;
using detail::grid_for;
using detail::kBlock;
using detail::require;

// table: [?, cols], index: [n] -> out: [n, cols]
template <class T>
__global__ void gather_rows_kernel(int64_t n, int64_t cols, const T* table, const int64_t* index, T* out) {
    const int64_t total = n * cols;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += stride) {
        const int64_t i = k / cols, c = k - i * cols;
        out[k] = table[index[i] * cols + c];
    }
}

// src: [n, cols], index: [n] -> table: [?, cols] (+=)
template <class T>
__global__ void scatter_add_rows_kernel(int64_t n, int64_t cols, const T* src, const int64_t* index, T* table) {
    const int64_t total = n * cols;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += stride) {
        const int64_t i = k / cols, c = k - i * cols;
        atomicAdd(table + index[i] * cols + c, src[k]);
    }
}

}  // namespace

// table: [?, cols], index: [n] -> out: [n, cols]
template <class T>
void gather_rows(int64_t n, int64_t cols, const T* table, const int64_t* index, T* out, void* stream) {
    require(n >= 0 && cols >= 0, "gather_rows", "negative size");
    if (n * cols == 0) return;
    gather_rows_kernel<T><<<grid_for(n * cols), kBlock, 0, as_stream(stream)>>>(n, cols, table, index, out);
    PARALAB_GPU_CHECK_LAUNCH("gather_rows_kernel");
}

// src: [n, cols], index: [n] -> table: [?, cols] (+=)
template <class T>
void scatter_add_rows(int64_t n, int64_t cols, const T* src, const int64_t* index, T* table, void* stream) {
    require(n >= 0 && cols >= 0, "scatter_add_rows", "negative size");
    if (n * cols == 0) return;
    scatter_add_rows_kernel<T><<<grid_for(n * cols), kBlock, 0, as_stream(stream)>>>(n, cols, src, index, table);
    PARALAB_GPU_CHECK_LAUNCH("scatter_add_rows_kernel");
}

PARALAB_GPU_INSTANTIATE_FLOAT_TYPES(PARALAB_GPU_EMBEDDING_OPS)

}  // namespace paralab::kernels::gpu
