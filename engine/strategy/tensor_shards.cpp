#include "engine/strategy/tensor_shards.h"

#include "engine/device/device.h"
#include "engine/nn/attention.h"
#include "engine/nn/linear.h"
#include "engine/nn/model.h"
#include "engine/strategy/registry.h"
#include "engine/strategy/strategy.h"
#include "engine/util/error.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

namespace paralab::strategy::tensor_shards {

namespace {

bool is_split(nn::Layer* layer) {
    return dynamic_cast<nn::TransformerBlock*>(layer) || dynamic_cast<nn::Attention*>(layer);
}

bool is_split_type(const std::string& type) { return type == "attention" || type == "transformer_block"; }

}  // namespace

void give_shard(nn::Layer& layer, const nn::TensorShard& shard) {
    if (auto* block = dynamic_cast<nn::TransformerBlock*>(&layer)) return block->set_tensor_shard(shard);
    if (auto* attention = dynamic_cast<nn::Attention*>(&layer)) return attention->set_tensor_shard(shard);
    const std::vector<nn::Layer*> children = layer.children();
    // Only a sequential's children run one after another.
    const bool chain = dynamic_cast<nn::Sequential*>(&layer) != nullptr;
    for (size_t i = 0; i < children.size(); ++i) {
        nn::TensorShard s = shard;
        s.split_input = chain && i > 0 && is_split(children[i - 1]);
        s.split_output = chain && i + 1 < children.size() && is_split(children[i + 1]);
        give_shard(*children[i], s);
    }
}

std::function<void(nn::Layer&)> shard_preparer(const std::vector<nn::LayerSpec>& layers, size_t first,
                                               size_t last, const nn::TensorShard& shard) {
    const std::vector<nn::LayerSpec> expanded = nn::expand_repeats(layers);
    last = std::min(last, expanded.size());
    std::vector<bool> split;
    for (size_t i = first; i < last; ++i) split.push_back(is_split_type(expanded[i].type));
    auto next = std::make_shared<size_t>(0);  // the index in [first, last) of the next layer
    return [split, next, shard](nn::Layer& layer) {
        const size_t i = (*next)++;
        PARALAB_CHECK(i < split.size(), "tensor_shards: more layers prepared than the model has");
        nn::TensorShard s = shard;
        s.split_input = i > 0 && split[i - 1];
        s.split_output = i + 1 < split.size() && split[i + 1];
        give_shard(layer, s);
    };
}

namespace {

// `inside`: within a sequence-parallel split layer.
void collect_partial(nn::Layer& layer, bool inside, std::vector<nn::Param*>& out) {
    if (auto* block = dynamic_cast<nn::TransformerBlock*>(&layer))
        inside = block->tensor_shard().sequence_parallel();
    else if (auto* attention = dynamic_cast<nn::Attention*>(&layer))
        inside = inside || attention->tensor_shard().sequence_parallel();
    if (auto* linear = dynamic_cast<nn::Linear*>(&layer); linear && linear->shard()) {
        // A column shard's parameters are slices; a row shard's bias went onto this device's
        // positions.
        const auto params = layer.parameters();
        if (inside && linear->shard()->split == nn::LinearShard::Split::row && params.size() > 1)
            out.push_back(params[1]);
        return;
    }
    // A layer's own parameters come before its children's (Layer::parameters).
    const std::vector<nn::Layer*> children = layer.children();
    size_t of_children = 0;
    for (nn::Layer* c : children) of_children += c->parameters().size();
    const auto params = layer.parameters();
    if (inside)
        for (size_t k = 0; k + of_children < params.size(); ++k) out.push_back(params[k]);
    for (nn::Layer* c : children) collect_partial(*c, inside, out);
}

}  // namespace

std::vector<nn::Param*> sequence_partial_parameters(nn::Layer& layer) {
    std::vector<nn::Param*> out;
    collect_partial(layer, false, out);
    return out;
}

void collect_cuts(nn::Layer& layer, std::vector<Cut>& out) {
    if (auto* linear = dynamic_cast<nn::Linear*>(&layer); linear && linear->shard()) {
        const nn::LinearShard& s = *linear->shard();
        const bool column = s.split == nn::LinearShard::Split::column;
        out.push_back({column ? Cut::Kind::rows : Cut::Kind::columns, s.parts});  // weight
        if (layer.parameters().size() > 1) out.push_back({column ? Cut::Kind::rows : Cut::Kind::whole, s.parts});
        return;
    }
    // A layer's own parameters come before its children's (Layer::parameters).
    size_t children = 0;
    for (nn::Layer* c : layer.children()) children += c->parameters().size();
    for (size_t k = children; k < layer.parameters().size(); ++k) out.push_back({});
    for (nn::Layer* c : layer.children()) collect_cuts(*c, out);
}

std::vector<Cut> stage_cuts(const std::vector<nn::LayerSpec>& layers, size_t first, size_t last, const Shape& input,
                            const std::string& loss, int n, bool sequence) {
    nn::TensorShard shard{0, n, {}};
    const auto never = [](const Tensor&) { throw Error("a stage built for its cuts computed"); };
    shard.all_reduce = never;
    if (sequence) shard.all_gather = shard.reduce_scatter = never;
    const auto model = nn::Model::stage(layers, first, last, input, loss, DType::f32, detached_host_device(),
                                        shard_preparer(layers, first, last, shard));
    std::vector<Cut> out;
    collect_cuts(model->net(), out);
    return out;
}

namespace {

// One contiguous run of numbers shared by the whole parameter and shard `r` of `n`.
struct Run {
    int64_t whole_at, shard_at, count;
};

std::vector<Run> runs_of(const Shape& whole, Cut cut, int r, int n) {
    if (cut.kind == Cut::Kind::whole || n == 1) return {{0, 0, whole.numel()}};
    const int64_t rows = whole[0], row_len = whole.numel() / rows;
    std::vector<Run> out;
    if (cut.kind == Cut::Kind::rows) {  // each part's rows [r·per, (r+1)·per)
        int64_t total = 0;
        for (const int64_t p : cut.parts) total += p;
        const int64_t unit = rows / total;
        int64_t whole_row = 0, shard_row = 0;
        for (const int64_t p : cut.parts) {
            const int64_t block = p * unit, per = block / n;
            out.push_back({(whole_row + r * per) * row_len, shard_row * row_len, per * row_len});
            whole_row += block;
            shard_row += per;
        }
    } else {  // columns [r·w, (r+1)·w) of every row
        const int64_t w = row_len / n;
        for (int64_t i = 0; i < rows; ++i) out.push_back({i * row_len + r * w, i * w, w});
    }
    return out;
}

Tensor host_tensor(const Shape& shape) {
    return Tensor::empty(shape, DType::f32, detached_host_device(), MemCategory::workspace);
}

}  // namespace

ShardCost shard_cost(const config::Experiment& e, const Shape& input, int n, bool sequence) {
    const std::vector<nn::LayerSpec> layers = nn::expand_repeats(e.layers);
    nn::TensorShard shard{0, n, {}};
    const auto never = [](const Tensor&) { throw Error("tensor_shards: a shard built for its memory computed"); };
    shard.all_reduce = never;
    if (sequence) shard.all_gather = shard.reduce_scatter = never;
    const auto model = nn::Model::stage(layers, 0, layers.size(), input, e.loss, DType::f32, meta_device(),
                                        shard_preparer(layers, 0, layers.size(), shard));
    ShardCost out;
    for (size_t i = 0; i < model->net().size(); ++i) {
        out.parameters.push_back(model->net().at(i).parameter_count());
        out.activations.push_back(model->net().at(i).activations_per_sample());
        out.scores.push_back(nn::attention_scores_of(model->net().at(i)));
        out.backward.push_back(nn::backward_extra_of(model->net().at(i)));
    }
    return out;
}

void shard_the_cost(const config::Experiment& e, int n, bool sequence, strategy::ModelCost& cost) {
    if (n <= 1 || cost.input.rank() == 0) return;
    ShardCost shard;
    try {
        shard = shard_cost(e, cost.input, n, sequence);
    } catch (const std::exception&) {
        return;
    }
    if (shard.activations.size() != cost.layer_activations.size() ||
        shard.parameters.size() != cost.layer_parameters.size())
        return;
    cost.layer_parameters = std::move(shard.parameters);
    cost.layer_activations = std::move(shard.activations);
    cost.layer_scores = std::move(shard.scores);
    cost.layer_backward = std::move(shard.backward);
}

Shape shard_shape(const Shape& whole, Cut cut, int n) {
    Shape out = whole;
    if (cut.kind == Cut::Kind::rows) out[0] = whole[0] / n;
    if (cut.kind == Cut::Kind::columns) out[1] = whole[1] / n;  // [rows, row length]
    return out;
}

Tensor slice_of(const Tensor& whole, const Shape& shard, Cut cut, int r, int n) {
    Tensor slice = host_tensor(shard);
    const float* from = whole.data<float>();
    for (const Run& run : runs_of(whole.shape(), cut, r, n))
        std::memcpy(slice.data<float>() + run.shard_at, from + run.whole_at, static_cast<size_t>(run.count) * sizeof(float));
    return slice;
}

Tensor join_shards(const Shape& whole, Cut cut, const std::vector<const Tensor*>& shards) {
    Tensor out = host_tensor(whole);
    const int n = static_cast<int>(shards.size());
    for (int r = 0; r < n; ++r) {
        if (cut.kind == Cut::Kind::whole && r > 0) break;
        const float* from = shards[static_cast<size_t>(r)]->data<float>();
        for (const Run& run : runs_of(whole, cut, r, n))
            std::memcpy(out.data<float>() + run.whole_at, from + run.shard_at, static_cast<size_t>(run.count) * sizeof(float));
    }
    return out;
}

void sum_sequence_partial(Rank& rank, comm::Communicator& group, const std::vector<nn::Param*>& params) {
    int64_t count = 0;
    for (const nn::Param* p : params) count += p->grad.numel();
    const Tensor buffer = Tensor::empty(Shape{count}, params.front()->grad.dtype(), params.front()->grad.device(),
                                        MemCategory::workspace);
    const auto copy = [&](bool in) {
        rank.compute("sequence_grads", [&] {
            int64_t at = 0;
            for (const nn::Param* p : params) {
                const Tensor view = buffer.view(at, p->grad.shape());
                if (in) view.copy_from(p->grad);
                else p->grad.copy_from(view);
                at += p->grad.numel();
            }
        });
    };
    copy(true);
    rank.record_comm(named(group.all_reduce(buffer, comm::ReduceOp::sum), "tp_sequence_grads"));
    copy(false);
}

WholeCheckpoint read_whole_checkpoint(const TrainingState& st, const std::vector<Shape>& shapes,
                                      const std::vector<Tensor>& buffers, size_t per_param) {
    const size_t n = shapes.size();
    if (st.parameters.size() != n)
        throw Error("the checkpoint holds " + std::to_string(st.parameters.size()) + " parameters, the model " +
                    std::to_string(n));
    if (st.buffers.size() != buffers.size())
        throw Error("the checkpoint holds " + std::to_string(st.buffers.size()) + " buffers, the model " +
                    std::to_string(buffers.size()));
    for (size_t i = 0; i < buffers.size(); ++i)
        if (!st.buffers[i].defined() || st.buffers[i].shape() != buffers[i].shape())
            throw Error("the checkpoint's buffer " + std::to_string(i) + " does not fit the model's " +
                        buffers[i].shape().to_string());
    WholeCheckpoint out;
    out.stepped = !st.optimizer_state.empty() && !st.optimizer_state[0].empty();
    if (out.stepped && st.optimizer_state.size() != n)
        throw Error("the checkpoint holds optimizer state for " + std::to_string(st.optimizer_state.size()) +
                    " parameters, the model has " + std::to_string(n));
    // f32 host copies of the whole tensors (slice_of reads f32).
    const auto whole = [&](const Tensor& t, size_t i, const std::string& what) {
        if (!t.defined() || t.shape() != shapes[i])
            throw Error("the checkpoint's " + what + " of parameter " + std::to_string(i) + " is " +
                        (t.defined() ? t.shape().to_string() : std::string("missing")) + "; the model's is " +
                        shapes[i].to_string());
        if (t.dtype() == DType::f32) return t;
        Tensor f = Tensor::empty(t.shape(), DType::f32, detached_host_device(), MemCategory::workspace);
        f.copy_from(t);
        return f;
    };
    out.state.resize(n);
    for (size_t i = 0; i < n; ++i) {
        out.values.push_back(whole(st.parameters[i], i, "value"));
        if (!out.stepped) continue;
        if (st.optimizer_state[i].size() != per_param)
            throw Error("the checkpoint holds " + std::to_string(st.optimizer_state[i].size()) +
                        " optimizer state tensors of parameter " + std::to_string(i) + "; the optimizer has " +
                        std::to_string(per_param));
        for (const Tensor& t : st.optimizer_state[i]) out.state[i].push_back(whole(t, i, "optimizer state"));
    }
    return out;
}

}  // namespace paralab::strategy::tensor_shards
