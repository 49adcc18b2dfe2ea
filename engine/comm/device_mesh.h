// The device mesh: how a run's ranks are laid out over the axes of parallelism, written once
// (docs/design.md, "The mesh and its parts"). Every strategy takes its groups from a mesh; a
// single-axis strategy (ddp, pipeline, tensor_parallel) is a mesh with one axis above 1.
//
// Rank k of a mesh of tp · cp · dp · pp devices has the coordinates
//     tp = k mod tp,   cp = (k div tp) mod cp,   dp = (k div tp·cp) mod dp,   pp = k div (tp·cp·dp)
// tp varies fastest (a tensor-parallel group is consecutive devices, inside one node) and pp
// slowest: Megatron-LM's order tp-cp-ep-dp-pp. The expert axis is not a dimension of its own: it
// is folded into the cp·dp devices of one (tp, pp), which otherwise hold the same parameters; an
// expert group is `ep` consecutive of them in the order cp + cp_size·dp, so ep divides cp · dp.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace paralab {
class Device;
}

namespace paralab::comm {

class Group;
class SubGroups;

enum class Axis { tp, cp, ep, dp, pp };

// "tp", "cp", "ep", "dp", "pp".
const char* axis_name(Axis a);

// The size of each axis (each at least 1).
struct MeshShape {
    int dp = 1, cp = 1, ep = 1, tp = 1, pp = 1;

    int64_t devices() const { return int64_t{dp} * cp * tp * pp; }
    int size(Axis a) const;
    bool operator==(const MeshShape&) const = default;
};

// One rank's place on every axis.
struct MeshCoords {
    int dp = 0, cp = 0, ep = 0, tp = 0, pp = 0;

    int at(Axis a) const;
    bool operator==(const MeshCoords&) const = default;
};

class DeviceMesh {
public:
    // One device.
    DeviceMesh() = default;
    // Throws ConfigError (check) when the shape does not fit `world` devices.
    DeviceMesh(MeshShape shape, int64_t world);
    // The shape alone, for pictures and estimates of a mesh not yet fitted to its devices: its
    // axes at least 1 (Error otherwise), its size whatever it is.
    explicit DeviceMesh(MeshShape shape);

    // Refuses a shape that is not `world` devices, an axis below 1 (its key "strategy.<axis>")
    // and an expert axis that does not divide cp · dp ("strategy.ep"). The device-count message
    // names the axes above 1 with dp, tp and pp always: "the mesh dp · tp · pp = 2 · 2 · 1 = 4
    // devices, but the run has 3" (key "strategy").
    static void check(const MeshShape& shape, int64_t world);

    const MeshShape& shape() const { return m_shape; }
    int size() const { return static_cast<int>(m_shape.devices()); }
    int size(Axis a) const { return m_shape.size(a); }

    MeshCoords coords(int rank) const;
    int coord(int rank, Axis a) const { return coords(rank).at(a); }
    // The rank at `c` (its ep coordinate is implied by cp and dp and ignored).
    int rank_of(const MeshCoords& c) const;
    // The rank that shares `rank`'s coordinates except `a`, which is `index`.
    int with(int rank, Axis a, int index) const;

    // The ranks that share every coordinate of `rank` but those of `axes`, in rank order (so
    // that a rank's place among them is its coordinate on a single axis). ep may not be asked
    // together with cp or dp (it is folded into them).
    std::vector<int> members(int rank, std::initializer_list<Axis> axes) const;
    // Every such group, each once, ordered by its first rank: a partition of the ranks.
    std::vector<std::vector<int>> groups(std::initializer_list<Axis> axes) const;

    // Communicators over groups(axes) for a run's devices (comm::SubGroups: in this process a
    // group reads its members' memory; a group with a member in another process sends messages
    // over `world` on `tag`, which no other messages of `world` may use).
    std::unique_ptr<SubGroups> communicators(std::initializer_list<Axis> axes, const std::vector<Device*>& devices,
                                             Group* world, int tag) const;

    // How people name a device of the mesh: "tp 1 · dp 0 · stage 2", each axis above 1 (on one
    // device, "dp 0").
    std::string label(int rank) const;

private:
    MeshShape m_shape;
};

}  // namespace paralab::comm
