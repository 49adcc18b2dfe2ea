// Goodput at scale (docs/planner.md, "Goodput"): with a GPU failure rate, a checkpoint written
// at the storage's bandwidth and a restart time, the expected fraction of wall time spent on
// steps that count, the checkpoint interval that maximises it, and the time and cost of
// training N tokens.
#pragma once

#include <optional>

#include <nlohmann/json_fwd.hpp>

namespace paralab::plan {

struct Prediction;

struct GoodputInputs {
    double failure_rate_per_gpu_hour = 0;  // unexpected interruptions per GPU and hour
    double storage_bytes_per_s = 0;        // the checkpoint's write rate, all devices together
    double restart_s = 0;                  // from a failure to training again (before rework)
    double tokens = 0;                     // to train; 0: no time to train
    std::optional<double> price_per_gpu_hour;  // the cluster's, or the command line's
};

struct Goodput {
    double checkpoint_bytes = 0;    // parameters + optimizer state of the whole model
    double checkpoint_write_s = 0;  // δ: the step stalls while it is written
    double mtbf_s = 0;              // M: the whole job's mean time between failures
    double checkpoint_interval_s = 0;  // τ: compute between two checkpoints
    double goodput = 0;             // expected useful fraction of wall time
    double time_to_train_s = 0;     // 0 without tokens
    std::optional<double> cost;     // with tokens and a price
};

// Daly's expected wall time (J. T. Daly 2006, "A higher order estimate of the optimum checkpoint
// interval for restart dumps", Future Generation Computer Systems 22(3)) for work `solve_s` checkpointed every `tau` s of compute:
//   T = M · e^(R/M) · (e^((τ+δ)/M) − 1) · solve / τ,
// failures arriving as a Poisson process of mean interval M; goodput = solve / T.
double goodput_at(double tau, double checkpoint_s, double restart_s, double mtbf_s);
// The interval that maximises it: Young's √(2δM) with Daly's correction (the same paper's higher-order estimate),
//   τ = √(2δM) · (1 + ⅓·√(δ/(2M)) + (1/9)·δ/(2M)) − δ   for δ < 2M,   τ = M otherwise.
double daly_interval(double checkpoint_s, double mtbf_s);
// Throws ConfigError (naming the option) for a failure rate, bandwidth or token count ≤ 0 or a
// negative restart time.
void check_goodput_inputs(const GoodputInputs& in);
// For one prediction (its devices, tokens/s and checkpoint bytes).
Goodput goodput_of(const Prediction& p, const GoodputInputs& in);
// Adds goodput, checkpoint_interval_s, time_to_train_s (with tokens), cost (with a price) and
// checkpoint_bytes, checkpoint_write_s, mtbf_s to a prediction's JSON object.
void add_goodput_json(nlohmann::json& out, const Goodput& g, const GoodputInputs& in);

}  // namespace paralab::plan
