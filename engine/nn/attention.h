// The transformer's layers (docs/experiment-format.md, "Transformers and text"): a learned
// position embedding, multi-head self-attention with its projections, and the pre-LayerNorm
// GPT block built from them. Per-sample inputs are [T, D]: T positions of width D.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/nn/dropout.h"
#include "engine/nn/linear.h"
#include "engine/nn/sequential.h"

namespace paralab::nn {

// [T, D] -> [T, D]: adds a learned [T, D] table (torch.nn.Embedding(T, D) of the positions
// 0..T-1, initialised N(0, 1)).
class PositionEmbedding : public Layer {
public:
    PositionEmbedding() : Layer("position_embedding") {}
    bool runs_on_gpu() const override { return true; }

protected:
    Shape build_impl(const Shape& input) override;
    void reset_parameters_impl(Rng& rng) override;
    Tensor forward_impl(const Tensor& x, Mode mode) override;
    Tensor backward_impl(const Tensor& dy) override;
    int64_t flops_impl() const override;

private:
    Param* m_weight = nullptr;  // [T, D]
};

// [T, D] -> [T, D]: qkv = x W_qkv^T + b (one linear D -> 3D), per head h (width D / heads)
// softmax(q k^T / sqrt(D / heads)) v, causal when asked (position i sees j <= i), the heads
// concatenated, then one linear D -> D. With dropout p > 0, in training, the attention
// probabilities and the output are dropped as in nanoGPT's CausalSelfAttention. Parameters
// 4D^2 + 4D: qkv.weight, qkv.bias, proj.weight, proj.bias, in that order.
class Attention : public Layer {
public:
    // Throws ConfigError when heads < 1 or dropout is outside [0, 1).
    Attention(int64_t heads, bool causal, double dropout);
    bool runs_on_gpu() const override { return true; }
    std::vector<Layer*> children() override;

    int64_t heads() const { return m_heads; }
    bool causal() const { return m_causal; }
    // Numbers per sample held for backward beyond the children's: the probabilities [H, T, T]
    // (twice with dropout: before and after it) and qkv [T, 3D].
    int64_t saved_per_sample() const;

protected:
    Shape build_impl(const Shape& input) override;
    void reset_parameters_impl(Rng& rng) override;
    Tensor forward_impl(const Tensor& x, Mode mode) override;
    Tensor backward_impl(const Tensor& dy) override;
    int64_t flops_impl() const override;
    int64_t activations_impl() override;
    void set_needs_input_grad_impl(bool needs) override;

private:
    int64_t m_heads;
    bool m_causal;
    double m_dropout;
    int64_t m_T = 0, m_D = 0;
    std::unique_ptr<Linear> m_qkv, m_proj;
    std::unique_ptr<Dropout> m_attn_drop, m_out_drop;  // null when dropout is 0
    Tensor m_qkv_out;  // [B, T, 3D]
    Tensor m_probs;    // [B, H, T, T], the softmax's output
    Tensor m_used;     // the probabilities the product with V used (m_probs, or dropped)
};

// [T, D] -> [T, D], the pre-LayerNorm GPT block:
//   h = x + attention(layernorm(x)),  y = h + dropout(linear_D(gelu(linear_ffn(layernorm(h))))).
// Children (a Sequential of two residuals): residual(layernorm, attention), residual(layernorm,
// linear ffn, gelu, linear D[, dropout]). Parameters 4D + (4D^2 + 4D) + (2 D ffn + ffn + D).
class TransformerBlock : public Sequential {
public:
    TransformerBlock(int64_t heads, int64_t ffn, double dropout, bool causal);
    int64_t heads() const { return m_heads; }
    int64_t ffn() const { return m_ffn; }

protected:
    Shape build_impl(const Shape& input) override;

private:
    int64_t m_heads, m_ffn;
};

// Throws ShapeError naming `layer` unless `input` is [T, D] with D divisible by heads.
void check_attention_input(const Layer& layer, const Shape& input, int64_t heads);

}  // namespace paralab::nn
