// check() for cuDNN statuses; include it (after check.cuh's macro is visible) where cuDNN is
// called. Inline, so that files without cuDNN do not link libcudnn.
#pragma once

#include <cudnn.h>

#include <string>

#include "check.cuh"

namespace paralab::kernels::gpu::detail {

inline void check(cudnnStatus_t status, const char* statement, const char* file, int line) {
    if (status == CUDNN_STATUS_SUCCESS) return;
    throw GpuError("cuDNN", static_cast<int>(status), cudnnGetErrorString(status), statement,
                   file, line);
}

}  // namespace paralab::kernels::gpu::detail
