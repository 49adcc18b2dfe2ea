#include "engine/comm/device_mesh.h"

#include <algorithm>

#include "engine/comm/sub_groups.h"
#include "engine/util/error.h"

namespace paralab::comm {

const char* axis_name(Axis a) {
    switch (a) {
    case Axis::tp: return "tp";
    case Axis::cp: return "cp";
    case Axis::ep: return "ep";
    case Axis::dp: return "dp";
    case Axis::pp: return "pp";
    }
    return "?";
}

namespace {

// The field of `axis` in a MeshShape or a MeshCoords (the same names in both).
template <class T>
int field(const T& t, Axis a) {
    switch (a) {
    case Axis::tp: return t.tp;
    case Axis::cp: return t.cp;
    case Axis::ep: return t.ep;
    case Axis::dp: return t.dp;
    case Axis::pp: return t.pp;
    }
    return 0;
}

}  // namespace

int MeshShape::size(Axis a) const { return field(*this, a); }

int MeshCoords::at(Axis a) const { return field(*this, a); }

void DeviceMesh::check(const MeshShape& s, int64_t world) {
    for (Axis a : {Axis::dp, Axis::cp, Axis::ep, Axis::tp, Axis::pp})
        if (s.size(a) < 1)
            throw ConfigError(std::string("strategy.") + axis_name(a),
                              "expected at least 1, got " + std::to_string(s.size(a)));
    if (s.devices() != world) {
        std::string names = "dp", sizes = std::to_string(s.dp);
        const auto add = [&](const char* name, int size) {
            names += std::string(" · ") + name;
            sizes += " · " + std::to_string(size);
        };
        if (s.cp > 1) add("cp", s.cp);
        add("tp", s.tp);
        add("pp", s.pp);
        throw ConfigError("strategy", "the mesh " + names + " = " + sizes + " = " + std::to_string(s.devices()) +
                                          " devices, but the run has " + std::to_string(world));
    }
    if ((int64_t{s.cp} * s.dp) % s.ep != 0)
        throw ConfigError("strategy.ep", "ep " + std::to_string(s.ep) + " splits the experts over devices of the "
                                         "cp · dp = " + std::to_string(int64_t{s.cp} * s.dp) +
                                         " that hold the same parameters, and must divide it");
}

DeviceMesh::DeviceMesh(MeshShape shape, int64_t world) : m_shape(shape) { check(shape, world); }

DeviceMesh::DeviceMesh(MeshShape shape) : m_shape(shape) {
    PARALAB_CHECK(shape.dp >= 1 && shape.cp >= 1 && shape.ep >= 1 && shape.tp >= 1 && shape.pp >= 1,
                  "DeviceMesh: an axis below 1");
}

MeshCoords DeviceMesh::coords(int rank) const {
    PARALAB_CHECK(rank >= 0 && rank < size(), "DeviceMesh: rank " + std::to_string(rank) + " outside the mesh");
    const MeshShape& s = m_shape;
    MeshCoords c;
    c.tp = rank % s.tp;
    c.cp = (rank / s.tp) % s.cp;
    c.dp = (rank / (s.tp * s.cp)) % s.dp;
    c.pp = rank / (s.tp * s.cp * s.dp);
    c.ep = (c.cp + s.cp * c.dp) % s.ep;
    return c;
}

int DeviceMesh::rank_of(const MeshCoords& c) const {
    const MeshShape& s = m_shape;
    PARALAB_CHECK(c.tp >= 0 && c.tp < s.tp && c.cp >= 0 && c.cp < s.cp && c.dp >= 0 && c.dp < s.dp && c.pp >= 0 &&
                      c.pp < s.pp,
                  "DeviceMesh: coordinates outside the mesh");
    return c.tp + s.tp * (c.cp + s.cp * (c.dp + s.dp * c.pp));
}

int DeviceMesh::with(int rank, Axis a, int index) const {
    MeshCoords c = coords(rank);
    switch (a) {
    case Axis::tp: c.tp = index; break;
    case Axis::cp: c.cp = index; break;
    case Axis::dp: c.dp = index; break;
    case Axis::pp: c.pp = index; break;
    case Axis::ep: {
        // The ep-th of this rank's expert group (consecutive in cp + cp_size·dp).
        const int j = (c.cp + m_shape.cp * c.dp) / m_shape.ep * m_shape.ep + index;
        c.cp = j % m_shape.cp;
        c.dp = j / m_shape.cp;
        break;
    }
    }
    return rank_of(c);
}

namespace {

bool has(std::initializer_list<Axis> axes, Axis a) {
    return std::find(axes.begin(), axes.end(), a) != axes.end();
}

}  // namespace

std::vector<int> DeviceMesh::members(int rank, std::initializer_list<Axis> axes) const {
    const bool expert = has(axes, Axis::ep);
    PARALAB_CHECK(!expert || (!has(axes, Axis::cp) && !has(axes, Axis::dp)),
                  "DeviceMesh: the ep axis is folded into cp and dp, not asked with them");
    const MeshCoords mine = coords(rank);
    const auto expert_block = [&](const MeshCoords& c) { return (c.cp + m_shape.cp * c.dp) / m_shape.ep; };
    std::vector<int> out;
    for (int q = 0; q < size(); ++q) {
        const MeshCoords c = coords(q);
        if (!has(axes, Axis::tp) && c.tp != mine.tp) continue;
        if (!has(axes, Axis::pp) && c.pp != mine.pp) continue;
        if (expert) {
            if (expert_block(c) != expert_block(mine)) continue;
        } else {
            if (!has(axes, Axis::cp) && c.cp != mine.cp) continue;
            if (!has(axes, Axis::dp) && c.dp != mine.dp) continue;
        }
        out.push_back(q);
    }
    return out;
}

std::vector<std::vector<int>> DeviceMesh::groups(std::initializer_list<Axis> axes) const {
    std::vector<std::vector<int>> out;
    std::vector<bool> placed(static_cast<size_t>(size()), false);
    for (int k = 0; k < size(); ++k) {
        if (placed[static_cast<size_t>(k)]) continue;
        out.push_back(members(k, axes));
        for (int q : out.back()) placed[static_cast<size_t>(q)] = true;
    }
    return out;
}

std::unique_ptr<SubGroups> DeviceMesh::communicators(std::initializer_list<Axis> axes,
                                                     const std::vector<Device*>& devices, Group* world,
                                                     int tag) const {
    PARALAB_CHECK(static_cast<int>(devices.size()) == size(), "DeviceMesh: one device per rank");
    return std::make_unique<SubGroups>(devices, groups(axes), world, tag);
}

std::string DeviceMesh::label(int rank) const {
    const MeshCoords c = coords(rank);
    std::string out;
    const auto add = [&out](const char* axis, int i) {
        if (!out.empty()) out += " · ";
        out += axis + std::string(" ") + std::to_string(i);
    };
    if (m_shape.tp > 1) add("tp", c.tp);
    if (m_shape.cp > 1) add("cp", c.cp);
    if (m_shape.dp > 1 || size() == 1) add("dp", c.dp);
    if (m_shape.ep > 1) add("ep", c.ep);
    if (m_shape.pp > 1) add("stage", c.pp + 1);
    return out;
}

}  // namespace paralab::comm
