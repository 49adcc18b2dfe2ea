// The GPU communicators' shared pieces (gpu_common.h): host mailbox, host barrier.
#include "engine/comm/gpu_common.h"

#include <chrono>
#include <thread>

#include <kernels/gpu/memory.h>
#include <kernels/gpu/stream.h>

#include "engine/device/cuda_device.h"

namespace paralab::comm::gpu_detail {

namespace kg = kernels::gpu;

void HostMailbox::send(CudaDevice& device, void* stream, void* ready, int from, int to, int tag,
                       const void* data, int64_t count, DType dtype) {
    m_abort.check();
    Message message;
    message.count = count;
    message.dtype = dtype;
    message.bytes.resize(size_t(count) * dtype_size(dtype));
    if (!message.bytes.empty()) {
        device.make_current();
        wait_for_compute(device, stream, ready);
        kg::copy_device_to_host_async(message.bytes.data(), data, message.bytes.size(), stream);
        kg::stream_synchronize(stream);
    }
    {
        std::lock_guard lock(m_mutex);
        m_mail[{from, to, tag}].push_back(std::move(message));
    }
    m_cv.notify_all();
}

void HostMailbox::recv(CudaDevice& device, void* stream, void* ready, int from, int to, int tag,
                       void* data, int64_t count, DType dtype) {
    m_abort.check();
    const Key key{from, to, tag};
    Message message;
    {
        std::unique_lock lock(m_mutex);
        m_cv.wait(lock, [&] {
            if (m_abort.is_set()) return true;
            auto it = m_mail.find(key);
            return it != m_mail.end() && !it->second.empty();
        });
        m_abort.check();
        auto it = m_mail.find(key);
        const Message& front = it->second.front();
        if (front.count != count || front.dtype != dtype)
            throw Error("Communicator::recv: rank " + std::to_string(to) + " expects " +
                        std::to_string(count) + " " + std::string(dtype_name(dtype)) +
                        " from rank " + std::to_string(from) + " (tag " + std::to_string(tag) +
                        "), but the message holds " + std::to_string(front.count) + " " +
                        std::string(dtype_name(front.dtype)));
        message = std::move(it->second.front());
        it->second.pop_front();
        if (it->second.empty()) m_mail.erase(it);
    }
    if (message.bytes.empty()) return;
    device.make_current();
    // The buffer may still be read by queued compute work: overwrite it after that work.
    wait_for_compute(device, stream, ready);
    kg::copy_host_to_device_async(data, message.bytes.data(), message.bytes.size(), stream);
    kg::stream_synchronize(stream);  // the host bytes die with `message`
}

void HostMailbox::wake_all() {
    { std::lock_guard lock(m_mutex); }  // a recv between its check and its sleep wakes
    m_cv.notify_all();
}

void HostBarrier::arrive_and_wait() {
    m_abort.check();
    std::unique_lock lock(m_mutex);
    const int64_t generation = m_generation;
    if (++m_arrived == m_world) {
        m_arrived = 0;
        ++m_generation;
        m_cv.notify_all();
        return;
    }
    m_cv.wait(lock, [&] { return m_generation != generation || m_abort.is_set(); });
    if (m_generation == generation) m_abort.check();
}

void HostBarrier::wake_all() {
    { std::lock_guard lock(m_mutex); }
    m_cv.notify_all();
}

void wait_for_stream(void* stream, void* event, const detail::AbortFlag& abort) {
    kg::event_record(event, stream);
    // Spin briefly (short collectives finish in microseconds), then sleep between polls.
    for (int polls = 0; !kg::event_completed(event); ++polls) {
        abort.check();
        if (polls < 64)
            std::this_thread::yield();
        else
            std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
}

void wait_for_compute(CudaDevice& device, void* stream, void* ready) {
    kg::event_record(ready, device.compute_stream());
    kg::stream_wait_event(stream, ready);
}

}  // namespace paralab::comm::gpu_detail
