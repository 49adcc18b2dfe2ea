// The machines a plan is made for (docs/planner.md, "Clusters"): nodes of identical devices, a
// fast link inside a node (NVLink) and a slower one across nodes (InfiniBand). The GPU presets
// are cluster files, resources/clusters/NAME.json, each figure with its source, compiled into
// the program; a user describes another cluster in a file of the same keys.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/device/device.h"
#include "engine/plan/stack.h"

namespace paralab::plan {

// The largest cluster a plan is made for: nodes, devices per node, and devices in all (a plan's
// work grows with them; docs/planner.md, "Bounds").
constexpr int kMaxNodes = 1000000;
constexpr int kMaxGpusPerNode = 4096;
constexpr int64_t kMaxClusterDevices = int64_t{1} << 20;

struct Cluster {
    std::string name;
    int nodes = 1;
    int gpus_per_node = 8;
    // Per device. Peak dense matrix rates: 16-bit (bf16/fp16) and fp32 (what an fp32 GEMM runs at).
    double peak_flops_16bit = 0;
    double peak_flops_fp32 = 0;
    double memory_bytes = 0;  // device memory
    double reserved_bytes =
        0;  // of it, taken before training (runtime context, library workspaces)
    double memory_bandwidth = 0;  // bytes/s
    // A GEMM whose smallest dimension is w runs at peak · gemm_efficiency · w / (w +
    // gemm_half_width); the _fp32 pair for fp32 GEMMs (no tensor cores: another curve).
    double gemm_efficiency = 0.8;
    double gemm_half_width = 64;
    double gemm_efficiency_fp32 = 0.8;
    double gemm_half_width_fp32 = 64;
    // A fused attention kernel (FlashAttention-like) runs its two products at peak ·
    // fused_attention_efficiency · d / (d + fused_attention_half_width), d the head dimension
    // (half width 0: the same rate at every head dimension).
    double fused_attention_efficiency = 0.8;
    double fused_attention_half_width = 0;
    // Links, per device and direction (bytes/s), and the latency α of one message (s).
    double intra_bandwidth = 0;
    double intra_latency = 0;
    double inter_bandwidth = 0;
    double inter_latency = 0;
    // What one device costs per hour of the run (any currency; the file's source says which),
    // for the cost of training N tokens; unset when the file gives none.
    std::optional<double> price_per_gpu_hour;
    // The software the plan assumes on it (`--stack`; "ideal" unless set).
    Stack stack;

    int devices() const { return nodes * gpus_per_node; }
    double fused_attention_fraction(double head_dim) const {
        return fused_attention_efficiency * head_dim / (head_dim + fused_attention_half_width);
    }
    double peak_flops(MatmulPrecision precision) const {
        return precision == MatmulPrecision::fp32 ? peak_flops_fp32 : peak_flops_16bit;
    }
    // The fraction of peak_flops(precision) a GEMM whose smallest dimension is w reaches.
    double gemm_fraction(MatmulPrecision precision, double w) const {
        return precision == MatmulPrecision::fp32
                   ? gemm_efficiency_fp32 * w / (w + gemm_half_width_fp32)
                   : gemm_efficiency * w / (w + gemm_half_width);
    }
};

// A GPU preset's file: its name (the file's, without .json) and its text.
struct PresetFile {
    const char* name;
    const char* text;
};
// Every resources/clusters/*.json, by name (a source generated at build time).
std::span<const PresetFile> preset_files();

// The preset names: the files' (a100-80g, h100-80g, h200), then local.
std::vector<std::string> preset_names();
// A preset by name (one node); throws ConfigError naming the known presets for another name.
Cluster preset(const std::string& name);
// This machine's virtual CPU devices: one node of as many devices as hardware threads, with the
// rates `paralab bench --calibrate` measured (calibrate.h), else the documented defaults
// (docs/planner.md, "local"). Throws ConfigError naming a malformed calibration file.
Cluster local_cluster();
// The keys of a cluster file (docs/planner.md), besides "sources".
std::vector<std::string> cluster_keys();
// A cluster from a JSON object (the keys above, and "sources": for any of them, where its figure
// comes from); throws ConfigError naming the JSON path of the first bad value, of a missing
// required key, or of a key that is not one of these.
Cluster cluster_from_json(const nlohmann::json& j);
// Refuses nodes × gpus_per_node above kMaxClusterDevices (ConfigError at `path`: the key, or the
// command-line option, that made it so).
void check_cluster_size(int64_t nodes, int64_t gpus_per_node, const std::string& path);
// A preset name, or a path to a JSON file (ends in .json, or names an existing file); errors
// name the file.
Cluster load_cluster(const std::string& name_or_file);

}  // namespace paralab::plan
