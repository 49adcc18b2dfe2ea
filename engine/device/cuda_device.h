// CudaDevice: one `cuda:N` of a run (docs/design.md). It owns a caching allocator with the CPU's
// category accounting plus what the driver reports free, a compute stream and a communication
// stream, and timing events for spans. Several CudaDevice objects may sit on one physical GPU
// (virtual GPUs: `cuda:0` listed twice): each owns its streams and its accounting. Everything
// here goes through the CUDA-free kernels/gpu API, so this header and its .cpp build without
// the toolkit; without the CUDA backend make_cuda_device throws ConfigError saying so.
//
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/device/device.h"
#include "engine/tensor/allocator.h"

namespace paralab {

// Device memory through cudaMalloc/cudaFree, cached by the base class. A freed block is handed
// out again at once, which is safe for work ordered on one stream (the compute stream); memory
// that another stream still reads must not be freed until that stream has been synchronised
// with the compute stream (record-stream semantics come with the strategies' CUDA wiring).
class CudaAllocator final : public Allocator {
public:
    // name: what out-of-memory errors call the device ("cuda:0"); ordinal: the physical GPU.
    CudaAllocator(std::string name, int ordinal);
    ~CudaAllocator() override;

    int ordinal() const { return m_ordinal; }
    // What the driver reports free on the whole GPU now (cudaMemGetInfo): shared by every
    // process and every virtual device on it, and it includes neither this cache nor others'.
    int64_t driver_free_bytes() const;
    int64_t driver_total_bytes() const;

protected:
    void* raw_allocate(size_t bytes) override;  // nullptr when the GPU is full
    void raw_free(void* ptr) override;

private:
    int m_ordinal;
};

// A CUDA event owned for its lifetime (move-only). timing: it records a timestamp.
class CudaEvent {
public:
    CudaEvent(int ordinal, bool timing = true);
    ~CudaEvent();
    CudaEvent(CudaEvent&& other) noexcept;
    CudaEvent& operator=(CudaEvent&& other) noexcept;
    CudaEvent(const CudaEvent&) = delete;
    CudaEvent& operator=(const CudaEvent&) = delete;

    // Marks the point of `stream`'s queue this event stands for (re-recording moves it).
    void record(void* stream);
    void synchronize() const;
    bool completed() const;
    void* handle() const { return m_event; }

private:
    void* m_event = nullptr;
};

// Milliseconds from `start` to `end`, both recorded timing events; waits for `end`.
float elapsed_ms(const CudaEvent& start, const CudaEvent& end);

class CudaDevice final : public Device {
public:
    // index: the physical GPU (cuda:index); name: what records and errors call this device,
    // "cuda:<index>" when empty (virtual GPUs on one card want distinct names).
    CudaDevice(int index, const std::string& name);
    ~CudaDevice() override;

    int ordinal() const { return id().index; }
    // The streams (cudaStream_t, opaque): non-blocking, created on this device's GPU.
    void* compute_stream() const { return m_compute_stream; }
    void* comm_stream() const { return m_comm_stream; }

    // cudaSetDevice(ordinal) for the calling thread.
    void make_current() override;
    void* queue() const override { return m_compute_stream; }
    void finish_queued() override;
    // Waits until both streams have finished their queued work.
    void synchronize();
    // Work queued on the communication stream from now on waits for the compute stream's work
    // queued so far (gradients ready before their all-reduce), and the converse.
    void comm_waits_for_compute();
    void compute_waits_for_comm();

    CudaAllocator& cuda_allocator() { return *m_cuda_allocator; }
    int64_t driver_free_bytes() const { return m_cuda_allocator->driver_free_bytes(); }

    // A span timed on the GPU: begin() records an event on `stream` where the span starts,
    // end() where it stops, elapsed_ms() waits for the stop and answers the time between.
    class SpanTimer {
    public:
        explicit SpanTimer(const CudaDevice& device);
        void begin(void* stream) { m_begin.record(stream); }
        void end(void* stream) { m_end.record(stream); }
        float elapsed_ms() const { return paralab::elapsed_ms(m_begin, m_end); }

    private:
        CudaEvent m_begin, m_end;
    };

private:
    CudaAllocator* m_cuda_allocator;  // owned by Device (allocator())
    void* m_compute_stream = nullptr;
    void* m_comm_stream = nullptr;
    CudaEvent m_compute_done;  // ordering only (no timing)
    CudaEvent m_comm_done;
};

// A CudaDevice on GPU `index`. Throws ConfigError when this build has no CUDA backend or the
// machine has no GPU `index` (the message says which, and how many GPUs there are).
std::unique_ptr<CudaDevice> make_cuda_device(int index, const std::string& name = {});

}  // namespace paralab
