// CudaLocalGroup (gpu.h): the local backend's protocol (engine/comm/local.cpp, whose opening
// comment explains the ring, the progress counters and why a published pointer stays valid) on
// device buffers. Each rank thread enqueues its steps on its CudaDevice's communication stream;
// ranks order each other on the host through the same progress counters, and on the GPU through
// one CUDA event per tick: a rank records event[t] on its stream right after the work of its
// tick t, and every host wait "peer has made tick t" is followed by a stream wait on the peer's
// event[t]. So the GPU's order mirrors the host's, and the CPU ring's argument (a chunk is
// overwritten only after its reader is done) holds for the kernels too.
//
// Summation order: that of local.cpp for every element (chunk c of an all-reduce is summed in
// rank order c, c+1, ..., c+N-1; reduce in rank order 0..N-1; average divides the finished sum),
// with one IEEE operation per element (kernels/gpu/comm_reduce.h): the result equals the CPU
// ranks' bit for bit for the same inputs.
//
// Virtual GPUs on one card read each other's buffers directly; a peer on another GPU is first
// copied into a staging buffer on this rank's GPU (a peer copy, through the host where peer
// access is off), then reduced.
//
// The counters, the host waits, abort and the ring's schedule are peer_protocol.h's.
//
// An event re-recorded by a peer's next call before this rank waits on it only makes this rank
// wait for more of the peer's queued work, never for work not yet queued: no deadlock, and the
// order still holds. Every call ends by synchronising the rank's communication stream.
#include <algorithm>
#include <cstring>

#include <kernels/gpu/comm_reduce.h>
#include <kernels/gpu/memory.h>
#include <kernels/gpu/stream.h>

#include "engine/comm/gpu.h"
#include "engine/comm/gpu_common.h"
#include "engine/comm/peer_protocol.h"
#include "engine/data/loader.h"
#include "engine/device/cuda_device.h"

namespace paralab::comm {

namespace kg = kernels::gpu;
using detail::offset_of;

namespace {

bool overlaps(const void* a, const void* b, size_t bytes) {
    const auto* x = static_cast<const std::byte*>(a);
    const auto* y = static_cast<const std::byte*>(b);
    return x < y + bytes && y < x + bytes;
}

// A device buffer on one GPU that grows on demand (device_free synchronises the device: rare).
class DeviceScratch {
public:
    explicit DeviceScratch(int ordinal) : m_ordinal(ordinal) {}
    ~DeviceScratch() {
        try {
            kg::device_free(m_ordinal, m_ptr);
        } catch (const std::exception&) {
        }
    }
    DeviceScratch(const DeviceScratch&) = delete;
    DeviceScratch& operator=(const DeviceScratch&) = delete;

    void* get(size_t bytes) {
        if (bytes <= m_bytes) return m_ptr;
        kg::device_free(m_ordinal, m_ptr);
        m_ptr = nullptr;
        m_bytes = 0;
        m_ptr = kg::device_allocate(m_ordinal, bytes);
        if (m_ptr == nullptr)
            throw Error("CudaLocalGroup: cuda:" + std::to_string(m_ordinal) + " has not " +
                        std::to_string(bytes) + " bytes free for the communicator's scratch");
        m_bytes = bytes;
        return m_ptr;
    }

private:
    int m_ordinal;
    void* m_ptr = nullptr;
    size_t m_bytes = 0;
};

}  // namespace

struct CudaLocalGroup::State {
    explicit State(std::vector<CudaDevice*> d)
        : world(int(d.size())), devices(std::move(d)), board(world), events(size_t(world)) {
        // A call ticks at most 1 + 2(N-1) times (all_reduce); one more event per rank orders
        // its communication stream after its compute stream.
        for (int r = 0; r < world; ++r)
            for (int t = 0; t < 2 * world + 1; ++t)
                events[size_t(r)].push_back(kg::event_create(devices[size_t(r)]->ordinal(), false));
    }
    void* ready_event(int r) { return events[size_t(r)].back(); }
    ~State() {
        for (auto& per_rank : events)
            for (void* e : per_rank) {
                try {
                    kg::event_destroy(e);
                } catch (const std::exception&) {
                }
            }
    }

    void abort(const std::string& reason) {
        if (!board.abort(reason)) return;
        mailbox.wake_all();
    }
    const detail::AbortFlag& aborted() const { return board.aborted(); }

    const int world;
    const std::vector<CudaDevice*> devices;
    detail::PeerBoard board;
    // [rank][call tick - 1], then the rank's ready event; recorded by that rank only.
    std::vector<std::vector<void*>> events;
    gpu_detail::HostMailbox mailbox{board.aborted()};
};

namespace {

class CudaLocalCommunicator final : public Communicator {
public:
    CudaLocalCommunicator(CudaLocalGroup::State& state, int rank)
        : Communicator(rank, state.world), m_state(state), m_cursor(state.board, rank),
          m_device(*state.devices[size_t(rank)]), m_stage(m_device.ordinal()),
          m_partial(m_device.ordinal()) {}

    std::string backend() const override { return "cuda_local"; }
    void abort(const std::string& reason) override { m_state.abort(reason); }

protected:
    void all_reduce_impl(void* data, int64_t count, DType dtype, ReduceOp op) override {
        m_state.aborted().check();
        const int n = world();
        if (n == 1 || count == 0) return;
        dispatch_float(dtype, [&]<class T>() {
            T* own = static_cast<T*>(data);
            const T* prev = static_cast<const T*>(enter_and_read(own, prev_rank()));
            ring_reduce_scatter(own, prev, count, op, 0);
            ring_all_gather(own, prev, count, n - 1, 0);
            wait_for(next_rank(), 1 + 2 * (n - 1));  // r+1 reads our buffer until its last step
            finish();
        });
    }

    void reduce_scatter_impl(void* data, int64_t count, DType dtype, ReduceOp op) override {
        m_state.aborted().check();
        const int n = world();
        if (n == 1 || count == 0) return;
        dispatch_float(dtype, [&]<class T>() {
            T* own = static_cast<T*>(data);
            const T* prev = static_cast<const T*>(enter_and_read(own, prev_rank()));
            ring_reduce_scatter(own, prev, count, op, 1);
            wait_for(next_rank(), 1 + (n - 1));
            finish();
        });
    }

    void all_gather_impl(void* data, int64_t count, DType dtype) override {
        m_state.aborted().check();
        const int n = world();
        if (n == 1 || count == 0) return;
        dispatch_float(dtype, [&]<class T>() {
            T* own = static_cast<T*>(data);
            const T* prev = static_cast<const T*>(enter_and_read(own, prev_rank()));
            ring_all_gather(own, prev, count, 0, 1);
            wait_for(next_rank(), 1 + (n - 1));
            finish();
        });
    }

    // Non-roots copy from the root's buffer; the root returns once all have copied.
    void broadcast_impl(void* data, int64_t count, DType dtype, int root) override {
        m_state.aborted().check();
        if (world() == 1 || count == 0) return;
        const size_t bytes = size_t(count) * dtype_size(dtype);
        if (rank() == root) {
            enter(data);
            tick();
            for (int q = 0; q < world(); ++q)
                if (q != root) wait_for(q, 2);
        } else {
            const void* src = enter_and_read(data, root);
            kg::copy_device_to_device_async(data, src, bytes, stream());
            tick();
        }
        finish();
    }

    // The root reduces every rank's buffer in rank order 0..N-1 into a scratch buffer (its own
    // buffer is one of the inputs), then copies the result into its buffer.
    void reduce_impl(void* data, int64_t count, DType dtype, ReduceOp op, int root) override {
        m_state.aborted().check();
        if (world() == 1 || count == 0) return;
        enter(data);
        if (rank() != root) {
            tick();
            wait_for(root, 2);
            finish();
            return;
        }
        dispatch_float(dtype, [&]<class T>() {
            const size_t bytes = size_t(count) * sizeof(T);
            T* partial = static_cast<T*>(m_partial.get(bytes));
            kg::copy_device_to_device_async(partial, read_buffer(0), bytes, stream());
            for (int q = 1; q < world(); ++q) {
                const T* src = local_copy(q, static_cast<const T*>(read_buffer(q)), count);
                kg::comm_combine<T>(count, partial, src, op == ReduceOp::max, stream());
            }
            if (op == ReduceOp::average) kg::comm_divide<T>(count, partial, world(), stream());
            kg::copy_device_to_device_async(data, partial, bytes, stream());
        });
        tick();
        finish();
    }

    void scatter_impl(const void* send, void* recv, const std::vector<int64_t>& counts, DType dtype,
                      int root) override {
        m_state.aborted().check();
        const size_t esize = dtype_size(dtype);
        const size_t mine = size_t(counts[size_t(rank())]) * esize;
        const size_t offset = size_t(offset_of(counts, rank())) * esize;
        if (rank() == root) {
            m_device.make_current();
            gpu_detail::wait_for_compute(m_device, stream(), m_state.ready_event(rank()));
            move_bytes(recv, static_cast<const std::byte*>(send) + offset, mine);
            if (world() == 1) {
                kg::stream_synchronize(stream());
                return;
            }
            enter(send);
            tick();
            for (int q = 0; q < world(); ++q)
                if (q != root) wait_for(q, 2);
        } else {
            const void* src = enter_and_read(nullptr, root);
            if (mine > 0)
                kg::copy_device_to_device_async(recv, static_cast<const std::byte*>(src) + offset,
                                                mine, stream());
            tick();
        }
        finish();
    }

    void gather_impl(const void* send, void* recv, const std::vector<int64_t>& counts, DType dtype,
                     int root) override {
        m_state.aborted().check();
        const size_t esize = dtype_size(dtype);
        if (rank() != root) {
            if (world() == 1) return;
            enter(send);
            tick();
            wait_for(root, 2);
            finish();
            return;
        }
        enter(send);
        for (int q = 0; q < world(); ++q) {
            const size_t bytes = size_t(counts[size_t(q)]) * esize;
            std::byte* dst = static_cast<std::byte*>(recv) + size_t(offset_of(counts, q)) * esize;
            if (q == rank())
                move_bytes(dst, send, bytes);
            else if (bytes > 0)
                kg::copy_device_to_device_async(dst, read_buffer(q), bytes, stream());
        }
        tick();
        finish();
    }

    // local.cpp's all-to-all: every rank publishes its send buffer and counts, copies from each
    // peer in rank order the rows laid out for it (a device copy, peer to peer), ticks, and
    // returns once every peer has ticked (is done reading its buffer).
    void all_to_all_impl(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                         const std::vector<int64_t>& recv_counts, DType dtype) override {
        m_state.aborted().check();
        const size_t esize = dtype_size(dtype);
        const int me = rank();
        const auto mismatch = [&](int q, int64_t n) {
            const std::string reason = "Communicator::all_to_all: rank " + std::to_string(q) + " sends " +
                                       std::to_string(n) + " elements to rank " + std::to_string(me) +
                                       ", which expects " + std::to_string(recv_counts[size_t(q)]);
            if (world() > 1) m_state.abort(reason);  // no peer waits for this rank's tick
            throw Error(reason);
        };
        if (send_counts[size_t(me)] != recv_counts[size_t(me)]) mismatch(me, send_counts[size_t(me)]);
        auto* to = static_cast<std::byte*>(recv);
        const Outgoing mine{send, send_counts.data()};
        enter(&mine);
        for (int q = 0; q < world(); ++q) {
            const auto* theirs = q == me ? &mine : static_cast<const Outgoing*>(read_buffer(q));
            const int64_t n = theirs->counts[me];
            if (n != recv_counts[size_t(q)]) mismatch(q, n);
            if (n > 0)
                kg::copy_device_to_device_async(to + size_t(offset_of(recv_counts, q)) * esize,
                                                static_cast<const std::byte*>(theirs->send) +
                                                    size_t(offset_of(theirs->counts, me)) * esize,
                                                size_t(n) * esize, stream());
        }
        tick();
        for (int q = 0; q < world(); ++q)
            if (q != me) wait_for(q, 2);
        finish();
    }

    void send_impl(const void* data, int64_t count, DType dtype, int peer, int tag) override {
        m_state.mailbox.send(m_device, stream(), m_state.ready_event(rank()), rank(), peer, tag,
                             data, count, dtype);
    }

    void recv_impl(void* data, int64_t count, DType dtype, int peer, int tag) override {
        m_state.mailbox.recv(m_device, stream(), m_state.ready_event(rank()), peer, rank(), tag,
                             data, count, dtype);
    }

    // Host-side only: every rank has entered (the GPU streams are not involved).
    void barrier_impl() override {
        m_state.aborted().check();
        if (world() == 1) return;
        enter(nullptr);
        for (int q = 0; q < world(); ++q)
            if (q != rank()) m_cursor.wait(q, 1);
    }

private:
    // What an all-to-all publishes: the send buffer and its per-rank counts, valid until every
    // peer has read them.
    struct Outgoing {
        const void* send;
        const int64_t* counts;
    };

    int prev_rank() const { return m_cursor.prev(); }
    int next_rank() const { return m_cursor.next(); }
    void* stream() const { return m_device.comm_stream(); }
    bool same_gpu(int peer) const { return m_state.devices[size_t(peer)]->ordinal() == m_device.ordinal(); }

    // Starts a call: this thread's GPU current, the communication stream after the compute
    // stream's queued work (the buffer is ready), `buffer` published, then tick 1 ("entered").
    void enter(const void* buffer) {
        m_cursor.begin_call();
        m_device.make_current();
        gpu_detail::wait_for_compute(m_device, stream(), m_state.ready_event(rank()));
        m_cursor.publish(buffer);
        tick();
    }

    // Marks the end of this call's tick on the stream, then on the host.
    void tick() {
        const int64_t call_tick = m_cursor.next_call_tick();
        kg::event_record(m_state.events[size_t(rank())][size_t(call_tick - 1)], stream());
        m_cursor.tick();
    }

    // Waits on the host until `peer` has made tick `call_tick` of this call (CommAborted once the
    // group is aborted); then this rank's stream waits for the peer's work of that tick.
    void wait_for(int peer, int64_t call_tick) {
        m_cursor.wait(peer, call_tick);
        kg::stream_wait_event(stream(), m_state.events[size_t(peer)][size_t(call_tick - 1)]);
    }

    const void* read_buffer(int peer) {
        wait_for(peer, 1);
        return m_cursor.published(peer);
    }

    const void* enter_and_read(const void* own, int peer) {
        enter(own);
        return read_buffer(peer);
    }

    // n elements at `src` of `peer`'s GPU, readable by a kernel on this rank's GPU: src itself
    // on the same GPU, a staged copy otherwise.
    template <class T>
    const T* local_copy(int peer, const T* src, int64_t n) {
        if (same_gpu(peer) || n == 0) return src;
        T* stage = static_cast<T*>(m_stage.get(size_t(n) * sizeof(T)));
        kg::copy_device_to_device_async(stage, src, size_t(n) * sizeof(T), stream());
        return stage;
    }

    // memmove on this rank's stream (cudaMemcpy wants disjoint ranges).
    void move_bytes(void* dst, const void* src, size_t bytes) {
        if (bytes == 0 || dst == src) return;
        if (!overlaps(dst, src, bytes)) {
            kg::copy_device_to_device_async(dst, src, bytes, stream());
            return;
        }
        void* tmp = m_partial.get(bytes);
        kg::copy_device_to_device_async(tmp, src, bytes, stream());
        kg::copy_device_to_device_async(dst, tmp, bytes, stream());
    }

    // The call's work is done on the GPU before return (communicator.h's contract).
    void finish() { kg::stream_synchronize(stream()); }

    // Steps 0..N-2 of a ring call; rank r ends with the reduction of chunk (r+1-shift).
    template <class T>
    void ring_reduce_scatter(T* own, const T* prev, int64_t count, ReduceOp op, int shift) {
        const int n = world();
        for (int k = 0; k <= n - 2; ++k) {
            wait_for(prev_rank(), 1 + k);
            const auto chunk = data::shard_of_dataset(count, m_cursor.reduced_chunk(k, shift), n);
            const T* src = local_copy(prev_rank(), prev + chunk.offset, chunk.count);
            kg::comm_combine<T>(chunk.count, own + chunk.offset, src, op == ReduceOp::max, stream());
            if (k == n - 2 && op == ReduceOp::average)
                kg::comm_divide<T>(chunk.count, own + chunk.offset, n, stream());
            tick();
        }
    }

    // Steps first_step .. first_step + N-2: rank r copies chunk (r-k-shift) of rank r-1.
    template <class T>
    void ring_all_gather(T* own, const T* prev, int64_t count, int first_step, int shift) {
        const int n = world();
        for (int k = 0; k <= n - 2; ++k) {
            wait_for(prev_rank(), 1 + first_step + k);
            const auto chunk = data::shard_of_dataset(count, m_cursor.gathered_chunk(k, shift), n);
            if (chunk.count > 0)
                kg::copy_device_to_device_async(own + chunk.offset, prev + chunk.offset,
                                                size_t(chunk.count) * sizeof(T), stream());
            tick();
        }
    }

    CudaLocalGroup::State& m_state;
    detail::PeerCursor m_cursor;
    CudaDevice& m_device;
    DeviceScratch m_stage;    // a peer GPU's chunk, copied here before it is reduced
    DeviceScratch m_partial;  // reduce's running result; overlapping moves
};

}  // namespace

CudaLocalGroup::CudaLocalGroup(std::vector<CudaDevice*> devices) : m_devices(devices) {
    if (devices.empty()) throw ConfigError("CudaLocalGroup: no devices");
    for (CudaDevice* d : devices)
        if (d == nullptr) throw ConfigError("CudaLocalGroup: a null device");
    m_state = std::make_unique<State>(std::move(devices));
    for (int r = 0; r < m_state->world; ++r)
        m_ranks.push_back(std::make_unique<CudaLocalCommunicator>(*m_state, r));
}

CudaLocalGroup::~CudaLocalGroup() {
    m_ranks.clear();  // their scratch buffers before the events
}

int CudaLocalGroup::world() const {
    return m_state->world;
}

Communicator& CudaLocalGroup::rank(int r) {
    return rank_of(m_ranks, r, "CudaLocalGroup");
}

void CudaLocalGroup::abort(const std::string& reason) {
    m_state->abort(reason);
}

// Same devices, so the same communication streams: the two groups' calls are ordered on each
// stream in the order their threads enqueue them, which costs overlap, never correctness.
std::unique_ptr<Group> CudaLocalGroup::split() {
    return std::make_unique<CudaLocalGroup>(m_devices);
}

}  // namespace paralab::comm
