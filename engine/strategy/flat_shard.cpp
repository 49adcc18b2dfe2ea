#include "engine/strategy/flat_shard.h"

#include <algorithm>

#include "engine/strategy/replicas.h"

namespace paralab::strategy {

void FlatShard::make(const std::vector<nn::Param*>& params, int index, int group, Device& device,
                     MemCategory value_category, const Tensor& flat_grads) {
    m_group = group;
    m_total = total_numel(params);
    m_values = Tensor::empty(Shape{m_total}, DType::f32, device, MemCategory::parameters);
    int64_t at = 0;
    for (nn::Param* p : params) {
        Tensor view = m_values.view(at, p->value.shape());
        view.copy_from(p->value);
        p->value = view;
        at += view.numel();
    }
    m_range = data::shard_of_dataset(m_total, index, group);
    m_param.name = "zero_shard";
    m_param.value = Tensor::empty(Shape{m_range.count}, DType::f32, device, value_category);
    refresh_param();
    m_param.grad = flat_grads.defined() ? range_view(flat_grads)
                                        : Tensor::zeros(Shape{m_range.count}, DType::f32, device, MemCategory::gradients);
}

void FlatShard::reduce_to_owners(Rank& rank, comm::Communicator& group, const Tensor& part, int64_t a,
                                 const char* op) const {
    const int64_t n = part.numel();
    for (int q = 0; q < m_group; ++q) {
        const data::ShardRange sq = data::shard_of_dataset(m_total, q, m_group);
        const int64_t lo = std::max(a, sq.offset), hi = std::min(a + n, sq.offset + sq.count);
        if (lo >= hi) continue;
        const Tensor piece = part.view(lo - a, Shape{hi - lo});
        rank.record_comm(named(group.reduce(piece.raw(), hi - lo, DType::f32, comm::ReduceOp::sum, q), op));
        if (q == group.rank()) m_param.grad.view(lo - m_range.offset, Shape{hi - lo}).copy_from(piece);
    }
}

std::vector<Tensor> join_flat(const std::vector<const Tensor*>& ranges, const std::vector<Shape>& shapes) {
    int64_t total = 0;
    for (const Shape& s : shapes) total += s.numel();
    Device& host = detached_host_device();
    Tensor flat = Tensor::empty(Shape{total}, DType::f32, host, MemCategory::workspace);
    const int group = static_cast<int>(ranges.size());
    for (int q = 0; q < group; ++q) {
        const data::ShardRange r = data::shard_of_dataset(total, q, group);
        if (r.count > 0) flat.view(r.offset, Shape{r.count}).copy_from(*ranges[static_cast<size_t>(q)]);
    }
    std::vector<Tensor> out;
    int64_t at = 0;
    for (const Shape& s : shapes) {
        Tensor t = Tensor::empty(s, DType::f32, host, MemCategory::workspace);
        t.copy_from(flat.view(at, s));
        at += s.numel();
        out.push_back(std::move(t));
    }
    return out;
}

Tensor range_of_flat(const std::vector<Tensor>& tensors, int q, int group) {
    int64_t total = 0;
    for (const Tensor& t : tensors) total += t.numel();
    Device& host = detached_host_device();
    Tensor flat = Tensor::empty(Shape{total}, DType::f32, host, MemCategory::workspace);
    int64_t at = 0;
    for (const Tensor& t : tensors) {
        flat.view(at, t.shape()).copy_from(t);
        at += t.numel();
    }
    const data::ShardRange r = data::shard_of_dataset(total, q, group);
    Tensor mine = Tensor::empty(Shape{r.count}, DType::f32, host, MemCategory::workspace);
    mine.copy_from(flat.view(r.offset, Shape{r.count}));
    return mine;
}

}  // namespace paralab::strategy
