// The CPU-only build's GPU convolution (kernels/gpu/conv.h): the same symbols; cudnn_available()
// answers false and every other call throws "built without the CUDA backend", so that code
// calling them links and fails with the reason. Pooling and batch norm are templates in
// kernels/gpu/detail/op_lists.h's lists, stubbed with the others in gpu_kernels_stub.cpp.
#include <kernels/gpu/conv.h>

#include "built_without_cuda.h"

namespace paralab::kernels::gpu {

bool cudnn_available() { return false; }

struct CudnnConv2dPlan::Impl {};

CudnnConv2dPlan::CudnnConv2dPlan(int, const cpu::Conv2dGeometry&, int64_t, int64_t, bool, bool, bool) {
    built_without_cuda("CudnnConv2dPlan");
}
CudnnConv2dPlan::~CudnnConv2dPlan() = default;
int64_t CudnnConv2dPlan::batch() const { built_without_cuda("CudnnConv2dPlan::batch"); }
std::string CudnnConv2dPlan::algorithms() const { built_without_cuda("CudnnConv2dPlan::algorithms"); }
size_t CudnnConv2dPlan::forward_workspace_bytes() const {
    built_without_cuda("CudnnConv2dPlan::forward_workspace_bytes");
}
size_t CudnnConv2dPlan::backward_workspace_bytes() const {
    built_without_cuda("CudnnConv2dPlan::backward_workspace_bytes");
}
void CudnnConv2dPlan::forward(const void*, const void*, const void*, void*, void*, void*) const {
    built_without_cuda("CudnnConv2dPlan::forward");
}
void CudnnConv2dPlan::backward(const void*, const void*, const void*, void*, void*, void*, void*, void*) const {
    built_without_cuda("CudnnConv2dPlan::backward");
}

}  // namespace paralab::kernels::gpu
