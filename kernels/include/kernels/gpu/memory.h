// GPU memory and host<->device copies, free of CUDA types. Device pointers are plain void*;
// streams are opaque void* (a cudaStream_t; nullptr is the default stream). Every call throws
// GpuError (kernels/gpu/error.h) when the runtime fails, except device_allocate, which answers
// nullptr when the device is out of memory so that an allocator can free its cache and retry.
// Implemented by kernels/cuda/runtime.cu; kernels/stub answers "no GPU" without CUDA.
#pragma once

#include <cstddef>
#include <cstdint>

namespace paralab::kernels::gpu {

// `bytes` of memory on GPU `device` (cudaMalloc, 256-byte aligned), or nullptr when the device
// has not that much free. Other failures (no such device, no driver) throw.
void* device_allocate(int device, size_t bytes);
// Frees what device_allocate returned (cudaFree: waits for the device's work to finish).
void device_free(int device, void* ptr);

struct DeviceMemoryInfo {
    int64_t free_bytes = 0;   // what the driver reports free now, for every user of the GPU
    int64_t total_bytes = 0;
};
// cudaMemGetInfo on GPU `device`.
DeviceMemoryInfo device_memory_info(int device);

// Page-locked host memory (cudaMallocHost): the only host memory an async copy overlaps with
// compute from. nullptr when the host is out of page-locked memory.
void* pinned_host_allocate(size_t bytes);
void pinned_host_free(void* ptr);

// ---- copies: dst and src must not overlap --------------------------------------------------
// Synchronous: return when the bytes have arrived. They are ordered after the legacy default
// stream's work only: work on a non-blocking stream (every CudaDevice stream) must be
// synchronised first, or use the _async forms on that stream.
void copy_host_to_device(void* dst, const void* src, size_t bytes);
void copy_device_to_host(void* dst, const void* src, size_t bytes);
void copy_device_to_device(void* dst, const void* src, size_t bytes);
// Asynchronous, ordered on `stream`. From or to pageable host memory the runtime stages the
// copy and it does not overlap; use pinned_host_allocate for overlap. The host buffer must
// stay alive until the stream has passed the copy.
void copy_host_to_device_async(void* dst, const void* src, size_t bytes, void* stream);
void copy_device_to_host_async(void* dst, const void* src, size_t bytes, void* stream);
// Also between two GPUs (peer copy through the runtime, staged through the host when peer
// access is off).
void copy_device_to_device_async(void* dst, const void* src, size_t bytes, void* stream);
// dst[0, bytes) = value (each byte), ordered on `stream`.
void fill_bytes_async(void* dst, int value, size_t bytes, void* stream);

}  // namespace paralab::kernels::gpu
