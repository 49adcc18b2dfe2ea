// The experiment file's content (`*.paralab.json`, docs/experiment-format.md) as value types:
// what every layer of the engine may include. Parsing and writing JSON live in
// engine/run/experiment_file.h; each strategy's options are declared by its registry entry
// (engine/strategy/registry.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/config/options.h"
#include "engine/data/dataset.h"
#include "engine/nn/spec.h"
#include "engine/optim/optimizer.h"
#include "engine/optim/schedule.h"
#include "engine/tensor/shape.h"

namespace paralab::config {

// The newest file format this build reads.
constexpr int kExperimentFormat = 1;

struct StrategyConfig {
    std::string type = "single";  // a registered strategy's name (strategy::registry())
    OptionValues options;         // the type's options (strategy::option reads them, typed)
    std::string straggler_device;    // teaching: one slow device ("" = none), any strategy
    double straggler_delay_ms = 0.0;
    // The slow role moves one device along `devices` each step, starting at straggler_device
    // (step s: the device s − 1 places after it, cyclically): every device is slow one step in N.
    bool straggler_rotate = false;
};

struct TrainConfig {
    int64_t epochs = 1;
    std::optional<int64_t> max_steps;  // caps optimizer steps
    int64_t grad_accum = 1;
    std::optional<double> clip_norm;
    std::string precision = "fp32";    // fp32 | bf16 | fp16
    int64_t eval_every = 0;            // evaluate every N steps (0: only at the end)
    int64_t checkpoint_every = 0;      // checkpoint every N steps (0: at epoch ends and on stop)
    std::string recompute = "none";    // none | selective | full (nn/recompute.h)
    // Teaching: each device starts at most this many steps a second (0: as fast as it runs), so
    // that a run of a fraction of a second can be watched; the wait is not counted in its time.
    double max_steps_per_s = 0;
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

}  // namespace paralab::config
