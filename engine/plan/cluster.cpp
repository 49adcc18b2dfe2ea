#include "engine/plan/cluster.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/plan/calibrate.h"
#include "engine/run/json_reader.h"
#include "engine/util/error.h"

namespace paralab::plan {

namespace {

constexpr double kTera = 1e12, kGiga = 1e9, kMicro = 1e-6;

std::string plan_number(double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", x);
    return buf;
}

}  // namespace

std::vector<std::string> preset_names() {
    std::vector<std::string> out;
    for (const PresetFile& f : preset_files()) out.emplace_back(f.name);
    out.emplace_back("local");
    return out;
}

Cluster local_cluster() {
    // Without a calibration (`paralab bench --calibrate`): rates a single core of a current x86
    // CPU reaches in an fp32 GEMM (about half of one AVX2 core's 2 FMA × 8 lanes × 3 GHz =
    // 96 GFLOP/s) and a share of a desktop's memory bandwidth; the link is a copy through
    // shared memory.
    Cluster c;
    c.name = "local";
    c.nodes = 1;
    c.gpus_per_node = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    c.peak_flops_fp32 = 50e9;
    c.peak_flops_16bit = c.peak_flops_fp32;  // no 16-bit matrix units assumed
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    const double ram =
        pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 8 * kGiga;
    c.memory_bytes = ram / c.gpus_per_node;
    c.reserved_bytes = 0;
    c.memory_bandwidth = 10 * kGiga;
    c.gemm_efficiency = c.gemm_efficiency_fp32 = 1.0;  // the rate above is already an achieved one
    c.gemm_half_width = c.gemm_half_width_fp32 = 16;
    c.fused_attention_efficiency = 1.0;
    c.intra_bandwidth = 5 * kGiga;
    c.intra_latency = 20 * kMicro;
    if (const auto measured = load_calibration(calibration_path())) {
        c.name = "local (calibrated)";
        c.peak_flops_fp32 = c.peak_flops_16bit = measured->gemm_flops;
        c.memory_bandwidth = measured->memory_bandwidth;
        c.intra_bandwidth = measured->copy_bandwidth;
        // The curve and the all-reduce's α and β where the file has them (a newer calibration).
        if (measured->gemm_half_width > 0)
            c.gemm_half_width = c.gemm_half_width_fp32 = measured->gemm_half_width;
        if (measured->allreduce_latency > 0 && measured->allreduce_bandwidth > 0) {
            c.intra_latency = measured->allreduce_latency;
            c.intra_bandwidth = measured->allreduce_bandwidth;
        }
    }
    c.inter_bandwidth = c.intra_bandwidth;
    c.inter_latency = c.intra_latency;
    return c;
}

Cluster preset(const std::string& name) {
    if (name == "local") return local_cluster();
    for (const PresetFile& f : preset_files()) {
        if (name != f.name) continue;
        const std::string where = "resources/clusters/" + name + ".json";
        const nlohmann::json j = run::parse_json_text(f.text, where);
        try {
            return cluster_from_json(j);
        } catch (const ConfigError& e) {
            throw ConfigError(where + ": " + e.what());
        }
    }
    std::string known;
    for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
    throw ConfigError("--cluster", "unknown cluster preset \"" + name + "\"; the presets are " +
                                       known + ", or give a cluster file (*.json)");
}

std::vector<std::string> cluster_keys() {
    return {"name",
            "nodes",
            "gpus_per_node",
            "peak_tflops_16bit",
            "peak_tflops_fp32",
            "memory_gb",
            "reserved_gb",
            "memory_bandwidth_gbps",
            "gemm_efficiency",
            "gemm_half_width",
            "gemm_efficiency_fp32",
            "gemm_half_width_fp32",
            "fused_attention_efficiency",
            "fused_attention_half_width",
            "intra_node_bandwidth_gbps",
            "intra_node_latency_us",
            "inter_node_bandwidth_gbps",
            "inter_node_latency_us",
            "price_per_gpu_hour"};
}

void check_cluster_size(int64_t nodes, int64_t gpus_per_node, const std::string& path) {
    // Both factors are at most 10^6 and 4096 here: the product fits an int64.
    const int64_t devices = nodes * gpus_per_node;
    if (devices > kMaxClusterDevices)
        throw ConfigError(path, "nodes × gpus_per_node = " + std::to_string(nodes) + " × " + std::to_string(gpus_per_node) +
                                    " = " + std::to_string(devices) + " devices; a cluster has at most " +
                                    std::to_string(kMaxClusterDevices));
}

Cluster cluster_from_json(const nlohmann::json& j) {
    run::JsonObjectReader r(j, "");
    Cluster c;
    c.name = r.string("name", "custom");
    c.nodes = static_cast<int>(r.integer("nodes", 1, 1, kMaxNodes));
    c.gpus_per_node = static_cast<int>(r.integer("gpus_per_node", 8, 1, kMaxGpusPerNode));
    check_cluster_size(c.nodes, c.gpus_per_node, "gpus_per_node");
    // The ranges of docs/planner.md ("Cluster files"): figures a device or a link can have, from a
    // small CPU to well beyond today's largest GPU, so that no time or memory of a plan is 0,
    // infinite or below a double's resolution.
    const auto rate = [&](const std::string& key, std::optional<double> fallback, double min, double max) {
        const auto v = r.number(key, min, max);
        if (!v && !fallback)
            r.fail(key, "missing; expected a number from " + plan_number(min) + " to " + plan_number(max));
        return v ? *v : *fallback;
    };
    c.peak_flops_16bit = rate("peak_tflops_16bit", std::nullopt, 1e-3, 1e6) * kTera;
    c.peak_flops_fp32 = rate("peak_tflops_fp32", c.peak_flops_16bit / kTera, 1e-3, 1e6) * kTera;
    c.memory_bytes = rate("memory_gb", std::nullopt, 1e-3, 1e6) * kGiga;
    c.reserved_bytes = r.number("reserved_gb", 0.0, 0, 1e6) * kGiga;
    if (c.reserved_bytes >= c.memory_bytes) r.fail("reserved_gb", "must be less than memory_gb");
    c.memory_bandwidth = rate("memory_bandwidth_gbps", std::nullopt, 1e-3, 1e6) * kGiga;
    c.gemm_efficiency = r.number("gemm_efficiency", 0.8, 0.01, 1.0);
    c.gemm_half_width = r.number("gemm_half_width", 64.0, 0, 1e6);
    c.gemm_efficiency_fp32 = r.number("gemm_efficiency_fp32", c.gemm_efficiency, 0.01, 1.0);
    c.gemm_half_width_fp32 = r.number("gemm_half_width_fp32", c.gemm_half_width, 0, 1e6);
    c.fused_attention_efficiency = r.number("fused_attention_efficiency", c.gemm_efficiency, 0.01, 1.0);
    c.fused_attention_half_width = r.number("fused_attention_half_width", 0.0, 0, 1e6);
    c.intra_bandwidth = rate("intra_node_bandwidth_gbps", std::nullopt, 1e-3, 1e6) * kGiga;
    c.intra_latency = r.number("intra_node_latency_us", 5.0, 0, 1e6) * kMicro;
    c.inter_bandwidth = rate("inter_node_bandwidth_gbps", c.intra_bandwidth / kGiga, 1e-3, 1e6) * kGiga;
    c.inter_latency = r.number("inter_node_latency_us", 10.0, 0, 1e6) * kMicro;
    if (const auto price = r.number("price_per_gpu_hour", 0, 1e6)) c.price_per_gpu_hour = *price;
    if (r.has("sources")) {
        // Where each figure comes from: text for people, one string per key of the file.
        run::JsonObjectReader sources(r.raw("sources"), "sources");
        for (const auto& key : cluster_keys())
            if (sources.has(key) && sources.string(key, "").empty())
                sources.fail(key, "expected the source of " + key + ", got an empty string");
        sources.finish();
    }
    r.finish();
    return c;
}

Cluster load_cluster(const std::string& name_or_file) {
    const bool is_file = name_or_file.ends_with(".json") || std::filesystem::exists(name_or_file);
    if (!is_file) return preset(name_or_file);
    const nlohmann::json j = run::read_json_file(name_or_file, "cluster file");
    try {
        return cluster_from_json(j);
    } catch (const ConfigError& e) {
        throw ConfigError(name_or_file + ": " + e.what());
    }
}

}  // namespace paralab::plan
