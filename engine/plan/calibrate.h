// The `local` preset's rates measured on this machine (`paralab bench --calibrate`,
// docs/planner.md, "local"): one virtual CPU device's fp32 GEMM rate, its memory bandwidth and
// the rate of a copy between devices, kept as JSON in the user's data folder.
#pragma once

#include <optional>
#include <string>

namespace paralab::plan {

struct Calibration {
    double gemm_flops = 0;        // fp32 GEMM on one thread, FLOP/s
    double memory_bandwidth = 0;  // bytes read + written per second by a large copy
    double copy_bandwidth = 0;    // bytes copied per second from one buffer to another
    std::string gemm_library;     // what ran the GEMM
};

// Measures for about `seconds` per figure on a thread of its own (one compute thread).
Calibration measure_local(double seconds = 0.5);
// $XDG_DATA_HOME/ParaLab/calibration.json (~/.local/share/ParaLab/ without XDG_DATA_HOME).
std::string calibration_path();
// Writes `c` to `path`, creating its folder; throws Error when it cannot.
void save_calibration(const Calibration& c, const std::string& path);
// The calibration at `path`, or nothing when there is no file; throws ConfigError naming the
// file and the JSON path when it is malformed.
std::optional<Calibration> load_calibration(const std::string& path);

}  // namespace paralab::plan
