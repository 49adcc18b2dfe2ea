// One check for every GPU library status: PARALAB_GPU_CHECK(statement)
// runs the statement and, unless it returned success, throws kernels::gpu::GpuError carrying
// the statement text, file, line and the library's error string. Overloads of check() pick the
// library by the status type: cudaError_t and cublasStatus_t here; cudnnStatus_t and
// ncclResult_t in check_cudnn.cuh and check_nccl.cuh (inline, so that only the files that use
// cuDNN or NCCL link them). Private to kernels/cuda: it needs CUDA types.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <kernels/gpu/error.h>

namespace paralab::kernels::gpu::detail {

// Throws GpuError unless status is success. A failed runtime call's error is also cleared
// from the thread's last-error slot (cudaGetLastError), so that a later check does not see it.
void check(cudaError_t status, const char* statement, const char* file, int line);
void check(cublasStatus_t status, const char* statement, const char* file, int line);

}  // namespace paralab::kernels::gpu::detail

#define PARALAB_GPU_CHECK(statement) \
    ::paralab::kernels::gpu::detail::check((statement), #statement, __FILE__, __LINE__)

// After a kernel launch: a bad configuration (too many threads, too much shared memory) is only
// reported by cudaGetLastError. Errors inside the kernel surface at the next synchronising call.
#define PARALAB_GPU_CHECK_LAUNCH(kernel_name) \
    ::paralab::kernels::gpu::detail::check(cudaGetLastError(), "launch of " kernel_name, __FILE__, __LINE__)
