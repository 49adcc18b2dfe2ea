// `paralab plan` (docs/planner.md): predicts a configuration at cluster scale without running it.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace paralab::app {

struct PlanArgs {
    std::string file;
    std::string cluster;    // "": a100-80g for a plan, local (or refused for a GPU run) for --compare
    int nodes = 0;          // 0: from the cluster (a preset: as many nodes as the mesh needs)
    int gpus_per_node = 0;  // 0: the cluster's
    std::vector<std::string> sweeps;
    bool json = false;
    int64_t compare = 0;  // --compare RUN_ID: a stored run's measurements beside its prediction
    std::string db;       // the run store of --compare ("": the default one)
    // Goodput (docs/planner.md, "Goodput"): NaN when not given.
    double failure_rate = kUnset;  // per GPU-hour
    double storage_gbps = kUnset;  // the checkpoint's write bandwidth, all devices together
    double restart_s = kUnset;
    double tokens = kUnset;
    double price_per_gpu_hour = kUnset;  // overrides the cluster file's
    bool cost = false;                   // the cost is asked for: a price must be known
    std::string stack;                   // --stack NAME ("": ideal)
    std::string grad_reduce;             // --grad-reduce-precision 16bit|fp32 ("": the stack's)
    std::string rank = "tokens_per_s";   // --rank: tokens_per_s, mfu, time_to_train
    bool show_skipped = false;           // --show-skipped: list the configurations that cannot run
    static constexpr double kUnset = std::numeric_limits<double>::quiet_NaN();
};

// Adds the `plan` subcommand to `app`, filling `args`.
CLI::App* add_plan_command(CLI::App& app, PlanArgs& args);
// Runs it: 0 done, 1 bad input (the message on stderr).
int run_plan_command(const PlanArgs& args);
// `paralab bench --calibrate`: measures the `local` preset's rates and keeps them in the user's
// data folder (engine/plan/calibrate.h). 0 done, 1 when the file cannot be written.
int run_calibrate_command(bool as_json);

}  // namespace paralab::app
