// The backend-independent half of every Communicator: argument checks, byte accounting and
// timing, then the backend's *_impl.
//
// Bytes are counted once per byte that crosses between ranks, on the rank that moves it: the
// reader for collectives (the local backend's ranks read each other's memory; a ring backend's
// ranks receive the same amounts), the sender for all_to_all and send/recv. A rank's own data
// is not counted.
// Ring collectives cut `count` into world chunks by shard_of_dataset (chunk c = its rows), so
// the counts are exact for uneven chunks:
//   all_reduce      2 count - chunk(r) - chunk(r+1)    (summed over ranks: 2 (N-1) count)
//   reduce_scatter  count - chunk(r-1)                 (rank r never reads chunk r-1)
//   all_gather      count - chunk(r)
//   broadcast       count on every rank but root, 0 on root
//   reduce          (N-1) count on root, 0 elsewhere
//   scatter         counts[r] on every rank but root; gather: sum(counts) - counts[root] on root
//   all_to_all      sum(send_counts) - send_counts[r] on rank r, the sender: what it sends to
//                   the others (its own rows are a local copy), so that summed over the ranks
//                   every row that changes rank counts once
//   send            count; recv 0 (the sender counted it)
#include "engine/comm/communicator.h"

#include <chrono>
#include <string>

#include "engine/data/loader.h"

namespace paralab::comm {
namespace {

double now_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

int64_t chunk_count(int64_t count, int chunk, int world) {
    const int c = ((chunk % world) + world) % world;
    return data::shard_of_dataset(count, c, world).count;
}

std::string call_name(const char* op) {
    return std::string("Communicator::") + op;
}

void check_count(const char* op, int64_t count) {
    if (count < 0)
        throw Error(call_name(op) + ": count must be >= 0, got " + std::to_string(count));
}

void check_dtype(const char* op, DType dtype) {
    if (dtype != DType::f32 && dtype != DType::f64)
        throw Error(call_name(op) + ": dtype must be f32 or f64, got " +
                    std::string(dtype_name(dtype)));
}

void check_buffer(const char* op, const char* name, const void* data, int64_t count) {
    if (data == nullptr && count > 0)
        throw Error(call_name(op) + ": " + name + " is null for " + std::to_string(count) +
                    " elements");
}

void check_rank(const char* op, const char* what, int value, int world) {
    if (value < 0 || value >= world)
        throw Error(call_name(op) + ": " + what + " " + std::to_string(value) +
                    " is not a rank of a world of " + std::to_string(world));
}

void check_op(const char* op, ReduceOp reduce) {
    if (reduce != ReduceOp::sum && reduce != ReduceOp::average && reduce != ReduceOp::max)
        throw Error(call_name(op) + ": unknown reduce op " +
                    std::to_string(static_cast<int>(reduce)));
}

int64_t checked_counts(const char* op, const std::vector<int64_t>& counts, int world,
                       const char* name = "counts") {
    if (static_cast<int64_t>(counts.size()) != world)
        throw Error(call_name(op) + ": " + name + " has " + std::to_string(counts.size()) +
                    " entries for a world of " + std::to_string(world));
    int64_t total = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
        if (counts[r] < 0)
            throw Error(call_name(op) + ": " + name + "[" + std::to_string(r) + "] must be >= 0, got " +
                        std::to_string(counts[r]));
        total += counts[r];
    }
    return total;
}

}  // namespace

Communicator::~Communicator() = default;
Group::~Group() = default;

Communicator& Group::rank_of(const std::vector<std::unique_ptr<Communicator>>& ranks, int r, const char* group) {
    if (r < 0 || r >= static_cast<int>(ranks.size()))
        throw Error(std::string(group) + "::rank: " + std::to_string(r) + " is not a rank of a world of " +
                    std::to_string(ranks.size()));
    return *ranks[size_t(r)];
}

template <class F>
CommRecord Communicator::timed(const char* op, int64_t bytes, F&& call) {
    CommRecord record;
    record.op = op;
    record.bytes = bytes;
    record.t_begin = now_seconds();
    call();
    record.t_end = now_seconds();
    m_totals.calls += 1;
    m_totals.bytes += bytes;
    m_totals.seconds += record.t_end - record.t_begin;
    return record;
}

CommRecord Communicator::all_reduce(void* data, int64_t count, DType dtype, ReduceOp op) {
    check_count("all_reduce", count);
    check_dtype("all_reduce", dtype);
    check_op("all_reduce", op);
    check_buffer("all_reduce", "data", data, count);
    const int64_t elems = m_world == 1 ? 0
                                       : 2 * count - chunk_count(count, m_rank, m_world) -
                                             chunk_count(count, m_rank + 1, m_world);
    return timed("all_reduce", elems * static_cast<int64_t>(dtype_size(dtype)),
                 [&] { all_reduce_impl(data, count, dtype, op); });
}

CommRecord Communicator::reduce_scatter(void* data, int64_t count, DType dtype, ReduceOp op) {
    check_count("reduce_scatter", count);
    check_dtype("reduce_scatter", dtype);
    check_op("reduce_scatter", op);
    check_buffer("reduce_scatter", "data", data, count);
    const int64_t elems = m_world == 1 ? 0 : count - chunk_count(count, m_rank - 1, m_world);
    return timed("reduce_scatter", elems * static_cast<int64_t>(dtype_size(dtype)),
                 [&] { reduce_scatter_impl(data, count, dtype, op); });
}

CommRecord Communicator::all_gather(void* data, int64_t count, DType dtype) {
    check_count("all_gather", count);
    check_dtype("all_gather", dtype);
    check_buffer("all_gather", "data", data, count);
    const int64_t elems = m_world == 1 ? 0 : count - chunk_count(count, m_rank, m_world);
    return timed("all_gather", elems * static_cast<int64_t>(dtype_size(dtype)),
                 [&] { all_gather_impl(data, count, dtype); });
}

CommRecord Communicator::broadcast(void* data, int64_t count, DType dtype, int root) {
    check_count("broadcast", count);
    check_dtype("broadcast", dtype);
    check_rank("broadcast", "root", root, m_world);
    check_buffer("broadcast", "data", data, count);
    const int64_t elems = m_rank == root ? 0 : count;
    return timed("broadcast", elems * static_cast<int64_t>(dtype_size(dtype)),
                 [&] { broadcast_impl(data, count, dtype, root); });
}

CommRecord Communicator::reduce(void* data, int64_t count, DType dtype, ReduceOp op, int root) {
    check_count("reduce", count);
    check_dtype("reduce", dtype);
    check_op("reduce", op);
    check_rank("reduce", "root", root, m_world);
    check_buffer("reduce", "data", data, count);
    const int64_t elems = m_rank == root ? (m_world - 1) * count : 0;
    return timed("reduce", elems * static_cast<int64_t>(dtype_size(dtype)),
                 [&] { reduce_impl(data, count, dtype, op, root); });
}

CommRecord Communicator::scatter(const void* send, void* recv, const std::vector<int64_t>& counts,
                                 DType dtype, int root) {
    check_dtype("scatter", dtype);
    check_rank("scatter", "root", root, m_world);
    const int64_t total = checked_counts("scatter", counts, m_world);
    if (m_rank == root) check_buffer("scatter", "send", send, total);
    check_buffer("scatter", "recv", recv, counts[static_cast<size_t>(m_rank)]);
    const int64_t elems = m_rank == root ? 0 : counts[static_cast<size_t>(m_rank)];
    return timed("scatter", elems * static_cast<int64_t>(dtype_size(dtype)),
                 [&] { scatter_impl(send, recv, counts, dtype, root); });
}

CommRecord Communicator::gather(const void* send, void* recv, const std::vector<int64_t>& counts,
                                DType dtype, int root) {
    check_dtype("gather", dtype);
    check_rank("gather", "root", root, m_world);
    const int64_t total = checked_counts("gather", counts, m_world);
    check_buffer("gather", "send", send, counts[static_cast<size_t>(m_rank)]);
    if (m_rank == root) check_buffer("gather", "recv", recv, total);
    const int64_t elems = m_rank == root ? total - counts[static_cast<size_t>(root)] : 0;
    return timed("gather", elems * static_cast<int64_t>(dtype_size(dtype)),
                 [&] { gather_impl(send, recv, counts, dtype, root); });
}

CommRecord Communicator::all_to_all(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                                    const std::vector<int64_t>& recv_counts, DType dtype) {
    check_dtype("all_to_all", dtype);
    const int64_t sent = checked_counts("all_to_all", send_counts, m_world, "send_counts");
    const int64_t received = checked_counts("all_to_all", recv_counts, m_world, "recv_counts");
    check_buffer("all_to_all", "send", send, sent);
    check_buffer("all_to_all", "recv", recv, received);
    const size_t esize = dtype_size(dtype);
    const auto* s = static_cast<const std::byte*>(send);
    const auto* r = static_cast<const std::byte*>(recv);
    if (sent > 0 && received > 0 && s < r + size_t(received) * esize && r < s + size_t(sent) * esize)
        throw Error(call_name("all_to_all") + ": send and recv overlap; the rows must go to a separate buffer");
    const int64_t elems = sent - send_counts[static_cast<size_t>(m_rank)];
    return timed("all_to_all", elems * static_cast<int64_t>(esize),
                 [&] { all_to_all_impl(send, send_counts, recv, recv_counts, dtype); });
}

CommRecord Communicator::send(const void* data, int64_t count, DType dtype, int peer, int tag) {
    check_count("send", count);
    check_dtype("send", dtype);
    check_rank("send", "peer", peer, m_world);
    check_buffer("send", "data", data, count);
    return timed("send", count * static_cast<int64_t>(dtype_size(dtype)),
                 [&] { send_impl(data, count, dtype, peer, tag); });
}

CommRecord Communicator::recv(void* data, int64_t count, DType dtype, int peer, int tag) {
    check_count("recv", count);
    check_dtype("recv", dtype);
    check_rank("recv", "peer", peer, m_world);
    check_buffer("recv", "data", data, count);
    return timed("recv", 0, [&] { recv_impl(data, count, dtype, peer, tag); });
}

CommRecord Communicator::barrier() {
    return timed("barrier", 0, [&] { barrier_impl(); });
}

}  // namespace paralab::comm
