// The CPU-only build's batch norm formula launchers (kernels/gpu/norm.h), each throwing "built
// without the CUDA backend" (see gpu_kernels_stub.cpp).
#include <kernels/gpu/detail/op_lists.h>
#include <kernels/gpu/norm.h>

#include "built_without_cuda.h"

namespace paralab::kernels::gpu {

#define PARALAB_NO_CUDA(name, ...) \
    template <class T>             \
    void name(__VA_ARGS__) {       \
        built_without_cuda(#name); \
    }
PARALAB_GPU_NORM_STATS_OPS(PARALAB_NO_CUDA, T)
#undef PARALAB_NO_CUDA

PARALAB_GPU_INSTANTIATE_FLOAT_TYPES(PARALAB_GPU_NORM_STATS_OPS)

}  // namespace paralab::kernels::gpu
