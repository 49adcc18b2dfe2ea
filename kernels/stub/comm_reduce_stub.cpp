// kernels/gpu/comm_reduce.h in the CPU-only build: there is no GPU, so every call throws naming
// the call; the local CUDA communicator is never made there (no CudaDevice can be).
#include <kernels/gpu/comm_reduce.h>

#include "built_without_cuda.h"

#include <stdexcept>
#include <string>

namespace paralab::kernels::gpu {

template <class T>
void comm_combine(int64_t, T*, const T*, bool, void*) {
    built_without_cuda("comm_combine");
}
template <class T>
void comm_divide(int64_t, T*, int, void*) {
    built_without_cuda("comm_divide");
}

template void comm_combine<float>(int64_t, float*, const float*, bool, void*);
template void comm_combine<double>(int64_t, double*, const double*, bool, void*);
template void comm_divide<float>(int64_t, float*, int, void*);
template void comm_divide<double>(int64_t, double*, int, void*);

}  // namespace paralab::kernels::gpu
