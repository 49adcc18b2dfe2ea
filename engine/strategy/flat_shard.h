// ZeRO's sharded state over a data-parallel group (docs/strategies.md, "zero" and "hybrid"): one
// rank's parameters laid end to end in one flat buffer [T], of which it owns the contiguous
// range shard_of_dataset(T, q, n) as rank q of the group's n; it keeps the optimizer state of that
// range only and steps it as a parameter of its own. zero (stages 1 and 2) and hybrid (zero 1 to
// 3 over each dp group) hold their state in it; the collectives run in place on the flat buffers.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/data/loader.h"
#include "engine/strategy/strategy.h"

namespace paralab::strategy {

class FlatShard {
public:
    // `params` (the rank's, in its layout order) become views of values(); the rank owns range()
    // as rank `index` of a group of `group`. The shard the optimizer steps gets a private copy of
    // its values (`value_category`: workspace while the flat values stay whole, parameters when
    // the shard is all a rank keeps) and, for gradient: a view of its range of `flat_grads` (the
    // params' gradients laid end to end, grads_as_views), or, when that is undefined, a zeroed
    // one of its own (the only gradient kept between steps).
    void make(const std::vector<nn::Param*>& params, int index, int group, Device& device,
              MemCategory value_category, const Tensor& flat_grads);

    int64_t total() const { return m_total; }
    const data::ShardRange& range() const { return m_range; }
    Tensor& values() { return m_values; }
    nn::Param& param() { return m_param; }
    const nn::Param& param() const { return m_param; }

    // The group's sum of `part` (the n floats at flat offset a) goes to the owners of its
    // ranges, a reduce to each (recorded as `op`); this rank's range of it is copied into the
    // shard's gradient.
    void reduce_to_owners(Rank& rank, comm::Communicator& group, const Tensor& part, int64_t a, const char* op) const;
    // The shard's value from the flat values (after they changed outside a step), and back.
    void refresh_param() { m_param.value.copy_from(range_view(m_values)); }
    void store_param() { range_view(m_values).copy_from(m_param.value); }
    // The flat values all-gathered in place over the group (each rank's range from its owner).
    comm::CommRecord all_gather(comm::Communicator& group) {
        return group.all_gather(m_values.raw(), m_total, DType::f32);
    }
    // This rank's range of a flat [T] tensor.
    Tensor range_view(const Tensor& flat) const { return flat.view(m_range.offset, Shape{m_range.count}); }
    // Drops the flat values (zero 3: between uses a rank keeps its shard only).
    void release_values() { m_values = Tensor(); }

private:
    int64_t m_total = 0;
    int m_group = 1;
    data::ShardRange m_range;
    Tensor m_values;
    nn::Param m_param;
};

// A group's flat state (one tensor per rank q: its range of the flat vector) laid end to end
// and cut into tensors of `shapes`, in order, on the host.
std::vector<Tensor> join_flat(const std::vector<const Tensor*>& ranges, const std::vector<Shape>& shapes);
// Rank q's range of `tensors` laid end to end (a group of `group`), on the host.
Tensor range_of_flat(const std::vector<Tensor>& tensors, int q, int group);

}  // namespace paralab::strategy
