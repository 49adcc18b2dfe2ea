// The gated MLP of Llama-style blocks (Shazeer 2020, "GLU Variants Improve Transformer"):
// [..., D] -> [..., D], y = down(silu(gate(x)) * up(x)), gate and up linears D -> ffn, down
// ffn -> D (Hugging Face's LlamaMLP). Used as a transformer_block's `mlp: "swiglu"`.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "engine/nn/linear.h"

namespace paralab::nn {

class SwiGLU : public Layer {
public:
    // Throws ConfigError when ffn < 1.
    SwiGLU(int64_t ffn, bool bias);
    bool runs_on_gpu() const override { return true; }
    // gate, up, down: the order of the parameters and of the weights file's names.
    std::vector<Layer*> children() override { return {m_gate.get(), m_up.get(), m_down.get()}; }
    int64_t ffn() const { return m_ffn; }

    // Before build only: Megatron's split over `world` devices, as the GELU MLP's: gate and up
    // column-parallel (ffn / world units each), down row-parallel; `sequence` on: the input
    // arrives and the output leaves split along the sequence (nn::LinearShard). Gate and up
    // read one input: it is gathered once (sequence parallelism) and the sum of their input
    // gradients all-reduced (or reduce-scattered) once, here rather than in each of them.
    void set_shard(int world, std::function<void(const Tensor&)> all_reduce, SequenceSplit sequence);

protected:
    Shape build_impl(const Shape& input) override;
    void reset_parameters_impl(Rng& rng) override;
    Tensor forward_impl(const Tensor& x, Mode mode) override;
    Tensor backward_impl(const Tensor& dy) override;
    int64_t flops_impl() const override;
    // gate's input (up keeps the same tensor), gate's and up's outputs, down's input.
    int64_t activations_impl() override;
    void set_needs_input_grad_impl(bool needs) override;
    void release_saved_impl() override { m_g = m_u = Tensor(); }

private:
    int64_t m_ffn;
    std::unique_ptr<Linear> m_gate, m_up, m_down;
    std::function<void(const Tensor&)> m_all_reduce;  // set_shard's; empty: not split
    SequenceSplit m_sequence;
    Tensor m_g, m_u;  // [B, ..., ffn (this device's)], the last forward's, for backward
};

}  // namespace paralab::nn
