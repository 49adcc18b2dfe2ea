// A host-memory stand-in for the CUDA runtime (kernels/gpu/memory.h, stream.h, info.h,
// comm_reduce.h, graph.h), linked into the fake-GPU tests in place of the GPU backend
// (kernels/stub in a CPU-only build, the CUDA backend in a CUDA one): "device" memory is host memory, and each stream is a worker thread that runs
// its queue in order, after a random delay per operation, so that streams really run
// asynchronously and out of step with the threads that enqueue on them. Events are (stream,
// position) pairs; a stream waiting on an event waits for that position, as cudaStreamWaitEvent
// does. It proves the local CUDA communicator's protocol (engine/comm/cuda_local.cpp) without
// a GPU: a missing stream wait shows as a wrong result here, as it would on a GPU. With
// fake_gpu_kernels.cpp (the kernels, on the host, queued through fake::submit) it runs the
// whole GPU training path (engine_fake_gpu_training_test).
//
// Copies follow the CUDA runtime's rules for pageable host memory (anything that
// pinned_host_allocate did not return), which engine code relies on: a host-to-device copy
// takes the host bytes before it returns (the device write stays ordered on the stream), and a
// device-to-host copy returns once the bytes have arrived. From or to pinned memory both are
// truly asynchronous. PARALAB_FAKE_GPU_STRICT=1 in the environment makes device-to-host copies
// into pageable memory asynchronous too, as memory.h's contract allows: code that reads the
// host buffer before it waits for the stream then fails here, where on a GPU it works only
// because the runtime stages the copy.
//
// Graphs: while a stream is captured, the work queued on it is recorded instead of run; a
// launch queues the recorded work on the stream, with the arguments it was recorded with.
// What the runtime forbids while a thread captures (cudaStreamCaptureModeThreadLocal:
// allocating, freeing, synchronous copies, waiting for the device or for a captured stream)
// throws GpuError and invalidates the capture, and so does what this fake does not model
// (copies between host and device, events recorded on or waited for by a captured stream):
// stream_end_capture then fails and the caller falls back to running the work eagerly.
//
// The delay before each operation is random in [0, PARALAB_FAKE_GPU_MAX_DELAY_US)
// microseconds (a compile definition, 40 unless set).
#include <kernels/gpu/comm_reduce.h>
#include <kernels/gpu/error.h>
#include <kernels/gpu/graph.h>
#include <kernels/gpu/info.h>
#include <kernels/gpu/memory.h>
#include <kernels/gpu/stream.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "fake_gpu.h"

#ifndef PARALAB_FAKE_GPU_MAX_DELAY_US
#define PARALAB_FAKE_GPU_MAX_DELAY_US 40
#endif

namespace paralab::kernels::gpu {
namespace {

constexpr int k_fake_gpus = 2;
constexpr uint32_t k_max_delay_us = PARALAB_FAKE_GPU_MAX_DELAY_US;

// A captured graph, and an executable one: the recorded operations in order. `invalid`: the
// capture met a call it cannot hold (stream_end_capture throws).
struct FakeGraph {
    std::vector<std::function<void()>> nodes;
    bool invalid = false;
};

class FakeStream {
public:
    explicit FakeStream(int device) : m_device(device), m_worker([this] { work(); }) {}
    ~FakeStream() {
        {
            std::lock_guard lock(m_mutex);
            m_stop = true;
        }
        m_cv.notify_all();
        m_worker.join();
    }

    int device() const { return m_device; }

    // Position of the last operation enqueued so far (0: none). While the stream is captured
    // the operation is recorded into the graph instead.
    int64_t enqueue(std::function<void()> op) {
        std::lock_guard lock(m_mutex);
        if (m_capture) {
            m_capture->nodes.push_back(std::move(op));
            return m_enqueued;
        }
        m_queue.push_back(std::move(op));
        ++m_enqueued;
        m_cv.notify_all();
        return m_enqueued;
    }
    int64_t enqueued() {
        std::lock_guard lock(m_mutex);
        return m_enqueued;
    }
    void wait_done(int64_t position) {
        std::unique_lock lock(m_mutex);
        m_cv.wait(lock, [&] { return m_done >= position; });
    }
    bool done(int64_t position) {
        std::lock_guard lock(m_mutex);
        return m_done >= position;
    }

    // Capture: begin hands the stream a graph to record into, end takes it back.
    bool begin_capture() {
        std::lock_guard lock(m_mutex);
        if (m_capture) return false;
        m_capture = std::make_unique<FakeGraph>();
        return true;
    }
    std::unique_ptr<FakeGraph> end_capture() {
        std::lock_guard lock(m_mutex);
        return std::move(m_capture);
    }
    bool capturing() {
        std::lock_guard lock(m_mutex);
        return m_capture != nullptr;
    }
    void invalidate_capture() {
        std::lock_guard lock(m_mutex);
        if (m_capture) m_capture->invalid = true;
    }

private:
    void work() {
#ifdef __linux__
        // Sleeps of a few microseconds, not the default 50 us of timer slack each.
        prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
#endif
        std::mt19937 delay(uint32_t(reinterpret_cast<uintptr_t>(this)));
        for (;;) {
            std::function<void()> op;
            {
                std::unique_lock lock(m_mutex);
                m_cv.wait(lock, [&] { return m_stop || !m_queue.empty(); });
                if (m_queue.empty()) return;
                op = std::move(m_queue.front());
                m_queue.pop_front();
            }
            if (k_max_delay_us > 0) {
                const uint32_t us = delay() % k_max_delay_us;
                if (us > 0) std::this_thread::sleep_for(std::chrono::microseconds(us));
            }
            op();
            {
                std::lock_guard lock(m_mutex);
                ++m_done;
            }
            m_cv.notify_all();
        }
    }

    const int m_device;
    std::mutex m_mutex;
    std::condition_variable m_cv;
    std::deque<std::function<void()>> m_queue;  // guarded by m_mutex
    int64_t m_enqueued = 0, m_done = 0;         // guarded by m_mutex
    bool m_stop = false;                        // guarded by m_mutex
    std::unique_ptr<FakeGraph> m_capture;       // guarded by m_mutex; null: not capturing
    std::thread m_worker;
};

struct FakeEvent {
    std::mutex mutex;
    FakeStream* stream = nullptr;  // guarded by mutex; nullptr: never recorded
    int64_t position = 0;          // guarded by mutex
};

std::mutex g_streams_mutex;
// Every live stream, owned here and by a synchronize_device waiting on it: a stream destroyed
// by one thread while another thread's cudaDeviceSynchronize (or cudaFree) waits on it lives
// until that wait ends.
std::map<FakeStream*, std::shared_ptr<FakeStream>> g_streams;  // guarded by g_streams_mutex

// Pinned host blocks: start -> size. Guarded by g_pinned_mutex.
std::mutex g_pinned_mutex;
std::map<const char*, size_t> g_pinned;

thread_local int t_current_device = 0;
// The streams this thread is capturing (cudaStreamCaptureModeThreadLocal).
thread_local std::vector<FakeStream*> t_captures;

FakeStream* as_stream(void* s) {
    return static_cast<FakeStream*>(s);
}

bool is_pinned(const void* p) {
    const auto* c = static_cast<const char*>(p);
    std::lock_guard lock(g_pinned_mutex);
    auto it = g_pinned.upper_bound(c);
    if (it == g_pinned.begin()) return false;
    --it;
    return c < it->first + it->second;
}

bool strict_pageable() {
    static const bool strict = [] {
        const char* v = std::getenv("PARALAB_FAKE_GPU_STRICT");
        return v && *v && std::strcmp(v, "0") != 0;
    }();
    return strict;
}

[[noreturn]] void capture_error(int status, const char* text, const char* call) {
    throw GpuError("CUDA", status, text, call, __FILE__, __LINE__);
}

// What the runtime forbids to a thread while it captures: the call fails and so do the captures.
void forbid_while_capturing(const char* call) {
    if (t_captures.empty()) return;
    for (FakeStream* s : t_captures) s->invalidate_capture();
    capture_error(
        900, "cudaErrorStreamCaptureUnsupported: operation not permitted when stream is capturing",
        call);
}

// What this fake does not model on a captured stream (the capture fails, the call too).
void refuse_on_captured(void* stream, const char* call) {
    if (!stream || !as_stream(stream)->capturing()) return;
    as_stream(stream)->invalidate_capture();
    capture_error(900, "cudaErrorStreamCaptureUnsupported: not captured by the fake GPU runtime",
                  call);
}

void check_device(int device, const char* call) {
    if (device < 0 || device >= k_fake_gpus)
        throw std::out_of_range(std::string("fake ") + call + ": no such GPU " +
                                std::to_string(device));
}

// cudaMemcpy's rule: the two sides of a copy must not overlap. Checked when the copy runs.
void copy_no_overlap(void* dst, const void* src, size_t bytes) {
    const auto* d = static_cast<const char*>(dst);
    const auto* s = static_cast<const char*>(src);
    if (bytes == 0) return;  // no copy, and no null pointer handed to memcpy
    if (d < s + bytes && s < d + bytes) std::abort();  // overlapping copy
    std::memcpy(dst, src, bytes);
}

}  // namespace

void fake::submit(void* stream, std::function<void()> op) {
    if (stream == nullptr)
        op();
    else
        as_stream(stream)->enqueue(std::move(op));
}

bool backend_built() {
    return true;
}
int device_count() {
    return k_fake_gpus;
}
GpuInfo device_info(int index) {
    if (index < 0 || index >= k_fake_gpus) throw std::out_of_range("fake device_info: no such GPU");
    return GpuInfo{"fake host GPU", int64_t{1} << 34, 1, 9, 0, ""};
}

// 256-byte aligned, as cudaMalloc.
void* device_allocate(int device, size_t bytes) {
    check_device(device, "device_allocate");
    forbid_while_capturing("cudaMalloc");
    return std::aligned_alloc(256, bytes == 0 ? 256 : (bytes + 255) / 256 * 256);
}
void device_free(int device, void* ptr) {
    if (!ptr) return;
    forbid_while_capturing("cudaFree");
    synchronize_device(device);  // cudaFree waits for the device
    std::free(ptr);
}
DeviceMemoryInfo device_memory_info(int) {
    return {int64_t{1} << 33, int64_t{1} << 34};
}
void* pinned_host_allocate(size_t bytes) {
    forbid_while_capturing("cudaMallocHost");
    void* p = std::malloc(bytes == 0 ? 1 : bytes);
    std::lock_guard lock(g_pinned_mutex);
    g_pinned[static_cast<const char*>(p)] = bytes == 0 ? 1 : bytes;
    return p;
}
void pinned_host_free(void* ptr) {
    if (!ptr) return;
    forbid_while_capturing("cudaFreeHost");
    {
        std::lock_guard lock(g_pinned_mutex);
        g_pinned.erase(static_cast<const char*>(ptr));
    }
    std::free(ptr);
}

// Synchronous copies: at once, ordered after nothing but the (here empty) legacy default stream,
// as cudaMemcpy; a kernel still running on a non-blocking stream races with them, as on a GPU.
void copy_host_to_device(void* dst, const void* src, size_t bytes) {
    forbid_while_capturing("cudaMemcpy");
    copy_no_overlap(dst, src, bytes);
}
void copy_device_to_host(void* dst, const void* src, size_t bytes) {
    forbid_while_capturing("cudaMemcpy");
    copy_no_overlap(dst, src, bytes);
}
void copy_device_to_device(void* dst, const void* src, size_t bytes) {
    forbid_while_capturing("cudaMemcpy");
    copy_no_overlap(dst, src, bytes);
}
void copy_device_to_device_async(void* dst, const void* src, size_t bytes, void* stream) {
    fake::submit(stream, [=] { copy_no_overlap(dst, src, bytes); });
}
// From pageable memory the runtime stages the host bytes before it returns (a caller may pass
// a stack array); the device write stays ordered on the stream.
void copy_host_to_device_async(void* dst, const void* src, size_t bytes, void* stream) {
    refuse_on_captured(stream, "cudaMemcpyAsync (host to device)");
    if (is_pinned(src)) return copy_device_to_device_async(dst, src, bytes, stream);
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                      static_cast<const char*>(src) + bytes);
    fake::submit(stream, [=] { std::memcpy(dst, staged->data(), bytes); });
}
// Into pageable memory the runtime returns only once the copy has completed.
void copy_device_to_host_async(void* dst, const void* src, size_t bytes, void* stream) {
    refuse_on_captured(stream, "cudaMemcpyAsync (device to host)");
    copy_device_to_device_async(dst, src, bytes, stream);
    if (stream && !is_pinned(dst) && !strict_pageable()) stream_synchronize(stream);
}
void fill_bytes_async(void* dst, int value, size_t bytes, void* stream) {
    fake::submit(stream, [=] { std::memset(dst, value, bytes); });
}

void set_device(int device) {
    check_device(device, "set_device");
    t_current_device = device;
}
int current_device() {
    return t_current_device;
}
// Waits for the work queued so far on every stream of `device`.
void synchronize_device(int device) {
    forbid_while_capturing("cudaDeviceSynchronize");
    std::vector<std::pair<std::shared_ptr<FakeStream>, int64_t>> marks;
    {
        std::lock_guard lock(g_streams_mutex);
        for (const auto& [raw, s] : g_streams)
            if (s->device() == device) marks.emplace_back(s, s->enqueued());
    }
    for (auto& [s, position] : marks) s->wait_done(position);
}

void* stream_create(int device, bool) {
    check_device(device, "stream_create");
    auto s = std::make_shared<FakeStream>(device);
    std::lock_guard lock(g_streams_mutex);
    g_streams.emplace(s.get(), s);
    return s.get();
}
void stream_destroy(void* stream) {
    if (!stream) return;
    std::shared_ptr<FakeStream> owned;
    {
        std::lock_guard lock(g_streams_mutex);
        const auto it = g_streams.find(as_stream(stream));
        if (it == g_streams.end()) return;
        owned = std::move(it->second);
        g_streams.erase(it);
    }
    stream_synchronize(stream);  // then gone, unless another thread still waits on it
}
void stream_synchronize(void* stream) {
    if (stream == nullptr) return;
    refuse_on_captured(stream, "cudaStreamSynchronize");
    FakeStream* s = as_stream(stream);
    s->wait_done(s->enqueued());
}
// The event's position as recorded now; the null stream (whose work runs at once on the
// calling thread) waits here.
void stream_wait_event(void* stream, void* event) {
    refuse_on_captured(stream, "cudaStreamWaitEvent");
    auto* e = static_cast<FakeEvent*>(event);
    FakeStream* waited;
    int64_t position;
    {
        std::lock_guard lock(e->mutex);
        waited = e->stream;
        position = e->position;
    }
    if (waited == nullptr || waited == stream) return;
    refuse_on_captured(waited, "cudaStreamWaitEvent (an event of a captured stream)");
    if (stream == nullptr)
        waited->wait_done(position);
    else
        fake::submit(stream, [waited, position] { waited->wait_done(position); });
}

void* event_create(int device, bool) {
    check_device(device, "event_create");
    return new FakeEvent;
}
void event_destroy(void* event) {
    delete static_cast<FakeEvent*>(event);
}
void event_record(void* event, void* stream) {
    refuse_on_captured(stream, "cudaEventRecord");
    auto* e = static_cast<FakeEvent*>(event);
    std::lock_guard lock(e->mutex);
    e->stream = as_stream(stream);
    e->position = stream ? as_stream(stream)->enqueued() : 0;
}
void event_synchronize(void* event) {
    auto* e = static_cast<FakeEvent*>(event);
    FakeStream* s;
    int64_t position;
    {
        std::lock_guard lock(e->mutex);
        s = e->stream;
        position = e->position;
    }
    if (s) s->wait_done(position);
}
bool event_completed(void* event) {
    auto* e = static_cast<FakeEvent*>(event);
    std::lock_guard lock(e->mutex);
    return e->stream == nullptr || e->stream->done(e->position);
}
float event_elapsed_ms(void*, void*) {
    return 0.0f;
}

// ---- graphs ---------------------------------------------------------------------------------

void stream_begin_capture(void* stream) {
    if (!stream)
        capture_error(900,
                      "cudaErrorStreamCaptureUnsupported: the legacy stream cannot be captured",
                      "cudaStreamBeginCapture");
    if (!as_stream(stream)->begin_capture())
        capture_error(1, "cudaErrorInvalidValue: the stream is already capturing",
                      "cudaStreamBeginCapture");
    t_captures.push_back(as_stream(stream));
}
// The stream leaves capture mode whether or not the capture held.
void* stream_end_capture(void* stream) {
    FakeStream* s = as_stream(stream);
    std::unique_ptr<FakeGraph> graph = s ? s->end_capture() : nullptr;
    t_captures.erase(std::remove(t_captures.begin(), t_captures.end(), s), t_captures.end());
    if (!graph)
        capture_error(901, "cudaErrorStreamCaptureInvalidated: the stream was not capturing",
                      "cudaStreamEndCapture");
    if (graph->invalid)
        capture_error(901,
                      "cudaErrorStreamCaptureInvalidated: operation failed due to a previous error "
                      "during capture",
                      "cudaStreamEndCapture");
    return graph.release();
}
void* graph_instantiate(void* graph) {
    return new FakeGraph(*static_cast<FakeGraph*>(graph));
}
// The same shape: as many nodes (each node is one launch, in order).
bool graph_exec_update(void* exec, void* graph) {
    auto* e = static_cast<FakeGraph*>(exec);
    const auto* g = static_cast<const FakeGraph*>(graph);
    if (e->nodes.size() != g->nodes.size()) return false;
    e->nodes = g->nodes;
    return true;
}
void graph_launch(void* exec, void* stream) {
    for (const auto& node : static_cast<FakeGraph*>(exec)->nodes) fake::submit(stream, node);
}
void graph_destroy(void* graph) {
    delete static_cast<FakeGraph*>(graph);
}
void graph_exec_destroy(void* exec) {
    delete static_cast<FakeGraph*>(exec);
}

// The kernels, on the host, with the CPU ring's operations (local.cpp's combine and divide).
template <class T>
void comm_combine(int64_t n, T* dst, const T* src, bool max, void* stream) {
    fake::submit(stream, [=] {
        for (int64_t i = 0; i < n; ++i)
            dst[i] = max ? (dst[i] < src[i] ? src[i] : dst[i]) : src[i] + dst[i];
    });
}
template <class T>
void comm_divide(int64_t n, T* data, int world, void* stream) {
    fake::submit(stream, [=] {
        const T w = static_cast<T>(world);
        for (int64_t i = 0; i < n; ++i) data[i] /= w;
    });
}

template void comm_combine<float>(int64_t, float*, const float*, bool, void*);
template void comm_combine<double>(int64_t, double*, const double*, bool, void*);
template void comm_divide<float>(int64_t, float*, int, void*);
template void comm_divide<double>(int64_t, double*, int, void*);

}  // namespace paralab::kernels::gpu
