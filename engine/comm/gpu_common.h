// What the two GPU communicators (nccl.cpp, cuda_local.cpp) share, private to engine/comm: the
// host mailbox behind send/recv and the host barrier (the abort flag is peer_protocol.h's).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/comm/peer_protocol.h"

namespace paralab {
class CudaDevice;
}

namespace paralab::comm::gpu_detail {

// Eager point-to-point messages through host memory: send copies the device buffer out (on the
// sender's communication stream, after its compute stream's work) and returns; recv waits for
// the oldest message of (peer, tag) and copies it into the device buffer. Messages between one
// pair with one tag arrive in order.
class HostMailbox {
public:
    explicit HostMailbox(const detail::AbortFlag& abort) : m_abort(abort) {}

    // stream: the rank's communication stream; ready: an ordering event of the rank's.
    void send(CudaDevice& device, void* stream, void* ready, int from, int to, int tag,
              const void* data, int64_t count, DType dtype);
    void recv(CudaDevice& device, void* stream, void* ready, int from, int to, int tag, void* data,
              int64_t count, DType dtype);
    // Wakes every waiting recv (which then throws CommAborted).
    void wake_all();

private:
    struct Message {
        int64_t count = 0;
        DType dtype = DType::f32;
        std::vector<std::byte> bytes;
    };
    using Key = std::tuple<int, int, int>;  // (from, to, tag)

    const detail::AbortFlag& m_abort;
    std::mutex m_mutex;
    std::condition_variable m_cv;              // a message arrived, or abort
    std::map<Key, std::deque<Message>> m_mail;  // guarded by m_mutex
};

// A reusable barrier of `world` threads that abort() wakes.
class HostBarrier {
public:
    HostBarrier(int world, const detail::AbortFlag& abort) : m_world(world), m_abort(abort) {}
    void arrive_and_wait();
    void wake_all();

private:
    const int m_world;
    const detail::AbortFlag& m_abort;
    std::mutex m_mutex;
    std::condition_variable m_cv;
    int m_arrived = 0;         // guarded by m_mutex
    int64_t m_generation = 0;  // guarded by m_mutex
};

// Records `event` on `stream` and waits until the stream has passed it, polling `abort`: a
// stream stuck in a collective whose peers never came (NCCL) does not hold the thread once the
// group is aborted. Throws CommAborted then.
void wait_for_stream(void* stream, void* event, const detail::AbortFlag& abort);

// Work queued on `stream` from now on waits for `device`'s compute stream's queued work (the
// buffers are ready), through `ready`, an ordering event that only this rank records.
void wait_for_compute(CudaDevice& device, void* stream, void* ready);

}  // namespace paralab::comm::gpu_detail
