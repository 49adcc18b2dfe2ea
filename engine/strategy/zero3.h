// zero stage 3 (zero3.cpp): the parts zero.cpp's descriptor hands to stage 3.
#pragma once

#include <memory>
#include <vector>

#include "engine/strategy/registry.h"
#include "engine/strategy/strategy.h"

namespace paralab::strategy {

// The stage-3 strategy (parameters, gradients and optimizer state sharded; FSDP's schedule).
std::unique_ptr<Strategy> make_zero_stage3();

// Its memory model, per device (zero3.cpp says what each category holds).
std::vector<DeviceMemoryEstimate> zero_stage3_memory(const config::Experiment& e, const ModelCost& m);

}  // namespace paralab::strategy
