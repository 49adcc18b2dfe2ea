// Whether a run's model fits the memory of its devices, asked before anything of it is
// allocated: the strategy's predicted memory per device (strategy::estimate_memory, from the
// model's shapes on the meta device) against what the machine has available now.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "engine/config/experiment.h"
#include "engine/tensor/shape.h"

namespace paralab::run {

// Bytes available to a run's devices of this kind: for CPU devices (which share the host's
// memory) /proc/meminfo's MemAvailable, for cuda:N that GPU's memory. The environment variable
// PARALAB_AVAILABLE_MEMORY (bytes, or a number with a K, M, G or T suffix: powers of 1024)
// replaces the figure for every device, to rehearse a smaller machine. Empty when unknown.
std::optional<int64_t> available_memory_bytes(const std::string& device);

// Refuses, with ConfigError on "devices", a run whose predicted memory exceeds what its devices
// have: "needs 12.5 GiB per device (25.0 GiB for the 2 CPU devices, which share the host's
// memory), 7.8 GiB available". Virtual devices of one physical device (cpu:K, the listings of
// one GPU) add up. `input` is the model's per-example input (run::model_input_shape).
void check_memory_fits(const config::Experiment& e, const Shape& input);

// "12.5 GiB"
std::string gib_text(double bytes);

}  // namespace paralab::run
