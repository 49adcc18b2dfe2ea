// fp32 <-> bf16 / fp16 casts (kernels/gpu/cast.h) through cuda_bf16.h / cuda_fp16.h's
// round-to-nearest-even conversions.
#include <kernels/gpu/cast.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "launch.cuh"

namespace paralab::kernels::gpu {

namespace {

using namespace detail;

struct ToBf16 {
    __device__ uint16_t operator()(float v) const { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }
};
struct FromBf16 {
    __device__ float operator()(uint16_t v) const { return __bfloat162float(__ushort_as_bfloat16(v)); }
};
struct ToF16 {
    __device__ uint16_t operator()(float v) const { return __half_as_ushort(__float2half_rn(v)); }
};
struct FromF16 {
    __device__ float operator()(uint16_t v) const { return __half2float(__ushort_as_half(v)); }
};

template <class In, class Out, class Op>
__global__ void cast_kernel(int64_t n, const In* x, Out* y, Op op) {
    PARALAB_GRID_STRIDE_LOOP(i, n)
        y[i] = op(x[i]);
}

template <class In, class Out, class Op>
void launch_cast(const char* name, int64_t n, const In* x, Out* y, void* stream) {
    require(n >= 0, name, "negative size");
    if (n == 0) return;
    cast_kernel<<<grid_for(n), kBlock, 0, as_stream(stream)>>>(n, x, y, Op{});
    PARALAB_GPU_CHECK_LAUNCH("cast_kernel");
}

}  // namespace

// x: [n] -> y: [n]
void cast_f32_to_bf16(int64_t n, const float* x, uint16_t* y, void* stream) {
    launch_cast<float, uint16_t, ToBf16>("cast_f32_to_bf16", n, x, y, stream);
}
void cast_bf16_to_f32(int64_t n, const uint16_t* x, float* y, void* stream) {
    launch_cast<uint16_t, float, FromBf16>("cast_bf16_to_f32", n, x, y, stream);
}
void cast_f32_to_f16(int64_t n, const float* x, uint16_t* y, void* stream) {
    launch_cast<float, uint16_t, ToF16>("cast_f32_to_f16", n, x, y, stream);
}
void cast_f16_to_f32(int64_t n, const uint16_t* x, float* y, void* stream) {
    launch_cast<uint16_t, float, FromF16>("cast_f16_to_f32", n, x, y, stream);
}

}  // namespace paralab::kernels::gpu
