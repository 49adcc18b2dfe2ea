#include "engine/device/cuda_device.h"

#include <kernels/gpu/gemm.h>
#include <kernels/gpu/info.h>
#include <kernels/gpu/memory.h>
#include <kernels/gpu/stream.h>

#include <utility>

#include "engine/util/error.h"

namespace paralab {

namespace kg = kernels::gpu;

// ---- CudaAllocator ---------------------------------------------------------------------------

CudaAllocator::CudaAllocator(std::string name, int ordinal)
    : Allocator(std::move(name)), m_ordinal(ordinal) {}

CudaAllocator::~CudaAllocator() {
    try {
        release_all();
    } catch (...) {
        // A destructor must not throw (cudaFree fails only when the driver is already gone,
        // and then the memory has gone with the context).
    }
}

void* CudaAllocator::raw_allocate(size_t bytes) { return kg::device_allocate(m_ordinal, bytes); }

void CudaAllocator::raw_free(void* ptr) { kg::device_free(m_ordinal, ptr); }

int64_t CudaAllocator::driver_free_bytes() const {
    return kg::device_memory_info(m_ordinal).free_bytes;
}

int64_t CudaAllocator::driver_total_bytes() const {
    return kg::device_memory_info(m_ordinal).total_bytes;
}

// ---- CudaEvent -------------------------------------------------------------------------------

CudaEvent::CudaEvent(int ordinal, bool timing) : m_event(kg::event_create(ordinal, timing)) {}

CudaEvent::~CudaEvent() {
    if (!m_event) return;
    try {
        kg::event_destroy(m_event);
    } catch (...) {
        // A destructor must not throw; the driver reclaims the event with the context.
    }
}

CudaEvent::CudaEvent(CudaEvent&& other) noexcept : m_event(std::exchange(other.m_event, nullptr)) {}

CudaEvent& CudaEvent::operator=(CudaEvent&& other) noexcept {
    if (this != &other) {
        CudaEvent old(std::move(*this));  // destroyed at the end of the scope
        m_event = std::exchange(other.m_event, nullptr);
    }
    return *this;
}

void CudaEvent::record(void* stream) { kg::event_record(m_event, stream); }
void CudaEvent::synchronize() const { kg::event_synchronize(m_event); }
bool CudaEvent::completed() const { return kg::event_completed(m_event); }

float elapsed_ms(const CudaEvent& start, const CudaEvent& end) {
    end.synchronize();
    return kg::event_elapsed_ms(start.handle(), end.handle());
}

// ---- CudaDevice ------------------------------------------------------------------------------

namespace {

std::string device_label(int index, const std::string& name) {
    return name.empty() ? "cuda:" + std::to_string(index) : name;
}

// Checks that GPU `index` exists before anything is created on it.
int checked_gpu(int index) {
    const std::string id = "cuda:" + std::to_string(index);
    if (!kg::backend_built())
        throw ConfigError(id + ": this ParaLab was built without the CUDA backend");
    const int count = kg::device_count();
    if (index < 0 || index >= count)
        throw ConfigError(id + ": no such GPU (" + std::to_string(count) +
                          (count == 1 ? " GPU" : " GPUs") + " visible on this machine)");
    return index;
}

}  // namespace

CudaDevice::CudaDevice(int index, const std::string& name)
    : Device(DeviceId{DeviceKind::cuda, checked_gpu(index)},
             std::make_unique<CudaAllocator>(device_label(index, name), index)),
      m_cuda_allocator(static_cast<CudaAllocator*>(&allocator())),
      m_compute_done(index, false),
      m_comm_done(index, false) {
    set_name(device_label(index, name));
    m_compute_stream = kg::stream_create(index, true);
    try {
        m_comm_stream = kg::stream_create(index, true);
    } catch (...) {
        kg::stream_destroy(m_compute_stream);
        throw;
    }
}

CudaDevice::~CudaDevice() {
    // Queued work may still read this device's memory: let it finish before the streams, the
    // cuBLAS handles bound to them and (in ~Device) the memory go.
    try {
        synchronize();
    } catch (...) {
    }
    for (void* stream : {m_compute_stream, m_comm_stream}) {
        try {
            kg::release_gemm_handles(stream);
            kg::stream_destroy(stream);
        } catch (...) {
            // A destructor must not throw; a failed driver is reported by the next call.
        }
    }
}

void CudaDevice::make_current() { kg::set_device(ordinal()); }

void CudaDevice::finish_queued() { kg::stream_synchronize(m_compute_stream); }

void CudaDevice::synchronize() {
    kg::stream_synchronize(m_compute_stream);
    kg::stream_synchronize(m_comm_stream);
}

void CudaDevice::comm_waits_for_compute() {
    m_compute_done.record(m_compute_stream);
    kg::stream_wait_event(m_comm_stream, m_compute_done.handle());
}

void CudaDevice::compute_waits_for_comm() {
    m_comm_done.record(m_comm_stream);
    kg::stream_wait_event(m_compute_stream, m_comm_done.handle());
}

CudaDevice::SpanTimer::SpanTimer(const CudaDevice& device)
    : m_begin(device.ordinal(), true), m_end(device.ordinal(), true) {}

std::unique_ptr<CudaDevice> make_cuda_device(int index, const std::string& name) {
    return std::make_unique<CudaDevice>(index, name);
}

}  // namespace paralab
