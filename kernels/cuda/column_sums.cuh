// Deterministic column sums of a row-major [rows, cols] matrix, shared by the bias gradient
// (elementwise.cu) and layer norm's parameter gradients (norm.cu). A block owns 8 columns (a
// warp reads 4 rows of 32 bytes each: whole memory sectors); its 64 thread rows each add every
// 64th row in order, in double, and the 64 partials are added in thread-row order: no atomics,
// so a rerun gives the same bits. Narrow blocks make many of them: a [2048, 768] gradient gets
// 96 blocks, enough to keep an H100's 132 SMs reading. Private.
#pragma once

#include "launch.cuh"

namespace paralab::kernels::gpu::detail {

constexpr int kColumnTile = 8;
constexpr int kColumnRowThreads = 64;

// sums[c] += (T) sum over r < rows of term(r, c), for c < cols.
template <class T, class Term>
__global__ void __launch_bounds__(kColumnTile* kColumnRowThreads)
    column_sums_kernel(int64_t rows, int64_t cols, Term term, T* sums) {
    __shared__ double partial[kColumnRowThreads][kColumnTile + 1];
    const int64_t c = static_cast<int64_t>(blockIdx.x) * kColumnTile + threadIdx.x;
    double acc = 0;
    if (c < cols)
        for (int64_t r = threadIdx.y; r < rows; r += kColumnRowThreads) acc += term(r, c);
    partial[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        double total = 0;
        for (int k = 0; k < kColumnRowThreads; ++k) total += partial[k][threadIdx.x];
        sums[c] += static_cast<T>(total);
    }
}

template <class T, class Term>
void launch_column_sums_of(int64_t rows, int64_t cols, Term term, T* sums, cudaStream_t stream) {
    if (cols == 0 || rows == 0) return;
    const dim3 block(kColumnTile, kColumnRowThreads);
    const auto grid = static_cast<unsigned>((cols + kColumnTile - 1) / kColumnTile);
    column_sums_kernel<T><<<grid, block, 0, stream>>>(rows, cols, term, sums);
    PARALAB_GPU_CHECK_LAUNCH("column_sums_kernel");
}

template <class T>
struct MatrixEntry {
    const T* x;
    int64_t cols;
    __device__ double operator()(int64_t r, int64_t c) const { return static_cast<double>(x[r * cols + c]); }
};

// x: [rows, cols] -> sums: [cols] (+=)
template <class T>
void launch_column_sums(int64_t rows, int64_t cols, const T* x, T* sums, cudaStream_t stream) {
    launch_column_sums_of(rows, cols, MatrixEntry<T>{x, cols}, sums, stream);
}

}  // namespace paralab::kernels::gpu::detail
