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

// What bounds this process's host memory, each where known (in bytes): /proc/meminfo's
// MemAvailable; what RLIMIT_AS leaves (its soft limit less the address space the process has
// mapped); what its cgroup leaves (memory.max less memory.current under cgroup v2, for its
// cgroup and each above it; memory.limit_in_bytes less memory.usage_in_bytes under v1).
// `root` is the file system's root ("/"; a test's folder of files in their places).
struct HostMemoryLimits {
    std::optional<int64_t> mem_available, address_space_left, cgroup_left;
    // The least of them, and which it is ("MemAvailable", "RLIMIT_AS", "the cgroup's memory limit").
    std::optional<int64_t> least() const;
    std::string least_name() const;
};
HostMemoryLimits host_memory_limits(const std::string& root = "/");

// Bytes available to a run's devices of this kind: for CPU devices (which share the host's
// memory) the least of host_memory_limits(), for cuda:N that GPU's memory. The environment variable
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
