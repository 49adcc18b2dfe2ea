// The experiment file (`*.paralab.json`, EXPERIMENT.md): everything needed to repeat a run.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/data/dataset.h"
#include "engine/nn/spec.h"
#include "engine/optim/optimizer.h"
#include "engine/optim/schedule.h"
#include "engine/tensor/shape.h"

namespace paralab::run {

// The newest file format this build reads.
constexpr int kExperimentFormat = 1;

struct StrategyConfig {
    std::string type = "single";  // single, data_parallel, ddp, zero, hogwild, param_server,
                                  // model_parallel, pipeline
    double bucket_mb = 25.0;      // ddp
    bool overlap = true;          // ddp
    std::string balance = "even"; // ddp: "even" (shard_of_batch) | "speed" (rows by measured speed)
    int zero_stage = 1;           // zero
    std::string ps_mode = "sync"; // param_server
    int64_t staleness = 0;        // param_server async
    std::vector<int64_t> split;   // model_parallel / pipeline: first layer index of each stage
    int64_t micro_batches = 4;    // pipeline
    std::string schedule = "gpipe";  // pipeline: gpipe | 1f1b
    bool sync_batchnorm = true;      // data_parallel, ddp, zero: batchnorm statistics over all devices
    std::string straggler_device;    // teaching: one slow device ("" = none)
    double straggler_delay_ms = 0.0;
};

struct TrainConfig {
    int64_t epochs = 1;
    std::optional<int64_t> max_steps;  // caps optimizer steps
    int64_t grad_accum = 1;
    std::optional<double> clip_norm;
    std::string precision = "fp32";    // fp32 | bf16 | fp16
    int64_t eval_every = 0;            // evaluate every N steps (0: only at the end)
};

struct Experiment {
    int format = kExperimentFormat;
    std::string name;
    uint64_t seed = 0;
    data::DataConfig data;
    std::optional<Shape> input;  // model.input; from the data set when absent
    std::vector<nn::LayerSpec> layers;
    std::string loss = "cross_entropy";
    std::vector<std::string> devices{"cpu:0"};
    StrategyConfig strategy;
    optim::OptimizerConfig optimizer;
    optim::ScheduleConfig schedule;
    TrainConfig train;
};

// Validates and converts; throws ConfigError naming the JSON path of the first problem.
Experiment parse_experiment(const nlohmann::json& j);
// Reads a file: a missing file, a JSON syntax error (with line and column) or an invalid
// experiment each throw ConfigError naming the file.
Experiment load_experiment(const std::string& path);
// Canonical JSON of an experiment (every field, defaults filled in): what the run store keeps
// and what the GUI saves. parse_experiment(to_json(e)) gives e back.
nlohmann::json to_json(const Experiment& e);

// The model's per-example input: model.input when given, else the data set's example shape
// (read from one example of each split, so it is cheap even for large sets).
Shape model_input_shape(const Experiment& e);

// The names EXPERIMENT.md allows for strategy.type.
const std::vector<std::string>& strategy_types();

}  // namespace paralab::run
