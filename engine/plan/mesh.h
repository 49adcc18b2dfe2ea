// How a plan spreads one training step over dp · tp · pp devices (docs/planner.md, "The mesh"):
// read from an experiment's `strategy` section (`hybrid`, or a single-axis strategy mapped onto
// it) and `train`, and changed one key at a time by a sweep.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/config/experiment.h"
#include "engine/device/device.h"
#include "engine/nn/recompute.h"
#include "engine/strategy/stages.h"

namespace paralab::plan {

struct Mesh {
    int dp = 1, tp = 1, pp = 1;
    int zero = 0;                   // 0–3, over the data-parallel group
    int micro_batches = 1;          // per optimizer step per data-parallel replica
    strategy::stages::Schedule schedule = strategy::stages::Schedule::one_f_one_b;
    int interleave = 1;  // chunks per device (interleaved_1f1b)
    bool sequence_parallel = false;
    nn::Recompute recompute = nn::Recompute::none;      // train.recompute
    MatmulPrecision precision = MatmulPrecision::fp32;  // train.precision
    double bucket_mb = 25;                              // the gradient all-reduce's bucket
    // The gradient all-reduce runs bucket by bucket under the backward (ddp's `overlap`), or
    // after it.
    bool overlap_grad_reduce = true;

    int64_t devices() const { return int64_t{dp} * tp * pp; }
    // Model chunks per pipeline device: `interleave` under interleaved_1f1b, else 1.
    int chunks() const {
        return schedule == strategy::stages::Schedule::interleaved_1f1b ? interleave : 1;
    }
};

// An experiment file read for planning: everything but the strategy through the experiment
// parser (errors name the JSON path), the strategy section kept as written.
struct PlanFile {
    config::Experiment experiment;  // its strategy is `single`
    std::string strategy_type;
};

// Reads FILE; throws ConfigError naming the file and the JSON path.
PlanFile read_plan_file(const std::string& path);
// The same from an experiment already read (a stored run's `config`); errors name `where`.
PlanFile plan_file_from_json(nlohmann::json j, const std::string& where);
// The mesh of `file` on `devices` devices: hybrid's options, or ddp/data_parallel → dp = N,
// zero{stage} → dp = N with zero, tensor_parallel → tp = N, pipeline/model_parallel → pp = N,
// single → 1. Throws ConfigError naming the JSON path ("strategy.tp").
Mesh mesh_of(const PlanFile& file, int devices);
// The other way: the mesh as hybrid's strategy options (every one of them), for a run of the
// planned configuration (the Plan tab's "Run here").
config::StrategyConfig hybrid_options(const Mesh& m);
// One line for people: "dp 2 · tp 4 · pp 1, 1f1b, 4 micro-batches of 8, zero 1, recompute
// none, bf16" (`micro_batch` 0: its size left out).
std::string mesh_line(const Mesh& m, int64_t micro_batch);

// The keys a sweep may change, and one change: throws ConfigError naming `--sweep` for an
// unknown key or a value it does not take.
std::vector<std::string> sweep_keys();
void set_mesh_key(Mesh& m, const std::string& key, const std::string& value);
// "tp=1,2,4" -> {"tp", {"1","2","4"}}; throws ConfigError for a malformed sweep.
std::pair<std::string, std::vector<std::string>> parse_sweep(const std::string& text);

}  // namespace paralab::plan
