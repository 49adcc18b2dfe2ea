// A stored run beside its plan (docs/planner.md, "A run beside its plan"): the run's own
// experiment and devices planned on the `local` cluster (a run on CPU devices) or on the cluster
// its GPUs are (a preset or a cluster file), and what the run measured. Used by
// `paralab plan --compare RUN_ID` and the Runs tab.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/plan/planner.h"

namespace paralab::plan {

struct RunComparison {
    std::string strategy;  // the run's strategy type
    int devices = 0;
    std::string cluster;   // the cluster planned on
    Prediction predicted;
    // The prediction's busiest device without the cluster's reserved bytes (runtime context,
    // library workspaces): what ParaLab's allocator counts, and so what is compared.
    double predicted_peak_bytes = 0;
    double step_s = 0;          // measured step time
    std::string step_from;      // how it was measured ("median of N recorded steps", ...)
    double samples_per_s = 0;   // measured
    double peak_bytes = 0;      // measured: the busiest device's peak
    // (predicted − measured) / measured; NaN without a measurement.
    double time_error = 0, rate_error = 0, memory_error = 0;
};

// `config`: the experiment the run ran; `summary`: its stored summary (steps, wall_s,
// samples_per_s, peak_memory_bytes); `step_ends`: when each recorded step ended, seconds since
// training started (the store's loss curve; may be empty); `where` names the run in errors.
// `on`: the cluster to plan on, its devices the run's own (one node); nullptr: `local`, which
// models this machine's CPU and so refuses a run on cuda devices. Throws ConfigError when the
// run has no summary or no steps, ran on GPUs with no cluster named, or its strategy cannot be
// planned.
RunComparison compare_run(const nlohmann::json& config, const nlohmann::json& summary,
                          const std::vector<double>& step_ends, const std::string& where,
                          const Cluster* on = nullptr);

}  // namespace paralab::plan
