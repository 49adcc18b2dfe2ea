// Embedding gather and scatter-add (kernels/gpu/embedding.h). The gather: one thread per element
// of the [n, cols] side, so that a warp reads 32 consecutive columns of one row. The scatter-add:
// one block per table row, its threads over the columns, each adding the rows of src that hold
// its row in order of i (every thread of a warp reads the same index: one broadcast load).
#include <kernels/gpu/embedding.h>
#include <kernels/gpu/detail/op_lists.h>

#include "launch.cuh"

namespace paralab::kernels::gpu {

namespace {

using namespace detail;

// table: [?, cols], index: [n] -> out: [n, cols]
template <class T>
__global__ void gather_rows_kernel(int64_t n, int64_t cols, const T* table, const int64_t* index, T* out) {
    PARALAB_GRID_STRIDE_LOOP(k, n * cols) {
        const int64_t i = k / cols, c = k - i * cols;
        out[k] = table[index[i] * cols + c];
    }
}

// src: [n, cols], index: [n] -> table: [rows, cols] (+=, in order of i)
template <class T>
__global__ void scatter_add_rows_kernel(int64_t n, int64_t rows, int64_t cols, const T* src, const int64_t* index,
                                        T* table) {
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x)
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
            T sum = table[r * cols + c];
            bool added = false;
            for (int64_t i = 0; i < n; ++i)
                if (index[i] == r) {
                    sum += src[i * cols + c];
                    added = true;
                }
            if (added) table[r * cols + c] = sum;
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

// src: [n, cols], index: [n] -> table: [rows, cols] (+=, in order of i)
template <class T>
void scatter_add_rows(int64_t n, int64_t rows, int64_t cols, const T* src, const int64_t* index, T* table,
                      void* stream) {
    require(n >= 0 && rows >= 0 && cols >= 0, "scatter_add_rows", "negative size");
    if (n * rows * cols == 0) return;
    const int threads = cols >= kBlock ? kBlock : static_cast<int>((cols + 31) / 32 * 32);
    const auto blocks = static_cast<unsigned>(rows < kMaxGrid ? rows : kMaxGrid);
    scatter_add_rows_kernel<T><<<blocks, threads, 0, as_stream(stream)>>>(n, rows, cols, src, index, table);
    PARALAB_GPU_CHECK_LAUNCH("scatter_add_rows_kernel");
}

PARALAB_GPU_INSTANTIATE_FLOAT_TYPES(PARALAB_GPU_EMBEDDING_OPS)

}  // namespace paralab::kernels::gpu
