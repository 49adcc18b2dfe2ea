// The element-wise steps of the local CUDA communicator (engine/comm/cuda_local.cpp), free of
// CUDA types. They reproduce the CPU local backend's arithmetic (engine/comm/local.cpp) bit for
// bit: one IEEE add, compare or divide per element, no fused multiply-add, no reassociation,
// so that virtual GPUs and CPU ranks reduce to the same bits. T = float or double; `stream` is
// an opaque cudaStream_t; every launcher throws GpuError on a bad launch.
#pragma once

#include <cstdint>

namespace paralab::kernels::gpu {

// dst: [n], src: [n] (src holds the partial result of the ranks before this one).
//   max == false: dst[i] = src[i] + dst[i]
//   max == true:  dst[i] = dst[i] < src[i] ? src[i] : dst[i]
// dst and src may live on the same GPU or src on a peer with peer access enabled.
template <class T>
void comm_combine(int64_t n, T* dst, const T* src, bool max, void* stream);

// data: [n]. data[i] /= T(world) (IEEE division, as the CPU's average).
template <class T>
void comm_divide(int64_t n, T* data, int world, void* stream);

}  // namespace paralab::kernels::gpu
