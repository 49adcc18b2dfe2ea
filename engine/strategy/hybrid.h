// hybrid: the mesh's parts composed (hybrid.cpp), and what the registry knows of its mesh before
// anything runs (mesh_model.cpp). A strategy that is hybrid with some axes fixed
// (tensor_parallel: tp over every device) is a preset: a function from its experiment and device
// count to hybrid's options, run by the same code.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/comm/device_mesh.h"
#include "engine/strategy/registry.h"
#include "engine/strategy/strategy.h"

namespace paralab::strategy {

// Hybrid's options (strategy.type "hybrid") that run `e`'s strategy on `world` devices (the
// descriptor's `as_hybrid`).
using HybridPreset = decltype(StrategyDescriptor::as_hybrid);

// The preset's own checks of `e` for a run of `world` devices (a job's world): throws ConfigError
// naming the file's path, before hybrid's checks of the options it makes.
using PresetCheck = void (*)(const config::Experiment& e, int world);

// The strategy named `name` that runs hybrid with `preset`'s options (null: e.strategy is
// hybrid's own), checked first by `check` (may be null). The dp group's collectives are named
// `dp_prefix` + what they do ("dp_all_gather_params"; a preset whose only group is the dp group
// names them without a prefix).
std::unique_ptr<Strategy> make_hybrid(const char* name, HybridPreset preset, PresetCheck check = nullptr,
                                      const char* dp_prefix = "dp_");

// The mesh of hybrid's options dp, tp and pp.
comm::MeshShape mesh_shape_of(const config::StrategyConfig& s);
// The registry's checks of hybrid's options for a run of `world` devices (a job's world, whose
// processes each list only their own devices in e.devices): ConfigError naming the option.
void check_mesh(const config::Experiment& e, int64_t world);
// The top-level layer bounds [0, b1, ..., L] of `parts` stages or chunks: `split` when it has
// parts − 1 of them, otherwise balanced by forward FLOPs (stages::balanced_split).
std::vector<size_t> stage_bounds_of(const std::vector<int64_t>& split, const std::vector<int64_t>& flops,
                                    const std::vector<int64_t>& params, int parts);
// The same for the top-level layers of a built model and `s`'s split.
std::vector<size_t> stage_bounds_of(const config::StrategyConfig& s, nn::Sequential& net, int parts);

// hybrid's memory model for `e` run as `preset` says (null: e.strategy is hybrid's own).
std::vector<DeviceMemoryEstimate> hybrid_memory(const config::Experiment& e, const ModelCost& m,
                                                HybridPreset preset = nullptr);

}  // namespace paralab::strategy
