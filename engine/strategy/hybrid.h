// hybrid (hybrid.cpp): the mesh's parts composed. A strategy that is hybrid with some axes fixed
// (tensor_parallel: tp over every device) is a preset: a function from its experiment and device
// count to hybrid's options, run by the same code.
#pragma once

#include <memory>
#include <vector>

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

// hybrid's memory model for `e` run as `preset` says (null: e.strategy is hybrid's own).
std::vector<DeviceMemoryEstimate> hybrid_memory(const config::Experiment& e, const ModelCost& m,
                                                HybridPreset preset = nullptr);

}  // namespace paralab::strategy
