// The MPI backend of Communicator (DESIGN.md §2, "comm"; §4): ranks are processes started by
// Open MPI's `mpirun`, on one host or several, and collectives are MPI's own (MPI_Allreduce,
// MPI_Reduce_scatter, MPI_Allgatherv, MPI_Bcast, MPI_Reduce, MPI_Scatterv/Gatherv, MPI_Send/
// MPI_Recv, MPI_Barrier) on host buffers.
//
// No MPI type appears here (DESIGN.md §1): the same header serves a build with MPI (mpi.cpp)
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
//   - per-rank counts (reduce_scatter, all_gather, scatter, gather) and their offsets must fit
//     in an int (MPI-3 counts); all_reduce, broadcast, reduce, send and recv take any count.
//   - abort(reason) prints the reason to stderr and calls MPI_Abort: MPI cannot wake a peer
//     blocked in a call, so the whole job ends (mpirun kills every rank within its own timeout)
//     instead of CommAborted being thrown in the peers. The run fails as a whole.
#pragma once

#include <memory>

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

    struct State;  // MPI handles (defined in mpi.cpp)

private:
    MpiGroup();
    std::unique_ptr<State> m_state;
};

}  // namespace paralab::comm
