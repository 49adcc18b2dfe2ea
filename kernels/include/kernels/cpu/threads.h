// Compute threads of the CPU kernels. Called by a device's rank thread (Device::make_current):
// OpenBLAS's count is process-wide, the OpenMP count of our own loops is per calling thread.
#pragma once

namespace paralab::kernels::cpu {

void set_num_threads(int threads);
int num_threads();

}  // namespace paralab::kernels::cpu
