// The CPU-only build's GPU convolution, pooling and batch norm (kernels/gpu/conv.h, pool.h and
// the batch norm half of norm.h): the same symbols; cudnn_available() answers false and every
// other call throws "built without the CUDA backend", so that code calling them links and
// fails with the reason.
#include <kernels/gpu/conv.h>
#include <kernels/gpu/norm.h>
#include <kernels/gpu/pool.h>

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

// Templates whose bodies throw, instantiated for float and double as the CUDA files are.
template <class T>
void maxpool2d_forward(const cpu::Pool2dGeometry&, const T*, T*, int32_t*, void*) {
    built_without_cuda("maxpool2d_forward");
}
template <class T>
void maxpool2d_backward(const cpu::Pool2dGeometry&, const int32_t*, const T*, T*, void*) {
    built_without_cuda("maxpool2d_backward");
}
template <class T>
void avgpool2d_forward(const cpu::Pool2dGeometry&, const T*, T*, void*) {
    built_without_cuda("avgpool2d_forward");
}
template <class T>
void avgpool2d_backward(const cpu::Pool2dGeometry&, const T*, T*, void*) {
    built_without_cuda("avgpool2d_backward");
}
template <class T>
void global_avgpool_forward(int64_t, int64_t, const T*, T*, void*) {
    built_without_cuda("global_avgpool_forward");
}
template <class T>
void global_avgpool_backward(int64_t, int64_t, const T*, T*, void*) {
    built_without_cuda("global_avgpool_backward");
}
template <class T>
void batchnorm_channel_sums(int64_t, int64_t, int64_t, const T*, double*, double*, void*) {
    built_without_cuda("batchnorm_channel_sums");
}
template <class T>
void batchnorm_normalize(int64_t, int64_t, int64_t, const T*, const T*, const T*, const T*, T*, void*) {
    built_without_cuda("batchnorm_normalize");
}
template <class T>
void batchnorm_backward_sums(int64_t, int64_t, int64_t, const T*, const T*, const T*, double*, double*, void*) {
    built_without_cuda("batchnorm_backward_sums");
}
template <class T>
void batchnorm_backward_input(int64_t, int64_t, int64_t, const T*, const T*, const T*, const T*, const T*,
                              const T*, T*, void*) {
    built_without_cuda("batchnorm_backward_input");
}

#define PARALAB_INSTANTIATE_STUB(T)                                                                         \
    template void maxpool2d_forward<T>(const cpu::Pool2dGeometry&, const T*, T*, int32_t*, void*);          \
    template void maxpool2d_backward<T>(const cpu::Pool2dGeometry&, const int32_t*, const T*, T*, void*);   \
    template void avgpool2d_forward<T>(const cpu::Pool2dGeometry&, const T*, T*, void*);                    \
    template void avgpool2d_backward<T>(const cpu::Pool2dGeometry&, const T*, T*, void*);                   \
    template void global_avgpool_forward<T>(int64_t, int64_t, const T*, T*, void*);                         \
    template void global_avgpool_backward<T>(int64_t, int64_t, const T*, T*, void*);                        \
    template void batchnorm_channel_sums<T>(int64_t, int64_t, int64_t, const T*, double*, double*, void*);  \
    template void batchnorm_normalize<T>(int64_t, int64_t, int64_t, const T*, const T*, const T*, const T*, \
                                         T*, void*);                                                        \
    template void batchnorm_backward_sums<T>(int64_t, int64_t, int64_t, const T*, const T*, const T*,       \
                                             double*, double*, void*);                                      \
    template void batchnorm_backward_input<T>(int64_t, int64_t, int64_t, const T*, const T*, const T*,      \
                                              const T*, const T*, const T*, T*, void*);

PARALAB_INSTANTIATE_STUB(float)
PARALAB_INSTANTIATE_STUB(double)
#undef PARALAB_INSTANTIATE_STUB

}  // namespace paralab::kernels::gpu
