// The CPU-only build: no GPUs, with the same interface as kernels/cuda/device_info.cu.
#include <kernels/gpu/info.h>

#include <stdexcept>

namespace paralab::kernels::gpu {

bool backend_built() { return false; }
int device_count() { return 0; }
GpuInfo device_info(int index) {
    throw std::out_of_range("no GPU " + std::to_string(index) +
                            ": this ParaLab was built without the CUDA backend");
}

}  // namespace paralab::kernels::gpu
