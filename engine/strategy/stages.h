// Layers split across devices: the pipeline schedules (gpipe, 1f1b, interleaved_1f1b) as lists
// of actions, the stage split and its checks, shared by the pipeline executor, hybrid and its
// presets (pipeline, model_parallel) and the planner. docs/strategies.md ("pipeline: stages,
// contexts and the schedules", "pipeline: interleaved 1F1B") says what each schedule runs and
// holds.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/strategy/registry.h"
#include "engine/strategy/strategy.h"

namespace paralab::strategy::stages {

enum class Schedule { gpipe, one_f_one_b, interleaved_1f1b };

// One step of a stage's schedule: forward or backward of micro-batch `micro` through the
// device's model chunk `chunk` (interleaved_1f1b; 0 otherwise).
struct Op {
    bool forward = true;
    int micro = 0;
    int chunk = 0;
    bool operator==(const Op&) const = default;
};

// The order in which stage `stage` of `stages` runs the forwards and backwards of
// `micro_batches` micro-batches through its `chunks` chunks (more than 1: interleaved_1f1b,
// whose order takes any number of micro-batches, groups of p with a last, smaller one; the
// warm-up is the textbook one when micro_batches is a multiple of p above p, every forward
// first otherwise).
std::vector<Op> stage_schedule(Schedule schedule, int stage, int stages, int micro_batches, int chunks = 1);
// How many micro-batches stage `stage` holds in flight at most under gpipe or 1f1b (its
// contexts); micro-batch i runs in context i % contexts_needed(...). interleaved_1f1b: the
// most of any one chunk (chunk_contexts).
int contexts_needed(Schedule schedule, int stage, int stages, int micro_batches, int chunks = 1);
// Per chunk: the most micro-batches it holds at once in `ops`.
std::vector<int> chunk_in_flight(const std::vector<Op>& ops, int chunks);
// How a flush of `micro_batches` runs: the sizes of the flushes it becomes, one after another
// (interleaved_1f1b with a count that is not a multiple of p above p: its largest multiple of
// p, then the rest; otherwise the one flush).
std::vector<int> flush_parts(Schedule schedule, int stages, int micro_batches);
// Per chunk of stage `stage`: the contexts it builds, enough for every flush of at most
// `micro_batches` micro-batches (flush_parts) that a run gives it.
std::vector<int> chunk_contexts(Schedule schedule, int stage, int stages, int micro_batches, int chunks);

// Contiguous, non-empty stages of `layer_cost` (per top-level layer: its forward FLOPs for the
// automatic split) over `stages` devices minimising the largest stage's cost. Among the splits
// that reach it: the fewest stages that start with a parameter-free layer (an activation, a
// dropout, a flatten stays with the layer before it; `layer_params`, or the costs when it is
// empty, tells which layers are), then the latest boundaries. Returns the split (stages - 1
// first-layer indices). Requires 1 <= stages <= layer_cost.size().
std::vector<int64_t> balanced_split(const std::vector<int64_t>& layer_cost, int stages,
                                    const std::vector<int64_t>& layer_params = {});

// Refuses more stages than top-level layers ("devices"; with chunks > 1, more than world·chunks
// chunks: "strategy.interleave") and a split that is not world·chunks - 1 strictly increasing
// indices in (0, layers) ("strategy.split[i]").
void check_stage_count(int world, size_t layers, const std::string& strategy_name, int chunks = 1);
void check_split(const std::vector<int64_t>& split, int world, size_t layers, int chunks = 1);
// The schedule options of pipeline and hybrid (`stages`: the pipeline's devices; the keys are
// named with `stages_key`, "devices" or "strategy.pp"): interleave v >= 2 only with
// interleaved_1f1b, which needs v >= 2, at least 2 stages and micro_batches a multiple of them.
void check_schedule(const std::string& schedule, int64_t interleave, int64_t micro_batches, int stages,
                    const std::string& stages_key);
// The registry's option check of model_parallel and pipeline: the above for the experiment's
// devices and top-level layers.
void check_stages(const config::Experiment& e);

// pipeline's (or hybrid's) strategy.schedule.
Schedule schedule_of(const config::Experiment& e);
// "gpipe", "1f1b", "interleaved_1f1b" and back; another name throws ConfigError naming `key`.
const char* schedule_name(Schedule s);
Schedule schedule_from_name(const std::string& name, const std::string& key = "strategy.schedule");
// pipeline's (or hybrid's) strategy.interleave: model chunks per device (1 unless interleaved).
int chunks_of(const config::Experiment& e);
// The label of a span of model chunk `chunk` under an interleaved schedule ("forward chunk 1"),
// `phase` itself otherwise.
std::string chunk_phase(const char* phase, int chunk, int chunks);
// The diagram of model_parallel and pipeline.
StepPicture stage_picture(const config::Experiment& e, bool pipelined);

}  // namespace paralab::strategy::stages
