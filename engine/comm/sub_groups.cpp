#include "engine/comm/sub_groups.h"

#include <algorithm>
#include <cstring>

#include "engine/comm/gpu.h"
#include "engine/comm/peer_protocol.h"
#include "engine/data/loader.h"
#include "engine/device/cuda_device.h"
#include "engine/device/device.h"

namespace paralab::comm {

namespace {

// A LocalGroup for cpu members, a CudaLocalGroup for cuda ones. Not NCCL even on distinct GPUs:
// NCCL communicators that share a stream deadlock when their ranks enqueue in different orders
// (NcclGroup::split), and a mesh's tensor- and data-parallel groups interleave on every device.
std::unique_ptr<Group> group_of_members(const std::vector<Device*>& devices, const std::vector<int>& members) {
    std::vector<CudaDevice*> gpus;
    for (int r : members) {
        auto* gpu = dynamic_cast<CudaDevice*>(devices[static_cast<size_t>(r)]);
        if (gpu) gpus.push_back(gpu);
    }
    if (gpus.empty()) return std::make_unique<LocalGroup>(static_cast<int>(members.size()));
    if (gpus.size() != members.size())
        throw Error("SubGroups: a sub-group mixes cpu and cuda devices, which no communicator serves");
    return std::make_unique<CudaLocalGroup>(gpus);
}

// Member `me` of a sub-group whose collectives are messages of the world's communicator of its
// world rank (sub_groups.h). Every call of a member sends its messages in the order the others
// receive them, on one tag: messages between one pair with one tag arrive in order.
class MessageCommunicator final : public detail::RingCommunicator {
public:
    MessageCommunicator(Group& world, const std::vector<int>& members, int me, int tag)
        : RingCommunicator(me, static_cast<int>(members.size())), m_world(world), m_members(members), m_tag(tag) {}

    std::string backend() const override { return "messages"; }
    // The sub-group's members wait in the world's calls: aborting the world wakes them.
    void abort(const std::string& reason) override { m_world.abort(reason); }

protected:
    void broadcast_impl(void* data, int64_t count, DType dtype, int root) override {
        if (world() == 1 || count == 0) return;
        if (rank() != root) return take(root, data, count, dtype);
        for (int q = 0; q < world(); ++q)
            if (q != root) put(q, data, count, dtype);
    }

    // The root sums every member's buffer in rank order 0..N-1, as the local backend does.
    void reduce_impl(void* data, int64_t count, DType dtype, ReduceOp op, int root) override {
        if (world() == 1 || count == 0) return;
        if (rank() != root) return put(root, data, count, dtype);
        dispatch_float(dtype, [&]<class T>() {
            std::vector<T> partial(static_cast<size_t>(count)), other;
            if (root == 0) std::memcpy(partial.data(), data, static_cast<size_t>(count) * sizeof(T));
            else take(0, partial.data(), count, dtype);
            for (int q = 1; q < world(); ++q) {
                const T* src = static_cast<const T*>(data);
                if (q != root) {
                    other.resize(static_cast<size_t>(count));
                    take(q, other.data(), count, dtype);
                    src = other.data();
                }
                detail::combine(partial.data(), src, count, op);
            }
            if (op == ReduceOp::average) detail::divide(partial.data(), count, world());
            std::memcpy(data, partial.data(), static_cast<size_t>(count) * sizeof(T));
        });
    }

    void scatter_impl(const void* send, void* recv, const std::vector<int64_t>& counts, DType dtype,
                      int root) override {
        const size_t esize = dtype_size(dtype);
        if (rank() != root) return take(root, recv, counts[static_cast<size_t>(rank())], dtype);
        for (int q = 0; q < world(); ++q) {
            const auto* at = static_cast<const std::byte*>(send) + static_cast<size_t>(detail::offset_of(counts, q)) * esize;
            const int64_t n = counts[static_cast<size_t>(q)];
            if (q != root) put(q, at, n, dtype);
            else if (n > 0 && recv != at) std::memmove(recv, at, static_cast<size_t>(n) * esize);
        }
    }

    void gather_impl(const void* send, void* recv, const std::vector<int64_t>& counts, DType dtype,
                     int root) override {
        const size_t esize = dtype_size(dtype);
        if (rank() != root) return put(root, send, counts[static_cast<size_t>(rank())], dtype);
        for (int q = 0; q < world(); ++q) {
            auto* at = static_cast<std::byte*>(recv) + static_cast<size_t>(detail::offset_of(counts, q)) * esize;
            const int64_t n = counts[static_cast<size_t>(q)];
            if (q != root) take(q, at, n, dtype);
            else if (n > 0 && send != at) std::memmove(at, send, static_cast<size_t>(n) * esize);
        }
    }

    // Its rows to every other member (eager), then theirs in member order; its own rows copied.
    void all_to_all_impl(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                         const std::vector<int64_t>& recv_counts, DType dtype) override {
        const size_t esize = dtype_size(dtype);
        const auto* from = static_cast<const std::byte*>(send);
        auto* to = static_cast<std::byte*>(recv);
        for (int q = 0; q < world(); ++q) {
            const int64_t n = send_counts[static_cast<size_t>(q)];
            const auto* rows = from + static_cast<size_t>(detail::offset_of(send_counts, q)) * esize;
            if (q != rank()) put(q, rows, n, dtype);
            else if (n > 0)
                std::memcpy(to + static_cast<size_t>(detail::offset_of(recv_counts, q)) * esize, rows,
                            static_cast<size_t>(n) * esize);
        }
        for (int q = 0; q < world(); ++q)
            if (q != rank())
                take(q, to + static_cast<size_t>(detail::offset_of(recv_counts, q)) * esize,
                     recv_counts[static_cast<size_t>(q)], dtype);
    }

    void send_impl(const void* data, int64_t count, DType dtype, int peer, int tag) override {
        check_tag("send", tag);
        put(peer, data, count, dtype);
    }
    void recv_impl(void* data, int64_t count, DType dtype, int peer, int tag) override {
        check_tag("recv", tag);
        take(peer, data, count, dtype);
    }

    // Every member tells member 0 it has arrived; member 0 then releases them all.
    void barrier_impl() override {
        if (world() == 1) return;
        double token = 0;
        if (rank() != 0) {
            put(0, &token, 1, DType::f64);
            take(0, &token, 1, DType::f64);
            return;
        }
        for (int q = 1; q < world(); ++q) take(q, &token, 1, DType::f64);
        for (int q = 1; q < world(); ++q) put(q, &token, 1, DType::f64);
    }

private:
    Communicator& own() { return m_world.rank(m_members[static_cast<size_t>(rank())]); }
    // A message to, or from, member q. Empty ones are not sent: both sides know the counts.
    void put(int q, const void* data, int64_t count, DType dtype) {
        if (count > 0) own().send(data, count, dtype, m_members[static_cast<size_t>(q)], m_tag);
    }
    void take(int q, void* data, int64_t count, DType dtype) {
        if (count > 0) own().recv(data, count, dtype, m_members[static_cast<size_t>(q)], m_tag);
    }
    static void check_tag(const char* op, int tag) {
        if (tag != 0)
            throw Error(std::string("Communicator::") + op + ": a sub-group of messages carries tag 0 only, got " +
                        std::to_string(tag));
    }

    // The local backend's ring (local.cpp, "Ring"), one whole chunk a step: in reduce-scatter step
    // k a member sends the chunk it finished in step k − 1 (at k = 0, its own) and adds the
    // previous member's into its chunk ring_reduced_chunk(k); in all-gather step k it sends the
    // chunk it has whole and takes ring_gathered_chunk(k) from the previous member.
    void ring(void* data, int64_t count, DType dtype, ReduceOp op, bool reduce, bool gather) override {
        const int n = world(), r = rank();
        if (n == 1 || count == 0) return;
        const int shift = reduce && gather ? 0 : 1;
        const int next = detail::wrap(r + 1, n), prev = detail::wrap(r - 1, n);
        const auto chunk = [&](int c) { return data::shard_of_dataset(count, c, n); };
        dispatch_float(dtype, [&]<class T>() {
            T* own_data = static_cast<T*>(data);
            if (reduce) {
                std::vector<T> from_prev(static_cast<size_t>(chunk(0).count));  // chunk 0 is never smaller
                for (int k = 0; k <= n - 2; ++k) {
                    // The next member reduces in step k what this one reduced in step k − 1.
                    const auto out = chunk(detail::ring_reduced_chunk(next, n, k, shift));
                    put(next, own_data + out.offset, out.count, dtype);
                    const auto in = chunk(detail::ring_reduced_chunk(r, n, k, shift));
                    take(prev, from_prev.data(), in.count, dtype);
                    detail::combine(own_data + in.offset, from_prev.data(), in.count, op);
                    if (k == n - 2 && op == ReduceOp::average) detail::divide(own_data + in.offset, in.count, n);
                }
            }
            if (gather)
                for (int k = 0; k <= n - 2; ++k) {
                    const auto out = chunk(detail::ring_gathered_chunk(next, n, k, shift));
                    put(next, own_data + out.offset, out.count, dtype);
                    const auto in = chunk(detail::ring_gathered_chunk(r, n, k, shift));
                    take(prev, own_data + in.offset, in.count, dtype);
                }
        });
    }

    Group& m_world;
    const std::vector<int>& m_members;
    const int m_tag;
};

// A sub-group of messages: its members of this process (those with a device; of(i) for those
// only).
class MessageGroup final : public Group {
public:
    MessageGroup(Group& world, const std::vector<Device*>& devices, std::vector<int> members, int tag)
        : m_world(world), m_members(std::move(members)) {
        m_ranks.resize(m_members.size());
        for (size_t i = 0; i < m_members.size(); ++i)
            if (devices[static_cast<size_t>(m_members[i])] != nullptr)
                m_ranks[i] = std::make_unique<MessageCommunicator>(world, m_members, static_cast<int>(i), tag);
    }
    int world() const override { return static_cast<int>(m_members.size()); }
    bool is_local(int r) const override {
        return r >= 0 && static_cast<size_t>(r) < m_ranks.size() && m_ranks[static_cast<size_t>(r)] != nullptr;
    }
    Communicator& rank(int r) override {
        if (!is_local(r))
            throw Error("SubGroups: member " + std::to_string(r) + " of a sub-group of " +
                        std::to_string(m_members.size()) + " does not run in this process");
        return *m_ranks[static_cast<size_t>(r)];
    }
    void abort(const std::string& reason) override { m_world.abort(reason); }
    std::unique_ptr<Group> split() override {
        throw Error("SubGroups: a sub-group of messages has no second group (split)");
    }

private:
    Group& m_world;
    const std::vector<int> m_members;
    std::vector<std::unique_ptr<Communicator>> m_ranks;  // null for a member of another process
};

}  // namespace

SubGroups::SubGroups(const std::vector<Device*>& devices, std::vector<std::vector<int>> members, Group* world,
                     int tag, bool messages)
    : m_members(std::move(members)), m_where(devices.size(), {-1, -1}) {
    const int size = static_cast<int>(devices.size());
    if (size < 1) throw Error("SubGroups: world must be >= 1, got " + std::to_string(size));
    for (size_t g = 0; g < m_members.size(); ++g) {
        if (m_members[g].empty()) throw Error("SubGroups: sub-group " + std::to_string(g) + " is empty");
        for (size_t i = 0; i < m_members[g].size(); ++i) {
            const int r = m_members[g][i];
            if (r < 0 || r >= size)
                throw Error("SubGroups: rank " + std::to_string(r) + " is not a rank of a world of " +
                            std::to_string(size));
            if (m_where[static_cast<size_t>(r)].first >= 0)
                throw Error("SubGroups: rank " + std::to_string(r) + " is in two sub-groups");
            m_where[static_cast<size_t>(r)] = {static_cast<int>(g), static_cast<int>(i)};
        }
    }
    for (size_t r = 0; r < m_where.size(); ++r)
        if (m_where[r].first < 0)
            throw Error("SubGroups: rank " + std::to_string(r) + " is in no sub-group");
    for (const auto& m : m_members) {
        const auto here = [&](int r) { return devices[static_cast<size_t>(r)] != nullptr; };
        const bool all_here = std::all_of(m.begin(), m.end(), here);
        if (all_here && !messages) {
            m_groups.push_back(group_of_members(devices, m));
            continue;
        }
        if (std::none_of(m.begin(), m.end(), here)) {
            m_groups.push_back(nullptr);  // another process's
            continue;
        }
        if (world == nullptr || world->world() != size)
            throw Error("SubGroups: a sub-group across processes needs the run's group over its " +
                        std::to_string(size) + " ranks");
        for (int r : m)
            if (here(r) && dynamic_cast<CudaDevice*>(devices[static_cast<size_t>(r)]))
                throw Error("SubGroups: a sub-group across processes runs on cpu devices only, and rank " +
                            std::to_string(r) + " is a cuda device");
        m_groups.push_back(std::make_unique<MessageGroup>(*world, devices, m, tag));
    }
}

SubGroups::~SubGroups() = default;

Communicator& SubGroups::of(int r) {
    if (r < 0 || static_cast<size_t>(r) >= m_where.size())
        throw Error("SubGroups::of: " + std::to_string(r) + " is not a rank of a world of " +
                    std::to_string(m_where.size()));
    const auto [g, i] = m_where[static_cast<size_t>(r)];
    if (!m_groups[static_cast<size_t>(g)])
        throw Error("SubGroups::of: rank " + std::to_string(r) + " runs in another process");
    return m_groups[static_cast<size_t>(g)]->rank(i);
}

void SubGroups::abort(const std::string& reason) {
    for (auto& g : m_groups)
        if (g) g->abort(reason);
}

}  // namespace paralab::comm
