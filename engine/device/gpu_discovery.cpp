// GPUs for `paralab devices`, through the kernels' CUDA-free discovery API.
#include <kernels/gpu/info.h>

#include "engine/device/device.h"

namespace paralab {

bool cuda_backend_built() { return kernels::gpu::backend_built(); }

std::vector<DeviceInfo> discover_cuda_devices() {
    std::vector<DeviceInfo> out;
    const int n = kernels::gpu::device_count();
    for (int i = 0; i < n; ++i) {
        const auto g = kernels::gpu::device_info(i);
        DeviceInfo d;
        d.name = "cuda:" + std::to_string(i);
        d.kind = DeviceKind::cuda;
        d.description = g.name;
        d.memory_bytes = g.memory_bytes;
        d.cores = g.multiprocessors;
        d.cc_major = g.cc_major;
        d.driver = g.driver;
        d.cc_minor = g.cc_minor;
        out.push_back(d);
    }
    return out;
}

}  // namespace paralab
