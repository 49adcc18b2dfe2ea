// check() for cuDNN statuses; include it (after check.cuh's macro is visible) where cuDNN is
// called. Inline; the status's words come from the library opened at first use
// (cudnn_api.cuh), so that nothing links libcudnn.
#pragma once

#include <cudnn.h>

#include <string>

#include "check.cuh"
#include "cudnn_api.cuh"

namespace paralab::kernels::gpu::detail {

inline void check(cudnnStatus_t status, const char* statement, const char* file, int line) {
    if (status == CUDNN_STATUS_SUCCESS) return;
    std::string text;
    try {
        text = cudnn().cudnnGetErrorString(status);
    } catch (const GpuError&) {  // a status not from the library (it cannot be opened)
        text = "cuDNN status " + std::to_string(static_cast<int>(status));
    }
    throw GpuError("cuDNN", static_cast<int>(status), text, statement, file, line);
}

}  // namespace paralab::kernels::gpu::detail
