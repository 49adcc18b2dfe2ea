// The local CUDA communicator's element-wise steps (kernels/gpu/comm_reduce.h): a combine and a
// divide, each one IEEE operation per element so that the results equal the CPU ring's bits.
#include <kernels/gpu/comm_reduce.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "check.cuh"

namespace paralab::kernels::gpu {
namespace {

constexpr int k_threads = 256;
// Grid-stride loops with at most this many blocks: enough to fill an H100 (132 SMs x 16).
constexpr int64_t k_max_blocks = 2048;

unsigned blocks_for(int64_t n) {
    return static_cast<unsigned>(std::min<int64_t>((n + k_threads - 1) / k_threads, k_max_blocks));
}

// dst, src: [n]. __fadd_rn/__dadd_rn: a plain add that nvcc may never contract into an FMA.
__device__ inline float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double add_rn(double a, double b) { return __dadd_rn(a, b); }

template <class T>
__global__ void comm_sum_kernel(int64_t n, T* __restrict__ dst, const T* __restrict__ src) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x)
        dst[i] = add_rn(src[i], dst[i]);
}

template <class T>
__global__ void comm_max_kernel(int64_t n, T* __restrict__ dst, const T* __restrict__ src) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x) {
        const T d = dst[i], s = src[i];
        dst[i] = d < s ? s : d;  // the CPU's select: NaN in dst stays, NaN in src is dropped
    }
}

template <class T>
__global__ void comm_divide_kernel(int64_t n, T* __restrict__ data, T world) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x)
        data[i] = data[i] / world;  // IEEE division: nvcc's default -prec-div=true
}

}  // namespace

template <class T>
void comm_combine(int64_t n, T* dst, const T* src, bool max, void* stream) {
    if (n < 0) throw std::invalid_argument("comm_combine: n must be >= 0, got " + std::to_string(n));
    if (n == 0) return;
    auto s = static_cast<cudaStream_t>(stream);
    if (max)
        comm_max_kernel<T><<<blocks_for(n), k_threads, 0, s>>>(n, dst, src);
    else
        comm_sum_kernel<T><<<blocks_for(n), k_threads, 0, s>>>(n, dst, src);
    PARALAB_GPU_CHECK_LAUNCH("comm_combine");
}

template <class T>
void comm_divide(int64_t n, T* data, int world, void* stream) {
    if (n < 0) throw std::invalid_argument("comm_divide: n must be >= 0, got " + std::to_string(n));
    if (world < 1)
        throw std::invalid_argument("comm_divide: world must be >= 1, got " + std::to_string(world));
    if (n == 0) return;
    comm_divide_kernel<T><<<blocks_for(n), k_threads, 0, static_cast<cudaStream_t>(stream)>>>(
        n, data, static_cast<T>(world));
    PARALAB_GPU_CHECK_LAUNCH("comm_divide");
}

template void comm_combine<float>(int64_t, float*, const float*, bool, void*);
template void comm_combine<double>(int64_t, double*, const double*, bool, void*);
template void comm_divide<float>(int64_t, float*, int, void*);
template void comm_divide<double>(int64_t, double*, int, void*);

}  // namespace paralab::kernels::gpu
