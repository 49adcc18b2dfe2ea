// Deterministic two-pass reductions to a device double, shared by the reduction, loss and
// squared-error launchers. Pass one: a grid fixed by n (never by the GPU) where block b sums
// the elements i = b*blockDim + t + k*grid*blockDim into partials[b]; pass two: one block adds
// the partials in a fixed tree. Private to kernels/cuda.
#pragma once

#include <kernels/gpu/reduce.h>

#include "launch.cuh"

namespace paralab::kernels::gpu::detail {

constexpr int kReduceBlock = 256;

// Grid of the first pass: ~4 elements per thread, at most kReduceScratch blocks.
inline unsigned reduce_grid(int64_t n) {
    return static_cast<unsigned>(
        std::clamp<int64_t>((n + 4 * kReduceBlock - 1) / (4 * kReduceBlock), 1, kReduceScratch));
}

// term(i) -> double for i < n; partials[blockIdx.x] = the block's sum.
template <class Term>
__global__ void __launch_bounds__(kReduceBlock) partial_sums_kernel(int64_t n, Term term, double* partials) {
    __shared__ double shared[32];
    double acc = 0;
    PARALAB_GRID_STRIDE_LOOP(i, n)
        acc += term(i);
    acc = block_sum(acc, shared);
    if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// Queues the second pass: partials: [parts] -> *result = (accumulate ? *result : 0) + their
// sum, by one block (defined in reduce.cu).
void launch_final_sum(int64_t parts, const double* partials, double* result, bool accumulate,
                      cudaStream_t stream);

// Queues both passes: *result = sum over i < n of term(i) (or += when accumulate).
template <class Term>
void reduce_to_device(int64_t n, Term term, double* result, double* scratch, bool accumulate,
                      cudaStream_t stream) {
    const unsigned grid = reduce_grid(n);
    partial_sums_kernel<<<grid, kReduceBlock, 0, stream>>>(n, term, scratch);
    PARALAB_GPU_CHECK_LAUNCH("partial_sums_kernel");
    launch_final_sum(grid, scratch, result, accumulate, stream);
}

}  // namespace paralab::kernels::gpu::detail
