// The strategy registry (docs/design.md, "The strategy registry"): one descriptor per
// strategy, declared in the strategy's own file beside its code, and listed once in
// registry.cpp. Everything that knows about strategies reads it: the experiment parser and
// `to_json` (the options), the CLI's `--strategy`, the run (the factory and the device rule),
// the Strategy tab (its form, explanation, diagram and predicted memory), the Runs tab's
// colours and docs/experiment-format.md.
//
// Adding a strategy: one file with its code and a `StrategyDescriptor <name>_descriptor()`,
// and one line in registry.cpp's list.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/comm/device_mesh.h"
#include "engine/config/experiment.h"
#include "engine/nn/recompute.h"
#include "engine/tensor/allocator.h"

namespace paralab::strategy {

class Strategy;

// ---- the memory model ---------------------------------------------------------------------
// The memory each device of a run should need, by category, predicted from the experiment and
// the model's shapes before anything runs. Rules shared by the strategies (bytes are f32, 4
// per number; P = parameters, k = optimizer numbers per parameter: 0 for plain SGD, 1 for SGD
// with momentum, 2 for Adam/AdamW; rows = the device's share of the global batch,
// shard_of_batch's rule); each strategy's own rule is beside its code. It is an estimate,
// checked against real runs: on the char-GPT example every category of every device within 10%
// for every strategy that runs it (tests/engine/test_memory_model.cpp), and on small models in
// each strategy's tests and tests/ui/test_setup_panels.cpp. Activations are the rough part on
// models other than transformers (backward's temporaries, the loss's buffers; convolutions and
// recurrent layers keep more). Workspace is not predicted.

struct DeviceMemoryEstimate {
    std::string device;  // "cpu:0"
    // What the device is when it differs from a plain replica: "server", "worker",
    // "stage 2: layers 3–4", ...; empty for a replica (or the single device).
    std::string role;
    std::array<int64_t, kMemCategoryCount> bytes{};
    int64_t total() const;
    void set(MemCategory c, int64_t numbers) { bytes[static_cast<size_t>(c)] = numbers * 4; }
};

// The model as the memory models need it: per top-level layer, its parameters and the numbers
// it outputs per example (a residual block's body counted with it).
struct ModelCost {
    std::vector<int64_t> layer_parameters;
    std::vector<int64_t> layer_flops;  // forward, per example: what the pipeline's stages balance
    // By top-level layer of the model (a repeated layer's copies one by one, nn::expand_repeats).
    std::vector<int64_t> layer_outputs;      // per example
    std::vector<int64_t> layer_activations;  // per example: what each layer holds for backward
    std::vector<int64_t> layer_scores;       // per example: of those, attention probabilities
    std::vector<int64_t> layer_backward;     // per example: its backward's extra (nn::backward_extra_of)
    nn::Recompute recompute = nn::Recompute::none;  // train.recompute
    Shape input;               // per example (model_cost's)
    int64_t input_numel = 0;   // per example
    int64_t output_numel = 0;  // the model's output per example
    int64_t parameters() const;
    // Numbers per example held for backward: what every layer keeps (Layer::activations_per_sample:
    // a linear its input, attention its q, k, v and probabilities, ...) and the loss's copy of
    // the output.
    int64_t activations_per_example() const;
    // Numbers per example held for backward by layers [first, last) under `recompute`: all of
    // theirs (none); without the attention probabilities but one attention's (selective); each
    // layer's output, all of the last one's, and one layer's whole while it is recomputed (full);
    // plus a layer's output and input gradients, alive while its backward runs, and what that
    // backward allocates beside them (layer_backward).
    int64_t activations_of(size_t first, size_t last) const;
    // The two parts of activations_of: what is kept per micro-batch in flight (`kept`), and what
    // exists for a moment during one backward (`transient`: a recomputed layer, a layer's
    // gradients and its backward's extra), once per device however many micro-batches it holds.
    struct Held {
        int64_t kept = 0, transient = 0;
    };
    Held held_of(size_t first, size_t last) const;
};

// Reads the shapes of `e`'s model for per-example `input` (run::model_input_shape) through
// nn::summarize (nothing allocated). Throws like nn::Model (ShapeError, ConfigError) when it does
// not build.
ModelCost model_cost(const config::Experiment& e, const Shape& input);

// How many optimizer numbers each parameter carries (0, 1 or 2).
int optimizer_state_per_parameter(const optim::OptimizerConfig& o);
// Rows of a global batch of `batch` for shard `r` of `shards` (data::shard_of_batch's rule).
int64_t rows_of(int64_t batch, int r, int shards);
// One estimate per device of `e`, in order, with its name set and every byte zero.
std::vector<DeviceMemoryEstimate> blank_estimates(const config::Experiment& e);
// The device as one whole replica training `rows` rows: parameters, gradients, optimizer state
// and activations (no role).
void whole_replica(DeviceMemoryEstimate& d, const config::Experiment& e, const ModelCost& m,
                   int64_t rows);

// ---- the picture of one step ----------------------------------------------------------------
// What the Strategy tab's diagram draws: devices as boxes and what moves between them, as
// data. The diagram has one drawing per layout; the strategy gives the words.
struct StepPicture {
    enum class Layout {
        one,     // a single box
        hub,     // one box above a row of devices, arrows down and up (or shared, both ways)
        ring,    // the devices in a ring, a chunk passed to the next
        shards,  // the devices in a row, each with its 1/N shard marked, two buses
        chain,   // the devices in a row, activations forward and gradients back
        mesh,    // a dp x tp x pp grid: a column of dp rows of tp devices per pipeline stage
    };
    Layout layout = Layout::one;
    std::vector<std::string> subtitles{};  // under each device's name (by device index)
    // hub: its title and subtitle; the first device is the hub itself when `hub_is_device`
    // (param_server's server), else the hub is drawn above every device; `shared`: dashed
    // two-way arrows (no messages: one memory).
    std::string hub_title{}, hub_subtitle{};
    bool hub_is_device = false;
    bool shared = false;
    std::string down_label{};  // hub: on the first arrow down; shards: the upper bus
    std::string up_label{};    // shards: the lower bus
    std::string centre{};      // ring: the label inside the ring
    std::string top{};         // chain: the line above the devices
    std::string caption{};     // the sentence under the picture
    std::string note{};        // a muted remark (one: above; shards: last line)
    comm::MeshShape mesh{};  // mesh: the grid (each device's place: comm::DeviceMesh)
};

// ---- the descriptor -------------------------------------------------------------------------
// One option as part of a run's name in the Runs tab ("stage 2", "1f1b", "4 micro-batches").
struct VariantPart {
    std::string key{};
    // "{}" is replaced by the value ("stage {}"); a boolean option shows `text` when true and
    // `text_if_false` when false ("" shows nothing).
    std::string text{};
    std::string text_if_false{};
};

// A strategy that runs its devices as consecutive stages: how many, how many micro-batches each
// step, in which schedule, how many model chunks each device holds (interleaved_1f1b; the
// Timeline measures the bubble against (p − 1) / (v·m + p − 1), v = chunks), and how many devices
// run the stages (a mesh's: each stage dp · tp devices that run the same schedule).
struct PipelineShape {
    int stages = 0;
    int micro_batches = 1;
    std::string schedule{};  // "gpipe", "1f1b", ...; "one at a time" for model_parallel
    int chunks = 1;
    int devices = 0;  // 0: one per stage
};

struct StrategyDescriptor {
    std::string name{};  // strategy.type
    std::vector<config::OptionSpec> options{};
    // One paragraph for the Strategy tab and the file-format page; option keys in `backticks`.
    std::string explanation{};
    std::string color{};  // "#rrggbb": the strategy's colour in the Runs tab's plots
    // The single-device baseline that scaling efficiency is measured against (single).
    bool baseline = false;
    // How many devices (ranks) it runs on; 0: no upper bound. `device_rule` says why, for the
    // message that refuses another count.
    int min_devices = 1;
    int max_devices = 0;
    std::string device_rule{};
    std::unique_ptr<Strategy> (*make)() = nullptr;
    // Refuses, before any device is made, devices this strategy cannot run on: throws
    // ConfigError naming the JSON path ("devices[2]"). Null: any devices.
    void (*check_devices)(const config::Experiment& e) = nullptr;
    // Refuses options that do not fit the experiment's model and devices (a split against the
    // layers): throws ConfigError naming the path. `paralab validate` and the GUI call it; the run
    // makes the same check when it sets the strategy up. Null: nothing to check.
    void (*check_options)(const config::Experiment& e) = nullptr;
    // The estimate for each device of `e` (on more than one device; one device is always a
    // whole replica).
    std::vector<DeviceMemoryEstimate> (*memory)(const config::Experiment& e, const ModelCost& m) = nullptr;
    StepPicture (*picture)(const config::Experiment& e) = nullptr;
    // The options that tell two runs of this strategy apart, in the order they are named.
    std::vector<VariantPart> variant{};
    // Null: not a pipeline.
    PipelineShape (*pipeline)(const config::Experiment& e) = nullptr;
    // A preset of hybrid (hybrid.h): hybrid's options that run this strategy on `world` devices,
    // as which the planner plans it. Null: not one.
    config::StrategyConfig (*as_hybrid)(const config::Experiment& e, int world) = nullptr;

    const config::OptionSpec* option(const std::string& key) const;
};

// Every strategy, in the order the docs and the GUI list them.
const std::vector<StrategyDescriptor>& registry();
// The descriptor of `name`, or null.
const StrategyDescriptor* find_strategy(const std::string& name);
// The descriptor of e.strategy.type; throws ConfigError("strategy.type") for an unknown one.
const StrategyDescriptor& descriptor_of(const config::Experiment& e);
std::vector<std::string> strategy_names();
// True for the registry's baseline strategy (single).
bool is_baseline(const std::string& name);

// A strategy config of `type` with every option at its default (the CLI's --strategy, tests).
// Throws ConfigError("strategy.type") for an unknown type.
config::StrategyConfig default_config(const std::string& type);

// An option of `s` read as its declared type (bool, int64_t, double, std::string,
// std::vector<int64_t>): the file's value, else the descriptor's default. Throws Error when
// the strategy has no such option or it has another type (a programming error).
template <class T>
T option(const config::StrategyConfig& s, const std::string& key);
// The same, untyped.
const config::OptionValue& option_value(const config::StrategyConfig& s, const std::string& key);

// Refuses a number of devices (ranks) outside the descriptor's bounds: ConfigError("devices").
void check_device_count(const StrategyDescriptor& d, int world);

// The predicted memory per device (above); a whole replica on one device.
std::vector<DeviceMemoryEstimate> estimate_memory(const config::Experiment& e, const ModelCost& m);
// What the diagram draws for `e`.
StepPicture step_picture(const config::Experiment& e);

// Options several strategies declare alike.
config::OptionSpec sync_batchnorm_option();
config::OptionSpec split_option();
// pipeline's and hybrid's `schedule` (default `fallback`) and `interleave`: `part` names what
// holds the chunks ("device", "stage"), `parts` and `count` how many there are ("the devices",
// "devices"; "pp").
config::OptionSpec schedule_option(const std::string& fallback, const std::string& part, const std::string& parts);
config::OptionSpec interleave_option(const std::string& part, const std::string& count);

// The file-format page's table of every strategy and its options (docs/experiment-format.md,
// between its "strategy options" markers; a test holds the page to it).
std::string options_markdown();

// What tells a run of `s.type` apart from another of the same strategy: "stage 2",
// "1f1b · 4 micro-batches" (the descriptor's `variant`, each option's value or its default; an
// option the form hides under the others' values is left out). "" when the strategy has none.
std::string variant_label(const config::StrategyConfig& s);

// "25", "0.25", "1e+06": a number as a person writes it.
std::string format_number(double v);

}  // namespace paralab::strategy
