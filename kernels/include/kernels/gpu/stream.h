// Devices, streams and events, free of CUDA types: a stream or an event is an opaque void*
// (cudaStream_t, cudaEvent_t). Every call throws GpuError (kernels/gpu/error.h) on failure.
// Implemented by kernels/cuda/runtime.cu; kernels/stub throws "built without CUDA".
#pragma once

namespace paralab::kernels::gpu {

// cudaSetDevice / cudaGetDevice for the calling thread.
void set_device(int device);
int current_device();
// Waits for every stream of GPU `device` (cudaDeviceSynchronize).
void synchronize_device(int device);

// A new stream on GPU `device`. non_blocking: it does not wait for the legacy default stream
// (cudaStreamNonBlocking), which is what a compute or communication stream wants.
void* stream_create(int device, bool non_blocking = true);
void stream_destroy(void* stream);
void stream_synchronize(void* stream);
// Work queued on `stream` after this call waits until `event` has completed.
void stream_wait_event(void* stream, void* event);

// An event on GPU `device`. timing: it records a timestamp (cudaEventDefault); without it the
// event only orders work (cudaEventDisableTiming, cheaper).
void* event_create(int device, bool timing = true);
void event_destroy(void* event);
void event_record(void* event, void* stream);
void event_synchronize(void* event);
// True when the work before the event's last record has completed (cudaEventQuery).
bool event_completed(void* event);
// Milliseconds between two recorded, completed timing events (resolution ~0.5 us).
float event_elapsed_ms(void* start, void* end);

}  // namespace paralab::kernels::gpu
