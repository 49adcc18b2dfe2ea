// Precision casts for mixed precision on the GPU: fp32 <-> bf16 and fp32 <-> fp16. Half-width
// values travel as their IEEE bit patterns in uint16_t (no CUDA type in a public header).
// Narrowing rounds to nearest, ties to even; NaN stays NaN, +-inf stays +-inf, and fp16
// overflow (|x| >= 65520) becomes +-inf. Widening is exact. Device pointers; `stream` is an
// opaque cudaStream_t.
#pragma once

#include <cstdint>

namespace paralab::kernels::gpu {

// x: [n] -> y: [n]
void cast_f32_to_bf16(int64_t n, const float* x, uint16_t* y, void* stream);
void cast_bf16_to_f32(int64_t n, const uint16_t* x, float* y, void* stream);
void cast_f32_to_f16(int64_t n, const float* x, uint16_t* y, void* stream);
void cast_f16_to_f32(int64_t n, const uint16_t* x, float* y, void* stream);

}  // namespace paralab::kernels::gpu
