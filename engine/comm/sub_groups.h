// Sub-groups of a run's ranks, for collectives among some of them only: a hybrid mesh's
// tensor-parallel groups (consecutive ranks), data-parallel groups (the ranks of one tensor
// rank) and expert groups. Each sub-group is a group of its own over its members' devices,
// whose rank i is members[i]: every rank of a sub-group calls its collectives in the same
// order, as with any group, and sub-groups never see each other's messages.
//
// A sub-group whose members all run in this process reads their memory directly: cpu devices
// make a LocalGroup (host memory); cuda devices a CudaLocalGroup (device memory; virtual GPUs of
// one card or distinct GPUs through peer copies), which may share the devices' communication
// streams with the run's group (gpu.h: the local protocol only serialises, never deadlocks).
//
// A sub-group with a member in another process (an MPI job; devices[r] null) runs its
// collectives as point-to-point messages of the run's whole group (`world`, rank r = world rank
// r), all on one tag of its own: the local backend's ring, step for step (peer_protocol.h), with
// each step's chunk sent eagerly to the next member and received from the previous one, so that
// every sum is taken in the local ring's order and the bytes are communicator.cpp's formulas;
// broadcast, scatter and gather from and to the root directly; all_to_all from every member to
// every other; reduce at the root in rank order 0..N-1; its own send and recv carry tag 0 only.
// Its members' local devices must be cpu devices (host buffers). Tests may ask for messages in
// one process too (`messages`).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/comm/communicator.h"

namespace paralab {
class Device;
}

namespace paralab::comm {

class SubGroups {
public:
    // `devices[r]`: world rank r's device (null: a rank of another process); `members[g]`: the
    // ranks of sub-group g, in the order of their ranks within it. Every rank of the world is in
    // exactly one sub-group, and a sub-group's devices are all cpu or all cuda (Error otherwise).
    // A sub-group with a rank of another process, or every sub-group when `messages` is set,
    // sends messages over `world` (the run's group over the same ranks; required then) with tag
    // `tag`, which no other messages of `world` may use (Error without a world, or for cuda
    // devices).
    SubGroups(const std::vector<Device*>& devices, std::vector<std::vector<int>> members,
              Group* world = nullptr, int tag = 0, bool messages = false);
    ~SubGroups();
    SubGroups(const SubGroups&) = delete;
    SubGroups& operator=(const SubGroups&) = delete;

    int size() const { return static_cast<int>(m_members.size()); }
    const std::vector<int>& members(int g) const { return m_members.at(static_cast<size_t>(g)); }
    // The sub-group of world rank r.
    int group_of(int r) const { return m_where.at(static_cast<size_t>(r)).first; }
    // World rank r's communicator within its sub-group (its rank(): r's place among the members);
    // r runs in this process.
    Communicator& of(int r);
    // Wakes every rank waiting in any sub-group (Communicator::abort). Idempotent.
    void abort(const std::string& reason);

private:
    std::vector<std::vector<int>> m_members;
    std::vector<std::unique_ptr<Group>> m_groups;  // null for a sub-group of other processes only
    std::vector<std::pair<int, int>> m_where;  // per world rank: sub-group, place in it
};

}  // namespace paralab::comm
