// Layers split across devices: the machinery model_parallel and pipeline share (docs/strategies.md).
//
// Rank s holds stage s, a contiguous range of the model's top-level layers, on its device.
// Activations go forward from stage s to s + 1 and input gradients come back from s + 1 to s
// as point-to-point messages; the last stage computes the loss over the GLOBAL batch, so the
// gradients the stages hold are exactly the single device's gradients of that batch.
//
// `strategy.split` lists the first top-level layer index of each stage after the first:
// with L top-level layers and N devices, split = [b1, ..., b(N-1)], 0 < b1 < ... < b(N-1) < L,
// and stage s holds layers [b(s), b(s+1)) with b0 = 0 and bN = L. Example: 5 layers on 3
// devices with split [2, 4] gives stages {0, 1}, {2, 3}, {4}. Without `split` the stages are
// balanced by compute: each top-level layer's forward FLOPs (balanced_split), so that the
// stages of a pipeline take about as long and its schedule shows. Only top-level layers are
// split: a residual block stays whole on one device.
//
// A batch runs as micro-batches (shard_of_batch(B, i, m)) in a schedule. A layer keeps what
// its backward needs from its LAST forward only, so a stage keeps K "contexts": K builds of
// its layers whose parameters and gradients are the SAME tensors (gradients accumulate in one
// place, and the memory picture counts parameters once), each holding one micro-batch in
// flight. GPipe runs every forward, then every backward in reverse, and needs K = m; 1F1B
// runs p - s - 1 warm-up forwards on stage s of p, then one forward and one backward in turn,
// then the remaining backwards, and needs only K = min(m, p - s): its activation memory is
// bounded by the number of stages where GPipe's grows with the micro-batches in flight.
//
// interleaved_1f1b (Narayanan et al. 2021, section 2.2.2; Megatron-LM's interleaved schedule)
// with v = strategy.interleave chunks per device: the top-level layers are cut into p·v chunks
// (strategy.split then lists p·v - 1 indices), and global chunk g runs on device g mod p as
// its local chunk g div p, so device d holds the non-adjacent chunks d, d + p, d + 2p, ... and
// the activations go around the devices v times (device p - 1 sends chunk c's output to device
// 0's chunk c + 1). The micro-batches run in groups of p: the device's k-th forward is chunk
// (k div p) mod v of micro-batch (k div pv)·p + k mod p, its backwards walk the same order with
// the chunks reversed. Device d runs 2·(p − d − 1) + (v − 1)·p warm-up forwards (clamped to the
// m·v it has; all of them when m = p), then one forward and one backward in turn, then the
// remaining backwards. A chunk's work is 1/v of a stage's, so the bubble shrinks from
// (p − 1)/m to (p − 1)/(v·m) of the ideal step. m must be a multiple of p; a flush that gets
// fewer micro-batches (a short last batch, grad_accum parts) runs its largest multiple of p in
// the schedule and the rest (fewer than p) as a second flush, all forwards first. Each chunk
// keeps its own contexts, micro-batch i in context i mod K of its chunk (chunk_contexts).
//
// train.grad_accum = g splits the global batch into g parts (shard_of_batch(B, k, g)) that run
// one after another, each as its own flush of the schedule over its micro-batches, with the
// gradients accumulating: memory as for a batch of B / g, the result as for the whole batch.
//
// Batch norm normalises each micro-batch with its own statistics (as in the GPipe paper), so
// it matches the single device only with one micro-batch; its running statistics are updated
// micro-batch after micro-batch in order, as gradient accumulation would on one device.
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
