// What the host stand-in for the GPU kernels (fake_gpu_kernels.cpp) needs from the host
// stand-in for the CUDA runtime (fake_gpu_runtime.cpp): a way to queue work on a fake stream.
// Private to the fake-GPU tests of the CPU-only build (tests/CMakeLists.txt).
#pragma once

#include <functional>

namespace paralab::kernels::gpu::fake {

// Runs `op` on the fake stream `stream` after everything queued there so far (on the stream's
// worker thread, after a random delay), or at once on the calling thread for the null stream.
// Returns at once: `op` must capture by value whatever the caller may change or free after the
// call (host arrays of pointers and sizes, a plan's geometry), as a CUDA launch copies its
// arguments. `op` must not throw: check the arguments before submitting, as the launchers do
// on the host before they queue a kernel.
void submit(void* stream, std::function<void()> op);

}  // namespace paralab::kernels::gpu::fake
