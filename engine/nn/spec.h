// A layer's description as the experiment file gives it (docs/experiment-format.md, model.layers[]).
// Parsing and validation of the JSON live in engine/run; the engine builds layers from this.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace paralab::nn {

struct LayerSpec {
    std::string type;  // "linear", "conv2d", ... as in docs/experiment-format.md
    // linear (bias: also attention, transformer_block, layernorm's absence of one, rmsnorm)
    int64_t out = 0;
    bool bias = true;
    // conv2d, maxpool2d, avgpool2d (stride 0 = kernel for pools, 1 for conv)
    int64_t out_channels = 0;
    int64_t kernel = 0;
    int64_t stride = 0;
    int64_t padding = 0;
    // dropout
    double p = 0.5;
    // embedding
    int64_t vocab = 0;
    int64_t dim = 0;
    // lstm, gru
    int64_t hidden = 0;
    int64_t num_layers = 1;
    bool return_sequence = false;  // "return": "sequence" (true) or "last" (false)
    // batchnorm, layernorm, rmsnorm
    double eps = 1e-5;
    double momentum = 0.1;
    // attention, transformer_block (dropout: attention probabilities and outputs)
    int64_t heads = 0;
    int64_t ffn = 0;
    bool causal = true;
    double dropout = 0.0;
    // attention, transformer_block: grouped-query attention (0: kv_heads = heads), rotary
    // positions ("none" or "rope"), and `bias` (above) for every linear and norm of the block
    int64_t kv_heads = 0;
    std::string position = "none";
    double rope_theta = 10000.0;
    // attention, transformer_block: the attention kernel, "fused", "materialized" or "" (the
    // file's `kernel` absent: fused unless the probabilities are dropped out)
    std::string attention_kernel = "";
    // transformer_block: "layernorm" or "rmsnorm"; "gelu", "swiglu" or "moe"
    std::string norm = "layernorm";
    std::string mlp = "gelu";
    // transformer_block with mlp "moe" (nn/moe.h): capacity_factor 0 is dropless (null in the file)
    int64_t experts = 0;
    int64_t top_k = 2;
    int64_t expert_ffn = 0;
    int64_t shared_experts = 0;
    double capacity_factor = 0.0;
    double aux_loss = 0.01;
    double router_z_loss = 0.0;
    // linear: the output layer multiplies by the model's embedding table (no weight of its own)
    bool tie_embeddings = false;
    // residual
    std::vector<LayerSpec> layers{};
    // Any layer: this many consecutive copies, each with its own parameters.
    int64_t repeat = 1;
    // Set by expand_repeats (model.h) on each copy: the layer's index in the file's list, and
    // which copy of how many it is. -1: the spec is the file's own, at its index in the list.
    int64_t source = -1;
    int64_t copy = 0, copies = 1;
};

}  // namespace paralab::nn
