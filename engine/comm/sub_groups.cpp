#include "engine/comm/sub_groups.h"

#include <algorithm>

#include "engine/comm/gpu.h"
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

}  // namespace

SubGroups::SubGroups(const std::vector<Device*>& devices, std::vector<std::vector<int>> members)
    : m_members(std::move(members)), m_where(devices.size(), {-1, -1}) {
    const int world = static_cast<int>(devices.size());
    if (world < 1) throw Error("SubGroups: world must be >= 1, got " + std::to_string(world));
    for (size_t g = 0; g < m_members.size(); ++g) {
        if (m_members[g].empty()) throw Error("SubGroups: sub-group " + std::to_string(g) + " is empty");
        for (size_t i = 0; i < m_members[g].size(); ++i) {
            const int r = m_members[g][i];
            if (r < 0 || r >= world)
                throw Error("SubGroups: rank " + std::to_string(r) + " is not a rank of a world of " +
                            std::to_string(world));
            if (m_where[static_cast<size_t>(r)].first >= 0)
                throw Error("SubGroups: rank " + std::to_string(r) + " is in two sub-groups");
            m_where[static_cast<size_t>(r)] = {static_cast<int>(g), static_cast<int>(i)};
        }
    }
    for (size_t r = 0; r < m_where.size(); ++r)
        if (m_where[r].first < 0)
            throw Error("SubGroups: rank " + std::to_string(r) + " is in no sub-group");
    for (const auto& m : m_members) m_groups.push_back(group_of_members(devices, m));
}

SubGroups::~SubGroups() = default;

Communicator& SubGroups::of(int r) {
    if (r < 0 || static_cast<size_t>(r) >= m_where.size())
        throw Error("SubGroups::of: " + std::to_string(r) + " is not a rank of a world of " +
                    std::to_string(m_where.size()));
    const auto [g, i] = m_where[static_cast<size_t>(r)];
    return m_groups[static_cast<size_t>(g)]->rank(i);
}

void SubGroups::abort(const std::string& reason) {
    for (auto& g : m_groups) g->abort(reason);
}

}  // namespace paralab::comm
