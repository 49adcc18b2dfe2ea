#include "engine/strategy/dp_reducer.h"

#include <algorithm>
#include <cmath>

#include "engine/device/gpu_values.h"
#include "engine/optim/clip.h"
#include "engine/strategy/registry.h"
#include "engine/strategy/replicas.h"

namespace paralab::strategy {

size_t DevicePart::chunk_offset(size_t c) const {
    size_t at = 0;
    for (size_t i = 0; i < c; ++i) at += chunks[i].param_count;
    return at;
}

namespace {

// zero 2: every context's gradients dropped (the layers make none until given).
void release_grads(DevicePart& part) {
    for (ModelChunk& ch : part.chunks)
        for (auto& context : ch.contexts)
            for (nn::Param* p : context->parameters()) p->grad = Tensor();
}

// zero 2: the other contexts use the master's gradients.
void share_grads(DevicePart& part) {
    for (ModelChunk& ch : part.chunks)
        for (size_t c = 1; c < ch.contexts.size(); ++c) {
            auto own = ch.contexts[c]->parameters();
            for (size_t i = 0; i < own.size(); ++i) own[i]->grad = ch.params[i]->grad;
        }
}

// zero 2, a step with several backwards per chunk: zeroed flat gradients [T], the master's
// gradients views of it.
Tensor flat_grads(DevicePart& part, Device& device) {
    Tensor flat = Tensor::zeros(Shape{part.numel()}, DType::f32, device, MemCategory::gradients);
    for (size_t l = 0; l < part.params.size(); ++l) part.params[l]->grad = flat.view(part.offsets[l], part.shapes[l]);
    return flat;
}

}  // namespace

void DpReducer::setup(const Options& o, const comm::DeviceMesh& mesh, RunContext& ctx, std::vector<DevicePart>& parts,
                      comm::SubGroups& dp_groups, const optim::OptimizerConfig& optimizer, nn::Sequential& reference) {
    m_mesh = mesh;
    m_ctx = &ctx;
    m_zero = o.zero;
    m_dp = mesh.size(comm::Axis::dp);
    m_world = mesh.size();
    const char* what[] = {"reduce_scatter_grads", "all_reduce_grads", "all_gather_params", "reduce_grads_to_owner"};
    for (size_t i = 0; i < m_ops.size(); ++i) m_ops[i] = o.op_prefix + what[i];
    m_parts = &parts;
    m_groups = &dp_groups;
    m_rank_of.assign(static_cast<size_t>(m_world), nullptr);
    m_state.resize(static_cast<size_t>(m_world));
    m_loaded.assign(static_cast<size_t>(m_world), {});
    m_optimizers.resize(static_cast<size_t>(m_world));
    for (int k = 0; k < m_world; ++k)
        if (ctx.is_local(k)) m_optimizers[static_cast<size_t>(k)] = optim::make_optimizer(optimizer);
    m_state_names = optim::make_optimizer(optimizer)->state_names().size();
    if (!params_sharded()) return;
    // zero 3: every device's units (its top-level layers with parameters, chunk after chunk),
    // laid out for every device (rank 0's process puts any dp group's shards together).
    ShardedUnits::Options options;
    options.gather_op = op(Op::all_gather_params);
    options.scatter_op = op(Op::reduce_scatter_grads);
    options.prefetch = o.prefetch;
    options.reshard_after_forward = o.reshard_after_forward;
    // With prefetch the next unit is gathered on a thread of its own, over communicators of
    // its own.
    if (options.prefetch) {
        m_gather_world = ctx.group->split();
        m_gather = mesh.communicators({comm::Axis::dp}, ctx.devices, m_gather_world.get(), o.tag);
    }
    m_units.resize(static_cast<size_t>(m_world));
    for (int k = 0; k < m_world; ++k) {
        DevicePart& part = parts[static_cast<size_t>(k)];
        std::vector<std::vector<Shape>> units;
        size_t l = 0;  // the device's parameter
        for (const ModelChunk& ch : part.chunks) {
            part.unit_of.emplace_back();
            for (size_t i = ch.first; i < ch.last; ++i) {
                const size_t n = reference.at(i).parameters().size();
                part.unit_of.back().push_back(n == 0 ? ShardedUnits::kNone : units.size());
                if (n == 0) continue;
                units.emplace_back(part.shapes.begin() + static_cast<std::ptrdiff_t>(l),
                                   part.shapes.begin() + static_cast<std::ptrdiff_t>(l + n));
                l += n;
            }
            // The unit after each layer (forward's prefetch) and before it (backward's), kNone
            // at the chunk's edge: a chunk's forward and backward are each one action.
            const std::vector<size_t>& of = part.unit_of.back();
            std::vector<size_t> after(of.size(), ShardedUnits::kNone), before(of.size(), ShardedUnits::kNone);
            for (size_t j = of.size(); j-- > 1;) after[j - 1] = of[j] != ShardedUnits::kNone ? of[j] : after[j];
            for (size_t j = 1; j < of.size(); ++j) before[j] = of[j - 1] != ShardedUnits::kNone ? of[j - 1] : before[j - 1];
            part.unit_after.push_back(std::move(after));
            part.unit_before.push_back(std::move(before));
        }
        m_units[static_cast<size_t>(k)] = std::make_unique<ShardedUnits>(std::move(units), data_rank(k), m_dp, options);
    }
}

nn::Param& DpReducer::shard_param(int k) {
    return params_sharded() ? m_units[static_cast<size_t>(k)]->shard() : m_state[static_cast<size_t>(k)].flat.param();
}

void DpReducer::start_rank(Rank& rank) {
    const int r = rank.index();
    m_rank_of[static_cast<size_t>(r)] = &rank;
    RankState& s = m_state[static_cast<size_t>(r)];
    DevicePart& part = (*m_parts)[static_cast<size_t>(r)];
    auto& ps = part.params;
    if (params_sharded()) {
        // zero 3: the top-level layers with parameters are sharded units over the dp group
        // (sharded_units.h), each gathered for every forward and backward of every context
        // (start drops every context's whole values and gradients).
        std::vector<std::vector<std::vector<nn::Param*>>> views;
        for (size_t c = 0; c < part.chunks.size(); ++c) {
            ModelChunk& ch = part.chunks[c];
            for (size_t layer = 0; layer < ch.layer_ends.size(); ++layer) {
                if (part.unit_of[c][layer] == ShardedUnits::kNone) continue;
                const size_t a = layer == 0 ? 0 : ch.layer_ends[layer - 1], b = ch.layer_ends[layer];
                views.emplace_back();
                for (auto& context : ch.contexts) {
                    const auto own = context->parameters();
                    views.back().emplace_back(own.begin() + static_cast<std::ptrdiff_t>(a),
                                              own.begin() + static_cast<std::ptrdiff_t>(b));
                }
            }
            for (auto& context : ch.contexts)
                context->net().set_forward_hooks(
                    [this, r, c](size_t layer) {
                        const DevicePart& p = (*m_parts)[static_cast<size_t>(r)];
                        m_units[static_cast<size_t>(r)]->before_forward(*m_rank_of[static_cast<size_t>(r)], group(r),
                                                                        p.unit_of[c][layer], p.unit_after[c][layer]);
                    },
                    [this, r, c](size_t layer) {
                        m_units[static_cast<size_t>(r)]->after_forward((*m_parts)[static_cast<size_t>(r)].unit_of[c][layer]);
                    });
        }
        m_units[static_cast<size_t>(r)]->start(rank, std::move(views), m_gather ? &m_gather->of(r) : nullptr);
        s.owned = {0, 0};
        s.released = true;
    } else {
        // zero 2 keeps no gradient of the whole between steps: it is made during the step.
        if (grads_sharded()) release_grads(part);
        else if (m_dp > 1) s.grads = grads_as_views(ps, 0, ps.size(), rank.device());
        if (sharded()) {
            // The parameters become views of one flat buffer, all-gathered in place; the shard
            // the optimizer sees is a parameter of its own.
            s.flat.make(ps, data_rank(r), m_dp, rank.device(), MemCategory::workspace,
                        grads_sharded() ? Tensor() : s.grads);
            s.owned = s.flat.range();
        } else {
            s.owned = {0, data_rank(r) == 0 ? part.numel() : 0};
        }
        // The other contexts use the master's (now flat) values and gradients.
        for (ModelChunk& ch : part.chunks) ch.share_master();
    }
    // Setup's copies (the contexts' own parameters, the flat buffers' sources) are not
    // training's peak.
    rank.device().allocator().reset_peak();
    // A resumed zero 1 to 3 run: this device's range of the checkpoint's optimizer state.
    if (sharded() && m_loaded_steps >= 0) {
        m_optimizers[static_cast<size_t>(r)]->load_state({&shard_param(r)}, {m_loaded[static_cast<size_t>(r)]},
                                                         m_loaded_steps);
        m_loaded[static_cast<size_t>(r)].clear();
    }
}

void DpReducer::finish_rank(Rank& rank) {
    if (params_sharded()) m_units[static_cast<size_t>(rank.index())]->stop();
}

void DpReducer::abort(const std::string& reason) {
    if (m_gather) m_gather->abort(reason);
    for (auto& units : m_units)
        if (units) units->interrupt();
}

void DpReducer::begin_step(Rank& rank, bool one_backward) {
    const int r = rank.index();
    RankState& s = m_state[static_cast<size_t>(r)];
    DevicePart& part = (*m_parts)[static_cast<size_t>(r)];
    // zero 2: layer by layer when every chunk runs one backward this step; otherwise a flat
    // gradient buffer for the step. (zero 3: always unit by unit.)
    s.eager = grads_sharded() && !params_sharded() && one_backward;
    if (params_sharded()) m_units[static_cast<size_t>(r)]->shard().grad.zero();
    else if (grads_sharded() && !s.eager) {
        s.grads = flat_grads(part, rank.device());
        share_grads(part);
    }
    if (!params_sharded())
        for (ModelChunk& ch : part.chunks) ch.master().zero_grad();
}

void DpReducer::add_hooks(Rank& rank, PipelineExecutor::Hooks& hooks,
                          std::function<void(Rank&, const std::vector<nn::Param*>&)> sum_partial) {
    if (m_state[static_cast<size_t>(rank.index())].eager || params_sharded())
        hooks.backward = [this, &rank, sum_partial = std::move(sum_partial)](int chunk, nn::Model& c, Tensor dy) {
            return backward_by_layer(rank, static_cast<size_t>(chunk), c, std::move(dy), sum_partial);
        };
    if (params_sharded())
        hooks.idle_slot = [this, &rank](int chunk, bool forward) {
            gather_without_compute(rank, static_cast<size_t>(chunk), forward);
        };
}

// zero 3, a micro-batch slot this replica lacks: the units of a forward (layer after layer) or
// a backward (in reverse, reducing zero gradients) of local chunk c, without compute.
void DpReducer::gather_without_compute(Rank& rank, size_t c, bool forward) {
    const DevicePart& part = (*m_parts)[static_cast<size_t>(rank.index())];
    ShardedUnits& units = *m_units[static_cast<size_t>(rank.index())];
    comm::Communicator& dp = group(rank.index());
    const size_t layers = part.chunks[c].layer_ends.size();
    for (size_t j = 0; j < layers; ++j) {
        const size_t u = part.unit_of[c][forward ? j : layers - 1 - j];
        if (forward) {
            units.before_forward(rank, dp, u, part.unit_after[c][j]);
            units.after_forward(u);
        } else {
            units.before_backward(rank, dp, u, part.unit_before[c][layers - 1 - j]);
            units.after_backward(rank, dp, u);
        }
    }
}

// zero 2 layer by layer: the gradients of top-level layer `layer` of local chunk `chunk`,
// zeroed, for the master and context `c`, just before its backward.
void DpReducer::make_layer_grads(DevicePart& part, size_t chunk, nn::Model& c, size_t layer) {
    ModelChunk& ch = part.chunks[chunk];
    const size_t a = layer == 0 ? 0 : ch.layer_ends[layer - 1], b = ch.layer_ends[layer];
    const auto own = c.parameters();
    for (size_t i = a; i < b; ++i) {
        nn::Param* p = ch.params[i];
        p->grad = Tensor::zeros(p->value.shape(), DType::f32, p->value.device(), MemCategory::gradients);
        own[i]->grad = p->grad;
    }
}

// zero 2 layer by layer: the layer's gradients are final. They cover the flat range [a, a + n);
// each owner q (data rank q of the dp group) of part of it receives the group's sum of that
// part, which it copies into its shard gradient; then the layer's gradients are freed.
void DpReducer::reduce_layer_to_owners(Rank& rank, size_t chunk, nn::Model& c, size_t layer) {
    DevicePart& part = (*m_parts)[static_cast<size_t>(rank.index())];
    ModelChunk& ch = part.chunks[chunk];
    const size_t first = layer == 0 ? 0 : ch.layer_ends[layer - 1], last = ch.layer_ends[layer];
    if (first == last) return;
    const size_t at = part.chunk_offset(chunk);
    const int64_t a = part.offsets[at + first];
    int64_t n = 0;
    for (size_t i = first; i < last; ++i) n += ch.params[i]->value.numel();
    RankState& s = m_state[static_cast<size_t>(rank.index())];
    const Tensor buf = Tensor::empty(Shape{n}, DType::f32, rank.device(), MemCategory::communication);
    for (size_t i = first; i < last; ++i)
        buf.view(part.offsets[at + i] - a, ch.params[i]->grad.shape()).copy_from(ch.params[i]->grad);
    s.flat.reduce_to_owners(rank, group(rank.index()), buf, a, op(Op::reduce_grads_to_owner));
    const auto own = c.parameters();
    for (size_t i = first; i < last; ++i) {
        ch.params[i]->grad = Tensor();
        own[i]->grad = Tensor();
    }
}

// zero 2 in a chunk's only backward of the step, and zero 3: a context's backward a top-level
// layer at a time. zero 3 gathers a unit just before (its recomputation's too) and reduce-
// scatters its gradients just after (with sequence_parallel, its partial layernorm and bias
// gradients summed over the tensor group first); zero 2 makes a layer's gradients just before
// and reduces them to their owners just after. Layers before an embedding (none by
// construction) are walked for their collectives only.
Tensor DpReducer::backward_by_layer(Rank& rank, size_t local, nn::Model& c, Tensor grad,
                                    const std::function<void(Rank&, const std::vector<nn::Param*>&)>& sum_partial) {
    DevicePart& part = (*m_parts)[static_cast<size_t>(rank.index())];
    const bool eager = m_state[static_cast<size_t>(rank.index())].eager;
    ShardedUnits* units = params_sharded() ? m_units[static_cast<size_t>(rank.index())].get() : nullptr;
    comm::Communicator& dp = group(rank.index());
    nn::Sequential& net = c.net();
    const ModelChunk& ch = part.chunks[local];
    bool computing = true;
    for (size_t i = net.size(); i-- > 0;) {
        const size_t u = units ? part.unit_of[local][i] : ShardedUnits::kNone;
        if (units) units->before_backward(rank, dp, u, part.unit_before[local][i]);
        if (eager) make_layer_grads(part, local, c, i);
        if (computing) {
            net.recompute_before_backward(i);
            grad = net.at(i).backward(grad);
            computing = grad.defined();
        }
        if (eager) reduce_layer_to_owners(rank, local, c, i);
        if (!units) continue;
        // sequence_parallel: the layer's partial gradients summed over the tensor group.
        std::vector<nn::Param*> partial;
        for (size_t j = i == 0 ? 0 : ch.layer_ends[i - 1]; j < ch.layer_ends[i]; ++j)
            if (std::find(part.sequence_partial.begin(), part.sequence_partial.end(), ch.params[j]) !=
                part.sequence_partial.end())
                partial.push_back(ch.params[j]);
        if (!partial.empty()) sum_partial(rank, partial);
        units->after_backward(rank, dp, u);
    }
    return grad;
}

void DpReducer::reduce(Rank& rank) {
    const int r = rank.index();
    RankState& s = m_state[static_cast<size_t>(r)];
    // (zero 2 layer by layer and zero 3: reduced to their owners in backward already.)
    if (m_dp == 1 || s.eager || params_sharded()) return;
    comm::Communicator& dp = group(r);
    const int64_t n = s.grads.numel();
    if (!sharded()) {
        rank.record_comm(named(dp.all_reduce(s.grads.raw(), n, DType::f32, comm::ReduceOp::sum), op(Op::all_reduce_grads)));
        return;
    }
    rank.record_comm(named(dp.reduce_scatter(s.grads.raw(), n, DType::f32, comm::ReduceOp::sum), op(Op::reduce_scatter_grads)));
    if (grads_sharded()) {
        // Keep the shard's sum; the step's whole gradients go.
        rank.compute("optimizer", [&] { s.flat.param().grad.copy_from(s.flat.range_view(s.grads)); });
        s.grads = Tensor();
        release_grads((*m_parts)[static_cast<size_t>(r)]);
    }
}

bool DpReducer::step(Rank& rank, double lr, optim::LossScaler* scaler, const std::optional<double>& clip_norm,
                     const std::function<bool(size_t)>& counted, double& grad_norm) {
    const int r = rank.index();
    RankState& s = m_state[static_cast<size_t>(r)];
    std::vector<nn::Param*> shard{&shard_param(r)};
    std::vector<nn::Param*>& stepped = sharded() ? shard : (*m_parts)[static_cast<size_t>(r)].params;
    // fp16: the last stage scaled the loss gradient, so every device's gradients (and shards)
    // are scaled; each checks its own and all agree, so they skip or step together (a skipped
    // step changes no values: nothing to gather).
    if (scaler && !unscale_gradients(rank, stepped, *scaler, true)) return false;
    if (clip_norm) grad_norm = clip(rank, counted, stepped, *clip_norm);
    rank.compute("optimizer", [&] {
        m_optimizers[static_cast<size_t>(r)]->step(stepped, lr);
        if (sharded() && !params_sharded()) s.flat.store_param();
    });
    // (zero 3: the shards are gathered where they are used, unit by unit.)
    if (sharded() && !params_sharded())
        rank.record_comm(named(s.flat.all_gather(group(r)), op(Op::all_gather_params)));
    return true;
}

// train.clip_norm: the squares of this rank's range of its flat gradients (the parameters
// `counted` on this rank; at zero 1 to 3 read from the shard's gradient) summed over the world;
// `stepped` scaled by the norm.
double DpReducer::clip(Rank& rank, const std::function<bool(size_t)>& counted, const std::vector<nn::Param*>& stepped,
                       double max_norm) {
    const int r = rank.index();
    const RankState& s = m_state[static_cast<size_t>(r)];
    const DevicePart& part = (*m_parts)[static_cast<size_t>(r)];
    double sq = rank.compute("clip", [&] {
        double sum = 0;
        if (params_sharded()) {
            // This rank's chunk of each unit, parameter by parameter.
            const ShardedUnits& units = *m_units[static_cast<size_t>(r)];
            const Tensor shard = gpu::on_host(units.shard().grad);
            const float* g = shard.data<float>();
            const int q = data_rank(r);
            size_t l = 0;  // the device's parameter
            for (size_t u = 0; u < units.units(); ++u) {
                const data::ShardRange c = units.chunk(u, q);
                int64_t from = 0;
                for (const Shape& shape : units.shapes(u)) {
                    const int64_t a = std::max(c.offset, from), b = std::min(c.offset + c.count, from + shape.numel());
                    if (a < b && counted(l))
                        for (int64_t j = a; j < b; ++j) {
                            const double x = g[units.at(u, q) + j - c.offset];
                            sum += x * x;
                        }
                    from += shape.numel();
                    ++l;
                }
            }
            return sum;
        }
        int64_t at = 0;
        const int64_t lo = s.owned.offset, hi = s.owned.offset + s.owned.count;
        // On a GPU the gradients are read back to sum their ranges on the host.
        const Tensor shard = sharded() ? gpu::on_host(s.flat.param().grad) : Tensor();
        for (size_t i = 0; i < part.params.size(); ++i) {
            const int64_t n = part.shapes[i].numel();
            const int64_t a = std::max(lo, at), b = std::min(hi, at + n);
            if (a < b && counted(i)) {
                const Tensor grad = sharded() ? Tensor() : gpu::on_host(part.params[i]->grad);
                // g[j − base]: the gradient at flat position j
                const float* g = sharded() ? shard.data<float>() : grad.data<float>();
                const int64_t base = sharded() ? lo : at;
                for (int64_t j = a; j < b; ++j) sum += static_cast<double>(g[j - base]) * g[j - base];
            }
            at += n;
        }
        return sum;
    });
    if (m_world > 1) rank.record_comm(named(all_reduce_doubles(rank, &sq, 1, comm::ReduceOp::sum), "clip_norm"));
    const double norm = std::sqrt(sq);
    rank.compute("clip", [&] { optim::clip_grads_with_norm(stepped, norm, max_norm); });
    return norm;
}

// zero 3: device k's tensors of its parameters' shapes (in its order) grouped by unit.
std::vector<std::vector<Tensor>> DpReducer::by_unit(int k, std::vector<Tensor> tensors) const {
    const ShardedUnits& units = *m_units[static_cast<size_t>(k)];
    std::vector<std::vector<Tensor>> out(units.units());
    size_t l = 0;
    for (size_t u = 0; u < units.units(); ++u)
        for (size_t i = 0; i < units.shapes(u).size(); ++i) out[u].push_back(std::move(tensors[l++]));
    return out;
}

// zero 3: every unit of `units` put together from its dp group's shards (`shards[d]`: data rank
// d's, in its layout) and cut into its parameters, in the device's order, on the host.
std::vector<Tensor> DpReducer::units_whole(const ShardedUnits& units, const std::vector<Tensor>& shards) {
    std::vector<Tensor> out;
    for (size_t u = 0; u < units.units(); ++u) {
        const Tensor whole = units.assemble(u, shards, detached_host_device(), MemCategory::workspace);
        int64_t from = 0;
        for (const Shape& shape : units.shapes(u)) {
            out.push_back(whole.view(from, shape).clone(MemCategory::workspace));
            from += shape.numel();
        }
    }
    return out;
}

// Each device gives a flag (1 when its values are a zero 3 shard) and its values: the devices of
// dp coordinate 0 their parameters, at zero 3 every device its shard, which make its dp group's
// flat values.
std::vector<std::vector<Tensor>> DpReducer::replica_values() const {
    const size_t world = static_cast<size_t>(m_world);
    std::vector<std::vector<Tensor>> mine(world);
    for (size_t k = 0; k < world; ++k) {
        if (!m_ctx->is_local(static_cast<int>(k))) continue;
        const bool shard = params_sharded() && m_state[k].released;
        if (!shard && data_rank(static_cast<int>(k)) != 0) continue;
        Tensor flag = Tensor::empty(Shape{1}, DType::f32, detached_host_device(), MemCategory::workspace);
        flag.data<float>()[0] = shard ? 1.0f : 0.0f;
        mine[k].push_back(std::move(flag));
        for (Tensor& t : shard ? host_copies(std::vector<Tensor>{m_units[k]->shard().value})
                               : host_copies((*m_parts)[k].params))
            mine[k].push_back(std::move(t));
    }
    std::vector<std::vector<Tensor>> all = lists_on_rank0(*m_ctx, std::move(mine));
    if (all.empty()) return {};
    std::vector<std::vector<Tensor>> out(world);
    for (size_t k = 0; k < world; ++k) {
        if (data_rank(static_cast<int>(k)) != 0) continue;
        PARALAB_CHECK(!all[k].empty(), "dp reducer: no process gave rank " + std::to_string(k) + "'s values");
        if (all[k][0].data<float>()[0] == 0.0f) {
            out[k].assign(all[k].begin() + 1, all[k].end());
            continue;
        }
        // zero 3: each unit put together from the dp group's shards, cut per parameter.
        std::vector<Tensor> shards;
        for (const int q : m_mesh.members(static_cast<int>(k), {comm::Axis::dp})) {
            PARALAB_CHECK(all[static_cast<size_t>(q)].size() == 2,
                          "dp reducer: no process gave rank " + std::to_string(q) + "'s shard");
            shards.push_back(all[static_cast<size_t>(q)][1]);
        }
        out[k] = units_whole(*m_units[k], shards);
    }
    return out;
}

std::vector<std::vector<Tensor>> DpReducer::local_state(int k) const {
    const DevicePart& part = (*m_parts)[static_cast<size_t>(k)];
    std::vector<std::vector<Tensor>> out(part.params.size());
    if (!sharded()) {
        const auto& state = m_optimizers[static_cast<size_t>(k)]->state();
        for (size_t l = 0; l < part.params.size(); ++l) out[l] = host_copies(state[l]);
        return out;
    }
    const size_t per_param = m_optimizers[static_cast<size_t>(k)]->state_names().size();
    const Tensor none;
    for (size_t j = 0; j < per_param && params_sharded(); ++j) {
        std::vector<Tensor> shards;
        for (const int q : m_mesh.members(k, {comm::Axis::dp})) shards.push_back(m_optimizers[static_cast<size_t>(q)]->state()[0][j]);
        std::vector<Tensor> whole = units_whole(*m_units[static_cast<size_t>(k)], shards);
        for (size_t l = 0; l < part.params.size(); ++l) out[l].push_back(std::move(whole[l]));
    }
    for (size_t j = 0; j < per_param && !params_sharded(); ++j) {
        std::vector<const Tensor*> ranges;
        for (const int q : m_mesh.members(k, {comm::Axis::dp})) {
            const auto& state = m_optimizers[static_cast<size_t>(q)]->state();
            ranges.push_back(state.empty() ? &none : &state[0][j]);
        }
        std::vector<Tensor> whole = join_flat(ranges, part.shapes);
        for (size_t l = 0; l < part.params.size(); ++l) out[l].push_back(std::move(whole[l]));
    }
    return out;
}

void DpReducer::load_state(int k, const std::vector<std::vector<Tensor>>& state, int64_t steps) {
    DevicePart& part = (*m_parts)[static_cast<size_t>(k)];
    if (!sharded()) {
        m_optimizers[static_cast<size_t>(k)]->load_state(part.params, state, steps);
        return;
    }
    // zero 1 and 2: the device's range of its flat state vectors; zero 3: its chunk of each unit's.
    std::vector<Tensor> shard;
    for (size_t j = 0; j < m_state_names; ++j) {
        std::vector<Tensor> of_j;
        for (const auto& s : state) of_j.push_back(s[j]);
        shard.push_back(params_sharded() ? m_units[static_cast<size_t>(k)]->shard_of(by_unit(k, std::move(of_j)), data_rank(k))
                                         : range_of_flat(of_j, data_rank(k), m_dp));
    }
    m_loaded[static_cast<size_t>(k)] = std::move(shard);
    m_loaded_steps = steps;
}

}  // namespace paralab::strategy
