// GPU discovery through the CUDA runtime. A machine with the toolkit but no driver or no GPU
// reports zero devices rather than failing.
#include <kernels/gpu/info.h>

#include <cuda_runtime.h>
#include <dlfcn.h>

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

namespace {

// NVML is part of the driver, not of the toolkit: loaded at run time so that the build needs
// neither its header nor its library, and a machine without it still answers.
std::string nvml_driver_version() {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return {};
    using Init = int (*)();
    using Version = int (*)(char*, unsigned);
    auto init = reinterpret_cast<Init>(dlsym(lib, "nvmlInit_v2"));
    auto version = reinterpret_cast<Version>(dlsym(lib, "nvmlSystemGetDriverVersion"));
    auto shutdown = reinterpret_cast<Init>(dlsym(lib, "nvmlShutdown"));
    std::string out;
    if (init && version && shutdown && init() == 0) {
        char text[96] = {};
        if (version(text, sizeof text) == 0) out = text;
        shutdown();
    }
    dlclose(lib);
    return out;
}

std::string driver_text() {
    int v = 0;
    std::string cuda;
    if (cudaDriverGetVersion(&v) == cudaSuccess && v > 0)
        cuda = "CUDA " + std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
    const std::string nvml = nvml_driver_version();
    if (nvml.empty()) return cuda;
    return cuda.empty() ? nvml : nvml + ", " + cuda;
}

}  // namespace

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
    info.driver = driver_text();
    return info;
}

}  // namespace paralab::kernels::gpu
