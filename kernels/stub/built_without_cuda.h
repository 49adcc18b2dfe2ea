// Private to kernels/stub: what every GPU entry point of a build without the CUDA backend does.
#pragma once

#include <stdexcept>
#include <string>

namespace paralab::kernels::gpu {

// Throws naming the call: there is no GPU code in this build. Callers that can run without a
// GPU check device_count() (0 here) first, so this is reached only by a real mistake.
[[noreturn]] inline void built_without_cuda(const char* call) {
    throw std::runtime_error(std::string(call) +
                             ": this ParaLab was built without the CUDA backend");
}

}  // namespace paralab::kernels::gpu
