// The MPI backend of Communicator (docs/design.md, "Collectives"): ranks are processes started
// by Open MPI's `mpirun`, on one host or several, and collectives are MPI's own (MPI_Allreduce,
// MPI_Reduce_scatter, MPI_Allgatherv, MPI_Bcast, MPI_Reduce, MPI_Scatterv/Gatherv,
// MPI_Alltoallv, MPI_Send/MPI_Recv, MPI_Barrier) on host buffers.
//
// No MPI type appears here (docs/design.md, "Layers"): the same header serves a build with MPI (mpi.cpp)
// and one without (mpi_stub.cpp, where available() is false and world() throws "this build has
// no MPI support").
//
//   auto& group = MpiGroup::world();          // MPI_Init_thread(MPI_THREAD_MULTIPLE) once
//   Communicator& comm = group.communicator(); // rank group.rank() of group.size()
//   auto bucket_comm = group.split_communicator();  // for a second thread (DDP's buckets)
//
// Semantics are those of communicator.h, with these differences:
//   - reduce (and all_reduce) sums are MPI's: bit-identical across ranks and run to run for a
//     given world size and count (Open MPI picks its algorithm from those alone), but not
//     necessarily in the local backend's order, so the two backends agree to float rounding.
//   - tags of send/recv are 0 .. MPI_TAG_UB (at least 32767).
//   - per-rank counts (reduce_scatter, all_gather, scatter, gather, all_to_all) and their offsets
//     must fit in an int (MPI-3 counts; a larger call is refused with Error naming the total);
//     all_reduce, broadcast, reduce, send and recv take any count.
//   - abort(reason) prints the reason to stderr and calls MPI_Abort: MPI cannot wake a peer
//     blocked in a call, so the whole job ends (mpirun kills every rank within its own timeout)
//     instead of CommAborted being thrown in the peers. The run fails as a whole.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/comm/communicator.h"

namespace paralab::comm {

class MpiGroup {
public:
    // True when this build has MPI (whether or not the process was started by mpirun: a
    // process started alone is a world of one).
    static bool available();

    // The process's group over MPI_COMM_WORLD. The first call initialises MPI with
    // MPI_THREAD_MULTIPLE (or checks the level of an MPI that is already initialised) and
    // throws Error when that level cannot be had; MPI is finalised at exit. Throws Error in a
    // build without MPI.
    static MpiGroup& world();

    ~MpiGroup();
    MpiGroup(const MpiGroup&) = delete;
    MpiGroup& operator=(const MpiGroup&) = delete;

    int rank() const;
    int size() const;

    // A Communicator over a private duplicate of MPI_COMM_WORLD (so that ParaLab's messages
    // never match anyone else's); valid until exit. One thread at a time uses it.
    Communicator& communicator();

    // Another duplicate, for a second thread that communicates concurrently with the first
    // (DDP's bucket thread). Collective: every rank calls it, in the same order as its other
    // collectives on MPI_COMM_WORLD. Destroy it before exit.
    std::unique_ptr<Communicator> split_communicator();

    // ---- messages of the run itself (not training data), on a communicator of their own ----
    // Every process's string, in rank order. Collective.
    std::vector<std::string> all_gather_strings(const std::string& mine);
    // A byte message to rank `dest` (a standard send: returns once the bytes are copied out or
    // received). Any thread.
    void send_bytes(int dest, int tag, const std::string& bytes);
    // A message with `tag` from any rank, if one has arrived: true with its source and bytes,
    // false at once otherwise. Any thread.
    bool try_recv_bytes(int tag, int& source, std::string& bytes);
    // Ends the whole job now: prints `reason` (naming this rank) to stderr and calls MPI_Abort;
    // mpirun then ends every rank.
    [[noreturn]] void abort_job(const std::string& reason);

    struct State;  // MPI handles (defined in mpi.cpp)

private:
    MpiGroup();
    std::unique_ptr<State> m_state;
};

// Point-to-point messages between processes on a duplicate of MPI_COMM_WORLD of their own,
// usable from any number of threads at once (MPI_THREAD_MULTIPLE): what the ranks of a process
// with several devices send to those of another. Sends are eager (the bytes are copied out and
// the call returns); a receive names its source process and tag and checks the size.
class MpiChannel {
public:
    // Collective: every process creates its channels in the same order.
    MpiChannel();
    ~MpiChannel();
    MpiChannel(const MpiChannel&) = delete;
    MpiChannel& operator=(const MpiChannel&) = delete;

    void send(int process, int tag, const void* data, size_t bytes);
    void recv(int process, int tag, void* data, size_t bytes);
    int tag_ub() const;

    struct State;

private:
    std::unique_ptr<State> m_state;
};

// The devices of every process of an MPI job as one Group, for processes that run more than one
// device: global rank g is device (g - first) of the process whose devices start at `first`
// (devices_per_process in process order). Collectives are hierarchical and exact: the devices
// of a process reduce in process (the local backend), the processes all-reduce over MPI between
// their first devices, and the result is broadcast in process; reduce_scatter, all_gather,
// broadcast and reduce are all-reduces of the data (zeros where a rank gives nothing), and
// scatter, gather, all_to_all, send and recv are point-to-point (in process, or over an
// MpiChannel).
class MpiDeviceGroup final : public Group {
public:
    // Collective: every process passes the same counts (its own is devices_per_process[rank]).
    explicit MpiDeviceGroup(std::vector<int> devices_per_process);
    ~MpiDeviceGroup() override;

    int world() const override;
    bool is_local(int r) const override;
    Communicator& rank(int r) override;
    void abort(const std::string& reason) override;
    std::unique_ptr<Group> split() override;

    struct State;

private:
    std::unique_ptr<State> m_state;
    std::vector<std::unique_ptr<Communicator>> m_ranks;  // this process's, by local index
};

// The ranks of an MPI job as one Group: process p is rank p, the only rank local to it.
// Communicators are the MpiGroup's; split() makes another duplicate (collective).
class MpiRankGroup final : public Group {
public:
    // Over MpiGroup::world()'s own communicator.
    MpiRankGroup();
    ~MpiRankGroup() override;

    int world() const override { return m_comm->world(); }
    bool is_local(int r) const override { return r == m_comm->rank(); }
    Communicator& rank(int r) override;
    void abort(const std::string& reason) override { m_comm->abort(reason); }
    std::unique_ptr<Group> split() override;

private:
    explicit MpiRankGroup(std::unique_ptr<Communicator> own);
    std::unique_ptr<Communicator> m_own;  // a split's duplicate (null for the world's own)
    Communicator* m_comm;
};

}  // namespace paralab::comm
