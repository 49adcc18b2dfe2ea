// Fully connected layer over the last dimension, like torch.nn.Linear: [..., in] -> [..., out].
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "engine/nn/layer.h"

namespace paralab::nn {

// Megatron-LM's tensor parallelism (engine/strategy/tensor_shards.h): a linear that holds
// one device's shard of a wider one; `all_reduce` (the strategy's: sums a tensor over the
// devices, in place) joins the shards.
//   column: the full weight's rows (output features) are split; the input is whole on every
//           device, so its gradient here is a partial sum, all-reduced in backward (Megatron's f).
//   row:    the full weight's columns (input features) are split, and the input is the
//           matching shard; the outputs are partial sums, all-reduced in forward (Megatron's g),
//           then the bias, whole on every device, is added once.
//
// With sequence parallelism (`sequence` on; Korthikanti et al. 2022) the tensors outside the
// split linears are split along the sequence: device r holds positions [r T/N, (r+1) T/N) of
// every sample ([B, T/N, X], the sequence being the dimension after the batch).
//   column: the input arrives split; an all-gather along the sequence makes it whole before the
//           GEMM (and the whole input is what backward keeps); the input gradient, a partial
//           sum of the whole sequence, is reduce-scattered along the sequence instead of
//           all-reduced. Per-sample shapes [T/N, in] -> [T, out].
//   row:    the partial sums are reduce-scattered along the sequence instead of all-reduced,
//           then the bias goes on this device's positions; backward all-gathers the output
//           gradient along the sequence first. Per-sample shapes [T, in] -> [T/N, out]. The
//           bias's gradient covers this device's positions only: the strategy sums it over
//           the devices.
struct SequenceSplit {
    int rank = 0;
    int world = 1;
    // Both in place over a buffer of `world` equal chunks (the communicator's layout):
    // all_gather fills every chunk from chunk `rank` of each device; reduce_scatter leaves in
    // chunk `rank` the sum over the devices of that chunk (the rest unspecified).
    std::function<void(const Tensor&)> all_gather;
    std::function<void(const Tensor&)> reduce_scatter;
    bool on() const { return world > 1 && all_gather && reduce_scatter; }
};

struct LinearShard {
    enum class Split { column, row };
    Split split = Split::column;
    // column: the full layer's outputs are parts of these relative widths, each split alike
    // over the devices, so that a shard holds its share of each (attention's q, k and v:
    // {heads, kv_heads, kv_heads}).
    std::vector<int64_t> parts{1};
    std::function<void(const Tensor&)> all_reduce;
    SequenceSplit sequence{};  // off by default
};

// Sequence parallelism's moves of a tensor [B, T, ...] along its sequence (dimension 1), on
// the tensor's device (results are activations there; the communication buffer is workspace):
//   sequence_slice:          positions [r T/N, (r+1) T/N) of the whole tensor (no communication)
//   sequence_gather:         [B, T/N, ...] on each device -> [B, T, ...] on every device
//   sequence_reduce_scatter: [B, T, ...] partial sums -> this device's positions of the sum
Tensor sequence_slice(const Tensor& whole, int rank, int world);
Tensor sequence_gather(const Tensor& local, const SequenceSplit& s);
Tensor sequence_reduce_scatter(const Tensor& whole, const SequenceSplit& s);

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
    // Before build only: the weight is `embedding`'s table [vocab, dim] (built before this
    // layer, in the same model), read as [out, in]; this layer has no weight of its own and its
    // weight gradient accumulates into the table's. Throws ConfigError at "<path>.out" when out
    // is not the vocabulary, ShapeError when in is not the embedding's width.
    void tie_to(Layer& embedding);
    bool tied() const { return m_tied_to != nullptr; }

protected:
    Shape build_impl(const Shape& input) override;
    void reset_parameters_impl(Rng& rng) override;
    Tensor forward_impl(const Tensor& x, Mode mode) override;
    Tensor backward_impl(const Tensor& dy) override;
    int64_t flops_impl() const override;
    int64_t activations_impl() override;
    void release_saved_impl() override { m_x = Tensor(); }

private:
    int64_t m_out;
    bool m_has_bias;
    int64_t m_in = 0;
    Param* m_weight = nullptr;  // [out, in]
    Param* m_bias = nullptr;    // [out], null without bias
    Tensor m_x;                 // the last forward's input, released by backward
    std::optional<LinearShard> m_shard;
    Layer* m_tied_to = nullptr;  // the embedding whose table is the weight (tie_to)

    // The sequence split when this shard is sequence-parallel, else null.
    const SequenceSplit* sequence() const;
    // Rows of the GEMM per sample: the input's, or the whole sequence's for a sequence-parallel
    // column shard (its input is gathered first).
    int64_t gemm_rows_per_sample() const;
};

}  // namespace paralab::nn
