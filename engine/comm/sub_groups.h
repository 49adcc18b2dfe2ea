// Sub-groups of a run's ranks, for collectives among some of them only: a hybrid mesh's
// tensor-parallel groups (consecutive ranks) and data-parallel groups (the ranks of one tensor
// rank). Each sub-group is a group of its own over its members' devices, whose rank i is
// members[i]: every rank of a sub-group calls its collectives in the same order, as with any
// group, and sub-groups never see each other's messages. In-process only: cpu devices make a
// LocalGroup (host memory); cuda devices a CudaLocalGroup (device memory; virtual GPUs of one
// card or distinct GPUs through peer copies), which may share the devices' communication
// streams with the run's group (gpu.h: the local protocol only serialises, never deadlocks).
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
    // `devices[r]`: world rank r's device; `members[g]`: the ranks of sub-group g, in the order
    // of their ranks within it. Every rank of the world is in exactly one sub-group, and a
    // sub-group's devices are all cpu or all cuda (Error otherwise).
    SubGroups(const std::vector<Device*>& devices, std::vector<std::vector<int>> members);
    ~SubGroups();
    SubGroups(const SubGroups&) = delete;
    SubGroups& operator=(const SubGroups&) = delete;

    int size() const { return static_cast<int>(m_members.size()); }
    const std::vector<int>& members(int g) const { return m_members.at(static_cast<size_t>(g)); }
    // The sub-group of world rank r.
    int group_of(int r) const { return m_where.at(static_cast<size_t>(r)).first; }
    // World rank r's communicator within its sub-group (its rank(): r's place among the members).
    Communicator& of(int r);
    // Wakes every rank waiting in any sub-group (Communicator::abort). Idempotent.
    void abort(const std::string& reason);

private:
    std::vector<std::vector<int>> m_members;
    std::vector<std::unique_ptr<Group>> m_groups;
    std::vector<std::pair<int, int>> m_where;  // per world rank: sub-group, place in it
};

}  // namespace paralab::comm
