// GPU discovery through the CUDA runtime. A machine with the toolkit but no driver or no GPU
// reports zero devices rather than failing.
#include <kernels/gpu/info.h>

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace paralab::kernels::gpu {

bool backend_built() { return true; }

int device_count() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();  // clear the sticky "no driver" error
        return 0;
    }
    return count;
}

GpuInfo device_info(int index) {
    cudaDeviceProp prop{};
    const cudaError_t err = cudaGetDeviceProperties(&prop, index);
    if (err != cudaSuccess)
        throw std::runtime_error("cudaGetDeviceProperties(" + std::to_string(index) +
                                 "): " + cudaGetErrorString(err));
    GpuInfo info;
    info.name = prop.name;
    info.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
    info.multiprocessors = prop.multiProcessorCount;
    info.cc_major = prop.major;
    info.cc_minor = prop.minor;
    return info;
}

}  // namespace paralab::kernels::gpu
