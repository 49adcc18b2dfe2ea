// The CUDA runtime and cuBLAS overloads of check() (check.cuh). The cuDNN and NCCL overloads
// are inline in their own headers; they are included here, where the toolkit has them, only so
// that every build compiles them (an inline function nobody calls links nothing).
#include <string>

#include "check.cuh"
#include "cublas_api.cuh"
#if __has_include(<cudnn.h>)
#include "check_cudnn.cuh"
#endif
#if __has_include(<nccl.h>)
#include "check_nccl.cuh"
#endif

namespace paralab::kernels::gpu::detail {

void check(cudaError_t status, const char* statement, const char* file, int line) {
    if (status == cudaSuccess) return;
    cudaGetLastError();  // clear the non-sticky error so that it is reported once, here
    throw GpuError("CUDA", static_cast<int>(status),
                   std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status),
                   statement, file, line);
}

void check(cublasStatus_t status, const char* statement, const char* file, int line) {
    if (status == CUBLAS_STATUS_SUCCESS) return;
    std::string text;
    try {
        text = std::string(cublas().status_name(status)) + ": " + cublas().status_string(status);
    } catch (const GpuError&) {  // a status not from the library (it cannot be opened)
        text = "cuBLAS status " + std::to_string(static_cast<int>(status));
    }
    throw GpuError("cuBLAS", static_cast<int>(status), text, statement, file, line);
}

}  // namespace paralab::kernels::gpu::detail
