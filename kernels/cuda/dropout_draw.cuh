// Dropout's keep/drop decision for one element, shared by the kernel (dropout.cu) and by the
// host test that proves it equal to the engine's draw (tests/gpu/test_gpu_host_logic.cpp).
// Private to kernels/cuda; __host__ __device__, so that the host test runs without a GPU.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace paralab::kernels::gpu::detail {

// engine/util/rng.h's splitmix64, unchanged: integer arithmetic gives the same bits on any
// processor.
__host__ __device__ inline uint64_t dropout_splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// The engine keeps element `counter` when u = k * 2^-53 >= p, with
// k = splitmix64(key ^ splitmix64(counter)) >> 11 (hash_uniform). u and p * 2^53 are exact
// doubles (scaling by a power of two), so for the integer k that test is k >= ceil(p * 2^53):
// the same decision in integers, without double arithmetic per element. 0 <= p < 1.
inline uint64_t dropout_keep_threshold(double p) {
    return static_cast<uint64_t>(std::ceil(std::ldexp(p, 53)));
}

__host__ __device__ inline bool dropout_keeps(uint64_t key, uint64_t counter, uint64_t threshold) {
    return (dropout_splitmix64(key ^ dropout_splitmix64(counter)) >> 11) >= threshold;
}

}  // namespace paralab::kernels::gpu::detail
