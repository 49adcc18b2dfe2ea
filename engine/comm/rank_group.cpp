// MpiRankGroup (mpi.h): the Group of an MPI job, one rank per process. Built on MpiGroup's
// interface only, so the same code serves a build without MPI (where MpiGroup::world() says
// why it cannot be had).
#include "engine/comm/mpi.h"

namespace paralab::comm {

MpiRankGroup::MpiRankGroup() : m_comm(&MpiGroup::world().communicator()) {}

MpiRankGroup::MpiRankGroup(std::unique_ptr<Communicator> own) : m_own(std::move(own)), m_comm(m_own.get()) {}

MpiRankGroup::~MpiRankGroup() = default;

Communicator& MpiRankGroup::rank(int r) {
    if (!is_local(r))
        throw Error("MpiRankGroup::rank: rank " + std::to_string(r) + " runs in another process (this is rank " +
                    std::to_string(m_comm->rank()) + " of " + std::to_string(m_comm->world()) + ")");
    return *m_comm;
}

std::unique_ptr<Group> MpiRankGroup::split() {
    return std::unique_ptr<Group>(new MpiRankGroup(MpiGroup::world().split_communicator()));
}

}  // namespace paralab::comm
