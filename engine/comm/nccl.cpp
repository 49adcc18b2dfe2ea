// NcclGroup (gpu.h): one NCCL communicator per GPU, made by ncclCommInitAll; each rank thread
// enqueues its collectives on its CudaDevice's communication stream after the compute stream's
// queued work, then waits for that stream while polling the group's abort flag, so that abort()
// frees a rank whose peer never came. Plain C++: NCCL is reached through kernels/gpu/nccl.h.
//
// Uneven shards. The interface's reduce_scatter and all_gather shard `count` by
// shard_of_dataset, whose shards differ by one row when count % world != 0, while NCCL's
// ReduceScatter and AllGather take equal shards: even counts go to those; uneven counts become
// a group (ncclGroupStart/End) of one Reduce or Broadcast per shard, rooted at its owner.
// scatter/gather are groups of ncclSend/ncclRecv between the root and every other rank;
// all_to_all is one group of an ncclSend and an ncclRecv per peer (NCCL's all-to-all pattern),
// the rank's own rows a device copy.
#include <cstdlib>
#include <chrono>
#include <set>
#include <shared_mutex>

#include <kernels/gpu/error.h>
#include <kernels/gpu/nccl.h>
#include <kernels/gpu/memory.h>
#include <kernels/gpu/stream.h>

#include "engine/comm/gpu.h"
#include "engine/comm/gpu_common.h"
#include "engine/data/loader.h"
#include "engine/device/cuda_device.h"

namespace paralab::comm {

namespace kg = kernels::gpu;
namespace nccl = kernels::gpu::nccl;
using detail::offset_of;

struct NcclGroup::State {
    std::vector<CudaDevice*> devices;
    std::vector<void*> comms;   // ncclComm_t per rank; nullptr once aborted or destroyed
    std::vector<void*> streams;  // per rank: where its NCCL work runs
    bool own_streams = false;    // streams were made for this group (split()), not the devices'
    std::vector<void*> events;   // per rank: the wait event on its stream
    std::vector<void*> ready;    // per rank: orders its stream after its compute stream
    detail::AbortFlag aborted;
    gpu_detail::HostMailbox mailbox{aborted};
    gpu_detail::HostBarrier barrier;
    // Held shared by a rank while it enqueues NCCL work, exclusive by abort() while it
    // ncclCommAbort's the communicators (and nulls `comms`).
    std::shared_timed_mutex enqueue_mutex;

    explicit State(std::vector<CudaDevice*> d)
        : devices(std::move(d)), barrier(int(devices.size()), aborted) {}
};

void abort_nccl_group(NcclGroup::State& state, const std::string& reason);

namespace {

nccl::Type nccl_type(DType dtype) {
    if (dtype == DType::f32) return nccl::Type::f32;
    if (dtype == DType::f64) return nccl::Type::f64;
    throw Error("NcclGroup: dtype must be f32 or f64, got " + std::string(dtype_name(dtype)));
}

nccl::Op nccl_op(ReduceOp op) {
    return op == ReduceOp::sum ? nccl::Op::sum : op == ReduceOp::average ? nccl::Op::average
                                                                         : nccl::Op::max;
}

// The root's own rows are copied with one device copy, which wants them in place or disjoint
// (the CPU backends memmove; a partly overlapping layout has no use a strategy needs).
void check_disjoint(const char* op, const void* a, const void* b, size_t bytes) {
    const auto* x = static_cast<const std::byte*>(a);
    const auto* y = static_cast<const std::byte*>(b);
    if (x < y + bytes && y < x + bytes)
        throw Error(std::string("Communicator::") + op +
                    ": the root's own rows in send and recv overlap without being the same "
                    "memory; the NCCL backend needs them in place or disjoint");
}

// The determinism NcclGroup promises (gpu.h) needs one algorithm for every call: Ring unless
// the user chose. Set before the first communicator is made, on the thread that makes the
// group, before its rank threads start; NCCL reads it at init.
void pin_nccl_algorithm() {
    setenv("NCCL_ALGO", "Ring", /*overwrite=*/0);
}

class NcclCommunicator final : public Communicator {
public:
    NcclCommunicator(NcclGroup::State& state, int rank)
        : Communicator(rank, int(state.devices.size())), m_state(state),
          m_device(*state.devices[size_t(rank)]) {}

    std::string backend() const override { return "nccl"; }
    void abort(const std::string& reason) override { abort_nccl_group(m_state, reason); }

protected:
    void all_reduce_impl(void* data, int64_t count, DType dtype, ReduceOp op) override {
        m_state.aborted.check();
        if (count == 0) return;  // every rank sees the same count: none calls NCCL
        run([&] { nccl::all_reduce(data, data, size_t(count), nccl_type(dtype), nccl_op(op), comm(), stream()); });
    }

    void reduce_scatter_impl(void* data, int64_t count, DType dtype, ReduceOp op) override {
        const int n = world();
        const size_t esize = dtype_size(dtype);
        auto* bytes = static_cast<std::byte*>(data);
        m_state.aborted.check();
        if (count == 0) return;
        run([&] {
            if (count % n == 0) {
                const int64_t shard = count / n;
                nccl::reduce_scatter(data, bytes + size_t(rank() * shard) * esize, size_t(shard),
                                     nccl_type(dtype), nccl_op(op), comm(), stream());
                return;
            }
            nccl::group_start();
            for (int c = 0; c < n; ++c) {
                const auto s = data::shard_of_dataset(count, c, n);
                if (s.count == 0) continue;  // count < world: the last shards are empty
                void* at = bytes + size_t(s.offset) * esize;
                nccl::reduce(at, at, size_t(s.count), nccl_type(dtype), nccl_op(op), c, comm(), stream());
            }
            nccl::group_end();
        });
    }

    void all_gather_impl(void* data, int64_t count, DType dtype) override {
        const int n = world();
        const size_t esize = dtype_size(dtype);
        auto* bytes = static_cast<std::byte*>(data);
        m_state.aborted.check();
        if (count == 0) return;
        run([&] {
            if (count % n == 0) {
                const int64_t shard = count / n;
                nccl::all_gather(bytes + size_t(rank() * shard) * esize, data, size_t(shard),
                                 nccl_type(dtype), comm(), stream());
                return;
            }
            nccl::group_start();
            for (int c = 0; c < n; ++c) {
                const auto s = data::shard_of_dataset(count, c, n);
                if (s.count == 0) continue;
                void* at = bytes + size_t(s.offset) * esize;
                nccl::broadcast(at, at, size_t(s.count), nccl_type(dtype), c, comm(), stream());
            }
            nccl::group_end();
        });
    }

    void broadcast_impl(void* data, int64_t count, DType dtype, int root) override {
        m_state.aborted.check();
        if (count == 0) return;
        run([&] { nccl::broadcast(data, data, size_t(count), nccl_type(dtype), root, comm(), stream()); });
    }

    void reduce_impl(void* data, int64_t count, DType dtype, ReduceOp op, int root) override {
        m_state.aborted.check();
        if (count == 0) return;
        run([&] {
            nccl::reduce(data, data, size_t(count), nccl_type(dtype), nccl_op(op), root, comm(), stream());
        });
    }

    void scatter_impl(const void* send, void* recv, const std::vector<int64_t>& counts, DType dtype,
                      int root) override {
        const size_t esize = dtype_size(dtype);
        run([&] {
            if (rank() == root) {
                const auto* from = static_cast<const std::byte*>(send);
                const size_t mine = size_t(counts[size_t(root)]) * esize;
                const std::byte* own = from + size_t(offset_of(counts, root)) * esize;
                if (mine > 0 && own != recv) {
                    check_disjoint("scatter", recv, own, mine);
                    kg::copy_device_to_device_async(recv, own, mine, stream());
                }
                nccl::group_start();
                for (int q = 0; q < world(); ++q)
                    if (q != root && counts[size_t(q)] > 0)
                        nccl::send(from + size_t(offset_of(counts, q)) * esize,
                                   size_t(counts[size_t(q)]), nccl_type(dtype), q, comm(), stream());
                nccl::group_end();
            } else if (counts[size_t(rank())] > 0) {
                nccl::recv(recv, size_t(counts[size_t(rank())]), nccl_type(dtype), root, comm(), stream());
            }
        });
    }

    void gather_impl(const void* send, void* recv, const std::vector<int64_t>& counts, DType dtype,
                     int root) override {
        const size_t esize = dtype_size(dtype);
        run([&] {
            if (rank() == root) {
                auto* to = static_cast<std::byte*>(recv);
                const size_t mine = size_t(counts[size_t(root)]) * esize;
                std::byte* own = to + size_t(offset_of(counts, root)) * esize;
                if (mine > 0 && own != send) {
                    check_disjoint("gather", own, send, mine);
                    kg::copy_device_to_device_async(own, send, mine, stream());
                }
                nccl::group_start();
                for (int q = 0; q < world(); ++q)
                    if (q != root && counts[size_t(q)] > 0)
                        nccl::recv(to + size_t(offset_of(counts, q)) * esize,
                                   size_t(counts[size_t(q)]), nccl_type(dtype), q, comm(), stream());
                nccl::group_end();
            } else if (counts[size_t(rank())] > 0) {
                nccl::send(send, size_t(counts[size_t(rank())]), nccl_type(dtype), root, comm(), stream());
            }
        });
    }

    void all_to_all_impl(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                         const std::vector<int64_t>& recv_counts, DType dtype) override {
        const size_t esize = dtype_size(dtype);
        const auto* from = static_cast<const std::byte*>(send);
        auto* to = static_cast<std::byte*>(recv);
        run([&] {
            const size_t mine = size_t(send_counts[size_t(rank())]) * esize;
            if (mine > 0)
                kg::copy_device_to_device_async(to + size_t(offset_of(recv_counts, rank())) * esize,
                                                from + size_t(offset_of(send_counts, rank())) * esize, mine,
                                                stream());
            nccl::group_start();
            for (int q = 0; q < world(); ++q) {
                if (q == rank()) continue;
                if (send_counts[size_t(q)] > 0)
                    nccl::send(from + size_t(offset_of(send_counts, q)) * esize, size_t(send_counts[size_t(q)]),
                               nccl_type(dtype), q, comm(), stream());
                if (recv_counts[size_t(q)] > 0)
                    nccl::recv(to + size_t(offset_of(recv_counts, q)) * esize, size_t(recv_counts[size_t(q)]),
                               nccl_type(dtype), q, comm(), stream());
            }
            nccl::group_end();
        });
    }

    void send_impl(const void* data, int64_t count, DType dtype, int peer, int tag) override {
        m_state.mailbox.send(m_device, stream(), m_state.ready[size_t(rank())], rank(), peer, tag,
                             data, count, dtype);
    }

    void recv_impl(void* data, int64_t count, DType dtype, int peer, int tag) override {
        m_state.mailbox.recv(m_device, stream(), m_state.ready[size_t(rank())], peer, rank(), tag,
                             data, count, dtype);
    }

    void barrier_impl() override { m_state.barrier.arrive_and_wait(); }

private:
    void* comm() const { return m_state.comms[size_t(rank())]; }
    void* stream() const { return m_state.streams[size_t(rank())]; }

    // Enqueues `enqueue` on the communication stream after the compute stream's queued work and
    // waits for it (the Communicator contract: the buffer holds the result on return). The
    // enqueue holds the group's lock shared, so that abort() does not free a communicator under
    // it; the wait holds nothing and polls the abort flag.
    template <class F>
    void run(F&& enqueue) {
        {
            std::shared_lock lock(m_state.enqueue_mutex);
            m_state.aborted.check();
            m_device.make_current();
            gpu_detail::wait_for_compute(m_device, stream(), m_state.ready[size_t(rank())]);
            try {
                enqueue();
            } catch (const kg::GpuError&) {
                m_state.aborted.check();  // NCCL's error after an abort is the abort
                throw;
            }
        }
        gpu_detail::wait_for_stream(stream(), m_state.events[size_t(rank())], m_state.aborted);
        std::shared_lock lock(m_state.enqueue_mutex);
        m_state.aborted.check();
        nccl::check_async_error(comm());
    }

    NcclGroup::State& m_state;
    CudaDevice& m_device;
};

// One all-reduce of one float over every communicator, from this thread in one NCCL group (as
// NCCL's single-thread, many-GPU example does): NCCL connects its rings lazily, at a
// communicator's first collective, and that connection waits for every peer. Made here, a rank's
// later collective only enqueues, and a rank whose peer never comes waits on its stream, where
// abort() reaches it, not inside NCCL. Init errors surface here too, with NCCL's words.
void connect_rings(NcclGroup::State& state) {
    std::vector<void*> scratch;
    try {
        for (CudaDevice* d : state.devices) {
            void* p = kg::device_allocate(d->ordinal(), sizeof(float));
            if (p == nullptr)
                throw Error("NcclGroup: " + d->name() + " has no memory left for a 4-byte warm-up");
            scratch.push_back(p);
            kg::set_device(d->ordinal());
            kg::fill_bytes_async(p, 0, sizeof(float), state.streams[scratch.size() - 1]);
        }
        nccl::group_start();
        for (size_t r = 0; r < state.devices.size(); ++r)
            nccl::all_reduce(scratch[r], scratch[r], 1, nccl::Type::f32, nccl::Op::sum,
                             state.comms[r], state.streams[r]);
        nccl::group_end();
        for (void* stream : state.streams) kg::stream_synchronize(stream);
    } catch (...) {
        for (size_t r = 0; r < scratch.size(); ++r) kg::device_free(state.devices[r]->ordinal(), scratch[r]);
        throw;
    }
    for (size_t r = 0; r < scratch.size(); ++r) kg::device_free(state.devices[r]->ordinal(), scratch[r]);
}

// Never throws (constructor failure paths and the destructor).
void release_streams_and_events(NcclGroup::State& state) {
    for (std::vector<void*>* list : {&state.events, &state.ready})
        for (void* e : *list) {
            try {
                kg::event_destroy(e);
            } catch (const std::exception&) {
            }
        }
    if (!state.own_streams) return;
    for (void* stream : state.streams) {
        try {
            kg::stream_synchronize(stream);
            kg::stream_destroy(stream);
        } catch (const std::exception&) {
        }
    }
}

}  // namespace

NcclGroup::NcclGroup(std::vector<CudaDevice*> devices, bool own_streams) {
    if (devices.empty()) throw ConfigError("NcclGroup: no devices");
    if (!nccl::available())
        throw ConfigError("NcclGroup: no NCCL (" + nccl::version() +
                          "); devices on distinct GPUs can use the local CUDA communicator "
                          "(CudaLocalGroup) instead");
    std::set<int> ordinals;
    std::vector<int> list;
    for (CudaDevice* d : devices) {
        if (d == nullptr) throw ConfigError("NcclGroup: a null device");
        if (!ordinals.insert(d->ordinal()).second)
            throw ConfigError("NcclGroup: cuda:" + std::to_string(d->ordinal()) +
                              " is listed twice; NCCL refuses two ranks on one GPU (use "
                              "CudaLocalGroup for virtual GPUs)");
        list.push_back(d->ordinal());
    }
    pin_nccl_algorithm();
    m_state = std::make_unique<State>(std::move(devices));
    m_state->own_streams = own_streams;
    m_state->comms = nccl::comm_init_all(list);
    try {
        for (CudaDevice* d : m_state->devices) {
            m_state->streams.push_back(own_streams ? kg::stream_create(d->ordinal(), true)
                                                   : d->comm_stream());
            m_state->events.push_back(kg::event_create(d->ordinal(), /*timing=*/false));
            m_state->ready.push_back(kg::event_create(d->ordinal(), /*timing=*/false));
        }
        connect_rings(*m_state);
    } catch (...) {
        // No destructor runs for a constructor that throws: free what was made.
        for (void* comm : m_state->comms) {
            try {
                nccl::comm_abort(comm);
            } catch (const std::exception&) {
            }
        }
        release_streams_and_events(*m_state);
        throw;
    }
    for (int r = 0; r < int(list.size()); ++r)
        m_ranks.push_back(std::make_unique<NcclCommunicator>(*m_state, r));
}

NcclGroup::~NcclGroup() {
    // Destructors do not throw: a failed destroy leaves the communicator to the process's end.
    for (size_t r = 0; r < m_state->comms.size(); ++r) {
        // After abort() the communicators are freed (ncclCommAbort), whether or not nulled.
        if (m_state->comms[r] == nullptr || m_state->aborted.is_set()) continue;
        try {
            nccl::comm_destroy(m_state->comms[r]);
        } catch (const std::exception&) {
        }
    }
    release_streams_and_events(*m_state);
}

int NcclGroup::world() const {
    return int(m_state->devices.size());
}

Communicator& NcclGroup::rank(int r) {
    return rank_of(m_ranks, r, "NcclGroup");
}

// The flag first, so that every waiting rank throws CommAborted at its next poll; then
// ncclCommAbort ends the kernels of collectives whose peers never came and frees the
// communicators. A rank inside an NCCL call holds enqueue_mutex shared; a call that blocks (a
// first send/recv connecting to a peer that never comes) would hold it forever, so after a
// second the communicators are aborted anyway: ncclCommAbort from another thread is how NCCL
// releases such a call (PyTorch's watchdog does the same), and the call then fails and its rank
// throws CommAborted.
void abort_nccl_group(NcclGroup::State& state, const std::string& reason) {
    if (!state.aborted.set(reason)) return;
    state.mailbox.wake_all();
    state.barrier.wake_all();
    std::unique_lock lock(state.enqueue_mutex, std::defer_lock);
    const bool exclusive = lock.try_lock_for(std::chrono::seconds(1));
    for (void*& comm : state.comms) {
        if (comm == nullptr) continue;
        try {
            nccl::comm_abort(comm);
        } catch (const std::exception&) {
            // Already failing: the flag is set, and every rank throws CommAborted.
        }
        if (exclusive) comm = nullptr;  // else a rank inside a call may still read it
    }
}

void NcclGroup::abort(const std::string& reason) {
    abort_nccl_group(*m_state, reason);
}

std::unique_ptr<Group> NcclGroup::split() {
    m_state->aborted.check();
    return std::make_unique<NcclGroup>(m_state->devices, /*own_streams=*/true);
}

}  // namespace paralab::comm
