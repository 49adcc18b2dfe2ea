// Inverted dropout: in Mode::train each element is kept with probability 1 - p and scaled by
// 1 / (1 - p), so eval (the identity) needs no rescaling.
//
// The mask is a pure function of (seed, step, label, global element index) through the
// counter-based hash of engine/util/rng.h, where the global element index counts from the
// first sample of the GLOBAL batch (set_random_state's sample_offset). A batch split across
// devices therefore draws exactly the masks one device draws for the whole batch. The label
// (the layer's place in the model, the same in every replica) separates the masks of a
// model's dropout layers, which all receive the same seed. The caller sets the random state
// before each step's forward; with an unchanged state every forward draws the same mask.
#pragma once

#include <cstdint>

#include "engine/nn/layer.h"

namespace paralab::nn {

class Dropout : public Layer {
public:
    // Throws ConfigError unless 0 <= p < 1.
    explicit Dropout(double p);
    double p() const { return m_p; }
    bool runs_on_gpu() const override { return true; }
    // Sequence parallelism (nn::TensorShard): this layer's per-sample input is positions
    // [rank P, (rank + 1) P) of a sample of world P positions (the sequence its first
    // dimension). Its masks are then the whole sample's at those positions: what one device
    // draws for the whole sequence.
    void set_sequence_slice(int rank, int world);

protected:
    Shape build_impl(const Shape& input) override;
    Tensor forward_impl(const Tensor& x, Mode mode) override;
    Tensor backward_impl(const Tensor& dy) override;
    int64_t flops_impl() const override;
    void set_random_state_impl(uint64_t seed, uint64_t step, int64_t sample_offset) override;
    bool draws_each_step_impl() const override { return m_p > 0; }
    void release_saved_impl() override { m_mask = Tensor(); }
    int64_t activations_impl() override { return output_shape().numel(); }  // the mask

private:
    double m_p;
    uint64_t m_seed = 0;
    uint64_t m_step = 0;
    int64_t m_sample_offset = 0;
    int m_slice_rank = 0, m_slice_world = 1;  // set_sequence_slice
    bool m_identity = false;  // the last forward passed x through (eval, or p = 0)
    Tensor m_mask;            // [B, ...]: 0 or 1/(1-p) per element; released by backward
};

}  // namespace paralab::nn
