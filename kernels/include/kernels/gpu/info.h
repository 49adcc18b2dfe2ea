// GPU discovery, free of CUDA types. Implemented by kernels/cuda when the toolkit is present,
// by kernels/stub (no GPUs) otherwise.
#pragma once

#include <cstdint>
#include <string>

namespace paralab::kernels::gpu {

struct GpuInfo {
    std::string name;
    int64_t memory_bytes = 0;
    int multiprocessors = 0;
    int cc_major = 0;
    int cc_minor = 0;
    // The driver: its version from NVML where libnvidia-ml loads ("580.159.04"), and the CUDA
    // version it supports ("CUDA 13.0"), e.g. "580.159.04, CUDA 13.0"; empty without a driver.
    std::string driver;
};

// True when this build has the CUDA backend.
bool backend_built();
// GPUs visible to this process (0 when none, or when the driver is missing).
int device_count();
GpuInfo device_info(int index);

}  // namespace paralab::kernels::gpu
