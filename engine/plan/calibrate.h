// The `local` preset's rates measured on this machine (`paralab bench --calibrate`,
// docs/planner.md, "local"): one virtual CPU device's fp32 GEMM rate by size, its memory
// bandwidth, the rate of a copy between devices and the local all-reduce's α and β, kept as
// JSON in the user's data folder.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace paralab::plan {

struct Calibration {
    double gemm_flops = 0;        // fp32 GEMM on one thread, FLOP/s: the fitted large-size rate
    double memory_bandwidth = 0;  // bytes read + written per second by a large copy
    double copy_bandwidth = 0;    // bytes copied per second from one buffer to another
    std::string gemm_library;     // what ran the GEMM
    // The GEMM rate by size: square n³ GEMMs at n = 64 … 512 fitted to gemm_flops · n / (n + w½)
    // (0: not measured, an older file).
    double gemm_half_width = 0;
    // The local ring all-reduce of two virtual devices, t = 2α + bytes / β (0: not measured):
    // α per message (s), β per device and direction (bytes/s).
    double allreduce_latency = 0, allreduce_bandwidth = 0;
};

// The rate curve r(n) = peak · n / (n + w½) through measured (n, rate) points: least squares on
// 1 / r = (1 / peak) + (w½ / peak) · (1 / n). Returns {peak, w½}; w½ is at least 0.
std::pair<double, double> fit_gemm_curve(const std::vector<std::pair<double, double>>& points);

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
