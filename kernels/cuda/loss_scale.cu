// Dynamic loss scaling (kernels/gpu/loss_scale.h): the inf/NaN check fused with the unscale
// over every gradient in one multi-tensor launch, and the scale update as a one-thread kernel.
#include <kernels/gpu/loss_scale.h>
#include <kernels/gpu/detail/op_lists.h>
#include <kernels/gpu/detail/single_tensor_forms.h>

#include <array>
#include <type_traits>

#include "launch.cuh"
#include "multi_tensor.cuh"

namespace paralab::kernels::gpu {

namespace {

using namespace detail;

// Block b unscales its chunk; any non-finite element sets *found_inf (every writer writes 1).
template <class T>
__global__ void __launch_bounds__(kTensorChunkBlock)
    non_finite_check_and_unscale_kernel(TensorList<1> list, float* found_inf, const float* inv_scale) {
    const int k = list.block_tensor[blockIdx.x];
    T* g = static_cast<T*>(list.ptr[0][k]);
    const int64_t begin = static_cast<int64_t>(list.block_chunk[blockIdx.x]) * kTensorChunk;
    const int64_t end = min(begin + kTensorChunk, list.size[k]);
    const float inv = *inv_scale;
    bool bad = false;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
        const T v = g[i];
        bad |= !isfinite(v);
        g[i] = inv == 1.0f ? v : static_cast<T>(v * inv);
    }
    if (__syncthreads_or(bad) && threadIdx.x == 0) *found_inf = 1.0f;
}

__global__ void update_loss_scale_kernel(float* scale, int32_t* growth_tracker, const float* found_inf,
                                         double growth_factor, double backoff_factor, int32_t growth_interval) {
    if (*found_inf != 0.0f) {
        *scale = static_cast<float>(*scale * backoff_factor);
        *growth_tracker = 0;
        return;
    }
    const int32_t successful = *growth_tracker + 1;
    if (successful == growth_interval) {
        const float grown = static_cast<float>(*scale * growth_factor);
        if (isfinite(grown)) *scale = grown;
        *growth_tracker = 0;
    } else {
        *growth_tracker = successful;
    }
}

}  // namespace

// grads[k]: [sizes[k]]
template <class T>
void non_finite_check_and_unscale_multi(int64_t count, T* const* grads, const int64_t* sizes,
                                        float* found_inf, const float* inv_scale, void* stream) {
    require_tensor_sizes("non_finite_check_and_unscale", count, sizes);
    const cudaStream_t s = as_stream(stream);
    const std::array<void* const*, 1> lists{reinterpret_cast<void* const*>(grads)};
    detail::for_each_tensor_chunk<1>(count, lists, sizes, kTensorChunk, [&](const TensorList<1>& list, int blocks) {
        non_finite_check_and_unscale_kernel<T><<<blocks, kTensorChunkBlock, 0, s>>>(list, found_inf, inv_scale);
        PARALAB_GPU_CHECK_LAUNCH("non_finite_check_and_unscale_kernel");
    });
}

void update_loss_scale(float* scale, int32_t* growth_tracker, const float* found_inf,
                       double growth_factor, double backoff_factor, int32_t growth_interval,
                       void* stream) {
    require(growth_factor > 1.0, "update_loss_scale", "growth_factor must be > 1");
    require(backoff_factor > 0.0 && backoff_factor < 1.0, "update_loss_scale",
            "backoff_factor must be in (0, 1)");
    require(growth_interval >= 1, "update_loss_scale", "growth_interval must be >= 1");
    update_loss_scale_kernel<<<1, 1, 0, as_stream(stream)>>>(scale, growth_tracker, found_inf, growth_factor,
                                                             backoff_factor, growth_interval);
    PARALAB_GPU_CHECK_LAUNCH("update_loss_scale_kernel");
}

PARALAB_GPU_INSTANTIATE_FLOAT_TYPES(PARALAB_GPU_LOSS_SCALE_OPS)

}  // namespace paralab::kernels::gpu
