// What every launcher shares: the opaque stream of the public API turned back into a
// cudaStream_t, grid sizes and the loop of elementwise kernels, the block size of one-block-
// per-row kernels, and deterministic block reductions. Private to kernels/cuda.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include <kernels/gpu/detail/launch_checks.h>

#include "check.cuh"

namespace paralab::kernels::gpu::detail {

// The public API passes streams as void*; nullptr is the legacy default stream.
inline cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }

constexpr int kBlock = 256;
// Grid-stride loops cap their grid here: enough blocks to fill an H100 (132 SMs x 8 resident
// blocks of 256 threads) many times over; larger arrays loop instead of launching more blocks.
constexpr int64_t kMaxGrid = 65536;

inline unsigned grid_for(int64_t n, int block = kBlock) {
    return static_cast<unsigned>(std::clamp<int64_t>((n + block - 1) / block, 1, kMaxGrid));
}

// Kernels that give each row of a matrix one block (softmax, layer norm, argmax) launch it with
// this many threads: a multiple of 32, as block_sum and block_max need.
constexpr int kRowBlock = 256;

// require, require_tensor_sizes and the launchers' other host-side checks are in
// kernels/gpu/detail/launch_checks.h (shared with the host fakes of the tests).

// Sets the calling thread's current device for a scope and restores the previous one.
class DeviceGuard {
public:
    explicit DeviceGuard(int device) {
        PARALAB_GPU_CHECK(cudaGetDevice(&m_previous));
        if (device != m_previous) PARALAB_GPU_CHECK(cudaSetDevice(device));
        m_changed = device != m_previous;
    }
    ~DeviceGuard() {
        if (m_changed) cudaSetDevice(m_previous);  // best effort: a destructor must not throw
    }
    DeviceGuard(const DeviceGuard&) = delete;
    DeviceGuard& operator=(const DeviceGuard&) = delete;

private:
    int m_previous = 0;
    bool m_changed = false;
};

// ---- deterministic reductions ------------------------------------------------------------
// The sum of a block is a fixed tree over thread indices (warp shuffles, then one warp over
// the warp sums), so it depends on the block size and the data, never on timing.

template <class V>
__device__ __forceinline__ V warp_sum(V v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

template <class V>
__device__ __forceinline__ V warp_max(V v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// Sum over the block of every thread's v, returned to every thread. blockDim.x must be a
// multiple of 32 and at most 1024; shared: 32 V. Every thread of the block must call it.
template <class V>
__device__ V block_sum(V v, V* shared) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int warps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();  // shared may still be read by a previous call
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = lane < warps ? shared[lane] : V(0);
    return warp_sum(v);
}

// Max over the block (NaN-ignoring, as fmax), returned to every thread; as block_sum.
template <class V>
__device__ V block_max(V v, V* shared) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int warps = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = lane < warps ? shared[lane] : V(-INFINITY);
    return warp_max(v);
}

}  // namespace paralab::kernels::gpu::detail

// The grid-stride loop of an elementwise kernel: `i` (an int64_t) runs over this thread's
// indices i < n, grid-size steps apart, so that the capped grid of grid_for covers any n.
// n is read once.
#define PARALAB_GRID_STRIDE_LOOP(i, n)                                                       \
    for (int64_t i##_end_ = (n), i##_stride_ = static_cast<int64_t>(gridDim.x) * blockDim.x, \
                 i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;            \
         i < i##_end_; i += i##_stride_)
