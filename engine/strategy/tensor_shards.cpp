#include "engine/strategy/tensor_shards.h"

#include "engine/device/device.h"
#include "engine/nn/attention.h"
#include "engine/nn/linear.h"

namespace paralab::strategy::tensor_shards {

void give_shard(nn::Layer& layer, const nn::TensorShard& shard) {
    if (auto* block = dynamic_cast<nn::TransformerBlock*>(&layer)) return block->set_tensor_shard(shard);
    if (auto* attention = dynamic_cast<nn::Attention*>(&layer)) return attention->set_tensor_shard(shard);
    for (nn::Layer* child : layer.children()) give_shard(*child, shard);
}

void collect_cuts(nn::Layer& layer, std::vector<Cut>& out) {
    if (auto* linear = dynamic_cast<nn::Linear*>(&layer); linear && linear->shard()) {
        const nn::LinearShard& s = *linear->shard();
        const bool column = s.split == nn::LinearShard::Split::column;
        out.push_back({column ? Cut::Kind::rows : Cut::Kind::columns, s.blocks});  // weight
        if (layer.parameters().size() > 1) out.push_back({column ? Cut::Kind::rows : Cut::Kind::whole, s.blocks});
        return;
    }
    // A layer's own parameters come before its children's (Layer::parameters).
    size_t children = 0;
    for (nn::Layer* c : layer.children()) children += c->parameters().size();
    for (size_t k = children; k < layer.parameters().size(); ++k) out.push_back({});
    for (nn::Layer* c : layer.children()) collect_cuts(*c, out);
}

std::vector<Run> runs_of(const Shape& whole, Cut cut, int r, int n) {
    if (cut.kind == Cut::Kind::whole || n == 1) return {{0, 0, whole.numel()}};
    const int64_t rows = whole[0], row_len = whole.numel() / rows;
    std::vector<Run> out;
    if (cut.kind == Cut::Kind::rows) {  // each block's rows [r·per, (r+1)·per)
        const int64_t block = rows / cut.blocks, per = block / n;
        for (int64_t k = 0; k < cut.blocks; ++k)
            out.push_back({(k * block + r * per) * row_len, k * per * row_len, per * row_len});
    } else {  // columns [r·w, (r+1)·w) of every row
        const int64_t w = row_len / n;
        for (int64_t i = 0; i < rows; ++i) out.push_back({i * row_len + r * w, i * w, w});
    }
    return out;
}

Tensor host_tensor(const Shape& shape) {
    return Tensor::empty(shape, DType::f32, detached_host_device(), MemCategory::workspace);
}

}  // namespace paralab::strategy::tensor_shards
