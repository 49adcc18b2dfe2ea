// The CPU-only build's GPU memory, streams and events (kernels/gpu/memory.h, stream.h): there
// is no GPU, so every call throws, naming the call and why. device_count() (gpu_stub.cpp) says
// 0, and callers check that first.
#include <kernels/gpu/memory.h>
#include <kernels/gpu/stream.h>

#include "built_without_cuda.h"

#include <stdexcept>
#include <string>

namespace paralab::kernels::gpu {


void* device_allocate(int, size_t) { built_without_cuda("device_allocate"); }
void device_free(int, void*) { built_without_cuda("device_free"); }
DeviceMemoryInfo device_memory_info(int) { built_without_cuda("device_memory_info"); }
void* pinned_host_allocate(size_t) { built_without_cuda("pinned_host_allocate"); }
void pinned_host_free(void*) { built_without_cuda("pinned_host_free"); }

void copy_host_to_device(void*, const void*, size_t) { built_without_cuda("copy_host_to_device"); }
void copy_device_to_host(void*, const void*, size_t) { built_without_cuda("copy_device_to_host"); }
void copy_device_to_device(void*, const void*, size_t) { built_without_cuda("copy_device_to_device"); }
void copy_host_to_device_async(void*, const void*, size_t, void*) {
    built_without_cuda("copy_host_to_device_async");
}
void copy_device_to_host_async(void*, const void*, size_t, void*) {
    built_without_cuda("copy_device_to_host_async");
}
void copy_device_to_device_async(void*, const void*, size_t, void*) {
    built_without_cuda("copy_device_to_device_async");
}
void fill_bytes_async(void*, int, size_t, void*) { built_without_cuda("fill_bytes_async"); }

void set_device(int) { built_without_cuda("set_device"); }
int current_device() { built_without_cuda("current_device"); }
void synchronize_device(int) { built_without_cuda("synchronize_device"); }
void* stream_create(int, bool) { built_without_cuda("stream_create"); }
void stream_destroy(void*) { built_without_cuda("stream_destroy"); }
void stream_synchronize(void*) { built_without_cuda("stream_synchronize"); }
void stream_wait_event(void*, void*) { built_without_cuda("stream_wait_event"); }
void* event_create(int, bool) { built_without_cuda("event_create"); }
void event_destroy(void*) { built_without_cuda("event_destroy"); }
void event_record(void*, void*) { built_without_cuda("event_record"); }
void event_synchronize(void*) { built_without_cuda("event_synchronize"); }
bool event_completed(void*) { built_without_cuda("event_completed"); }
float event_elapsed_ms(void*, void*) { built_without_cuda("event_elapsed_ms"); }

}  // namespace paralab::kernels::gpu
