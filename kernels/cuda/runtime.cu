// Memory, copies, streams and events (kernels/gpu/memory.h, kernels/gpu/stream.h): thin
// checked wrappers over the CUDA runtime, so that the engine's CudaDevice needs no CUDA header.
#include <kernels/gpu/memory.h>
#include <kernels/gpu/stream.h>

#include "check.cuh"
#include "launch.cuh"

namespace paralab::kernels::gpu {

using detail::as_stream;
using detail::DeviceGuard;

// ---- memory --------------------------------------------------------------------------------

void* device_allocate(int device, size_t bytes) {
    DeviceGuard guard(device);
    void* ptr = nullptr;
    const cudaError_t status = cudaMalloc(&ptr, bytes);
    if (status == cudaErrorMemoryAllocation) {
        cudaGetLastError();  // not sticky: clear it, the caller frees its cache and retries
        return nullptr;
    }
    PARALAB_GPU_CHECK(status);
    return ptr;
}

void device_free(int device, void* ptr) {
    if (!ptr) return;
    DeviceGuard guard(device);
    PARALAB_GPU_CHECK(cudaFree(ptr));
}

DeviceMemoryInfo device_memory_info(int device) {
    DeviceGuard guard(device);
    size_t free_bytes = 0, total_bytes = 0;
    PARALAB_GPU_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    return {static_cast<int64_t>(free_bytes), static_cast<int64_t>(total_bytes)};
}

void* pinned_host_allocate(size_t bytes) {
    void* ptr = nullptr;
    const cudaError_t status = cudaMallocHost(&ptr, bytes);
    if (status == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        return nullptr;
    }
    PARALAB_GPU_CHECK(status);
    return ptr;
}

void pinned_host_free(void* ptr) {
    if (ptr) PARALAB_GPU_CHECK(cudaFreeHost(ptr));
}

// ---- copies --------------------------------------------------------------------------------

// cudaMemcpy returns before the bytes have arrived in two cases (the runtime API's notes on
// synchronous copies): from pageable host memory once the bytes are staged for DMA, and between
// device buffers at once. Work on a non-blocking stream is not ordered after the legacy stream,
// and read stale bytes on a busy GPU; waiting for the legacy stream keeps memory.h's promise.
void copy_host_to_device(void* dst, const void* src, size_t bytes) {
    PARALAB_GPU_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
    PARALAB_GPU_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
}

void copy_device_to_host(void* dst, const void* src, size_t bytes) {
    PARALAB_GPU_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

void copy_device_to_device(void* dst, const void* src, size_t bytes) {
    PARALAB_GPU_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
    PARALAB_GPU_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
}

void copy_host_to_device_async(void* dst, const void* src, size_t bytes, void* stream) {
    PARALAB_GPU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, as_stream(stream)));
}

void copy_device_to_host_async(void* dst, const void* src, size_t bytes, void* stream) {
    PARALAB_GPU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, as_stream(stream)));
}

void copy_device_to_device_async(void* dst, const void* src, size_t bytes, void* stream) {
    // cudaMemcpyDefault: with unified addressing the runtime sees which GPU each side is on.
    PARALAB_GPU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, as_stream(stream)));
}

void fill_bytes_async(void* dst, int value, size_t bytes, void* stream) {
    PARALAB_GPU_CHECK(cudaMemsetAsync(dst, value, bytes, as_stream(stream)));
}

// ---- devices, streams, events --------------------------------------------------------------

void set_device(int device) { PARALAB_GPU_CHECK(cudaSetDevice(device)); }

int current_device() {
    int device = 0;
    PARALAB_GPU_CHECK(cudaGetDevice(&device));
    return device;
}

void synchronize_device(int device) {
    DeviceGuard guard(device);
    PARALAB_GPU_CHECK(cudaDeviceSynchronize());
}

void* stream_create(int device, bool non_blocking) {
    DeviceGuard guard(device);  // a stream belongs to the device current at its creation
    cudaStream_t stream = nullptr;
    PARALAB_GPU_CHECK(
        cudaStreamCreateWithFlags(&stream, non_blocking ? cudaStreamNonBlocking : cudaStreamDefault));
    return stream;
}

void stream_destroy(void* stream) {
    if (stream) PARALAB_GPU_CHECK(cudaStreamDestroy(as_stream(stream)));
}

void stream_synchronize(void* stream) { PARALAB_GPU_CHECK(cudaStreamSynchronize(as_stream(stream))); }

void stream_wait_event(void* stream, void* event) {
    PARALAB_GPU_CHECK(cudaStreamWaitEvent(as_stream(stream), static_cast<cudaEvent_t>(event), 0));
}

void* event_create(int device, bool timing) {
    DeviceGuard guard(device);
    cudaEvent_t event = nullptr;
    PARALAB_GPU_CHECK(cudaEventCreateWithFlags(&event, timing ? cudaEventDefault : cudaEventDisableTiming));
    return event;
}

void event_destroy(void* event) {
    if (event) PARALAB_GPU_CHECK(cudaEventDestroy(static_cast<cudaEvent_t>(event)));
}

void event_record(void* event, void* stream) {
    PARALAB_GPU_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), as_stream(stream)));
}

void event_synchronize(void* event) {
    PARALAB_GPU_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
}

bool event_completed(void* event) {
    const cudaError_t status = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (status == cudaErrorNotReady) {
        cudaGetLastError();
        return false;
    }
    PARALAB_GPU_CHECK(status);
    return true;
}

float event_elapsed_ms(void* start, void* end) {
    float ms = 0;
    PARALAB_GPU_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start),
                                           static_cast<cudaEvent_t>(end)));
    return ms;
}

}  // namespace paralab::kernels::gpu
