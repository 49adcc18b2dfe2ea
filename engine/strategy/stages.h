// Layers split across devices: the pipeline schedules (gpipe, 1f1b, interleaved_1f1b, zb_h1) as
// lists of actions, the stage split and its checks, shared by the pipeline executor, hybrid and its
// presets (pipeline, model_parallel) and the planner. docs/strategies.md ("pipeline: stages,
// contexts and the schedules", "pipeline: interleaved 1F1B", "pipeline: zero bubble (zb_h1)")
// says what each schedule runs and holds.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/strategy/registry.h"
#include "engine/strategy/strategy.h"

namespace paralab::strategy::stages {

enum class Schedule { gpipe, one_f_one_b, interleaved_1f1b, zb_h1 };

// What an action runs: a forward; a backward (under zb_h1 its input-gradient part only, B: the
// layers queue their weight gradients, nn::Layer::defer_weight_grads); zb_h1's weight pass
// (W): the weight gradients that micro-batch's B queued.
enum class Pass : uint8_t { forward, backward, weight };

// One step of a stage's schedule: pass `pass` of micro-batch `micro` through the device's model
// chunk `chunk` (interleaved_1f1b; 0 otherwise).
struct Op {
    Pass pass = Pass::forward;
    int micro = 0;
    int chunk = 0;
    bool forward() const { return pass == Pass::forward; }
    bool operator==(const Op&) const = default;
};
// True when `schedule` splits each backward into B and W actions (zb_h1).
bool splits_backward(Schedule schedule);

// The order in which stage `stage` of `stages` runs the forwards and backwards of
// `micro_batches` micro-batches through its `chunks` chunks (more than 1: interleaved_1f1b,
// whose order takes any number of micro-batches, groups of p with a last, smaller one; the
// warm-up is the textbook one when micro_batches is a multiple of p above p, every forward
// first otherwise). zb_h1 (Qi et al. 2023, ZB-H1; one chunk): 1F1B's forwards and backwards
// (B) with each micro-batch's W after its B: stage s runs W right after B once it has run s
// backwards, so that its last s W fill what would be the cooldown's bubble.
std::vector<Op> stage_schedule(Schedule schedule, int stage, int stages, int micro_batches, int chunks = 1);
// How many micro-batches stage `stage` holds in flight (forward run, backward not) at most under
// gpipe, 1f1b or zb_h1 (its contexts); micro-batch i runs in context i % contexts_needed(...).
// interleaved_1f1b: the most of any one chunk (chunk_contexts).
int contexts_needed(Schedule schedule, int stage, int stages, int micro_batches, int chunks = 1);
// Per chunk: the most micro-batches it holds at once in `ops` (from forward to backward; a W
// holds only the tensors its layers queued).
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
// interleaved_1f1b, which needs v >= 2, at least 2 stages and micro_batches a multiple of them
// (zb_h1 with interleave > 1: "strategy.schedule").
void check_schedule(const std::string& schedule, int64_t interleave, int64_t micro_batches, int stages,
                    const std::string& stages_key);
// hybrid's zb_h1 with ZeRO over dp > 1 replicas: stage 3, and stage 2 with one micro-batch (which
// runs layer by layer), reduce each layer's gradients to their owners as its backward ends,
// before a deferred W could add to them: refused at "strategy.schedule". (Stage 2 with more
// micro-batches reduces its flat gradients after the flush, when every W has run.)
void check_zero_bubble(const std::string& schedule, int64_t zero, int64_t dp, int64_t micro_batches);
// The registry's option check of model_parallel and pipeline: the above for the experiment's
// devices and top-level layers.
void check_stages(const config::Experiment& e);

// pipeline's (or hybrid's) strategy.schedule.
Schedule schedule_of(const config::Experiment& e);
// "gpipe", "1f1b", "interleaved_1f1b", "zb_h1" and back; another name throws ConfigError naming
// `key`.
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
