// The pipeline schedule simulated event by event (docs/planner.md, "Pipeline"): every device
// runs its forwards, backwards and (zb_h1) weight passes in the order the engine's pipeline runs
// them (strategy::stages::stage_schedule); an operation starts when its device is free and its
// input has arrived (the previous stage's forward, the next stage's backward, plus the transfer
// between them; a W its own B).
#pragma once

#include <vector>

#include "engine/strategy/stages.h"

namespace paralab::plan {

struct PipeTimes {
    // Per global chunk g = chunk · stages + device: one micro-batch's forward and backward (s).
    std::vector<double> forward, backward;
    // Per boundary g → g + 1: one micro-batch's activation (or gradient) transfer (s).
    std::vector<double> transfer;
    // Sends block their sender (Megatron-LM's and ParaLab's pipelines wait for each send and
    // receive before the next operation): a forward ends after sending its activation, a
    // backward after sending its gradient, and the receiver has it then. Otherwise a transfer
    // only delays its receiver.
    bool blocking_sends = false;
    // Per global chunk: the weight-gradient part of `backward` (s), which a schedule that splits
    // the backward (zb_h1) runs as W, the rest as B. Empty: half the backward (the weight
    // gradients' GEMMs are half of a backward's FLOPs).
    std::vector<double> weight;
};

// One operation as simulated: when device `device` ran it (s from the step's start).
struct PipeSpan {
    int device = 0;
    strategy::stages::Op op;
    double start = 0, end = 0;
};

struct PipeResult {
    double makespan = 0;              // first forward's start to the last operation's end
    std::vector<double> busy;         // per device: the sum of its operations (sends included)
    std::vector<int> peak_in_flight;  // per device: most micro-batch chunks held at once
    std::vector<PipeSpan> spans;      // every operation, in the order run (when asked for)
};

// Simulates `schedule` on `stages` devices with `chunks` chunks each and `micro_batches`
// micro-batches. times.forward/backward have stages · chunks entries, transfer one fewer.
// With `record_spans`, the result lists every operation's start and end (the Plan tab's
// predicted timeline).
PipeResult simulate_pipeline(strategy::stages::Schedule schedule, int stages, int chunks,
                             int micro_batches, const PipeTimes& times, bool record_spans = false);

}  // namespace paralab::plan
