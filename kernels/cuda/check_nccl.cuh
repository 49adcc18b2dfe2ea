// check() for NCCL results; include it where NCCL is called. Inline; the result's words come
// from the library opened at first use (nccl_api.cuh), so that nothing links libnccl.
// ncclInProgress (a non-blocking communicator still working) is not an error.
#pragma once

#include <nccl.h>

#include <string>

#include "check.cuh"
#include "nccl_api.cuh"

namespace paralab::kernels::gpu::detail {

inline void check(ncclResult_t status, const char* statement, const char* file, int line) {
    if (status == ncclSuccess || status == ncclInProgress) return;
    std::string text;
    try {
        text = nccl_library().ncclGetErrorString(status);
    } catch (const GpuError&) {  // a result not from the library (it cannot be opened)
        text = "NCCL result " + std::to_string(static_cast<int>(status));
    }
    throw GpuError("NCCL", static_cast<int>(status), text, statement, file, line);
}

}  // namespace paralab::kernels::gpu::detail
