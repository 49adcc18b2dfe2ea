#include "engine/plan/compare.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "engine/plan/cluster.h"
#include "engine/plan/mesh.h"
#include "engine/plan/plan_model.h"
#include "engine/util/error.h"

namespace paralab::plan {

namespace {

double relative_error(double predicted, double measured) {
    return measured > 0 ? (predicted - measured) / measured : std::nan("");
}

}  // namespace

RunComparison compare_run(const nlohmann::json& config, const nlohmann::json& summary,
                          const std::vector<double>& step_ends, const std::string& where,
                          const Cluster* on) {
    if (!summary.is_object() || !summary.contains("peak_memory_bytes"))
        throw ConfigError(where + " has no summary: compare a run that has ended");
    const auto steps = summary.value("steps", int64_t{0});
    if (steps <= 0) throw ConfigError(where + " recorded no steps");

    RunComparison c;
    int devices = 1;
    if (config.contains("devices") && config["devices"].is_array())
        devices = std::max(1, static_cast<int>(config["devices"].size()));
    // An MPI job stores every process's devices as "rK/cpu:0", which no experiment file names:
    // the plan needs only their number, as this machine's virtual devices cpu:0..N-1.
    nlohmann::json planned = config;
    bool across_processes = false;
    std::string gpu;  // the first cuda device, if any
    if (planned.contains("devices") && planned["devices"].is_array())
        for (const auto& d : planned["devices"]) {
            const std::string name = d.is_string() ? d.get<std::string>() : std::string();
            across_processes = across_processes || name.find('/') != std::string::npos;
            if (gpu.empty() && name.find("cuda") != std::string::npos) gpu = name;
        }
    if (!on && !gpu.empty())
        throw ConfigError(where + " ran on " + gpu +
                          ", and the local cluster models this machine's CPU: plan it on the "
                          "cluster of that GPU (a preset such as h100-80g or h200, or a cluster "
                          "file)");
    if (across_processes) {
        planned["devices"] = nlohmann::json::array();
        for (int i = 0; i < devices; ++i) planned["devices"].push_back("cpu:" + std::to_string(i));
    }
    const PlanFile file = plan_file_from_json(planned, where);
    Mesh mesh;
    try {
        mesh = mesh_of(file, devices);
    } catch (const ConfigError& e) {
        throw ConfigError(where + ": " + e.what());
    }
    Cluster cluster = on ? *on : local_cluster();
    cluster.nodes = 1;
    cluster.gpus_per_node = static_cast<int>(mesh.devices());  // a run here: a few devices
    cluster.stack = stack_preset("paralab");                    // ParaLab's engine ran it
    const PlanModel model = plan_model(file.experiment);
    c.predicted = predict(file.experiment, model, cluster, mesh);
    if (!c.predicted.skipped.empty())
        throw ConfigError(where + ": strategy " + file.strategy_type + ": " + c.predicted.skipped);
    c.strategy = file.strategy_type;
    c.devices = static_cast<int>(mesh.devices());
    c.cluster = cluster.name;

    // Measured step time: the median of the recorded steps' durations (the slowest device's end
    // of each step), else the run's wall time over its steps.
    if (!step_ends.empty()) {
        std::vector<double> d;
        double previous = 0;
        for (const double end : step_ends) {
            d.push_back(end - previous);
            previous = end;
        }
        std::sort(d.begin(), d.end());
        const size_t n = d.size();
        c.step_s = n % 2 ? d[n / 2] : (d[n / 2 - 1] + d[n / 2]) / 2;
        c.step_from = "median of " + std::to_string(n) + " recorded steps";
    }
    if (!(c.step_s > 0)) {
        c.step_s = summary.value("wall_s", 0.0) / static_cast<double>(steps);
        c.step_from = "wall_s / steps";
    }
    if (summary["peak_memory_bytes"].is_object())
        for (const auto& [device, bytes] : summary["peak_memory_bytes"].items())
            if (bytes.is_number()) c.peak_bytes = std::max(c.peak_bytes, bytes.get<double>());
    c.samples_per_s = summary.value("samples_per_s", 0.0);
    c.time_error = relative_error(c.predicted.step_time_s, c.step_s);
    c.predicted_peak_bytes =
        c.predicted.memory_total - c.predicted.memory[static_cast<size_t>(MemCategory::workspace)];
    c.memory_error = relative_error(c.predicted_peak_bytes, c.peak_bytes);
    c.rate_error = relative_error(c.predicted.samples_per_s, c.samples_per_s);
    return c;
}

}  // namespace paralab::plan
