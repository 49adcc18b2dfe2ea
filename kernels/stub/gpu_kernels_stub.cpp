// The CPU-only build's GPU kernel launchers (kernels/gpu/*.h): the same symbols, each throwing
// "built without the CUDA backend", so that code calling them links and fails with the reason.
#include <kernels/gpu/attention.h>
#include <kernels/gpu/cast.h>
#include <kernels/gpu/detail/op_lists.h>
#include <kernels/gpu/dropout.h>
#include <kernels/gpu/elementwise.h>
#include <kernels/gpu/embedding.h>
#include <kernels/gpu/gemm.h>
#include <kernels/gpu/loss_scale.h>
#include <kernels/gpu/norm.h>
#include <kernels/gpu/optim.h>
#include <kernels/gpu/pool.h>
#include <kernels/gpu/recurrent.h>
#include <kernels/gpu/reduce.h>
#include <kernels/gpu/rmsnorm.h>
#include <kernels/gpu/rope.h>
#include <kernels/gpu/softmax.h>
#include <kernels/gpu/swiglu.h>

#include "built_without_cuda.h"

#include <stdexcept>
#include <string>

namespace paralab::kernels::gpu {


// Every templated launcher (kernels/gpu/detail/op_lists.h): a template whose body throws,
// instantiated for float and double.
#define PARALAB_NO_CUDA(name, ...) \
    template <class T>             \
    void name(__VA_ARGS__) {       \
        built_without_cuda(#name); \
    }
PARALAB_GPU_ALL_OPS(PARALAB_NO_CUDA, T)
#undef PARALAB_NO_CUDA

PARALAB_GPU_INSTANTIATE_FLOAT_TYPES(PARALAB_GPU_ALL_OPS)

// The launchers that are not templates.
void clip_coefficient(const double*, double, double*, void*) { built_without_cuda("clip_coefficient"); }
void cast_f32_to_bf16(int64_t, const float*, uint16_t*, void*) { built_without_cuda("cast_f32_to_bf16"); }
void cast_bf16_to_f32(int64_t, const uint16_t*, float*, void*) { built_without_cuda("cast_bf16_to_f32"); }
void cast_f32_to_f16(int64_t, const float*, uint16_t*, void*) { built_without_cuda("cast_f32_to_f16"); }
void cast_f16_to_f32(int64_t, const uint16_t*, float*, void*) { built_without_cuda("cast_f16_to_f32"); }
void update_loss_scale(float*, int32_t*, const float*, double, double, int32_t, void*) {
    built_without_cuda("update_loss_scale");
}
void gemm_half(HalfType, bool, bool, int64_t, int64_t, int64_t, float, const uint16_t*, int64_t,
               const uint16_t*, int64_t, float, float*, int64_t, void*) {
    built_without_cuda("gemm_half");
}
// Nothing was made, so nothing to release: 0 handles, as the CUDA build answers for a stream
// that never ran a GEMM.
int release_gemm_handles(void*) { return 0; }

}  // namespace paralab::kernels::gpu
