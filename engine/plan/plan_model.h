// The model as the planner needs it (docs/planner.md): each top-level layer's counts from
// nn::summarize, and what the transformer layers are made of.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/config/experiment.h"

namespace paralab::plan {

// One top-level layer (a repeated layer's copies one by one).
struct PlanLayer {
    std::string type;
    int64_t parameters = 0;
    int64_t flops = 0;        // forward, per sample (the engine's count)
    int64_t activations = 0;  // numbers per sample held for backward (the engine's count)
    int64_t output = 0;       // numbers per sample out
    // Transformer layers (attention, transformer_block): sequence, width, heads, key/value
    // heads, ffn (0: attention) and the MLP's matrices (2: GELU, 3: SwiGLU).
    int64_t seq = 0, width = 0, heads = 0, kv_heads = 0, ffn = 0, mlp_matrices = 2;
    bool causal = true;
    // The attention's `kernel` in the file: 1 fused, 0 materialized, -1 not given (the stack's).
    int attention_kernel = -1;
    bool attention_dropout = false;  // dropout on the attention probabilities
    // A mixture-of-experts MLP (mlp "moe"): ffn is each expert's width, and each token goes
    // through top_k of the experts and every shared one (0, 0, 0 for another MLP).
    int64_t experts = 0, top_k = 0, shared_experts = 0;
    int64_t in = 0, out = 0;  // linear: its matrix
    bool transformer() const { return heads > 0; }
};
struct PlanModel {
    std::vector<PlanLayer> layers;
    int64_t parameters = 0;
    int64_t flops_per_sample = 0;
    int64_t seq_len = 1;      // tokens per sample (1 for a model without a sequence)
    int64_t blocks = 0;       // attention and transformer_block layers
    int64_t input_numel = 0;  // the model's input per sample (token ids for an embedding)
};
// From nn::summarize of e's model (meta device: nothing allocated). Throws like nn::Model.
PlanModel plan_model(const config::Experiment& e);

}  // namespace paralab::plan
