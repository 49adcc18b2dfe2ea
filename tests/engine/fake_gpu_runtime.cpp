// A host-memory stand-in for the CUDA runtime (kernels/gpu/memory.h, stream.h, info.h,
// comm_reduce.h), linked into engine_cuda_local_protocol_test in the CPU-only build in place of
// kernels/stub: "device" memory is host memory, and each stream is a worker thread that runs
// its queue in order, after a random delay per operation, so that streams really run
// asynchronously and out of step with the threads that enqueue on them. Events are (stream,
// position) pairs; a stream waiting on an event waits for that position, as cudaStreamWaitEvent
// does. It proves the local CUDA communicator's protocol (engine/comm/cuda_local.cpp) without
// a GPU: a missing stream wait shows as a wrong result here, as it would on a GPU.
#include <kernels/gpu/comm_reduce.h>
#include <kernels/gpu/info.h>
#include <kernels/gpu/memory.h>
#include <kernels/gpu/stream.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>

namespace paralab::kernels::gpu {
namespace {

constexpr int k_fake_gpus = 2;

class FakeStream {
public:
    FakeStream() : m_worker([this] { work(); }) {}
    ~FakeStream() {
        {
            std::lock_guard lock(m_mutex);
            m_stop = true;
        }
        m_cv.notify_all();
        m_worker.join();
    }

    // Position of the last operation enqueued so far (0: none).
    int64_t enqueue(std::function<void()> op) {
        std::lock_guard lock(m_mutex);
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

private:
    void work() {
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
            std::this_thread::sleep_for(std::chrono::microseconds(delay() % 40));
            op();
            {
                std::lock_guard lock(m_mutex);
                ++m_done;
            }
            m_cv.notify_all();
        }
    }

    std::mutex m_mutex;
    std::condition_variable m_cv;
    std::deque<std::function<void()>> m_queue;  // guarded by m_mutex
    int64_t m_enqueued = 0, m_done = 0;          // guarded by m_mutex
    bool m_stop = false;                          // guarded by m_mutex
    std::thread m_worker;
};

struct FakeEvent {
    std::mutex mutex;
    FakeStream* stream = nullptr;  // guarded by mutex; nullptr: never recorded
    int64_t position = 0;          // guarded by mutex
};

std::mutex g_streams_mutex;
std::set<FakeStream*> g_streams;  // guarded by g_streams_mutex

FakeStream* as_stream(void* s) {
    return static_cast<FakeStream*>(s);
}

// Runs `op` on `stream` in order, or at once for the null stream.
void submit(void* stream, std::function<void()> op) {
    if (stream == nullptr)
        op();
    else
        as_stream(stream)->enqueue(std::move(op));
}

}  // namespace

bool backend_built() { return true; }
int device_count() { return k_fake_gpus; }
GpuInfo device_info(int index) {
    if (index < 0 || index >= k_fake_gpus) throw std::out_of_range("fake device_info: no such GPU");
    return GpuInfo{"fake host GPU", int64_t{1} << 34, 1, 9, 0};
}

void* device_allocate(int, size_t bytes) { return std::malloc(bytes == 0 ? 1 : bytes); }
void device_free(int device, void* ptr) {
    synchronize_device(device);  // cudaFree waits for the device
    std::free(ptr);
}
DeviceMemoryInfo device_memory_info(int) { return {int64_t{1} << 33, int64_t{1} << 34}; }
void* pinned_host_allocate(size_t bytes) { return std::malloc(bytes); }
void pinned_host_free(void* ptr) { std::free(ptr); }

void copy_host_to_device(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void copy_device_to_host(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void copy_device_to_device(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
// Async copies check cudaMemcpy's rule (no overlap) when they run.
void copy_device_to_device_async(void* dst, const void* src, size_t bytes, void* stream) {
    submit(stream, [=] {
        const auto* d = static_cast<const char*>(dst);
        const auto* s = static_cast<const char*>(src);
        if (d < s + bytes && s < d + bytes && bytes > 0) std::abort();  // overlapping copy
        std::memcpy(dst, src, bytes);
    });
}
void copy_host_to_device_async(void* dst, const void* src, size_t bytes, void* stream) {
    copy_device_to_device_async(dst, src, bytes, stream);
}
void copy_device_to_host_async(void* dst, const void* src, size_t bytes, void* stream) {
    copy_device_to_device_async(dst, src, bytes, stream);
}
void fill_bytes_async(void* dst, int value, size_t bytes, void* stream) {
    submit(stream, [=] { std::memset(dst, value, bytes); });
}

void set_device(int device) {
    if (device < 0 || device >= k_fake_gpus) throw std::out_of_range("fake set_device: no such GPU");
}
int current_device() { return 0; }
void synchronize_device(int) {
    std::vector<std::pair<FakeStream*, int64_t>> marks;
    {
        std::lock_guard lock(g_streams_mutex);
        for (FakeStream* s : g_streams) marks.emplace_back(s, s->enqueued());
    }
    for (auto& [s, position] : marks) s->wait_done(position);
}

void* stream_create(int, bool) {
    auto* s = new FakeStream;
    std::lock_guard lock(g_streams_mutex);
    g_streams.insert(s);
    return s;
}
void stream_destroy(void* stream) {
    {
        std::lock_guard lock(g_streams_mutex);
        g_streams.erase(as_stream(stream));
    }
    stream_synchronize(stream);
    delete as_stream(stream);
}
void stream_synchronize(void* stream) {
    if (stream == nullptr) return;
    FakeStream* s = as_stream(stream);
    s->wait_done(s->enqueued());
}
void stream_wait_event(void* stream, void* event) {
    auto* e = static_cast<FakeEvent*>(event);
    FakeStream* waited;
    int64_t position;
    {
        std::lock_guard lock(e->mutex);
        waited = e->stream;
        position = e->position;
    }
    if (waited == nullptr || stream == nullptr) return;
    submit(stream, [waited, position] { waited->wait_done(position); });
}

void* event_create(int, bool) { return new FakeEvent; }
void event_destroy(void* event) { delete static_cast<FakeEvent*>(event); }
void event_record(void* event, void* stream) {
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
float event_elapsed_ms(void*, void*) { return 0.0f; }

// The kernels, on the host, with the CPU ring's operations (local.cpp's combine and divide).
template <class T>
void comm_combine(int64_t n, T* dst, const T* src, bool max, void* stream) {
    submit(stream, [=] {
        for (int64_t i = 0; i < n; ++i)
            dst[i] = max ? (dst[i] < src[i] ? src[i] : dst[i]) : src[i] + dst[i];
    });
}
template <class T>
void comm_divide(int64_t n, T* data, int world, void* stream) {
    submit(stream, [=] {
        const T w = static_cast<T>(world);
        for (int64_t i = 0; i < n; ++i) data[i] /= w;
    });
}

template void comm_combine<float>(int64_t, float*, const float*, bool, void*);
template void comm_combine<double>(int64_t, double*, const double*, bool, void*);
template void comm_divide<float>(int64_t, float*, int, void*);
template void comm_divide<double>(int64_t, double*, int, void*);

}  // namespace paralab::kernels::gpu
