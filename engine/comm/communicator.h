// Communicator: the collectives and point-to-point messages that ranks of one run use
// (docs/design.md, "Collectives"). One Communicator object per rank, bound to that rank;
// every rank of a group must call the collectives in the same order with the same counts (as
// with NCCL and MPI). Public non-virtual entry points check their arguments and account bytes
// and time, then call the backend's virtual *_impl.
//
// Buffers are plain pointers to `count` elements of `dtype` in the memory of the rank's
// device (host memory for cpu devices). Collectives are in place where NCCL allows it:
//   all_reduce      data[count] on every rank -> the reduction on every rank
//   reduce_scatter  data[count] on every rank -> rank r's shard of data (rows
//                   shard_of_dataset(count, r, world)) holds the reduction; the rest of data
//                   is left in an unspecified state
//   all_gather      rank r's shard of data[count] on rank r -> all of data on every rank
//   broadcast       data[count] on root -> on every rank
//   reduce          data[count] on every rank -> the reduction on root (others unspecified)
//   scatter/gather  variable counts per rank (scatterv/gatherv), rows laid out in rank order
//   all_to_all      variable counts both ways (alltoallv): send_counts[r] elements of send go
//                   to rank r, recv_counts[r] elements of recv come from rank r, each laid out
//                   in rank order; recv_counts[r] here equals send_counts[this rank] on rank r,
//                   and send and recv do not overlap
//   send/recv       eager send (copied out; returns without waiting for the receiver),
//                   blocking recv; messages between one pair with one tag arrive in order
// Results are bit-identical run to run: each element's sum is taken in an order that
// depends only on the world size and the element's index.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/tensor/dtype.h"
#include "engine/tensor/tensor.h"
#include "engine/util/error.h"

namespace paralab::comm {

enum class ReduceOp { sum, average, max };

// Thrown in every rank waiting in (or entering) a collective once the group is aborted: a rank
// that failed calls abort() so that the others do not wait for it forever.
class CommAborted : public Error {
public:
    using Error::Error;
};

// What one call did, for the timeline: bytes this rank sent (or, for the local backend, read
// from a peer's memory) and when it started and ended on the steady clock.
struct CommRecord {
    const char* op = "";  // "all_reduce", "reduce_scatter", ...
    int64_t bytes = 0;
    double t_begin = 0, t_end = 0;  // seconds, std::chrono::steady_clock's epoch
};

// Per-rank running totals, for step records and benchmarks.
struct CommTotals {
    int64_t calls = 0;
    int64_t bytes = 0;
    double seconds = 0;
};

class Communicator {
public:
    virtual ~Communicator();
    Communicator(const Communicator&) = delete;
    Communicator& operator=(const Communicator&) = delete;

    int rank() const { return m_rank; }
    int world() const { return m_world; }
    // "local", "mpi", "nccl", "cuda_local" (engine/comm/gpu.h).
    virtual std::string backend() const = 0;

    CommRecord all_reduce(void* data, int64_t count, DType dtype, ReduceOp op);
    CommRecord reduce_scatter(void* data, int64_t count, DType dtype, ReduceOp op);
    CommRecord all_gather(void* data, int64_t count, DType dtype);
    CommRecord broadcast(void* data, int64_t count, DType dtype, int root);
    CommRecord reduce(void* data, int64_t count, DType dtype, ReduceOp op, int root);
    // counts[r] elements go to / come from rank r; send (scatter) and recv (gather) are read
    // or written on root only, as sum(counts) elements in rank order.
    CommRecord scatter(const void* send, void* recv, const std::vector<int64_t>& counts,
                       DType dtype, int root);
    CommRecord gather(const void* send, void* recv, const std::vector<int64_t>& counts,
                      DType dtype, int root);
    // send_counts[r] elements of `send` go to rank r, recv_counts[r] elements of `recv` come from
    // rank r, both in rank order; this rank's own rows are copied. The two buffers are disjoint.
    CommRecord all_to_all(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                          const std::vector<int64_t>& recv_counts, DType dtype);
    CommRecord send(const void* data, int64_t count, DType dtype, int peer, int tag = 0);
    CommRecord recv(void* data, int64_t count, DType dtype, int peer, int tag = 0);
    CommRecord barrier();

    // Tensor conveniences (contiguous tensors; count = numel).
    CommRecord all_reduce(const Tensor& t, ReduceOp op) {
        return all_reduce(t.raw(), t.numel(), t.dtype(), op);
    }
    CommRecord broadcast(const Tensor& t, int root) { return broadcast(t.raw(), t.numel(), t.dtype(), root); }

    // Wakes every rank of the group that waits in a call, and makes every later call, with
    // CommAborted carrying `reason`. Idempotent; callable from any thread.
    virtual void abort(const std::string& reason) = 0;

    CommTotals totals() const { return m_totals; }

protected:
    Communicator(int rank, int world) : m_rank(rank), m_world(world) {}

    // Arguments are checked; count >= 0; peers and roots are valid ranks.
    virtual void all_reduce_impl(void* data, int64_t count, DType dtype, ReduceOp op) = 0;
    virtual void reduce_scatter_impl(void* data, int64_t count, DType dtype, ReduceOp op) = 0;
    virtual void all_gather_impl(void* data, int64_t count, DType dtype) = 0;
    virtual void broadcast_impl(void* data, int64_t count, DType dtype, int root) = 0;
    virtual void reduce_impl(void* data, int64_t count, DType dtype, ReduceOp op, int root) = 0;
    virtual void scatter_impl(const void* send, void* recv, const std::vector<int64_t>& counts,
                              DType dtype, int root) = 0;
    virtual void gather_impl(const void* send, void* recv, const std::vector<int64_t>& counts,
                             DType dtype, int root) = 0;
    virtual void all_to_all_impl(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                                 const std::vector<int64_t>& recv_counts, DType dtype) = 0;
    virtual void send_impl(const void* data, int64_t count, DType dtype, int peer, int tag) = 0;
    virtual void recv_impl(void* data, int64_t count, DType dtype, int peer, int tag) = 0;
    virtual void barrier_impl() = 0;

private:
    template <class F>
    CommRecord timed(const char* op, int64_t bytes, F&& call);

    int m_rank, m_world;
    CommTotals m_totals;  // touched by this rank's thread only
};

// The ranks of one run as a whole: every rank's communicator is reached through its group. A
// group's ranks may all live in this process (LocalGroup) or be spread over processes (an MPI
// job: MpiRankGroup, mpi.h), in which case only this process's ranks are reachable here.
class Group {
public:
    virtual ~Group();
    virtual int world() const = 0;
    // True when rank r runs in this process (its communicator can be had here).
    virtual bool is_local(int r) const = 0;
    // Rank r's communicator (a local rank); valid while the group lives. Each rank uses its own
    // from one thread at a time.
    virtual Communicator& rank(int r) = 0;
    // Wakes (or, across processes, ends) every rank waiting in a call; see Communicator::abort.
    virtual void abort(const std::string& reason) = 0;
    // A second group over the same ranks whose messages never meet this one's, for a second
    // thread per rank that communicates concurrently (DDP's buckets). Across processes this is
    // collective: every process calls it, in the same order as its other collectives.
    virtual std::unique_ptr<Group> split() = 0;

protected:
    Group() = default;
    // rank(r) of a group holding one communicator per rank, all in this process: ranks[r], or
    // Error "<group>::rank: r is not a rank of a world of N".
    static Communicator& rank_of(const std::vector<std::unique_ptr<Communicator>>& ranks, int r,
                                 const char* group);
};

// The in-process backend for virtual devices: ranks are threads of one process and read each
// other's buffers directly. all_reduce, reduce_scatter and all_gather are chunked rings (each
// rank moves 2(N-1)/N of the data in an all-reduce), synchronised neighbour to neighbour, so
// that a slow rank delays only what depends on it. Large calls run the ring in pieces of each
// chunk (piece_bytes; 0: 256 KiB, or whole chunks when the ranks outnumber the hardware
// threads), so that what a rank reads was written moments ago by its neighbour (local.cpp).
class LocalGroup final : public Group {
public:
    explicit LocalGroup(int world, int64_t piece_bytes = 0);
    ~LocalGroup() override;
    LocalGroup(const LocalGroup&) = delete;
    LocalGroup& operator=(const LocalGroup&) = delete;

    int world() const override;
    bool is_local(int r) const override { return r >= 0 && r < world(); }
    Communicator& rank(int r) override;
    void abort(const std::string& reason) override;
    std::unique_ptr<Group> split() override;

    struct State;  // shared between the ranks (defined in local.cpp)

private:
    std::unique_ptr<State> m_state;
    std::vector<std::unique_ptr<Communicator>> m_ranks;
};

}  // namespace paralab::comm
