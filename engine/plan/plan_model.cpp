#include "engine/plan/plan_model.h"

#include "engine/nn/model.h"
#include "engine/run/experiment_file.h"
#include "engine/util/error.h"

namespace paralab::plan {

PlanModel plan_model(const config::Experiment& e) {
    const Shape input = run::model_input_shape(e);
    const nn::ModelSummary s = nn::summarize(e.layers, input, e.loss);
    const std::vector<nn::LayerSpec> specs = nn::expand_repeats(e.layers);
    PlanModel m;
    m.input_numel = input.numel();
    m.parameters = s.parameters;
    m.flops_per_sample = s.flops_per_sample;
    size_t k = 0;
    for (const auto& row : s.layers) {
        if (row.depth != 0) continue;
        for (int64_t c = 0; c < row.copies; ++c, ++k) {
            PARALAB_CHECK(k < specs.size(), "plan_model: more summary rows than layers");
            const nn::LayerSpec& spec = specs[k];
            PlanLayer l;
            l.type = row.type;
            l.parameters = row.parameters / row.copies;
            l.flops = row.flops / row.copies;
            l.activations = row.activations / row.copies;
            l.output = row.output.numel();
            const auto& dims = row.output.dims();
            if ((spec.type == "attention" || spec.type == "transformer_block") &&
                dims.size() >= 2) {
                l.seq = dims[dims.size() - 2];
                l.width = dims.back();
                l.heads = spec.heads;
                l.kv_heads = spec.kv_heads > 0 ? spec.kv_heads : spec.heads;
                l.ffn = spec.type == "transformer_block" ? spec.ffn : 0;
                l.mlp_matrices = spec.mlp == "swiglu" ? 3 : 2;
                l.causal = spec.causal;
                l.attention_kernel = spec.attention_kernel.empty() ? -1 : spec.attention_kernel == "fused";
                l.attention_dropout = spec.dropout > 0;
                if (spec.type == "transformer_block" && spec.mlp == "moe") {
                    l.ffn = spec.expert_ffn;
                    l.mlp_matrices = 3;
                    l.experts = spec.experts;
                    l.top_k = spec.top_k;
                    l.shared_experts = spec.shared_experts;
                }
                ++m.blocks;
                if (m.seq_len == 1) m.seq_len = l.seq;
            }
            if (spec.type == "linear" && spec.out > 0) {
                l.out = spec.out;
                // A tied output layer's matrix is the embedding's table (no parameters of its own).
                l.in = spec.tie_embeddings ? e.layers.front().dim
                                           : (l.parameters - (spec.bias ? spec.out : 0)) / spec.out;
            }
            m.layers.push_back(l);
        }
    }
    // Text: a sample is a sequence of tokens (the embedding's input).
    if (m.blocks == 0 && !e.layers.empty() && e.layers.front().type == "embedding")
        m.seq_len = input.numel();
    return m;
}

}  // namespace paralab::plan
