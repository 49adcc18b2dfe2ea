// The planner (docs/planner.md): predicts one training step of an
// experiment on a cluster without running it — step time and where it goes, tokens/s, MFU,
// and each device's memory by category — from the engine's own per-layer counts
// (nn::summarize), a roofline per device, α–β collectives per link level and the pipeline
// schedule simulated event by event.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/config/experiment.h"
#include "engine/plan/cluster.h"
#include "engine/plan/collectives.h"
#include "engine/plan/mesh.h"
#include "engine/plan/pipeline_sim.h"
#include "engine/plan/plan_model.h"
#include "engine/tensor/allocator.h"

namespace paralab::plan {

struct GoodputInputs;

// ---- one prediction ------------------------------------------------------------------------
struct Breakdown {
    double compute = 0, recompute = 0, tp_comm = 0, pp_bubble = 0, pp_comm = 0, dp_comm = 0,
           optimizer = 0;
};

struct Prediction {
    Mesh mesh;
    std::string skipped;  // why the configuration cannot run ("" when it can)
    std::string stack;    // the software stack it was planned with (Cluster::stack)
    int devices = 0;
    int64_t micro_batch = 0;  // rows per micro-batch
    double step_time_s = 0, tokens_per_s = 0, samples_per_s = 0, mfu = 0;
    bool fits = false;
    // The most loaded device's bytes by MemCategory (workspace: the cluster's reserved bytes).
    std::array<double, kMemCategoryCount> memory{};
    double memory_total = 0, memory_capacity = 0;
    int memory_stage = 0;  // the pipeline stage of that device
    Breakdown breakdown;
    double model_flops_per_step = 0;  // 3 × forward, without recomputation
    // What a checkpoint holds: the whole model's parameters and optimizer state, in the bytes
    // the memory model gives them (16-bit parameters with an fp32 master in mixed precision).
    double checkpoint_bytes = 0;
};

// Bytes per parameter of the memory model: the parameter itself (and its gradient) in the
// step's precision, and the optimizer's state (`state_numbers` fp32 numbers, plus an fp32 master
// copy in mixed precision).
double parameter_bytes(const Mesh& mesh);
double optimizer_state_bytes(const Mesh& mesh, int state_numbers);

// The reason `mesh` cannot run `model` with a global batch of `batch` on `devices` devices, or "".
std::string check_mesh(const Mesh& mesh, const PlanModel& model, int64_t batch, int devices);
// The most (chunk, micro-batch) pairs a plan's pipeline simulation holds: pp × interleave ×
// micro_batches (docs/planner.md, "Bounds").
constexpr int64_t kMaxPipelinePairs = int64_t{1} << 21;
// One prediction; a mesh check_mesh refuses gives a Prediction with only `skipped` set. With
// `timeline`, also every forward and backward of the simulated pipeline (transfers included),
// one lane per stage device.
Prediction predict(const config::Experiment& e, const PlanModel& model, const Cluster& cluster,
                   const Mesh& mesh, std::vector<PipeSpan>* timeline = nullptr);

// A mesh sweep's dp (docs/planner.md, "Sweeps"): dp = devices ÷ (tp·pp); with `keep_rows`, the
// micro-batches follow it so that each keeps `rows` rows (micro_batches = batch ÷ (dp × rows),
// at least 1). Returns why not when tp·pp does not divide the devices (m unchanged), else "".
std::string fill_dp(Mesh& m, int devices, int64_t batch, int64_t rows, bool keep_rows);

// What a sweep ranks by (higher tokens/s, higher MFU, or shorter time to train, which needs
// goodput inputs with tokens).
enum class Rank { tokens_per_s, mfu, time_to_train };
// "tokens_per_s", "mfu", "time_to_train"; throws ConfigError at "--rank" for another name.
Rank rank_from_name(const std::string& name);

struct SweepOptions {
    Rank rank = Rank::tokens_per_s;
    // For Rank::time_to_train: the goodput inputs (tokens > 0).
    const GoodputInputs* goodput = nullptr;
};

// Every combination of the sweeps' values over `base`, ranked: configurations that fit by
// `options.rank`, then those that do not (the same way), then the skipped ones. Unless dp is
// swept, a sweep of tp or pp derives dp from the device count (fill_dp), and the
// micro-batches follow it unless they are swept too.
std::vector<Prediction> sweep(
    const config::Experiment& e, const PlanModel& model, const Cluster& cluster, const Mesh& base,
    const std::vector<std::pair<std::string, std::vector<std::string>>>& sweeps,
    const SweepOptions& options = {});

// The JSON object of `paralab plan --json` (docs/planner.md; with "config" when `swept_keys` is
// not empty).
nlohmann::json to_json(const Prediction& p, const std::vector<std::string>& swept_keys = {});

}  // namespace paralab::plan
