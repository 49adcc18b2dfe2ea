#include "engine/plan/layer_cost.h"

#include <algorithm>

#include "engine/plan/collectives.h"

namespace paralab::plan {

LayerCost transformer_cost(const PlanLayer& l, int64_t input_numel, const LayerContext& x) {
    LayerCost out;
    const double t = x.mesh.tp, b = static_cast<double>(x.b);
    const double T = static_cast<double>(l.seq), D = static_cast<double>(l.width),
                 H = static_cast<double>(l.heads), F = static_cast<double>(l.ffn);
    const double KV = static_cast<double>(l.kv_heads > 0 ? l.kv_heads : l.heads), M = static_cast<double>(l.mlp_matrices);
    const bool block = l.ffn > 0;
    // GEMMs: q, k, v and the projection (2·T·D·(2D + 2·kv_heads·D/heads) per sample: 8·T·D² with
    // as many key/value heads as heads), the MLP (2·T·D·ffn per matrix: 2 for GELU, 3 for
    // SwiGLU), the two attention products (4·T²·D); the rest of the engine's count (softmax,
    // norms, activations, biases, RoPE) is elementwise work, counted by the bytes it moves.
    // A mixture of experts: each token through top_k + shared SwiGLUs (the active experts only)
    // and the router's D x experts.
    const double routes = l.experts > 0 ? static_cast<double>(l.top_k + l.shared_experts) : 1;
    const double E = static_cast<double>(l.experts);
    const double linear = 2 * T * D * (2 * D + 2 * KV * D / H + routes * M * F + E), products = 4 * T * T * D;
    const double linear_s = x.gemm_s(b * linear / t, std::min(b * T, D / t));
    // The attention kernel is the layer's `kernel`, or where the file gives none the stack's
    // (the framework planned for; ParaLab's engine picks by the layer's dropout). Fused (FlashAttention-like): both
    // products in one kernel at its own rate by head dimension, a causal mask's upper half
    // skipped, the scores never in memory (Dao et al. 2022). Materialized: two GEMMs at the
    // GEMM curve, the scores, softmax and dropout mask written and read.
    const bool fused = l.attention_kernel >= 0        ? l.attention_kernel == 1
                       : x.c.stack.engine_attention ? !l.attention_dropout
                                                    : x.c.stack.fused_attention;
    const double head_dim = D / H, causal = fused && l.causal ? 0.5 : 1.0;
    const auto products_time = [&](double flops) {
        return fused ? x.attention_s(flops * causal, head_dim)
                     : x.gemm_s(flops, std::min(T, head_dim));
    };
    const double products_s = products_time(b * products / t);
    // Korthikanti et al. 2022, bytes per layer in 16-bit: s·b·h·(34 + 5·a·s/h) for a block
    // (attention 11 of the 34, of which 3 not split by tensor parallelism; MLP and norms 23, of
    // which 7), the a·s² term the attention scores, softmax and its dropout mask. The MLP's 19 are
    // its input (2), each ffn-wide tensor (2·ffn/h each: GELU's input and output, SwiGLU's gate,
    // up and product) and the dropout mask (1): with ffn = 4h, GELU's 2 + 16 + 1. Grouped-query
    // attention keeps as much as full attention (the engine expands k and v to every head).
    const double sbh = T * b * D, scale = x.act_bytes / 2;
    // A mixture of experts keeps per route (top_k + shared) the gathered input row, the
    // SwiGLU's three ffn-wide tensors and the output row, and per token the router's
    // probabilities (experts wide).
    const double mlp = l.experts > 0 ? 3 + routes * (4 + 3 * 2 * F / D) + 2 * E / D : 3 + (M == 3 ? 3 : 2) * 2 * F / D;
    const double kept = block ? 11 + 4 + mlp : 11, unsplit = block ? 10 : 3;
    const double scores = fused ? 0 : 5 * H * T * T * b;
    const double body =
        x.mesh.sequence_parallel ? sbh * kept / t : sbh * (unsplit + (kept - unsplit) / t);
    out.full_bytes = (body + scores / t) * scale;
    const double elementwise_s = x.memory_s(2 * out.full_bytes);  // written once, read once
    out.forward_s = linear_s + products_s + elementwise_s;
    // Selective recomputation redoes the scores and softmax; a fused kernel stores none to drop.
    out.selective_s =
        fused ? 0 : products_time(b * products / 2 / t) + x.memory_s(2 * scores / t * scale);
    if (x.mesh.recompute == nn::Recompute::none)
        out.stored_bytes = out.full_bytes;
    else if (x.mesh.recompute == nn::Recompute::selective)
        out.stored_bytes = body * scale;
    else
        out.stored_bytes =
            static_cast<double>(input_numel) * b * x.act_bytes / (x.mesh.sequence_parallel ? t : 1);
    // Tensor parallelism: an all-reduce of the b·s·h activations after attention and after the
    // MLP in forward, two more in backward, and the forward's again when it is recomputed.
    // Sequence parallelism (Korthikanti et al. 2022, §4.2.2) replaces each by an all-gather and
    // a reduce-scatter of the same bytes, and its backward all-gathers each sublayer's input
    // once more: the weight gradients need the whole sequence, which forward did not keep.
    const int per_pass = block ? 2 : 1;
    const Link tp_link = link_of(x.c, x.mesh.tp, 1);
    const double ar = all_reduce_s(sbh * x.act_bytes, x.mesh.tp, tp_link);
    const double ag = all_gather_s(sbh * x.act_bytes, x.mesh.tp, tp_link);
    out.tp_forward_s = per_pass * ar;
    out.tp_backward_s = per_pass * (ar + (x.mesh.sequence_parallel ? ag : 0));
    out.tp_recompute_s = x.mesh.recompute == nn::Recompute::full ? per_pass * ar : 0;
    out.gather_parameters = static_cast<double>(l.parameters);
    out.parameters = static_cast<double>(l.parameters) / t;
    return out;
}

LayerCost other_cost(const PlanLayer& l, int64_t input_numel, const LayerContext& x) {
    LayerCost out;
    const double b = static_cast<double>(x.b);
    // Megatron-LM splits the embedding and the output linear over the tensor ranks by vocabulary.
    const bool split = x.mesh.tp > 1 && (l.type == "embedding" || l.type == "linear");
    const double t = split ? x.mesh.tp : 1;
    double width = 4096;  // a layer without a known matrix: a wide GEMM
    if (l.out > 0)
        width = std::min({b * static_cast<double>(l.output) / static_cast<double>(l.out),
                          static_cast<double>(l.out) / t, static_cast<double>(l.in)});
    const double compute_s = x.gemm_s(b * static_cast<double>(l.flops) / t, width);
    const double bytes =
        static_cast<double>(l.parameters) / t * x.act_bytes +
        b * (static_cast<double>(input_numel) + static_cast<double>(l.output) / t) * x.act_bytes;
    out.forward_s = std::max(compute_s, x.memory_s(bytes));
    out.full_bytes = static_cast<double>(l.activations) * b * x.act_bytes;
    out.stored_bytes = x.mesh.recompute == nn::Recompute::full
                           ? static_cast<double>(input_numel) * b * x.act_bytes
                           : out.full_bytes;
    out.gather_parameters = static_cast<double>(l.parameters);
    out.parameters = static_cast<double>(l.parameters) / t;
    return out;
}

}  // namespace paralab::plan
