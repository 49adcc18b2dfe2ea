// What a run produces, as value types every layer may include: a step's record per device, a
// phase's span for the timeline, an evaluation, and the run's summary (the store keeps them;
// the GUI and the CLI show them).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/tensor/allocator.h"

namespace paralab::config {

// What one mixture-of-experts layer (nn/moe.h) routed in one step's training forwards.
struct MoERecord {
    std::string layer;                      // its label: "model.layers[1] (transformer_block).mlp.moe"
    std::vector<int64_t> tokens_per_expert; // assignments each expert computed
    int64_t dropped_tokens = 0;             // assignments past an expert's capacity
    double aux_loss = 0;                    // the load-balancing loss added to the loss (coefficient included)
    double router_z_loss = 0;               // the z-loss added (coefficient included)
};

// Adds `m` to `into`: summed into the record of the same layer, or appended. The records of
// one step's devices add up so (each replica routes its own tokens; a tensor group's first
// shard alone records).
inline void add_moe_record(std::vector<MoERecord>& into, const MoERecord& m) {
    auto it = std::find_if(into.begin(), into.end(), [&](const MoERecord& x) { return x.layer == m.layer; });
    if (it == into.end()) {
        into.push_back(m);
        return;
    }
    for (size_t e = 0; e < std::min(it->tokens_per_expert.size(), m.tokens_per_expert.size()); ++e)
        it->tokens_per_expert[e] += m.tokens_per_expert[e];
    it->dropped_tokens += m.dropped_tokens;
    it->aux_loss += m.aux_loss;
    it->router_z_loss += m.router_z_loss;
}

// One optimizer step on one device.
struct StepRecord {
    int64_t step = 0;        // 1-based optimizer step
    int64_t epoch = 0;       // 0-based
    int64_t steps_per_epoch = 0;
    int64_t total_steps = 0; // the planned number of steps (epochs and max_steps)
    std::string device;
    double loss = 0;         // mean training loss of the step's batch
    int64_t samples = 0;
    double lr = 0;
    double wall_s = 0;       // training time since it started (evaluations and pauses excluded)
    double compute_ms = 0;   // forward, backward, optimizer (and other compute) on the rank thread
    double comm_ms = 0;      // communication calls (also those overlapped on a second thread)
    double idle_ms = 0;      // waiting for a peer, a communication thread or a server
    double data_wait_ms = 0; // waiting for the batch
    double grad_norm = 0;    // before clipping (0 when not computed)
    MemoryStats memory;
    std::vector<MoERecord> moe;  // per mixture-of-experts layer, in model order; empty without
};

// One phase of one step on one device, for the timeline: times in seconds since training
// started, on one steady clock for every device.
struct Span {
    int64_t step = 0;
    std::string device;
    std::string phase;  // data_wait, forward, backward, optimizer (strategies add comm phases)
    double t_begin = 0, t_end = 0;
    int64_t bytes = 0;  // bytes moved, for communication phases
};

struct EvalResult {
    int64_t step = 0;
    double loss = 0;
    std::optional<double> accuracy;  // classification only
    int64_t samples = 0;
    // Text models: a continuation of `prompt` (the start of the test split) drawn from the model
    // at this evaluation (run/generate.h), as printable text; empty otherwise.
    std::string prompt, sample;
};

struct RunSummary {
    std::string status = "finished";  // finished | stopped | failed
    std::string error;                 // when failed
    std::string name, strategy;
    std::vector<std::string> devices;
    int64_t steps = 0;
    int64_t epochs = 0;                // epochs started
    double final_loss = 0;
    std::optional<double> test_loss, test_accuracy;
    double samples_per_s = 0;
    double wall_s = 0;                 // training only; evaluation and pauses excluded
    std::map<std::string, int64_t> peak_memory_bytes;
    int64_t parameters = 0;
};

}  // namespace paralab::config
