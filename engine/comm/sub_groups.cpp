#include "engine/comm/sub_groups.h"

#include <algorithm>

namespace paralab::comm {

LocalSubGroups::LocalSubGroups(int world, std::vector<std::vector<int>> members)
    : m_members(std::move(members)), m_where(static_cast<size_t>(std::max(world, 0)), {-1, -1}) {
    if (world < 1) throw Error("LocalSubGroups: world must be >= 1, got " + std::to_string(world));
    for (size_t g = 0; g < m_members.size(); ++g) {
        if (m_members[g].empty()) throw Error("LocalSubGroups: sub-group " + std::to_string(g) + " is empty");
        for (size_t i = 0; i < m_members[g].size(); ++i) {
            const int r = m_members[g][i];
            if (r < 0 || r >= world)
                throw Error("LocalSubGroups: rank " + std::to_string(r) + " is not a rank of a world of " +
                            std::to_string(world));
            if (m_where[static_cast<size_t>(r)].first >= 0)
                throw Error("LocalSubGroups: rank " + std::to_string(r) + " is in two sub-groups");
            m_where[static_cast<size_t>(r)] = {static_cast<int>(g), static_cast<int>(i)};
        }
        m_groups.push_back(std::make_unique<LocalGroup>(static_cast<int>(m_members[g].size())));
    }
    for (size_t r = 0; r < m_where.size(); ++r)
        if (m_where[r].first < 0)
            throw Error("LocalSubGroups: rank " + std::to_string(r) + " is in no sub-group");
}

LocalSubGroups::~LocalSubGroups() = default;

Communicator& LocalSubGroups::of(int r) {
    if (r < 0 || static_cast<size_t>(r) >= m_where.size())
        throw Error("LocalSubGroups::of: " + std::to_string(r) + " is not a rank of a world of " +
                    std::to_string(m_where.size()));
    const auto [g, i] = m_where[static_cast<size_t>(r)];
    return m_groups[static_cast<size_t>(g)]->rank(i);
}

void LocalSubGroups::abort(const std::string& reason) {
    for (auto& g : m_groups) g->abort(reason);
}

}  // namespace paralab::comm
