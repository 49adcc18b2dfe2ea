// check() for NCCL results; include it where NCCL is called. Inline, so that files without
// NCCL do not link libnccl. ncclInProgress (a non-blocking communicator still working) is not
// an error.
#pragma once

#include <nccl.h>

#include <string>

#include "check.cuh"

namespace paralab::kernels::gpu::detail {

inline void check(ncclResult_t status, const char* statement, const char* file, int line) {
    if (status == ncclSuccess || status == ncclInProgress) return;
    throw GpuError("NCCL", static_cast<int>(status), ncclGetErrorString(status), statement, file,
                   line);
}

}  // namespace paralab::kernels::gpu::detail
