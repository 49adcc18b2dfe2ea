// The Megatron-LM cut of a model's parameters over a tensor-parallel group, shared by
// tensor_parallel and hybrid: each attention and transformer_block built as shard r of n
// (nn::TensorShard), and each parameter of the whole model mapped to its shards' numbers, so that
// the whole model can be put together from the shards (predict, checkpoints, tests) and cut again.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/config/experiment.h"
#include "engine/nn/attention.h"
#include "engine/nn/spec.h"
#include "engine/tensor/tensor.h"

namespace paralab::comm {
class Communicator;
}
namespace paralab::strategy {
class Rank;
struct ModelCost;
struct TrainingState;
}

namespace paralab::strategy::tensor_shards {

// Gives every attention and transformer_block of an unbuilt layer tree its shard. With
// sequence parallelism (shard.sequence_parallel()), `shard`'s split_input / split_output are
// those of `layer` itself when it is split; inside a composite, split layers that follow one
// another in one sequential chain hand their outputs on split along the sequence.
void give_shard(nn::Layer& layer, const nn::TensorShard& shard);

// Model's `prepare` for the top-level layers [first, last) of `layers` (nn::expand_repeats'
// order, as nn::Model builds them): give_shard, with neighbouring split layers (attention,
// transformer_block) chained under sequence parallelism, so that the sequence is split once
// before the first of a run of them and gathered once after the last.
std::function<void(nn::Layer&)> shard_preparer(const std::vector<nn::LayerSpec>& layers, size_t first,
                                               size_t last, const nn::TensorShard& shard);

// The parameters of a built shard model that sequence parallelism leaves whole but feeds only
// this device's positions (each split layer's layernorms and row-parallel biases): their
// gradients are partial sums, to be summed over the tensor-parallel group before the optimizer.
std::vector<nn::Param*> sequence_partial_parameters(nn::Layer& layer);

// Sums those partial gradients (`params`, non-empty) over the tensor-parallel `group` in one
// all-reduce of a buffer holding them all, recorded on `rank` as "tp_sequence_grads" (the
// copies in and out as "sequence_grads" compute).
void sum_sequence_partial(Rank& rank, comm::Communicator& group, const std::vector<nn::Param*>& params);

// A checkpoint (the single device's layout) read for cutting into shards: every whole parameter
// (`shapes`, in the model's order) and, when the run had stepped, each one's `per_param`
// optimizer state tensors, as f32 host-readable tensors for slice_of; `buffers` checked against
// the model's. Throws Error naming what does not fit, before anything changes.
struct WholeCheckpoint {
    std::vector<Tensor> values;
    std::vector<std::vector<Tensor>> state;  // [parameter][state]; empty lists when not stepped
    bool stepped = false;                    // the checkpoint holds optimizer state
};
WholeCheckpoint read_whole_checkpoint(const TrainingState& st, const std::vector<Shape>& shapes,
                                      const std::vector<Tensor>& buffers, size_t per_param);

// What tensor rank 0 of `n` holds in each top-level layer of `e`'s model (nn::expand_repeats'
// order): its parameters (the split layers' slices and the replicated ones whole), what it keeps
// for backward per example and of that its attention probabilities: read from the model built
// with its shards (give_shard; `sequence`: with sequence parallelism) on the meta device, nothing
// allocated. `input`: the model's per-example input.
struct ShardCost {
    std::vector<int64_t> parameters, activations, scores, backward;  // backward: nn::backward_extra_of
};
ShardCost shard_cost(const config::Experiment& e, const Shape& input, int n, bool sequence);

// `cost`'s parameters, activations, attention probabilities and backward extras replaced, layer
// by layer, by those of tensor rank 0 of `n` (shard_cost of cost.input): the memory model of
// every strategy that splits layers over a tensor-parallel group. A model whose layers do not
// divide over `n` (refused at setup, but estimated in the window as it is edited) keeps its
// whole numbers.
void shard_the_cost(const config::Experiment& e, int n, bool sequence, strategy::ModelCost& cost);

// How one parameter of the whole model is cut: whole (replicated), by rows of its first
// dimension in parts of the relative heights `parts` (nn::LinearShard's), each part split alike
// (a column-parallel weight or bias: grouped-query attention's qkv is {heads, kv_heads,
// kv_heads}), or by columns of its second (a row-parallel weight).
struct Cut {
    enum class Kind { whole, rows, columns };
    Kind kind = Kind::whole;
    std::vector<int64_t> parts{1};
};

// The cut of each parameter of a built shard model, appended in parameters() order.
void collect_cuts(nn::Layer& layer, std::vector<Cut>& out);

// The cuts of the parameters of top-level layers [first, last) of `layers` (per-example input
// `input`) split over `n` devices (`sequence`: with sequence parallelism), from a build of them
// on the host that never computes: a stage none of this process's devices holds.
std::vector<Cut> stage_cuts(const std::vector<nn::LayerSpec>& layers, size_t first, size_t last, const Shape& input,
                            const std::string& loss, int n, bool sequence);

// The shape of each of the n shards of a parameter of shape `whole`.
Shape shard_shape(const Shape& whole, Cut cut, int n);

// Shard `r` of `n` (of shape `shard`) of the whole parameter `whole` (f32, host-readable), as
// an f32 tensor on the host.
Tensor slice_of(const Tensor& whole, const Shape& shard, Cut cut, int r, int n);
// The whole parameter of shape `whole` put together from its n shards (shards[r]: f32,
// host-readable), on the host; a replicated one is shard 0.
Tensor join_shards(const Shape& whole, Cut cut, const std::vector<const Tensor*>& shards);

}  // namespace paralab::strategy::tensor_shards
