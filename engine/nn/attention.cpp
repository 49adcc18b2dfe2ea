#include "engine/nn/attention.h"
#include "engine/nn/checked_count.h"

#include <kernels/cpu/attention.h>
#include <kernels/cpu/rope.h>
#include <kernels/gpu/attention.h>
#include <kernels/gpu/rope.h>

#include <cmath>

#include "engine/device/device.h"
#include "engine/device/gpu_values.h"
#include "engine/nn/activation.h"
#include "engine/nn/norm.h"
#include "engine/nn/ops.h"
#include "engine/nn/recompute.h"
#include "engine/nn/swiglu.h"

namespace paralab::nn {

namespace kc = kernels::cpu;
namespace kg = kernels::gpu;

void check_attention_input(const Layer& layer, const Shape& input, int64_t heads) {
    if (input.rank() != 2)
        throw ShapeError(layer.path(), layer.label() + ": expects a sequence [T, D] (positions by width), got " +
                                           input.to_string());
    if (input[1] % heads != 0) {
        const std::string key = layer.path().empty() ? "heads" : layer.path() + ".heads";
        throw ShapeError(layer.path(), layer.label() + ": " + key + " = " + std::to_string(heads) +
                                           " does not divide the width D = " + std::to_string(input[1]) +
                                           " of its input " + input.to_string() +
                                           "; each head is D / heads wide");
    }
}

void check_tensor_shard(const Layer& layer, const char* key, int64_t count, int world) {
    if (count % world == 0) return;
    const std::string path = layer.path().empty() ? key : layer.path() + "." + key;
    throw ConfigError(path, std::to_string(count) + " " + key + " do not divide over " + std::to_string(world) +
                                " devices (tensor_parallel gives every device an equal share)");
}

// ---- sequence parallelism at a split layer's edges ----------------------------------------------

Tensor sequence_enter(const TensorShard& s, const Tensor& x) {
    return s.sequence_parallel() && !s.split_input ? sequence_slice(x, s.rank, s.world) : x;
}

Tensor sequence_leave(const TensorShard& s, const Tensor& y) {
    return s.sequence_parallel() && !s.split_output ? sequence_gather(y, s.sequence()) : y;
}

Tensor sequence_leave_backward(const TensorShard& s, const Tensor& dy) {
    return s.sequence_parallel() && !s.split_output ? sequence_slice(dy, s.rank, s.world) : dy;
}

Tensor sequence_enter_backward(const TensorShard& s, const Tensor& dx) {
    return s.sequence_parallel() && !s.split_input && dx.defined() ? sequence_gather(dx, s.sequence()) : dx;
}

int64_t sequence_length(const Layer& layer, const TensorShard& s, const Shape& input) {
    const int64_t T = s.split_input ? input[0] * s.world : input[0];
    if (T % s.world != 0)
        throw ConfigError(layer.path(), layer.label() + ": its sequence of " + std::to_string(T) +
                                            " positions does not divide over " + std::to_string(s.world) +
                                            " devices (sequence_parallel gives every device T / N of them)");
    return T;
}

// ---- PositionEmbedding -----------------------------------------------------------------------

Shape PositionEmbedding::build_impl(const Shape& input) {
    if (input.rank() != 2) shape_error("a sequence [T, D] (positions by width)", input);
    m_weight = &add_param("weight", input);
    return input;
}

void PositionEmbedding::reset_parameters_impl(Rng& rng) {
    fill_standard_normal(m_weight->value, rng);
}

// x: [B, T, D] -> y = x + table, the table added to every sample's rows.
Tensor PositionEmbedding::forward_impl(const Tensor& x, Mode mode) {
    (void)mode;
    Tensor y = new_activation(x.shape());
    y.copy_from(x);
    const int64_t cols = input_shape().numel();
    dispatch_float(x.dtype(), [&]<class T>() {
        if (void* q = y.queue()) kg::bias_add_rows<T>(x.dim(0), cols, m_weight->value.data<T>(), y.data<T>(), q);
        else kc::bias_add_rows<T>(x.dim(0), cols, m_weight->value.data<T>(), y.data<T>());
    });
    return y;
}

// dy: [B, T, D] -> dx = dy; d table += the sum of dy over the batch.
Tensor PositionEmbedding::backward_impl(const Tensor& dy) {
    dispatch_float(dy.dtype(), [&]<class T>() {
        ops_for(dy).column_sums_accumulate<T>(dy.dim(0), input_shape().numel(), dy.data<T>(),
                                              m_weight->grad.data<T>());
    });
    return needs_input_grad() ? dy : Tensor();
}

int64_t PositionEmbedding::flops_impl() const { return built() ? input_shape().numel() : 0; }

// ---- Attention -------------------------------------------------------------------------------

Attention::Attention(const AttentionOptions& o)
    : Layer("attention"),
      m_heads(o.heads),
      m_kv_heads(o.kv_heads == 0 ? o.heads : o.kv_heads),
      m_causal(o.causal),
      m_dropout(o.dropout),
      m_rope(o.rope),
      m_rope_theta(o.rope_theta),
      m_bias(o.bias),
      m_fused(o.kernel == AttentionKernel::fused || (o.kernel == AttentionKernel::automatic && o.dropout == 0)) {
    if (m_heads < 1) throw ConfigError("heads", "expected a positive integer, got " + std::to_string(m_heads));
    if (m_kv_heads < 1 || m_heads % m_kv_heads != 0)
        throw ConfigError("kv_heads", "expected a positive divisor of heads = " + std::to_string(m_heads) +
                                          " (each key/value head serves heads / kv_heads query heads), got " +
                                          std::to_string(m_kv_heads));
    if (!(m_dropout >= 0.0 && m_dropout < 1.0))
        throw ConfigError("dropout", "expected a number in [0, 1), got " + std::to_string(m_dropout));
    if (!(m_rope_theta > 0.0))
        throw ConfigError("rope_theta", "expected a positive number, got " + std::to_string(m_rope_theta));
    if (m_fused && m_dropout > 0)
        throw ConfigError("kernel", "\"fused\" keeps no attention probabilities, so it cannot drop them out; "
                                    "use \"materialized\" or dropout 0");
}

namespace {

// RoPE turns pairs of a head's numbers: the head width must be even.
void check_rope_width(const Layer& layer, const Shape& input, int64_t heads) {
    const int64_t hd = input[1] / heads;
    if (hd % 2 == 0) return;
    const std::string key = layer.path().empty() ? "position" : layer.path() + ".position";
    throw ConfigError(key, "\"rope\" rotates pairs of a head's numbers, and the head width D / heads = " +
                               std::to_string(input[1]) + " / " + std::to_string(heads) + " = " +
                               std::to_string(hd) + " is odd; choose a width or head count that makes it even");
}

}  // namespace

std::vector<Layer*> Attention::children() {
    std::vector<Layer*> out;
    for (Layer* l : std::initializer_list<Layer*>{m_qkv.get(), m_attn_drop.get(), m_proj.get(), m_out_drop.get()})
        if (l) out.push_back(l);
    return out;
}

Shape Attention::build_impl(const Shape& input) {
    check_attention_input(*this, input, m_heads);
    if (m_rope) check_rope_width(*this, input, m_heads);
    check_tensor_shard(*this, "heads", m_heads, m_shard.world);
    check_tensor_shard(*this, "kv_heads", m_kv_heads, m_shard.world);
    const bool seq = m_shard.sequence_parallel();
    if (m_cp.on()) check_context_shard(input, seq);
    m_T = seq ? sequence_length(*this, m_shard, input) : input[0];
    m_D = input[1];
    m_H = m_heads / m_shard.world;
    m_KV = m_kv_heads / m_shard.world;
    m_inner = m_D / m_shard.world;
    const int64_t hd = m_D / m_heads;
    // The positions this layer's own tensors hold: all, or with sequence parallelism T / N.
    const Shape local = seq ? Shape{m_T / m_shard.world, m_D} : input;
    m_qkv = std::make_unique<Linear>((m_H + 2 * m_KV) * hd, m_bias);
    m_proj = std::make_unique<Linear>(m_D, m_bias);
    if (m_shard.world > 1) {  // qkv column-parallel (its q, k, v parts), proj row-parallel
        const SequenceSplit sequence = seq ? m_shard.sequence() : SequenceSplit{};
        m_qkv->set_shard({LinearShard::Split::column, {m_heads, m_kv_heads, m_kv_heads}, m_shard.all_reduce, sequence});
        m_proj->set_shard({LinearShard::Split::row, {1}, m_shard.all_reduce, sequence});
    }
    m_qkv->set_label(label() + ".qkv", path());
    m_proj->set_label(label() + ".proj", path());
    m_qkv->set_needs_input_grad(needs_input_grad());
    m_qkv->build(local, dtype(), device());
    m_proj->build(Shape{m_T, m_inner}, dtype(), device());
    if (m_dropout > 0) {
        m_attn_drop = std::make_unique<Dropout>(m_dropout);
        m_out_drop = std::make_unique<Dropout>(m_dropout);
        // The masks are told apart by label (engine/nn/dropout.h).
        m_attn_drop->set_label(label() + ".attn_dropout", path());
        m_out_drop->set_label(label() + ".out_dropout", path());
        m_attn_drop->build(Shape{m_H, m_T, m_T}, dtype(), device());
        m_out_drop->build(local, dtype(), device());
        // Its positions' masks of the whole sequence.
        if (seq) m_out_drop->set_sequence_slice(m_shard.rank, m_shard.world);
    }
    return seq && !m_shard.split_output ? Shape{m_T, m_D} : local;
}

void Attention::reset_parameters_impl(Rng& rng) {
    Rng a = rng.split();
    m_qkv->reset_parameters(a);
    Rng b = rng.split();
    m_proj->reset_parameters(b);
}

void Attention::set_needs_input_grad_impl(bool needs) {
    if (m_qkv) m_qkv->set_needs_input_grad(needs);
}

Tensor Attention::forward_impl(const Tensor& x_in, Mode mode) {
    const int64_t B = x_in.dim(0), H = m_H, T = m_T, Dh = m_D / m_heads;
    const Tensor x = sequence_enter(m_shard, x_in);
    m_qkv_out = m_qkv->forward(x, mode);
    if (m_cp.on()) {
        m_out = context_forward(m_qkv_out);
        return m_proj->forward(m_out, mode);
    }
    if (expands()) {
        const Tensor compact = m_qkv_out;
        m_qkv_out = new_activation(Shape{B, T, 3 * m_inner});
        dispatch_float(x.dtype(), [&]<class F>() {
            if (void* q = x.queue())
                kg::qkv_expand_rope<F>(B, T, H, m_KV, Dh, m_rope, m_rope_theta, compact.data<F>(),
                                       m_qkv_out.data<F>(), q);
            else
                kc::qkv_expand_rope<F>(B, T, H, m_KV, Dh, m_rope, m_rope_theta, compact.data<F>(),
                                       m_qkv_out.data<F>());
        });
    }
    Tensor heads = new_activation(Shape{B, T, m_inner});
    if (m_fused) {
        m_lse = new_activation(Shape{B, H, T});
        dispatch_float(x.dtype(), [&]<class F>() {
            if (void* q = x.queue())
                kg::attention_fused_forward<F>(B, T, H, Dh, m_causal, m_qkv_out.data<F>(), heads.data<F>(),
                                               m_lse.data<F>(), q);
            else
                kc::attention_fused_forward<F>(B, T, H, Dh, m_causal, m_qkv_out.data<F>(), heads.data<F>(),
                                               m_lse.data<F>());
        });
        m_out = heads;
        return sequence_leave(m_shard, m_proj->forward(heads, mode));
    }
    scores_and_dropout(B, mode);
    dispatch_float(x.dtype(), [&]<class F>() {
        if (void* q = x.queue())
            kg::attention_apply<F>(B, T, H, Dh, m_causal, m_used.data<F>(), m_qkv_out.data<F>(), heads.data<F>(), q);
        else
            kc::attention_apply<F>(B, T, H, Dh, m_causal, m_used.data<F>(), m_qkv_out.data<F>(), heads.data<F>());
    });
    if (m_recompute_scores && mode == Mode::train) {  // the T^2 tensors wait for backward
        m_probs = m_used = Tensor();
        if (m_attn_drop) m_attn_drop->release_saved();
    }
    Tensor y = m_proj->forward(heads, mode);
    if (m_out_drop) y = m_out_drop->forward(y, mode);
    return sequence_leave(m_shard, y);
}

void Attention::scores_and_dropout(int64_t B, Mode mode) {
    const int64_t H = m_H, T = m_T, Dh = m_D / m_heads;
    m_probs = new_activation(Shape{B, H, T, T});
    dispatch_float(m_qkv_out.dtype(), [&]<class F>() {
        if (void* q = m_qkv_out.queue())
            kg::attention_scores_softmax<F>(B, T, H, Dh, m_causal, m_qkv_out.data<F>(), m_probs.data<F>(), q);
        else
            kc::attention_scores_softmax<F>(B, T, H, Dh, m_causal, m_qkv_out.data<F>(), m_probs.data<F>());
    });
    m_used = m_attn_drop ? m_attn_drop->forward(m_probs, mode) : m_probs;
}

void Attention::release_saved_impl() { m_qkv_out = m_probs = m_used = m_out = m_lse = Tensor(); }

Tensor Attention::backward_impl(const Tensor& dy_out) {
    PARALAB_CHECK(m_qkv_out.defined(), label() + ": a second backward after one forward");
    const Tensor dy = sequence_leave_backward(m_shard, dy_out);
    const int64_t B = dy.dim(0), H = m_H, T = m_T, Dh = m_D / m_heads;
    if (m_fused) {
        const Tensor dheads = m_proj->backward(dy);
        if (m_cp.on()) {
            const Tensor dcompact = context_backward(dheads);
            m_out = m_lse = m_qkv_out = Tensor();
            return m_qkv->backward(dcompact);
        }
        Tensor dqkv = new_activation(Shape{B, T, 3 * m_inner});
        dispatch_float(dy.dtype(), [&]<class F>() {
            if (void* q = dy.queue())
                kg::attention_fused_backward<F>(B, T, H, Dh, m_causal, m_qkv_out.data<F>(), m_out.data<F>(),
                                                dheads.data<F>(), m_lse.data<F>(), dqkv.data<F>(), q);
            else
                kc::attention_fused_backward<F>(B, T, H, Dh, m_causal, m_qkv_out.data<F>(), m_out.data<F>(),
                                                dheads.data<F>(), m_lse.data<F>(), dqkv.data<F>());
        });
        m_out = m_lse = m_qkv_out = Tensor();
        return sequence_enter_backward(m_shard, m_qkv->backward(contract_heads(dqkv)));
    }
    if (!m_probs.defined()) {  // selective recomputation: the same scores from the same q, k
        RecomputeScope recompute;
        scores_and_dropout(B, Mode::train);
    }
    const Tensor g = m_out_drop ? m_out_drop->backward(dy) : dy;
    const Tensor dheads = m_proj->backward(g);
    Tensor dqkv = new_activation(Shape{B, T, 3 * m_inner});
    Tensor dprobs = new_activation(Shape{B, H, T, T});
    dispatch_float(dy.dtype(), [&]<class F>() {
        if (void* q = dy.queue())
            kg::attention_backward_values<F>(B, T, H, Dh, m_causal, m_used.data<F>(), m_qkv_out.data<F>(),
                                             dheads.data<F>(), dprobs.data<F>(), dqkv.data<F>(), q);
        else
            kc::attention_backward_values<F>(B, T, H, Dh, m_causal, m_used.data<F>(), m_qkv_out.data<F>(),
                                             dheads.data<F>(), dprobs.data<F>(), dqkv.data<F>());
    });
    m_used = Tensor();
    if (m_attn_drop) dprobs = m_attn_drop->backward(dprobs);
    dispatch_float(dy.dtype(), [&]<class F>() {
        if (void* q = dy.queue())
            kg::attention_backward_scores<F>(B, T, H, Dh, m_causal, m_probs.data<F>(), m_qkv_out.data<F>(),
                                             dprobs.data<F>(), dqkv.data<F>(), q);
        else
            kc::attention_backward_scores<F>(B, T, H, Dh, m_causal, m_probs.data<F>(), m_qkv_out.data<F>(),
                                             dprobs.data<F>(), dqkv.data<F>());
    });
    m_probs = Tensor();
    m_qkv_out = Tensor();
    return sequence_enter_backward(m_shard, m_qkv->backward(contract_heads(dqkv)));
}

Tensor Attention::contract_heads(const Tensor& dqkv) {
    if (!expands()) return dqkv;
    // The key/value heads' gradients summed over their query heads, turned back.
    const int64_t B = dqkv.dim(0), H = m_H, T = m_T, Dh = m_D / m_heads;
    Tensor out = new_activation(Shape{B, T, (H + 2 * m_KV) * Dh});
    dispatch_float(dqkv.dtype(), [&]<class F>() {
        if (void* q = dqkv.queue())
            kg::qkv_expand_rope_backward<F>(B, T, H, m_KV, Dh, m_rope, m_rope_theta, dqkv.data<F>(), out.data<F>(), q);
        else
            kc::qkv_expand_rope_backward<F>(B, T, H, m_KV, Dh, m_rope, m_rope_theta, dqkv.data<F>(), out.data<F>());
    });
    return out;
}

// The projections, plus q k^T and the product with V: 2 T T D multiply-adds each (every head,
// the masked half included, as the usual MFU accounting counts them), the softmax, and with
// RoPE 3 per rotated number of q and k (two products and a sum). With context parallelism this
// device's T / cp queries against the T keys: 1 / cp of the whole.
int64_t Attention::flops_impl() const {
    if (!built()) return 0;
    const int64_t projections = checked_sum(m_qkv->flops_per_sample(), m_proj->flops_per_sample(), "FLOPs");
    const int64_t keys = m_T * m_cp.world;
    const int64_t scores = checked_sum(checked_product({4, m_T, keys, m_inner}, "FLOPs"),
                                       checked_product({5, m_H, m_T, keys}, "FLOPs"), "FLOPs");
    const int64_t rope = m_rope ? checked_product({3, m_T, m_H + m_KV, m_D / m_heads}, "FLOPs") : 0;
    return checked_sum(checked_sum(projections, scores, "FLOPs"), rope, "FLOPs");
}

int64_t Attention::activations_impl() {
    int64_t n = saved_per_sample();
    for (Layer* c : children()) n += c->activations_per_sample();
    return n;
}

int64_t Attention::saved_per_sample() const {
    return (m_fused ? m_H * m_T : scores_per_sample()) + 3 * m_T * m_inner;
}

int64_t Attention::backward_per_sample() const {
    const int64_t gradients = 3 * m_T * m_inner;
    if (!m_cp.on()) return gradients;
    const int64_t kv = 2 * m_T * m_KV * (m_D / m_heads);  // this device's keys and values
    const int64_t in_flight = m_cp.comm == ContextShard::Comm::ring ? 2 * kv : m_cp.world * kv;
    return gradients + 2 * in_flight;
}

void Attention::check_context_shard(const Shape& input, bool sequence_parallel) {
    const auto key = [&](const char* k) { return path().empty() ? std::string(k) : path() + "." + k; };
    if (sequence_parallel)
        throw ConfigError(key("attention"), label() + ": context parallelism does not run with sequence_parallel "
                                                      "(both split the sequence); turn sequence_parallel off");
    if (!m_fused)
        throw ConfigError(key("kernel"), label() + ": context parallelism merges blocks of the fused kernel by "
                                                   "their log-sum-exp; use kernel \"fused\" (and dropout 0)");
    if (device().is_gpu())
        throw ConfigError(key("attention"), label() + ": context parallelism's attention runs on cpu devices, "
                                                      "and " + device().name() + " is a GPU");
    // This device's rows are 2C of the sequence's T = 2C·cp.
    m_positions = context_positions(input[0] * m_cp.world, m_cp.rank, m_cp.world, key("input"));
}

// ---- TransformerBlock ------------------------------------------------------------------------

namespace {

// The block's norms: an RMSNorm has no bias (torch.nn.RMSNorm's form), a LayerNorm one unless
// the block has none.
std::unique_ptr<Layer> block_norm(const AttentionOptions& a, const BlockOptions& b) {
    if (b.rmsnorm) return std::make_unique<RMSNorm>(1e-5, false);
    return std::make_unique<LayerNorm>(1e-5, a.bias);
}

std::vector<std::unique_ptr<Layer>> block_layers(const AttentionOptions& a, const BlockOptions& b) {
    if (b.ffn < 1 && !b.moe) throw ConfigError("ffn", "expected a positive integer, got " + std::to_string(b.ffn));
    std::vector<std::unique_ptr<Layer>> attn;
    attn.push_back(block_norm(a, b));
    attn.push_back(std::make_unique<Attention>(a));
    std::vector<std::unique_ptr<Layer>> mlp;
    mlp.push_back(block_norm(a, b));
    if (b.moe) {
        mlp.push_back(std::make_unique<MoE>(b.experts));
    } else if (b.swiglu) {
        mlp.push_back(std::make_unique<SwiGLU>(b.ffn, a.bias));
    } else {
        mlp.push_back(std::make_unique<Linear>(b.ffn, a.bias));
        mlp.push_back(std::make_unique<Activation>(ActivationKind::gelu));
        mlp.push_back(std::make_unique<Linear>(1, a.bias));  // width set in build_impl (D)
    }
    if (a.dropout > 0) mlp.push_back(std::make_unique<Dropout>(a.dropout));
    std::vector<std::unique_ptr<Layer>> out;
    out.push_back(std::make_unique<Residual>(std::move(attn)));
    out.push_back(std::make_unique<Residual>(std::move(mlp)));
    return out;
}

}  // namespace

TransformerBlock::TransformerBlock(const AttentionOptions& attention, const BlockOptions& block)
    : Sequential(block_layers(attention, block), "transformer_block"),
      m_heads(attention.heads),
      m_kv_heads(attention.kv_heads == 0 ? attention.heads : attention.kv_heads),
      m_ffn(block.ffn),
      m_swiglu(block.swiglu),
      m_moe(block.moe) {}

Shape TransformerBlock::build_impl(const Shape& input) {
    check_attention_input(*this, input, m_heads);
    // The GELU MLP's second linear maps back to the width, known only now (SwiGLU's down sets
    // its own).
    Layer& mlp = *at(1).children().front();
    auto* body = static_cast<Sequential*>(&mlp);
    const bool one_layer = m_swiglu || m_moe;  // the MLP is one layer (else linear, gelu, linear)
    const size_t mlp_end = one_layer ? 2 : 4;  // the MLP's layers; a dropout after them
    if (!one_layer) static_cast<Linear&>(body->at(3)).set_out(input[1]);
    const bool seq = m_shard.sequence_parallel();
    if (m_shard.world > 1) {  // Megatron's MLP: the first linear(s) column-, the last row-parallel
        check_tensor_shard(*this, "heads", m_heads, m_shard.world);
        check_tensor_shard(*this, "kv_heads", m_kv_heads, m_shard.world);
        if (!m_moe) check_tensor_shard(*this, "ffn", m_ffn, m_shard.world);
        const SequenceSplit sequence = seq ? m_shard.sequence() : SequenceSplit{};
        if (m_moe) {
            // The router sees every token on every device; with sequence parallelism each would
            // hold only its own positions' routing.
            if (seq)
                throw ConfigError(path().empty() ? "mlp" : path() + ".mlp",
                                  "\"moe\" does not run under sequence_parallel (every tensor rank routes the whole "
                                  "sequence); turn sequence_parallel off");
            auto& moe = static_cast<MoE&>(body->at(1));
            check_tensor_shard(*this, "expert_ffn", moe.options().expert_ffn, m_shard.world);
            moe.set_shard(m_shard.rank, m_shard.world, m_shard.all_reduce);
        } else if (m_swiglu) {
            static_cast<SwiGLU&>(body->at(1)).set_shard(m_shard.world, m_shard.all_reduce, sequence);
        } else {
            auto& fc1 = static_cast<Linear&>(body->at(1));
            fc1.set_out(m_ffn / m_shard.world);
            fc1.set_shard({LinearShard::Split::column, {1}, m_shard.all_reduce, sequence});
            static_cast<Linear&>(body->at(3)).set_shard({LinearShard::Split::row, {1}, m_shard.all_reduce, sequence});
        }
        // With sequence parallelism the block's norms, residual adds and dropout hold this
        // device's positions: the attention takes and gives them split.
        TensorShard inner = m_shard;
        inner.split_input = inner.split_output = seq;
        // The MLP's dropout draws its positions' masks of the whole sequence.
        if (seq && body->size() > mlp_end)
            static_cast<Dropout&>(body->at(mlp_end)).set_sequence_slice(m_shard.rank, m_shard.world);
        auto* attention = static_cast<Sequential*>(at(0).children().front());
        static_cast<Attention&>(attention->at(1)).set_tensor_shard(std::move(inner));
    }
    if (m_cp.on()) {
        auto* attention = static_cast<Sequential*>(at(0).children().front());
        static_cast<Attention&>(attention->at(1)).set_context_shard(m_cp);
    }
    const char* names[] = {"attention", "mlp"};
    for (size_t i = 0; i < 2; ++i) {
        Layer& part = at(i);
        part.set_label(label() + "." + names[i], path());
        auto* inner = static_cast<Sequential*>(part.children().front());
        for (size_t k = 0; k < inner->size(); ++k)
            inner->at(k).set_label(label() + "." + names[i] + "." + inner->at(k).type(), path());
    }
    if (!seq) return Sequential::build_impl(input);
    const int64_t T = sequence_length(*this, m_shard, input);
    const Shape local{T / m_shard.world, input[1]};
    Sequential::build_impl(local);
    return m_shard.split_output ? local : Shape{T, input[1]};
}

Tensor TransformerBlock::forward_impl(const Tensor& x, Mode mode) {
    return sequence_leave(m_shard, Sequential::forward_impl(sequence_enter(m_shard, x), mode));
}

Tensor TransformerBlock::backward_impl(const Tensor& dy) {
    return sequence_enter_backward(m_shard, Sequential::backward_impl(sequence_leave_backward(m_shard, dy)));
}

}  // namespace paralab::nn
