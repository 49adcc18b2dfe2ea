// Fully connected layer over the last dimension, like torch.nn.Linear: [..., in] -> [..., out].
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "engine/nn/layer.h"

namespace paralab::nn {

// Megatron-LM's tensor parallelism (engine/strategy/tensor_parallel.cpp): a linear that holds
// one device's shard of a wider one; `all_reduce` (the strategy's: sums a tensor over the
// devices, in place) joins the shards.
//   column: the full weight's rows (output features) are split; the input is whole on every
//           device, so its gradient here is a partial sum, all-reduced in backward (Megatron's f).
//   row:    the full weight's columns (input features) are split, and the input is the
//           matching shard; the outputs are partial sums, all-reduced in forward (Megatron's g),
//           then the bias, whole on every device, is added once.
struct LinearShard {
    enum class Split { column, row };
    Split split = Split::column;
    // column: the full layer's outputs are `blocks` equal parts split alike (attention's q, k
    // and v: 3), so that a shard holds its part of each.
    int64_t blocks = 1;
    std::function<void(const Tensor&)> all_reduce;
};

class Linear : public Layer {
public:
    // Throws ConfigError when out < 1.
    Linear(int64_t out, bool bias = true);
    bool runs_on_gpu() const override { return true; }
    // Before build only: the output width (a layer whose width follows its input's).
    void set_out(int64_t out);
    // Before build only: this linear is a shard (above); its `out` is the shard's width.
    void set_shard(LinearShard shard);
    const LinearShard* shard() const { return m_shard ? &*m_shard : nullptr; }

protected:
    Shape build_impl(const Shape& input) override;
    void reset_parameters_impl(Rng& rng) override;
    Tensor forward_impl(const Tensor& x, Mode mode) override;
    Tensor backward_impl(const Tensor& dy) override;
    int64_t flops_impl() const override;
    void release_saved_impl() override { m_x = Tensor(); }

private:
    int64_t m_out;
    bool m_has_bias;
    int64_t m_in = 0;
    Param* m_weight = nullptr;  // [out, in]
    Param* m_bias = nullptr;    // [out], null without bias
    Tensor m_x;                 // the last forward's input, released by backward
    std::optional<LinearShard> m_shard;
};

}  // namespace paralab::nn
