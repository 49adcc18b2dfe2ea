// The transformer's layers (docs/experiment-format.md, "Transformers and text"): a learned
// position embedding, multi-head self-attention with its projections, and the pre-LayerNorm
// GPT block built from them. Per-sample inputs are [T, D]: T positions of width D.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/nn/dropout.h"
#include "engine/nn/linear.h"
#include "engine/nn/moe.h"
#include "engine/nn/sequential.h"

namespace paralab::nn {

// [T, D] -> [T, D]: adds a learned [T, D] table (torch.nn.Embedding(T, D) of the positions
// 0..T-1, initialised N(0, 1)).
class PositionEmbedding : public Layer {
public:
    PositionEmbedding() : Layer("position_embedding") {}
    bool runs_on_gpu() const override { return true; }

protected:
    int64_t activations_impl() override { return 0; }  // its backward needs no input
    Shape build_impl(const Shape& input) override;
    void reset_parameters_impl(Rng& rng) override;
    Tensor forward_impl(const Tensor& x, Mode mode) override;
    Tensor backward_impl(const Tensor& dy) override;
    int64_t flops_impl() const override;

private:
    Param* m_weight = nullptr;  // [T, D]
};

// Megatron-LM's tensor parallelism (engine/strategy/tensor_shards.h), given to an attention
// or a transformer_block before build: device `rank` of `world` computes heads
// [rank H / world, (rank + 1) H / world) and, in a block, ffn / world of the MLP's units. Its
// qkv and the MLP's first linear are column-parallel, proj and the MLP's second linear
// row-parallel (LinearShard); `all_reduce` sums a tensor over the world's devices, in place.
//
// Sequence parallelism (Korthikanti et al. 2022), when `all_gather` and `reduce_scatter` are
// set (SequenceSplit's in-place collectives): the layernorms, dropouts and residual adds run on
// this device's T/N positions, the all-gathers and reduce-scatters along the sequence of the
// split linears (LinearShard) taking the place of the all-reduces. T must divide by world.
// `split_input`: the input arrives split along the sequence from the split layer before (else
// it is whole, and the layer keeps its own positions of it); `split_output`: the output leaves
// split for the split layer after (else it is gathered whole).
struct TensorShard {
    int rank = 0;
    int world = 1;
    std::function<void(const Tensor&)> all_reduce;
    std::function<void(const Tensor&)> all_gather{};
    std::function<void(const Tensor&)> reduce_scatter{};
    bool split_input = false;
    bool split_output = false;

    SequenceSplit sequence() const { return {rank, world, all_gather, reduce_scatter}; }
    bool sequence_parallel() const { return sequence().on(); }
};

// Sequence parallelism at a split layer's edges (TensorShard): the input's positions, the
// output gathered, and in backward the conjugates (the output gradient's positions, the input
// gradient gathered). Each is the identity when the layer's neighbour is split too.
Tensor sequence_enter(const TensorShard& s, const Tensor& x);
Tensor sequence_leave(const TensorShard& s, const Tensor& y);
Tensor sequence_leave_backward(const TensorShard& s, const Tensor& dy);
Tensor sequence_enter_backward(const TensorShard& s, const Tensor& dx);
// The per-sample shapes inside a sequence-parallel layer of per-sample input `input` ([T, D]
// or, split, [T/N, D]): the whole sequence's length T. Throws ConfigError at
// "<layer path>" naming T and the device count when T does not divide.
int64_t sequence_length(const Layer& layer, const TensorShard& s, const Shape& input);

// Context parallelism (docs/strategies.md, "Context parallelism"), given to an attention or a
// transformer_block before build: every sequence of T positions is cut into 2·world chunks of
// C = T / (2·world), and device `rank` holds chunks rank and 2·world − 1 − rank (the zig-zag
// split, which gives every device an equal share of the causal mask's work). The layer's
// per-sample input is those 2C rows, the first chunk's then the second's; RoPE and the causal
// mask use their positions in the whole sequence. `comm`:
//   ring:       each device's keys and values (of its kv_heads, RoPE applied) go round the
//               devices by `send` and `recv`, attention computed against each block while the
//               next is on its way, the blocks merged by log-sum-exp (kernels/cpu/attention.h,
//               attention_merge); backward sends them round again with their gradients, which
//               arrive at their owner at the end.
//   all_gather: `all_gather` gives every device every device's keys and values (in forward and
//               again in backward), `reduce_scatter` sums their gradients back to their owners.
// The fused kernel only, on cpu devices.
struct ContextShard {
    enum class Comm { ring, all_gather };
    int rank = 0;
    int world = 1;
    Comm comm = Comm::ring;
    // ring: `send` hands a tensor to device rank + 1 and returns without waiting for it (the
    // communicator's eager send); `recv` fills a tensor of the same shape from device rank − 1,
    // waiting for it (modulo world). A device sends a block, computes, then receives the next.
    std::function<void(const Tensor&)> send{};
    std::function<void(const Tensor&)> recv{};
    // all_gather, both in place over a buffer of `world` equal chunks (the communicator's layout):
    // all_gather fills every chunk from chunk `rank` of each device; reduce_scatter leaves in
    // chunk `rank` the sum over the devices of that chunk (the rest unspecified).
    std::function<void(const Tensor&)> all_gather{};
    std::function<void(const Tensor&)> reduce_scatter{};

    bool on() const { return world > 1; }
};

// The zig-zag split of sequences of T positions over `world` devices: the positions in the whole
// sequence of device `rank`'s 2C rows, in its order. Throws ConfigError at `key` unless T divides
// by 2·world.
std::vector<int64_t> context_positions(int64_t T, int rank, int world, const std::string& key);
// Device `rank`'s rows of x [B, T, ...] (a cpu tensor; T divisible by 2·world), in that order:
// [B, 2T / (2·world), ...], a new activation tensor on x's device.
Tensor context_slice(const Tensor& x, int rank, int world);

// What one context-parallel forward computed, per sample and head: pairs of a query chunk and a
// key chunk, `full` (every key visible) or `diagonal` (the same chunk under the causal mask, half
// of it). Under the causal mask every device computes 2·world − 1 full and 2 diagonal pairs;
// without it 4·world full ones.
struct ContextWork {
    int64_t full = 0, diagonal = 0;
    bool operator==(const ContextWork&) const = default;
};

// How the attention computes softmax(q k^T / sqrt(hd)) v: `fused`, one pass per direction with
// an online softmax and the probabilities never stored (kernels/cpu/attention.h); `materialized`,
// the [T, T] probabilities stored between passes (what attention dropout needs); `automatic`,
// fused unless dropout > 0.
enum class AttentionKernel { automatic, fused, materialized };

// The options of an attention (and of a transformer_block's), docs/experiment-format.md.
struct AttentionOptions {
    int64_t heads = 1;
    int64_t kv_heads = 0;  // key/value heads (grouped-query attention); 0: as many as heads
    bool causal = true;
    double dropout = 0.0;
    bool rope = false;         // rotary position embedding on q and k
    double rope_theta = 10000.0;
    bool bias = true;          // the projections' biases
    AttentionKernel kernel = AttentionKernel::automatic;
};

// [T, D] -> [T, D]: qkv = x W_qkv^T + b (one linear D -> (heads + 2 kv_heads) hd, hd = D /
// heads: q for every head, then k and v for every key/value head), with RoPE q and k rotated
// by their positions (kernels/cpu/rope.h), per head h softmax(q k^T / sqrt(hd)) v with the
// key/value head h / (heads / kv_heads), causal when asked (position i sees j <= i), the heads
// concatenated, then one linear D -> D. With dropout p > 0, in training, the attention
// probabilities and the output are dropped as in nanoGPT's CausalSelfAttention. Parameters
// D (heads + 2 kv_heads) hd + D^2, plus (heads + 2 kv_heads) hd + D with bias (4D^2 + 4D for
// kv_heads = heads): qkv.weight, qkv.bias, proj.weight, proj.bias, in that order.
class Attention : public Layer {
public:
    // Throws ConfigError at the option's key when heads < 1, kv_heads does not divide heads,
    // dropout is outside [0, 1), rope_theta is not positive or the fused kernel is asked for
    // with dropout.
    explicit Attention(const AttentionOptions& options);
    Attention(int64_t heads, bool causal, double dropout)
        : Attention(AttentionOptions{heads, 0, causal, dropout, false, 10000.0, true}) {}
    bool runs_on_gpu() const override { return true; }
    std::vector<Layer*> children() override;

    int64_t heads() const { return m_heads; }
    int64_t kv_heads() const { return m_kv_heads; }
    bool causal() const { return m_causal; }
    bool fused() const { return m_fused; }
    // Before build only: this layer computes one shard of the heads (TensorShard).
    void set_tensor_shard(TensorShard shard) { m_shard = std::move(shard); }
    const TensorShard& tensor_shard() const { return m_shard; }
    // Before build only: this layer holds one device's chunks of each sequence (ContextShard).
    void set_context_shard(ContextShard shard) { m_cp = std::move(shard); }
    const ContextShard& context_shard() const { return m_cp; }
    // The chunk pairs the last context-parallel forward computed.
    ContextWork context_work() const { return m_work; }
    // Selective recomputation (nn/recompute.h): in training, the probabilities (and their
    // dropout mask) are dropped after forward and computed again from q, k in backward.
    void set_recompute_scores(bool on) { m_recompute_scores = on; }
    // Numbers per sample kept for backward beyond the children's (the projections keep their
    // inputs, the dropouts their masks): q, k, v [T, 3D] and, materialized, the probabilities
    // [H, T, T], twice with dropout (before it and after); fused, each row's log-sum-exp [H, T]
    // (its output is the projection's input, kept there).
    int64_t saved_per_sample() const;
    // What its backward allocates beyond them that the memory model counts: the q, k, v
    // gradients [T, 3D]; with context parallelism (T this device's rows) also the keys and
    // values [T, 2 kv_heads hd] in flight with their gradients, twice (the block held and the one
    // arriving) on a ring, of the whole sequence when gathered.
    int64_t backward_per_sample() const;
    // Of those, the probabilities: what selective recomputation does not keep (none when fused).
    int64_t scores_per_sample() const { return m_fused ? 0 : (m_attn_drop ? 2 : 1) * m_H * m_T * m_T; }

protected:
    Shape build_impl(const Shape& input) override;
    void reset_parameters_impl(Rng& rng) override;
    Tensor forward_impl(const Tensor& x, Mode mode) override;
    Tensor backward_impl(const Tensor& dy) override;
    int64_t flops_impl() const override;
    int64_t activations_impl() override;
    void set_needs_input_grad_impl(bool needs) override;
    void release_saved_impl() override;

private:
    // probs = softmax of the scores of m_qkv_out; m_used = what the product with V reads.
    void scores_and_dropout(int64_t B, Mode mode);
    // The gradient of the passes' [B, T, 3 inner] turned into the qkv projection's output's
    // (expands()); the same tensor when nothing was expanded.
    Tensor contract_heads(const Tensor& dqkv);

    // The context-parallel passes (context_attention.cpp): the qkv projection's output `compact`
    // [B, T, (H + 2 KV) hd] of this device's rows -> the heads' outputs [B, T, inner]; and back,
    // dheads -> the projection's output gradient.
    Tensor context_forward(Tensor compact);
    Tensor context_backward(const Tensor& dheads);
    // Refuses what context parallelism does not run with, and places this device's rows.
    void check_context_shard(const Shape& input, bool sequence_parallel);

    // The qkv projection's output [B, T, (H + 2 KV) hd] as the passes read it, [B, T, 3 inner]:
    // key/value heads repeated for their query heads, q and k rotated (kernels/cpu/rope.h).
    // Without grouped heads or rotation the projection's output is used as it is.
    bool expands() const { return m_KV != m_H || m_rope; }

    int64_t m_heads, m_kv_heads;
    bool m_causal;
    double m_dropout;
    bool m_rope;
    double m_rope_theta;
    bool m_bias;
    bool m_fused;
    bool m_recompute_scores = false;
    int64_t m_T = 0, m_D = 0;  // m_T: this device's rows (with context parallelism 2C of T)
    TensorShard m_shard;
    ContextShard m_cp;
    std::vector<int64_t> m_positions;  // context parallelism: the rows' positions in the sequence
    ContextWork m_work;
    int64_t m_H = 0, m_inner = 0;  // the heads this layer computes and their width (all: heads, D)
    int64_t m_KV = 0;              // the key/value heads this layer computes
    std::unique_ptr<Linear> m_qkv, m_proj;
    std::unique_ptr<Dropout> m_attn_drop, m_out_drop;  // null when dropout is 0
    Tensor m_qkv_out;  // [B, T, 3 inner], expanded (expands())
    Tensor m_probs;    // [B, H, T, T], the softmax's output
    Tensor m_used;     // the probabilities the product with V used (m_probs, or dropped)
    Tensor m_out;      // fused: [B, T, inner], the heads' outputs
    Tensor m_lse;      // fused: [B, H, T], each row's log-sum-exp of its scaled scores
};

// A transformer_block's options beyond its attention's.
struct BlockOptions {
    int64_t ffn = 1;
    bool rmsnorm = false;  // norm: "rmsnorm" (else "layernorm")
    bool swiglu = false;   // mlp: "swiglu" (else "gelu")
    bool moe = false;      // mlp: "moe" (nn/moe.h, with `experts`; ffn unused)
    MoEOptions experts{};
};

// [T, D] -> [T, D], the pre-norm block:
//   h = x + attention(norm(x)),  y = h + dropout(mlp(norm(h))),
// GPT's with layernorm and mlp = linear_D(gelu(linear_ffn(.))), Llama's with rmsnorm and the
// SwiGLU MLP (nn/swiglu.h), or a mixture of SwiGLU experts (nn/moe.h). Children (a Sequential of
// two residuals): residual(norm, attention), residual(norm, linear ffn, gelu, linear D[, dropout]),
// residual(norm, swiglu[, dropout]) or residual(norm, moe[, dropout]).
// Parameters of GPT's: 4D + (4D^2 + 4D) + (2 D ffn + ffn + D). Without bias no linear and no
// norm has one.
class TransformerBlock : public Sequential {
public:
    TransformerBlock(const AttentionOptions& attention, const BlockOptions& block);
    TransformerBlock(int64_t heads, int64_t ffn, double dropout, bool causal)
        : TransformerBlock(AttentionOptions{heads, 0, causal, dropout, false, 10000.0, true}, BlockOptions{ffn}) {}
    int64_t heads() const { return m_heads; }
    int64_t ffn() const { return m_ffn; }
    // Before build only: this block computes one shard of the heads and of the MLP (TensorShard).
    void set_tensor_shard(TensorShard shard) { m_shard = std::move(shard); }
    const TensorShard& tensor_shard() const { return m_shard; }
    // Before build only: its attention holds one device's chunks of each sequence (ContextShard;
    // the norms and the MLP work on those rows as they are).
    void set_context_shard(ContextShard shard) { m_cp = std::move(shard); }

protected:
    Shape build_impl(const Shape& input) override;
    Tensor forward_impl(const Tensor& x, Mode mode) override;
    Tensor backward_impl(const Tensor& dy) override;

private:
    int64_t m_heads, m_kv_heads, m_ffn;
    bool m_swiglu, m_moe;
    TensorShard m_shard;
    ContextShard m_cp;
};

// Gives every attention and transformer_block of an unbuilt layer tree `shard`. Throws
// ConfigError at a position_embedding's path (its table is of the rows it sees, not of their
// positions in the sequence).
void give_context_shard(Layer& layer, const ContextShard& shard);

// Throws ShapeError naming `layer` unless `input` is [T, D] with D divisible by heads.
void check_attention_input(const Layer& layer, const Shape& input, int64_t heads);
// Throws ConfigError at "<layer path>.<key>" unless `count` (heads, ffn) divides over `world`
// devices.
void check_tensor_shard(const Layer& layer, const char* key, int64_t count, int world);

}  // namespace paralab::nn
