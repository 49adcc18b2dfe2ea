// MpiDeviceGroup (mpi.h): the devices of every process of an MPI job as one group, built on
// LocalGroup (the devices of this process), MpiGroup's communicators (one process-level
// communicator that only this process's first device uses) and an MpiChannel (point-to-point
// between devices of different processes). Uses no MPI type, so the same code serves a build
// without MPI (where MpiGroup::world() says why it cannot be had).
#include <algorithm>
#include <cstring>
#include <numeric>

#include "engine/comm/mpi.h"
#include "engine/comm/peer_protocol.h"
#include "engine/data/loader.h"
#include "engine/tensor/dtype.h"

namespace paralab::comm {

struct MpiDeviceGroup::State {
    std::vector<int> counts;  // devices per process
    std::vector<int> first;   // global rank of each process's first device
    int process = 0;          // this process
    LocalGroup local;
    std::unique_ptr<Communicator> leaders;  // process-level; used by local rank 0 only
    MpiChannel channel;
    int max_local = 1;

    State(std::vector<int> c, int me)
        : counts(std::move(c)), process(me), local(counts.at(size_t(me))),
          leaders(MpiGroup::world().split_communicator()) {
        int at = 0;
        for (int n : counts) {
            if (n < 1) throw Error("MpiDeviceGroup: every process needs at least one device");
            first.push_back(at);
            at += n;
        }
        max_local = *std::max_element(counts.begin(), counts.end());
    }
    int world() const { return first.back() + counts.back(); }
    int process_of(int g) const {
        return int(std::upper_bound(first.begin(), first.end(), g) - first.begin()) - 1;
    }
    int local_of(int g) const { return g - first[size_t(process_of(g))]; }
    // One MPI tag per (user tag, sending device, receiving device): messages of different
    // pairs of devices between two processes never match each other's receives.
    int channel_tag(int tag, int from_local, int to_local) const {
        const int64_t t = (int64_t(tag) * max_local + from_local) * max_local + to_local;
        if (t > channel.tag_ub())
            throw Error("Communicator::send: tag " + std::to_string(tag) + " with " + std::to_string(max_local) +
                        " devices per process exceeds MPI's tag range (0.." + std::to_string(channel.tag_ub()) + ")");
        return int(t);
    }
};

namespace {

class DeviceCommunicator final : public Communicator {
public:
    DeviceCommunicator(MpiDeviceGroup::State& s, int global, int local)
        : Communicator(global, s.world()), m_s(s), m_local(local) {}

    std::string backend() const override { return "mpi"; }

    void abort(const std::string& reason) override {
        m_s.local.abort(reason);
        m_s.leaders->abort(reason);  // MPI_Abort: the job ends as a whole (mpi.h)
    }

protected:
    // In process to the first device, across processes between first devices, back in process.
    void all_reduce_impl(void* data, int64_t count, DType dtype, ReduceOp op) override {
        Communicator& local = m_s.local.rank(m_local);
        const ReduceOp partial = op == ReduceOp::max ? ReduceOp::max : ReduceOp::sum;
        local.reduce(data, count, dtype, partial, 0);
        if (m_local == 0) m_s.leaders->all_reduce(data, count, dtype, partial);
        local.broadcast(data, count, dtype, 0);
        if (op == ReduceOp::average) {
            dispatch_float(dtype, [&]<class T>() {
                T* x = static_cast<T*>(data);
                const T w = static_cast<T>(world());
                for (int64_t i = 0; i < count; ++i) x[i] /= w;
            });
        }
    }

    void reduce_scatter_impl(void* data, int64_t count, DType dtype, ReduceOp op) override {
        all_reduce_impl(data, count, dtype, op);  // every shard reduced; this rank's is in place
    }

    void all_gather_impl(void* data, int64_t count, DType dtype) override {
        const auto mine = data::shard_of_dataset(count, rank(), world());
        zero_except(data, count, dtype, mine.offset, mine.count);
        all_reduce_impl(data, count, dtype, ReduceOp::sum);  // x + 0 + ... + 0 = x, exactly
    }

    void broadcast_impl(void* data, int64_t count, DType dtype, int root) override {
        if (rank() != root) zero_except(data, count, dtype, 0, 0);
        all_reduce_impl(data, count, dtype, ReduceOp::sum);
    }

    void reduce_impl(void* data, int64_t count, DType dtype, ReduceOp op, int root) override {
        (void)root;  // every rank ends with the reduction; only root's is specified
        all_reduce_impl(data, count, dtype, op);
    }

    void scatter_impl(const void* send, void* recv, const std::vector<int64_t>& counts, DType dtype,
                      int root) override {
        const size_t es = dtype_size(dtype);
        if (rank() == root) {
            int64_t at = 0;
            for (int q = 0; q < world(); ++q) {
                const auto* from = static_cast<const std::byte*>(send) + size_t(at) * es;
                if (q == root) {
                    if (counts[size_t(q)] > 0 && recv != from) std::memmove(recv, from, size_t(counts[size_t(q)]) * es);
                } else {
                    send_impl(from, counts[size_t(q)], dtype, q, kScatterTag);
                }
                at += counts[size_t(q)];
            }
        } else {
            recv_impl(recv, counts[size_t(rank())], dtype, root, kScatterTag);
        }
    }

    void gather_impl(const void* send, void* recv, const std::vector<int64_t>& counts, DType dtype,
                     int root) override {
        const size_t es = dtype_size(dtype);
        if (rank() == root) {
            int64_t at = 0;
            for (int q = 0; q < world(); ++q) {
                auto* to = static_cast<std::byte*>(recv) + size_t(at) * es;
                if (q == root) {
                    if (counts[size_t(q)] > 0 && send != to) std::memmove(to, send, size_t(counts[size_t(q)]) * es);
                } else {
                    recv_impl(to, counts[size_t(q)], dtype, q, kGatherTag);
                }
                at += counts[size_t(q)];
            }
        } else {
            send_impl(send, counts[size_t(rank())], dtype, root, kGatherTag);
        }
    }

    // Eager sends to every other rank, then the receives in rank order; its own rows copied.
    void all_to_all_impl(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                         const std::vector<int64_t>& recv_counts, DType dtype) override {
        const size_t es = dtype_size(dtype);
        int64_t from = 0;
        for (int q = 0; q < world(); ++q) {
            const int64_t n = send_counts[size_t(q)];
            const auto* rows = static_cast<const std::byte*>(send) + size_t(from) * es;
            if (q == rank()) {
                if (n > 0) std::memcpy(static_cast<std::byte*>(recv) + size_t(detail::offset_of(recv_counts, q)) * es, rows, size_t(n) * es);
            } else if (n > 0) {
                send_impl(rows, n, dtype, q, kAllToAllTag);
            }
            from += n;
        }
        int64_t to = 0;
        for (int q = 0; q < world(); ++q) {
            const int64_t n = recv_counts[size_t(q)];
            if (q != rank() && n > 0)
                recv_impl(static_cast<std::byte*>(recv) + size_t(to) * es, n, dtype, q, kAllToAllTag);
            to += n;
        }
    }

    void send_impl(const void* data, int64_t count, DType dtype, int peer, int tag) override {
        const int p = m_s.process_of(peer);
        if (p == m_s.process)
            m_s.local.rank(m_local).send(data, count, dtype, m_s.local_of(peer), tag);
        else
            m_s.channel.send(p, m_s.channel_tag(tag, m_local, m_s.local_of(peer)), data, size_t(count) * dtype_size(dtype));
    }

    void recv_impl(void* data, int64_t count, DType dtype, int peer, int tag) override {
        const int p = m_s.process_of(peer);
        if (p == m_s.process)
            m_s.local.rank(m_local).recv(data, count, dtype, m_s.local_of(peer), tag);
        else
            m_s.channel.recv(p, m_s.channel_tag(tag, m_s.local_of(peer), m_local), data, size_t(count) * dtype_size(dtype));
    }

    void barrier_impl() override {
        double x = 0;
        all_reduce_impl(&x, 1, DType::f64, ReduceOp::sum);
    }

private:
    // Tags of scatter, gather and all_to_all's messages: above any a strategy uses
    // (communicator.h's tags are the caller's; these are this backend's own, on the same channel).
    static constexpr int kScatterTag = 32000, kGatherTag = 32001, kAllToAllTag = 32002;

    static void zero_except(void* data, int64_t count, DType dtype, int64_t keep_at, int64_t keep) {
        auto* bytes = static_cast<std::byte*>(data);
        const size_t es = dtype_size(dtype);
        std::memset(bytes, 0, size_t(keep_at) * es);
        std::memset(bytes + size_t(keep_at + keep) * es, 0, size_t(count - keep_at - keep) * es);
    }

    MpiDeviceGroup::State& m_s;
    int m_local;
};

}  // namespace

MpiDeviceGroup::MpiDeviceGroup(std::vector<int> devices_per_process) {
    MpiGroup& mpi = MpiGroup::world();
    if (int(devices_per_process.size()) != mpi.size())
        throw Error("MpiDeviceGroup: " + std::to_string(devices_per_process.size()) + " device counts for " +
                    std::to_string(mpi.size()) + " processes");
    m_state = std::make_unique<State>(std::move(devices_per_process), mpi.rank());
    const int n = m_state->counts[size_t(m_state->process)];
    for (int l = 0; l < n; ++l)
        m_ranks.push_back(std::make_unique<DeviceCommunicator>(*m_state, m_state->first[size_t(m_state->process)] + l, l));
}

MpiDeviceGroup::~MpiDeviceGroup() {
    m_ranks.clear();
}

int MpiDeviceGroup::world() const { return m_state->world(); }

bool MpiDeviceGroup::is_local(int r) const {
    return r >= 0 && r < world() && m_state->process_of(r) == m_state->process;
}

Communicator& MpiDeviceGroup::rank(int r) {
    if (!is_local(r))
        throw Error("MpiDeviceGroup::rank: rank " + std::to_string(r) + " is a device of another process");
    return *m_ranks[size_t(m_state->local_of(r))];
}

void MpiDeviceGroup::abort(const std::string& reason) {
    m_state->local.abort(reason);
    m_state->leaders->abort(reason);
}

std::unique_ptr<Group> MpiDeviceGroup::split() {
    return std::make_unique<MpiDeviceGroup>(m_state->counts);
}

}  // namespace paralab::comm
