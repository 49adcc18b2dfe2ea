// hybrid: the dp × tp × pp mesh (docs/strategies.md, "hybrid"), composed of the parts every
// strategy shares: a comm::DeviceMesh gives each device its place and its tp and dp groups;
// tensor_shards cuts the attentions and blocks of a stage over its tp group; the pipeline
// executor runs the stages' schedule; the gradients are reduced over the dp group at ZeRO 0 to 3.
// A checkpoint holds the single device's layout. check_hybrid refuses a mesh that does not fit,
// naming the option.
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>

#include "engine/comm/device_mesh.h"
#include "engine/comm/sub_groups.h"
#include "engine/device/gpu_values.h"
#include "engine/nn/attention.h"
#include "engine/optim/clip.h"
#include "engine/strategy/flat_shard.h"
#include "engine/strategy/hybrid.h"
#include "engine/strategy/pipeline_executor.h"
#include "engine/strategy/registry.h"
#include "engine/strategy/replicas.h"
#include "engine/strategy/sharded_units.h"
#include "engine/strategy/stages.h"
#include "engine/strategy/strategy.h"
#include "engine/strategy/tensor_shards.h"

namespace paralab::strategy {

namespace {

using comm::Axis;

// The mesh of hybrid's options dp, tp and pp.
comm::MeshShape mesh_shape_of(const config::StrategyConfig& s) {
    comm::MeshShape m;
    m.dp = static_cast<int>(option<int64_t>(s, "dp"));
    m.tp = static_cast<int>(option<int64_t>(s, "tp"));
    m.pp = static_cast<int>(option<int64_t>(s, "pp"));
    return m;
}

int zero_of(const config::StrategyConfig& s) { return static_cast<int>(option<int64_t>(s, "zero")); }

// Each attention and transformer_block spec of `layers` (residual bodies included), with its
// JSON path.
void for_each_split_spec(const std::vector<nn::LayerSpec>& layers, const std::string& prefix,
                         const std::function<void(const nn::LayerSpec&, const std::string&)>& fn) {
    for (size_t i = 0; i < layers.size(); ++i) {
        const std::string path = prefix + "[" + std::to_string(i) + "]";
        if (layers[i].type == "attention" || layers[i].type == "transformer_block") fn(layers[i], path);
        if (layers[i].type == "residual") for_each_split_spec(layers[i].layers, path + ".layers", fn);
    }
}

// The registry's checks for a run of `world` devices (a job's world, whose processes each list
// only their own devices in e.devices).
void check_mesh(const config::Experiment& e, int64_t world) {
    const comm::MeshShape m = mesh_shape_of(e.strategy);
    comm::DeviceMesh::check(m, world);
    const size_t layers = nn::expand_repeats(e.layers).size();
    if (static_cast<size_t>(m.pp) > layers)
        throw ConfigError("strategy.pp", std::to_string(m.pp) + " pipeline stages for a model of " +
                                             std::to_string(layers) +
                                             " top-level layers: each stage holds at least one");
    stages::check_schedule(option<std::string>(e.strategy, "schedule"), option<int64_t>(e.strategy, "interleave"),
                           option<int64_t>(e.strategy, "micro_batches"), m.pp, "strategy.pp");
    // Each replica's share of the batch is cut into the micro-batches: the largest share holds
    // at least one row for each.
    const int64_t micro_batches = option<int64_t>(e.strategy, "micro_batches");
    const int64_t largest_share = (e.data.batch_size + m.dp - 1) / m.dp;
    if (micro_batches > largest_share)
        throw ConfigError("strategy.micro_batches",
                          std::to_string(micro_batches) + " micro-batches, but " +
                              (m.dp > 1 ? "the largest of dp " + std::to_string(m.dp) + " replicas' shares of " : std::string()) +
                              "data.batch_size " + std::to_string(e.data.batch_size) + " has " +
                              std::to_string(largest_share) + " row" + (largest_share == 1 ? "" : "s") +
                              "; at most " + std::to_string(largest_share));
    stages::check_stage_count(m.pp, layers, "hybrid", stages::chunks_of(e));
    const auto split = option<std::vector<int64_t>>(e.strategy, "split");
    if (!split.empty()) stages::check_split(split, m.pp, layers, stages::chunks_of(e));
    // Sequence parallelism gives each device of a tensor group T/tp positions of every sample.
    if (option<bool>(e.strategy, "sequence_parallel") && m.tp > 1 && e.data.seq_len > 0 &&
        e.data.seq_len % m.tp != 0)
        throw ConfigError("data.seq_len", "sequence_parallel splits the sequence over the tensor group: " +
                                              std::to_string(e.data.seq_len) + " positions do not divide over tp " +
                                              std::to_string(m.tp));
    if (m.tp == 1) return;
    bool any = false;
    for_each_split_spec(e.layers, "model.layers", [&](const nn::LayerSpec& s, const std::string& path) {
        any = true;
        if (s.heads > 0 && s.heads % m.tp != 0)
            throw ConfigError("strategy.tp", "tp " + std::to_string(m.tp) + " does not divide the " +
                                                 std::to_string(s.heads) + " heads of " + path);
        if (s.kv_heads > 0 && s.kv_heads % m.tp != 0)
            throw ConfigError("strategy.tp", "tp " + std::to_string(m.tp) + " does not divide the " +
                                                 std::to_string(s.kv_heads) + " key/value heads of " + path);
        if (s.type == "transformer_block" && s.ffn > 0 && s.ffn % m.tp != 0)
            throw ConfigError("strategy.tp", "tp " + std::to_string(m.tp) + " does not divide the " +
                                                 std::to_string(s.ffn) + " ffn units of " + path);
    });
    if (!any)
        throw ConfigError("strategy.tp",
                          "tp splits attention and transformer_block layers, and this model has "
                          "none; use tp 1");
}

void check_hybrid(const config::Experiment& e) {
    check_mesh(e, std::max<int64_t>(1, static_cast<int64_t>(e.devices.size())));
}

using namespace tensor_shards;

// The top-level layer bounds [0, b1, ..., L] of `parts` stages or chunks: `split` when it has
// parts − 1 of them, otherwise balanced by forward FLOPs (stages::balanced_split).
std::vector<size_t> stage_bounds_of(const std::vector<int64_t>& split, const std::vector<int64_t>& flops,
                                    const std::vector<int64_t>& params, int parts) {
    const auto layers = static_cast<int64_t>(flops.size());
    std::vector<int64_t> cuts = split;
    if (cuts.size() != static_cast<size_t>(parts - 1) && parts > 1 && parts <= layers)
        cuts = stages::balanced_split(flops, parts, params);
    std::vector<size_t> bounds{0};
    for (int64_t b : cuts) bounds.push_back(static_cast<size_t>(std::clamp<int64_t>(b, 0, layers)));
    while (static_cast<int>(bounds.size()) < parts) bounds.push_back(static_cast<size_t>(layers));
    bounds.push_back(static_cast<size_t>(layers));
    return bounds;
}

// The tags of the tensor- and data-parallel groups' messages when they span processes
// (comm::SubGroups): above every stage message's (PipelineExecutor::tags_used), below MPI's least tag bound.
constexpr int kTpGroupTag = 32760, kDpGroupTag = 32761;

class Hybrid final : public Strategy {
public:
    Hybrid(const char* name, HybridPreset preset, PresetCheck check, const char* dp_prefix)
        : Strategy(name), m_preset(preset), m_check(check) {
        const char* what[] = {"reduce_scatter_grads", "all_reduce_grads", "all_gather_params", "reduce_grads_to_owner"};
        for (size_t i = 0; i < m_dp_ops.size(); ++i) m_dp_ops[i] = std::string(dp_prefix) + what[i];
    }

    // A replica's first stage reads the inputs of its rows, its last the targets; every tensor
    // rank of them alike.
    DataRole data_role(int rank) const override {
        const int s = stage_of(rank);
        return {s == 0 || s == m_mesh.size(Axis::pp) - 1, data_rank(rank), m_mesh.size(Axis::dp)};
    }

    void start_rank(Rank& rank) override {
        const int r = rank.index();
        m_rank_of[static_cast<size_t>(r)] = &rank;
        RankState& s = m_state[static_cast<size_t>(r)];
        Piece& piece = m_pieces[static_cast<size_t>(r)];
        auto& ps = piece.params;
        const int64_t total = total_numel_of(piece);
        if (params_sharded()) {
            // zero 3: the top-level layers with parameters are sharded units over the dp group
            // (sharded_units.h), each gathered for every forward and backward of every context
            // (start drops every context's whole values and gradients).
            std::vector<std::vector<std::vector<nn::Param*>>> views;
            for (size_t c = 0; c < piece.chunks.size(); ++c) {
                ModelChunk& ch = piece.chunks[c];
                for (size_t layer = 0; layer < ch.layer_ends.size(); ++layer) {
                    if (piece.unit_of[c][layer] == ShardedUnits::kNone) continue;
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
                            m_units[static_cast<size_t>(r)]->before_forward(
                                *m_rank_of[static_cast<size_t>(r)], m_dp_groups->of(r),
                                m_pieces[static_cast<size_t>(r)].unit_of[c][layer],
                                m_pieces[static_cast<size_t>(r)].unit_after[c][layer]);
                        },
                        [this, r, c](size_t layer) {
                            m_units[static_cast<size_t>(r)]->after_forward(m_pieces[static_cast<size_t>(r)].unit_of[c][layer]);
                        });
            }
            m_units[static_cast<size_t>(r)]->start(rank, std::move(views), m_dp_gather ? &m_dp_gather->of(r) : nullptr);
            s.owned = {0, 0};
            s.released = true;
        } else {
            // zero 2 keeps no gradient of the whole between steps: it is made during the step.
            if (grads_sharded()) release_grads(piece);
            else if (m_mesh.size(Axis::dp) > 1) s.grads = grads_as_views(ps, 0, ps.size(), rank.device());
            if (sharded()) {
                // The parameters become views of one flat buffer, all-gathered in place; the shard
                // the optimizer sees is a parameter of its own.
                s.flat.make(ps, data_rank(r), m_mesh.size(Axis::dp), rank.device(), MemCategory::workspace,
                            grads_sharded() ? Tensor() : s.grads);
                s.owned = s.flat.range();
            } else {
                s.owned = {0, data_rank(r) == 0 ? total : 0};
            }
            // The other contexts use the master's (now flat) values and gradients.
            for (ModelChunk& ch : piece.chunks) ch.share_master();
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

    StepResult step(Rank& rank, const data::Batch& batch, int64_t offset, double lr) override {
        const config::Experiment& e = rank.experiment();
        const int r = rank.index();
        RankState& s = m_state[static_cast<size_t>(r)];
        Piece& piece = m_pieces[static_cast<size_t>(r)];
        auto& ps = piece.params;
        StepResult res;
        // zero 2: layer by layer when every chunk runs one backward this step (the same on every
        // device of a dp group: each replica has rows and one micro-batch of them); otherwise a
        // flat gradient buffer for the step. (zero 3: always unit by unit.)
        s.eager = grads_sharded() && !params_sharded() && e.train.grad_accum == 1 && m_micro_batches == 1 &&
                  !m_sequence && batch.global_size >= m_mesh.size(Axis::dp);
        if (params_sharded()) m_units[static_cast<size_t>(r)]->shard().grad.zero();
        else if (grads_sharded() && !s.eager) {
            s.grads = flat_grads(piece, rank.device());
            share_grads(piece);
        }
        if (!params_sharded())
            for (ModelChunk& ch : piece.chunks) ch.master().zero_grad();
        // This replica's rows of the global batch, in grad_accum parts, each a flush of the
        // schedule over its micro-batches. zero 3: every device of a dp group gathers the same
        // layers in the same order, so each runs the flushes of replica 0 (the most rows), its
        // own micro-batches in the first slots of each and no compute in the slots it lacks.
        const auto rows = data::shard_of_batch(batch.global_size, data_rank(r), m_mesh.size(Axis::dp));
        const int64_t plan_rows = params_sharded() ? data::shard_of_batch(batch.global_size, 0, m_mesh.size(Axis::dp)).count
                                                   : rows.count;
        if (plan_rows > 0) {
            PipelineExecutor::Hooks hooks;
            hooks.scaler = s.scaler.get();
            if (s.eager || params_sharded())
                hooks.backward = [&](int chunk, nn::Model& c, Tensor dy) {
                    return backward_by_layer(rank, piece, static_cast<size_t>(chunk), c, std::move(dy));
                };
            hooks.idle_slot = [&](int chunk, bool forward) {
                gather_without_compute(rank, piece, static_cast<size_t>(chunk), forward);
            };
            const int parts = static_cast<int>(std::min<int64_t>(e.train.grad_accum, plan_rows));
            for (int k = 0; k < parts; ++k) {
                const int slots = static_cast<int>(
                    std::min<int64_t>(m_micro_batches, data::shard_of_batch(plan_rows, k, parts).count));
                const auto part = data::shard_of_batch(rows.count, k, parts);
                const int m = static_cast<int>(std::min<int64_t>(slots, part.count));
                std::vector<data::ShardRange> micro;
                for (int i = 0; i < m; ++i) {
                    const auto mb = data::shard_of_batch(part.count, i, m);
                    micro.push_back({rows.offset + part.offset + mb.offset, mb.count});
                }
                m_executor.run_flush(rank, piece.chunks, batch, offset, micro, slots, res, hooks);
            }
            res.samples = rows.count;
        }
        // (zero 3: summed unit by unit in backward already.)
        if (!piece.sequence_partial.empty() && !params_sharded())
            sum_sequence_partial(rank, m_tp_groups->of(rank.index()), piece.sequence_partial);
        // (zero 2 layer by layer and zero 3: reduced to their owners in backward already.)
        if (m_mesh.size(Axis::dp) > 1 && !s.eager && !params_sharded()) {
            comm::Communicator& dp = m_dp_groups->of(r);
            const int64_t n = s.grads.numel();
            if (sharded()) {
                rank.record_comm(named(dp.reduce_scatter(s.grads.raw(), n, DType::f32, comm::ReduceOp::sum),
                                       dp_op(DpOp::reduce_scatter_grads)));
                if (grads_sharded()) {
                    // Keep the shard's sum; the step's whole gradients go.
                    rank.compute("optimizer", [&] {
                        s.flat.param().grad.copy_from(s.flat.range_view(s.grads));
                    });
                    s.grads = Tensor();
                    release_grads(piece);
                }
            } else
                rank.record_comm(
                    named(dp.all_reduce(s.grads.raw(), n, DType::f32, comm::ReduceOp::sum), dp_op(DpOp::all_reduce_grads)));
        }
        std::vector<nn::Param*> shard{&shard_param(r)};
        std::vector<nn::Param*>& stepped = sharded() ? shard : ps;
        // fp16: the last stage scaled the loss gradient, so every device's gradients (and shards)
        // are scaled; each checks its own and all agree, so they skip or step together (a skipped
        // step changes no values: nothing to gather).
        if (s.scaler && !unscale_gradients(rank, stepped, *s.scaler, true)) return res;
        if (e.train.clip_norm) res.grad_norm = clip(rank, s, stepped, *e.train.clip_norm);
        rank.compute("optimizer", [&] {
            m_optimizers[static_cast<size_t>(r)]->step(stepped, lr);
            if (sharded() && !params_sharded())
                s.flat.store_param();
        });
        // (zero 3: the shards are gathered where they are used, unit by unit.)
        if (sharded() && !params_sharded())
            rank.record_comm(named(s.flat.all_gather(m_dp_groups->of(r)), dp_op(DpOp::all_gather_params)));
        if (r == 0) ++m_steps;
        return res;
    }

    void finish_rank(Rank& rank) override {
        if (params_sharded()) m_units[static_cast<size_t>(rank.index())]->stop();
    }

    void abort(const std::string& reason) override {
        if (m_tp_groups) m_tp_groups->abort(reason);
        if (m_dp_groups) m_dp_groups->abort(reason);
        if (m_dp_gather) m_dp_gather->abort(reason);
        for (auto& units : m_units)
            if (units) units->interrupt();
    }

    // The whole model on the host, put together from replica 0's shards when they have changed.
    Tensor predict(const Tensor& x) override { return m_whole.predict(*this, *m_ctx, m_steps.load(), x); }

    // The whole model's parameters in the single device's order: chunk after chunk (stage after
    // stage without interleaving), each put together from the shards of replica 0's tensor ranks
    // (every replica holds the same values). Across processes, on rank 0's process (the others
    // list empty tensors).
    std::vector<Tensor> parameters() override {
        const std::vector<std::vector<Tensor>> values = replica_values();
        if (values.empty()) return std::vector<Tensor>(m_shapes.size());
        const int tp = m_mesh.size(Axis::tp);
        std::vector<Tensor> out;
        for (int g = 0; g < m_mesh.size(Axis::pp) * m_chunks; ++g) {
            const int first_rank = first_of_stage(g % m_mesh.size(Axis::pp));
            const size_t c = static_cast<size_t>(g / m_mesh.size(Axis::pp));
            const Piece& piece = m_pieces[static_cast<size_t>(first_rank)];
            const ModelChunk& ch = piece.chunks[c];
            const size_t at = chunk_offset(piece, c);
            for (size_t i = 0; i < ch.param_count; ++i) {
                const size_t whole = ch.first_param + i;
                std::vector<const Tensor*> of_i;
                for (int t = 0; t < tp; ++t) of_i.push_back(&values[static_cast<size_t>(first_rank + t)][at + i]);
                out.push_back(join_shards(m_shapes[whole], m_cuts[whole], of_i));
            }
        }
        return out;
    }

    // Chunk after chunk, the buffers of the stage's first device (a device of another process
    // lists empty tensors).
    std::vector<Tensor> buffers() override {
        std::vector<Tensor> out;
        for (int g = 0; g < m_mesh.size(Axis::pp) * m_chunks; ++g) {
            const int k = first_of_stage(g % m_mesh.size(Axis::pp));
            const ModelChunk& ch = m_pieces[static_cast<size_t>(k)].chunks[static_cast<size_t>(g / m_mesh.size(Axis::pp))];
            if (!m_ctx->is_local(k)) {
                out.resize(out.size() + ch.buffer_count);
                continue;
            }
            for (Tensor& t : host_copies(ch.buffers)) out.push_back(std::move(t));
        }
        return out;
    }

    // A checkpoint holds the single device's layout, as tensor_parallel's: the whole parameters
    // (parameters()) and each parameter's whole optimizer state, put together the same way from
    // replica 0's tensor ranks (element-wise optimizers: a slice's state is the whole state's
    // slice; a replicated parameter's is tensor rank 0's, the same on every tensor rank). At
    // zero 1 to 3 a device's state is its 1/dp of the flat state of its (stage, tensor rank): the
    // data-parallel group's shards are laid end to end first. A resume cuts them
    // again (the shards in start_rank, where the shard parameters are made).
    const char* why_no_checkpoint_impl() const override { return nullptr; }

    TrainingState save_state() override {
        if (why_no_checkpoint()) return Strategy::save_state();
        const optim::Optimizer& opt0 = *m_optimizers[0];
        // (Every device's scaler is the same.)
        TrainingState st = whole_model_state(*this, opt0, m_state[0].scaler.get());
        // Before the first step there is no state. (Rank 0's optimizer may hold none after it
        // either: its stage may have no parameters; every rank steps at every step.)
        if (opt0.steps_taken() == 0) return st;
        const int tp = m_mesh.size(Axis::tp);
        // Each device of replica 0 ([tensor rank][local parameter][state]), stage after stage.
        std::vector<std::vector<std::vector<std::vector<Tensor>>>> of_stage(static_cast<size_t>(m_mesh.size(Axis::pp)));
        for (int g = 0; g < m_mesh.size(Axis::pp) * m_chunks; ++g) {
            const int first_rank = first_of_stage(g % m_mesh.size(Axis::pp));
            const size_t c = static_cast<size_t>(g / m_mesh.size(Axis::pp));
            auto& shards = of_stage[static_cast<size_t>(g % m_mesh.size(Axis::pp))];
            if (shards.empty())
                for (int t = 0; t < tp; ++t) shards.push_back(local_state(first_rank + t));
            const Piece& piece = m_pieces[static_cast<size_t>(first_rank)];
            const ModelChunk& ch = piece.chunks[c];
            const size_t at = chunk_offset(piece, c);
            for (size_t i = 0; i < ch.param_count; ++i) {
                const size_t whole = ch.first_param + i;
                for (size_t j = 0; j < st.optimizer_state_names.size(); ++j) {
                    std::vector<const Tensor*> of_i;
                    for (const auto& shard : shards) of_i.push_back(&shard[at + i][j]);
                    st.optimizer_state[whole].push_back(join_shards(m_shapes[whole], m_cuts[whole], of_i));
                }
            }
        }
        return st;
    }

    // Each device's slices of the checkpoint's parameters and optimizer state, cut as setup cuts
    // the reference's (at zero 1 to 3, its 1/dp of the flat state, loaded in start_rank). Everything
    // is checked and cut before anything changes, so that a checkpoint that does not fit leaves
    // the devices as they were.
    void load_state(const TrainingState& st) override {
        const size_t per_param = m_optimizers[0]->state_names().size();
        WholeCheckpoint checkpoint = read_whole_checkpoint(st, m_shapes, buffers(), per_param);
        const bool stepped = checkpoint.stepped;
        std::vector<Tensor>& values = checkpoint.values;
        std::vector<std::vector<Tensor>>& state = checkpoint.state;
        // Before the first step an optimizer with state has none yet: the fresh one is it.
        const bool restore_state = stepped || per_param == 0;
        // Each device's slices: of the values, and of the state ([local parameter][state]).
        std::vector<std::vector<Tensor>> my_values(static_cast<size_t>(m_world));
        std::vector<std::vector<std::vector<Tensor>>> my_state(static_cast<size_t>(m_world));
        for (int k = 0; k < m_world; ++k) {
            const Piece& piece = m_pieces[static_cast<size_t>(k)];
            const int t = tensor_rank(k);
            for (size_t l = 0; l < piece.params.size(); ++l) {
                const size_t i = piece.param_index[l];
                const Shape& shape = piece.shapes[l];
                my_values[static_cast<size_t>(k)].push_back(slice_of(values[i], shape, m_cuts[i], t, m_mesh.size(Axis::tp)));
                std::vector<Tensor> mine;
                if (restore_state)
                    for (const Tensor& s : state[i]) mine.push_back(slice_of(s, shape, m_cuts[i], t, m_mesh.size(Axis::tp)));
                my_state[static_cast<size_t>(k)].push_back(std::move(mine));
            }
        }
        // zero 1 and 2: each device's range of its flat state vectors; zero 3: its chunk of each
        // unit's.
        std::vector<std::vector<Tensor>> shard_state(static_cast<size_t>(m_world));
        if (sharded() && restore_state)
            for (int k = 0; k < m_world; ++k)
                for (size_t j = 0; j < per_param; ++j) {
                    std::vector<Tensor> of_j;
                    for (const auto& state : my_state[static_cast<size_t>(k)]) of_j.push_back(state[j]);
                    shard_state[static_cast<size_t>(k)].push_back(
                        params_sharded() ? m_units[static_cast<size_t>(k)]->shard_of(by_unit(k, std::move(of_j)), data_rank(k))
                                         : range_of_flat(of_j, data_rank(k), m_mesh.size(Axis::dp)));
                }
        for (int k = 0; k < m_world; ++k) {
            Piece& piece = m_pieces[static_cast<size_t>(k)];
            for (size_t l = 0; l < piece.params.size(); ++l)
                piece.params[l]->value.copy_from(my_values[static_cast<size_t>(k)][l]);
            // Every device of a chunk's stage holds its buffers: the checkpoint's, chunk by chunk.
            for (ModelChunk& ch : piece.chunks)
                for (size_t i = 0; i < ch.buffers.size(); ++i) ch.buffers[i].copy_from(st.buffers[ch.first_buffer + i]);
            if (m_state[static_cast<size_t>(k)].scaler && st.has_scaler)
                m_state[static_cast<size_t>(k)].scaler->load_state(st.scaler);
            if (!restore_state) continue;
            if (sharded()) {
                m_loaded[static_cast<size_t>(k)] = std::move(shard_state[static_cast<size_t>(k)]);
                m_loaded_steps = st.optimizer_steps;
            } else {
                m_optimizers[static_cast<size_t>(k)]->load_state(piece.params, my_state[static_cast<size_t>(k)],
                                                                 st.optimizer_steps);
            }
        }
        m_whole.invalidate();
    }

protected:
    void setup_impl(RunContext& ctx, nn::Model& reference) override {
        // `e` with hybrid's options: the file's, or those of the preset this strategy is.
        config::Experiment e = *ctx.experiment;
        if (m_check) m_check(e, m_world);
        if (m_preset) e.strategy = m_preset(e, m_world);
        check_mesh(e, m_world);
        m_mesh = comm::DeviceMesh(mesh_shape_of(e.strategy), m_world);
        m_zero = zero_of(e.strategy);
        m_micro_batches = option<int64_t>(e.strategy, "micro_batches");
        m_schedule = stages::schedule_of(e);
        m_chunks = stages::chunks_of(e);
        m_executor = PipelineExecutor(m_mesh, m_schedule, m_chunks);
        m_sequence = option<bool>(e.strategy, "sequence_parallel") && m_mesh.size(Axis::tp) > 1;
        const int tp = m_mesh.size(Axis::tp), dp = m_mesh.size(Axis::dp), pp = m_mesh.size(Axis::pp);
        // Tensor-parallel groups: the tp consecutive devices of one (stage, data rank);
        // data-parallel groups: the devices of one (stage, tensor rank).
        // Across processes a group with members in several processes sends messages over the
        // run's group, on tags apart from the stages'.
        m_tp_groups = m_mesh.communicators({Axis::tp}, ctx.devices, ctx.group, kTpGroupTag);
        m_dp_groups = m_mesh.communicators({Axis::dp}, ctx.devices, ctx.group, kDpGroupTag);
        m_rank_of.assign(static_cast<size_t>(m_world), nullptr);
        m_state.resize(static_cast<size_t>(m_world));
        m_pieces.resize(static_cast<size_t>(m_world));
        m_loaded.assign(static_cast<size_t>(m_world), {});
        m_optimizers.resize(static_cast<size_t>(m_world));
        // SyncBatchNorm over each dp group: every replica runs every micro-batch's forward.
        const bool sync_batchnorm = option<bool>(e.strategy, "sync_batchnorm") && dp > 1 && has_batchnorm(reference.net());
        if (sync_batchnorm) check_sync_batchnorm_rows(ctx, dp, m_micro_batches);

        // The stages (interleaved: pp · v chunks): strategy.split, or the top-level layers balanced
        // by forward FLOPs.
        nn::Sequential& net = reference.net();
        std::vector<int64_t> flops, counts;
        for (size_t i = 0; i < net.size(); ++i) {
            flops.push_back(net.at(i).flops_per_sample());
            counts.push_back(net.at(i).parameter_count());
        }
        const std::vector<ChunkPlace> layout = lay_out_chunks(
            reference, stage_bounds_of(option<std::vector<int64_t>>(e.strategy, "split"), flops, counts, pp * m_chunks));
        const std::vector<nn::LayerSpec> layers = nn::expand_repeats(e.layers);  // as reference.net()
        const auto ref_params = reference.parameters();
        const auto ref_buffers = reference.buffers();
        for (const nn::Param* p : ref_params) m_shapes.push_back(p->value.shape());
        m_cuts.assign(ref_params.size(), Cut{});
        std::vector<bool> cut(static_cast<size_t>(pp * m_chunks), false);  // global chunk g's cuts are known
        // Every device's chunks: their layers, and their parameters and buffers in the model's lists.
        for (int k = 0; k < m_world; ++k)
            for (int c = 0; c < m_chunks; ++c)
                m_pieces[static_cast<size_t>(k)].chunks.emplace_back(layout[static_cast<size_t>(c * pp + stage_of(k))]);
        // No flush has more micro-batches than the largest replica has rows.
        const int64_t most = std::min(m_micro_batches, (e.data.batch_size + dp - 1) / dp);
        // Across processes every stage message's tag stays below the groups' (MPI's tags end at
        // 32767 at least).
        if (ctx.spans_processes() && m_executor.tags_used(most) > kTpGroupTag)
            throw ConfigError("strategy.micro_batches",
                              "across processes a replica's micro-batches times its chunks must stay below " +
                                  std::to_string(kTpGroupTag / 2) + ", got " + std::to_string(most * m_chunks));
        for (int k = 0; k < m_world; ++k) {
            if (!ctx.is_local(k)) continue;  // another process builds it
            Device& device = *ctx.devices[static_cast<size_t>(k)];
            const int t = tensor_rank(k), st = stage_of(k);
            Piece& piece = m_pieces[static_cast<size_t>(k)];
            nn::TensorShard shard;
            shard.rank = t;
            shard.world = tp;
            if (tp > 1) shard.all_reduce = [this, k](const Tensor& x) { tp_all_reduce(k, x); };
            if (tp > 1 && m_sequence) {
                shard.all_gather = [this, k](const Tensor& x) { tp_all_gather(k, x); };
                shard.reduce_scatter = [this, k](const Tensor& x) { tp_reduce_scatter(k, x); };
            }
            const std::vector<int> contexts =
                stages::chunk_contexts(m_schedule, st, pp, static_cast<int>(std::max<int64_t>(1, most)), m_chunks);
            for (int c = 0; c < m_chunks; ++c) {
                ModelChunk& ch = piece.chunks[static_cast<size_t>(c)];
                const size_t g = static_cast<size_t>(c) * static_cast<size_t>(pp) + static_cast<size_t>(st);
                // Under sequence parallelism a run of split layers ends at the chunk's edge.
                build_chunk(ch, e, layers, device, contexts[static_cast<size_t>(c)],
                            [&] { return shard_preparer(layers, ch.first, ch.last, shard); });
                nn::Model& master = ch.master();
                if (tp > 1 && m_sequence)
                    for (nn::Param* q : sequence_partial_parameters(master.net())) piece.sequence_partial.push_back(q);
                // The chunk's cuts, from the first of its devices (the same on every tensor rank).
                if (!cut[g]) {
                    collect_chunk_cuts(master.net(), ch);
                    cut[g] = true;
                }
                // This device's slices of the reference.
                for (size_t i = 0; i < ch.params.size(); ++i) {
                    const size_t whole = ch.first_param + i;
                    ch.params[i]->value.copy_from(
                        slice_of(ref_params[whole]->value, ch.params[i]->value.shape(), m_cuts[whole], t, tp));
                    piece.params.push_back(ch.params[i]);
                }
                for (size_t i = 0; i < ch.buffers.size(); ++i)
                    ch.buffers[i].copy_from(ref_buffers[ch.first_buffer + i]);
            }
            if (sync_batchnorm)
                for (ModelChunk& ch : piece.chunks)
                    for (auto& context : ch.contexts)
                        install_sync_batchnorm(m_rank_of[static_cast<size_t>(k)], *context, &m_dp_groups->of(k));
            m_optimizers[static_cast<size_t>(k)] = optim::make_optimizer(e.optimizer);
            m_state[static_cast<size_t>(k)].scaler = loss_scaler_for(e);
        }
        // A chunk held only by other processes: its cuts from a shard of it built on the host.
        for (size_t g = 0; g < cut.size(); ++g) {
            if (cut[g]) continue;
            const int k = first_of_stage(static_cast<int>(g % static_cast<size_t>(pp)));  // a device of the chunk
            const ModelChunk& ch = m_pieces[static_cast<size_t>(k)].chunks[g / static_cast<size_t>(pp)];
            nn::TensorShard shard{0, tp, {}};
            const auto never = [](const Tensor&) { throw Error("hybrid: a chunk built for its cuts computed"); };
            shard.all_reduce = never;
            if (m_sequence) shard.all_gather = shard.reduce_scatter = never;
            const auto model = nn::Model::stage(layers, ch.first, ch.last, ch.input, e.loss, DType::f32,
                                                detached_host_device(), shard_preparer(layers, ch.first, ch.last, shard));
            collect_chunk_cuts(model->net(), ch);
        }
        // Every device's parameters (its slices), laid end to end chunk after chunk: their indices
        // in the whole model's list, shapes and flat offsets (zero 3 releases the values and keeps
        // these).
        for (int k = 0; k < m_world; ++k) {
            Piece& piece = m_pieces[static_cast<size_t>(k)];
            int64_t at = 0;
            for (const ModelChunk& ch : piece.chunks)
                for (size_t i = 0; i < ch.param_count; ++i) {
                    const size_t whole = ch.first_param + i;
                    const Shape shape = shard_shape(m_shapes[whole], m_cuts[whole], tp);
                    PARALAB_CHECK(!ctx.is_local(k) || shape == piece.params[piece.shapes.size()]->value.shape(),
                                  "hybrid: a slice's shape does not match its cut");
                    piece.param_index.push_back(whole);
                    piece.offsets.push_back(at);
                    piece.shapes.push_back(shape);
                    at += shape.numel();
                }
        }
        if (!params_sharded()) return;
        // zero 3: every device's units (its top-level layers with parameters, chunk after chunk),
        // laid out for every device (rank 0's process puts any dp group's shards together).
        ShardedUnits::Options options;
        options.gather_op = dp_op(DpOp::all_gather_params);
        options.scatter_op = dp_op(DpOp::reduce_scatter_grads);
        options.prefetch = option<bool>(e.strategy, "prefetch");
        options.reshard_after_forward = option<bool>(e.strategy, "reshard_after_forward");
        // With prefetch the next unit is gathered on a thread of its own, over communicators of
        // its own.
        if (options.prefetch && dp > 1) {
            m_gather_world = ctx.group->split();
            m_dp_gather = m_mesh.communicators({Axis::dp}, ctx.devices, m_gather_world.get(), kDpGroupTag);
        }
        m_units.resize(static_cast<size_t>(m_world));
        for (int k = 0; k < m_world; ++k) {
            Piece& piece = m_pieces[static_cast<size_t>(k)];
            std::vector<std::vector<Shape>> units;
            size_t l = 0;  // the device's parameter
            for (const ModelChunk& ch : piece.chunks) {
                piece.unit_of.emplace_back();
                for (size_t i = ch.first; i < ch.last; ++i) {
                    const size_t n = net.at(i).parameters().size();
                    piece.unit_of.back().push_back(n == 0 ? ShardedUnits::kNone : units.size());
                    if (n == 0) continue;
                    units.emplace_back(piece.shapes.begin() + static_cast<std::ptrdiff_t>(l),
                                       piece.shapes.begin() + static_cast<std::ptrdiff_t>(l + n));
                    l += n;
                }
                // The unit after each layer (forward's prefetch) and before it (backward's), kNone
                // at the chunk's edge: a chunk's forward and backward are each one action.
                const std::vector<size_t>& of = piece.unit_of.back();
                std::vector<size_t> after(of.size(), ShardedUnits::kNone), before(of.size(), ShardedUnits::kNone);
                for (size_t j = of.size(); j-- > 1;) after[j - 1] = of[j] != ShardedUnits::kNone ? of[j] : after[j];
                for (size_t j = 1; j < of.size(); ++j)
                    before[j] = of[j - 1] != ShardedUnits::kNone ? of[j - 1] : before[j - 1];
                piece.unit_after.push_back(std::move(after));
                piece.unit_before.push_back(std::move(before));
            }
            m_units[static_cast<size_t>(k)] =
                std::make_unique<ShardedUnits>(std::move(units), data_rank(k), dp, options);
        }
    }

private:
    // One device's part of the mesh: its chunks (local chunk c is global chunk c·pp + stage).
    struct Piece {
        std::vector<ModelChunk> chunks;
        std::vector<nn::Param*> params;   // every chunk's, chunk after chunk
        std::vector<size_t> param_index;  // each one's index in the whole model's list
        std::vector<int64_t> offsets;     // each one's offset in the flat parameters
        std::vector<Shape> shapes;        // each one's shape
        // sequence_parallel: the whole parameters whose gradients hold this device's positions
        // only (tensor_shards::sequence_partial_parameters of each chunk)
        std::vector<nn::Param*> sequence_partial;
        // zero 3: by local chunk, by top-level layer: its unit of m_units (kNone: no parameters),
        // and the chunk's unit after it and before it (kNone: none)
        std::vector<std::vector<size_t>> unit_of, unit_after, unit_before;
    };

    struct RankState {
        Tensor grads;  // dp > 1, [T]: the gradients are views of it (zero 2: during a step only)
        // zero 1 to 3: the flat parameters (zero 3: setup only) and the shard the optimizer steps;
        // its gradient a view of `grads` at zero 1, its own at zero 2 and 3
        FlatShard flat;
        data::ShardRange owned;  // the flat range whose gradient norm (and, at zero 1 to 3, update) is this rank's
        bool eager = false;  // zero 2 and 3, this step: each layer's gradients reduced as its backward ends
        bool released = false;  // zero 3: the values are the shard only (start_rank has run)
        // fp16 mixed precision: every device's, kept equal (they agree on every overflow)
        std::unique_ptr<optim::LossScaler> scaler;
    };

    int tensor_rank(int k) const { return m_mesh.coord(k, Axis::tp); }
    int data_rank(int k) const { return m_mesh.coord(k, Axis::dp); }
    int stage_of(int k) const { return m_mesh.coord(k, Axis::pp); }
    // The first device of stage s (tensor and data rank 0).
    int first_of_stage(int s) const { return m_mesh.rank_of({.pp = s}); }
    bool sharded() const { return m_zero >= 1 && m_mesh.size(Axis::dp) > 1; }
    bool grads_sharded() const { return m_zero >= 2 && m_mesh.size(Axis::dp) > 1; }
    bool params_sharded() const { return m_zero >= 3 && m_mesh.size(Axis::dp) > 1; }

    // The parameter the optimizer of device k steps at zero 1 to 3.
    nn::Param& shard_param(int k) {
        return params_sharded() ? m_units[static_cast<size_t>(k)]->shard() : m_state[static_cast<size_t>(k)].flat.param();
    }
    // The name of a collective over the dp group.
    enum class DpOp { reduce_scatter_grads, all_reduce_grads, all_gather_params, reduce_grads_to_owner };
    const char* dp_op(DpOp op) const { return m_dp_ops[static_cast<size_t>(op)].c_str(); }
    // zero 3: device k's tensors of its parameters' shapes (in its order) grouped by unit.
    std::vector<std::vector<Tensor>> by_unit(int k, std::vector<Tensor> tensors) const {
        const ShardedUnits& units = *m_units[static_cast<size_t>(k)];
        std::vector<std::vector<Tensor>> out(units.units());
        size_t l = 0;
        for (size_t u = 0; u < units.units(); ++u)
            for (size_t i = 0; i < units.shapes(u).size(); ++i) out[u].push_back(std::move(tensors[l++]));
        return out;
    }
    // zero 3: every unit of `units` put together from its dp group's shards (`shards[d]`: data rank
    // d's, in its layout) and cut into its parameters, in the device's order, on the host.
    static std::vector<Tensor> units_whole(const ShardedUnits& units, const std::vector<Tensor>& shards) {
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
    // zero 3, a micro-batch slot this replica lacks: the units of a forward (layer after layer)
    // or a backward (in reverse, reducing zero gradients) of local chunk c, without compute.
    void gather_without_compute(Rank& rank, Piece& piece, size_t c, bool forward) {
        ShardedUnits& units = *m_units[static_cast<size_t>(rank.index())];
        comm::Communicator& dp = m_dp_groups->of(rank.index());
        const size_t layers = piece.chunks[c].layer_ends.size();
        for (size_t j = 0; j < layers; ++j) {
            const size_t u = piece.unit_of[c][forward ? j : layers - 1 - j];
            if (forward) {
                units.before_forward(rank, dp, u, piece.unit_after[c][j]);
                units.after_forward(u);
            } else {
                units.before_backward(rank, dp, u, piece.unit_before[c][layers - 1 - j]);
                units.after_backward(rank, dp, u);
            }
        }
    }
    // Host copies of the values of replica 0's devices ([rank][local parameter]; empty for the
    // other ranks), on rank 0's process (lists_on_rank0; elsewhere an empty vector). Each device
    // gives a flag (1 when its values are a zero 3 shard) and its values: replica 0's devices
    // their parameters, at zero 3 every device its shard, which make its dp group's flat values.
    std::vector<std::vector<Tensor>> replica_values() const {
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
                                   : host_copies(m_pieces[k].params))
                mine[k].push_back(std::move(t));
        }
        std::vector<std::vector<Tensor>> all = lists_on_rank0(*m_ctx, std::move(mine));
        if (all.empty()) return {};
        std::vector<std::vector<Tensor>> out(world);
        for (size_t k = 0; k < world; ++k) {
            if (data_rank(static_cast<int>(k)) != 0) continue;
            PARALAB_CHECK(!all[k].empty(), "hybrid: no process gave rank " + std::to_string(k) + "'s values");
            if (all[k][0].data<float>()[0] == 0.0f) {
                out[k].assign(all[k].begin() + 1, all[k].end());
                continue;
            }
            // zero 3: each unit put together from the dp group's shards, cut per parameter.
            std::vector<Tensor> shards;
            for (const int q : m_mesh.members(static_cast<int>(k), {Axis::dp})) {
                PARALAB_CHECK(all[static_cast<size_t>(q)].size() == 2,
                              "hybrid: no process gave rank " + std::to_string(q) + "'s shard");
                shards.push_back(all[static_cast<size_t>(q)][1]);
            }
            out[k] = units_whole(*m_units[k], shards);
        }
        return out;
    }
    // The cuts of a chunk's parameters (their places in the whole model's list) from a build of it.
    void collect_chunk_cuts(nn::Layer& net, const ModelChunk& ch) {
        std::vector<Cut> cuts;
        collect_cuts(net, cuts);
        PARALAB_CHECK(cuts.size() == ch.param_count, "hybrid: the chunk's cuts do not match");
        std::copy(cuts.begin(), cuts.end(), m_cuts.begin() + static_cast<std::ptrdiff_t>(ch.first_param));
    }
    static int64_t total_numel_of(const Piece& piece) {
        return piece.offsets.empty() ? 0 : piece.offsets.back() + piece.shapes.back().numel();
    }

    // zero 2: every context's gradients dropped (the layers make none until given).
    static void release_grads(Piece& piece) {
        for (ModelChunk& ch : piece.chunks)
            for (auto& context : ch.contexts)
                for (nn::Param* p : context->parameters()) p->grad = Tensor();
    }
    // zero 2: the other contexts use the master's gradients.
    static void share_grads(Piece& piece) {
        for (ModelChunk& ch : piece.chunks)
            for (size_t c = 1; c < ch.contexts.size(); ++c) {
                auto own = ch.contexts[c]->parameters();
                for (size_t i = 0; i < own.size(); ++i) own[i]->grad = ch.params[i]->grad;
            }
    }
    // zero 2, a step with several backwards per chunk: zeroed flat gradients [T], the master's
    // gradients views of it.
    static Tensor flat_grads(Piece& piece, Device& device) {
        Tensor flat = Tensor::zeros(Shape{total_numel_of(piece)}, DType::f32, device, MemCategory::gradients);
        for (size_t l = 0; l < piece.params.size(); ++l)
            piece.params[l]->grad = flat.view(piece.offsets[l], piece.shapes[l]);
        return flat;
    }

    // zero 2 layer by layer: the gradients of top-level layer `layer` of local chunk `chunk`,
    // zeroed, for the master and context `c`, just before its backward.
    static void make_layer_grads(Piece& piece, size_t chunk, nn::Model& c, size_t layer) {
        ModelChunk& ch = piece.chunks[chunk];
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
    void reduce_layer_to_owners(Rank& rank, Piece& piece, size_t chunk, nn::Model& c, size_t layer) {
        ModelChunk& ch = piece.chunks[chunk];
        const size_t first = layer == 0 ? 0 : ch.layer_ends[layer - 1], last = ch.layer_ends[layer];
        if (first == last) return;
        const size_t at = chunk_offset(piece, chunk);
        const int64_t a = piece.offsets[at + first];
        int64_t n = 0;
        for (size_t i = first; i < last; ++i) n += ch.params[i]->value.numel();
        RankState& s = m_state[static_cast<size_t>(rank.index())];
        const Tensor buf = Tensor::empty(Shape{n}, DType::f32, rank.device(), MemCategory::communication);
        for (size_t i = first; i < last; ++i)
            buf.view(piece.offsets[at + i] - a, ch.params[i]->grad.shape()).copy_from(ch.params[i]->grad);
        s.flat.reduce_to_owners(rank, m_dp_groups->of(rank.index()), buf, a, dp_op(DpOp::reduce_grads_to_owner));
        const auto own = c.parameters();
        for (size_t i = first; i < last; ++i) {
            ch.params[i]->grad = Tensor();
            own[i]->grad = Tensor();
        }
    }

    // The first of local chunk c's parameters in the device's list (piece.params).
    static size_t chunk_offset(const Piece& piece, size_t c) {
        size_t at = 0;
        for (size_t i = 0; i < c; ++i) at += piece.chunks[i].param_count;
        return at;
    }

    // Device k's optimizer state as host f32 copies, [local parameter][state], each of its
    // parameter's shape: its optimizer's, or at zero 1 to 3 the flat state of its (stage, tensor
    // rank) laid together from the data-parallel group's shards and cut per parameter.
    std::vector<std::vector<Tensor>> local_state(int k) const {
        const Piece& piece = m_pieces[static_cast<size_t>(k)];
        std::vector<std::vector<Tensor>> out(piece.params.size());
        if (!sharded()) {
            const auto& state = m_optimizers[static_cast<size_t>(k)]->state();
            for (size_t l = 0; l < piece.params.size(); ++l) out[l] = host_copies(state[l]);
            return out;
        }
        const size_t per_param = m_optimizers[static_cast<size_t>(k)]->state_names().size();
        const Tensor none;
        for (size_t j = 0; j < per_param && params_sharded(); ++j) {
            std::vector<Tensor> shards;
            for (const int q : m_mesh.members(k, {Axis::dp})) shards.push_back(m_optimizers[static_cast<size_t>(q)]->state()[0][j]);
            std::vector<Tensor> whole = units_whole(*m_units[static_cast<size_t>(k)], shards);
            for (size_t l = 0; l < piece.params.size(); ++l) out[l].push_back(std::move(whole[l]));
        }
        for (size_t j = 0; j < per_param && !params_sharded(); ++j) {
            std::vector<const Tensor*> ranges;
            for (const int q : m_mesh.members(k, {Axis::dp})) {
                const auto& state = m_optimizers[static_cast<size_t>(q)]->state();
                ranges.push_back(state.empty() ? &none : &state[0][j]);
            }
            std::vector<Tensor> whole = join_flat(ranges, piece.shapes);
            for (size_t l = 0; l < piece.params.size(); ++l) out[l].push_back(std::move(whole[l]));
        }
        return out;
    }

    void tp_all_reduce(int k, const Tensor& x) {
        Rank& rank = *m_rank_of[static_cast<size_t>(k)];
        rank.record_comm(named(m_tp_groups->of(k).all_reduce(x, comm::ReduceOp::sum), "tp_all_reduce"));
    }
    // sequence_parallel's collectives along the sequence, in place over `x` (tp equal chunks).
    void tp_all_gather(int k, const Tensor& x) {
        Rank& rank = *m_rank_of[static_cast<size_t>(k)];
        rank.record_comm(named(m_tp_groups->of(k).all_gather(x.raw(), x.numel(), x.dtype()), "tp_all_gather"));
    }
    void tp_reduce_scatter(int k, const Tensor& x) {
        Rank& rank = *m_rank_of[static_cast<size_t>(k)];
        rank.record_comm(named(m_tp_groups->of(k).reduce_scatter(x.raw(), x.numel(), x.dtype(), comm::ReduceOp::sum),
                               "tp_reduce_scatter"));
    }
    // zero 2 in a chunk's only backward of the step, and zero 3: a context's backward a top-level
    // layer at a time. zero 3 gathers a unit just before (its recomputation's too) and reduce-
    // scatters its gradients just after (with sequence_parallel, its partial layernorm and bias
    // gradients summed over the tensor group first); zero 2 makes a layer's gradients just before
    // and reduces them to their owners just after. Layers before an embedding (none by
    // construction) are walked for their collectives only.
    Tensor backward_by_layer(Rank& rank, Piece& piece, size_t local, nn::Model& c, Tensor grad) {
        const bool eager = m_state[static_cast<size_t>(rank.index())].eager;
        ShardedUnits* units = params_sharded() ? m_units[static_cast<size_t>(rank.index())].get() : nullptr;
        comm::Communicator& dp = m_dp_groups->of(rank.index());
        nn::Sequential& net = c.net();
        bool computing = true;
        for (size_t i = net.size(); i-- > 0;) {
            const size_t u = units ? piece.unit_of[local][i] : ShardedUnits::kNone;
            if (units) units->before_backward(rank, dp, u, piece.unit_before[local][i]);
            if (eager) make_layer_grads(piece, local, c, i);
            if (computing) {
                net.recompute_before_backward(i);
                grad = net.at(i).backward(grad);
                computing = grad.defined();
            }
            if (eager) reduce_layer_to_owners(rank, piece, local, c, i);
            if (units) {
                if (!piece.sequence_partial.empty()) sum_layer_partial(rank, piece, local, i);
                units->after_backward(rank, dp, u);
            }
        }
        return grad;
    }
    // sequence_parallel at zero 3: the partial gradients of local chunk c's top-level layer
    // summed over the tensor group (tensor_shards::sum_sequence_partial).
    void sum_layer_partial(Rank& rank, Piece& piece, size_t c, size_t layer) {
        const ModelChunk& ch = piece.chunks[c];
        std::vector<nn::Param*> partial;
        for (size_t i = layer == 0 ? 0 : ch.layer_ends[layer - 1]; i < ch.layer_ends[layer]; ++i)
            if (std::find(piece.sequence_partial.begin(), piece.sequence_partial.end(), ch.params[i]) !=
                piece.sequence_partial.end())
                partial.push_back(ch.params[i]);
        if (!partial.empty()) sum_sequence_partial(rank, m_tp_groups->of(rank.index()), partial);
    }

    // train.clip_norm: the squares of this rank's range of its flat gradients (the replicated
    // parameters' on tensor rank 0 only; at zero 1 to 3 read from the shard's gradient) summed
    // over the world; `stepped` scaled by the norm.
    double clip(Rank& rank, const RankState& s, const std::vector<nn::Param*>& stepped, double max_norm) {
        const int r = rank.index();
        const bool counts_whole = tensor_rank(r) == 0;
        const Piece& piece = m_pieces[static_cast<size_t>(r)];
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
                        if (a < b && (m_cuts[piece.param_index[l]].kind != Cut::Kind::whole || counts_whole))
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
            for (size_t i = 0; i < piece.params.size(); ++i) {
                const int64_t n = piece.shapes[i].numel();
                const int64_t a = std::max(lo, at), b = std::min(hi, at + n);
                if (a < b && (m_cuts[piece.param_index[i]].kind != Cut::Kind::whole || counts_whole)) {
                    const Tensor grad = sharded() ? Tensor() : gpu::on_host(piece.params[i]->grad);
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

    HybridPreset m_preset = nullptr;
    PresetCheck m_check = nullptr;
    // The dp group's collectives' names (DpOp), `dp_prefix` + what they do.
    std::array<std::string, 4> m_dp_ops;
    comm::DeviceMesh m_mesh;
    int m_zero = 0;  // ZeRO stage over the dp groups
    int64_t m_micro_batches = 1;
    stages::Schedule m_schedule = stages::Schedule::one_f_one_b;
    int m_chunks = 1;  // model chunks per device (interleaved_1f1b)
    PipelineExecutor m_executor;
    std::unique_ptr<comm::SubGroups> m_tp_groups, m_dp_groups;
    // zero 3 with prefetch: the prefetch threads' dp groups, over a group of their own
    std::unique_ptr<comm::Group> m_gather_world;
    std::unique_ptr<comm::SubGroups> m_dp_gather;
    bool m_sequence = false;  // sequence_parallel with tp > 1
    std::vector<Piece> m_pieces;  // by rank; each rank thread touches its own
    std::vector<std::unique_ptr<ShardedUnits>> m_units;  // zero 3, by rank (started on its own thread)
    std::vector<std::unique_ptr<optim::Optimizer>> m_optimizers;
    std::vector<RankState> m_state;  // by rank; each touched by its own thread
    std::vector<Rank*> m_rank_of;    // each rank thread sets its own in start_rank
    std::vector<Cut> m_cuts;         // by parameter of the whole model
    std::vector<Shape> m_shapes;     // the whole model's parameter shapes
    std::atomic<int64_t> m_steps{0};
    WholeOnHost m_whole;
    // zero 1 to 3, a checkpoint to resume from: each device's range of the flat optimizer state
    // ([state]), loaded into its shard in start_rank; the optimizer's steps (-1: none).
    std::vector<std::vector<Tensor>> m_loaded;
    int64_t m_loaded_steps = -1;
};

// ---- the registry's memory model and picture --------------------------------------------------

// Per device: parameters and gradients of its stage's tensor shard (the replicated layers whole,
// 1/tp of every attention and block); optimizer state for them, 1/dp of it under zero 1 to 3;
// at zero 2 the gradients of its 1/dp shard plus, layer by layer (one micro-batch, no
// grad_accum, no sequence_parallel), its largest top-level layer's, otherwise the whole flat
// gradients of the step; at zero 3 its chunk of each top-level layer (sharded_units.h) plus its
// largest top-level layer whole, for the parameters (gathered) and the gradients alike;
// activations of its stage's layers as its tensor shard holds them (tensor_shards::
// shard_cost, sequence parallelism included) for a micro-batch of
// its replica's rows, times the micro-batches its schedule holds in flight (stages.h), the
// loss's copy of the output on the last stage.
std::vector<DeviceMemoryEstimate> mesh_memory(const config::Experiment& e, const ModelCost& m) {
    auto out = blank_estimates(e);
    comm::MeshShape axes = mesh_shape_of(e.strategy);
    axes.dp = std::max(1, axes.dp);
    axes.tp = std::max(1, axes.tp);
    axes.pp = std::max(1, axes.pp);
    const comm::DeviceMesh mesh(axes);
    const int tp = axes.tp, dp = axes.dp, pp = axes.pp, zero = zero_of(e.strategy);
    const int64_t layers = static_cast<int64_t>(m.layer_parameters.size());
    const bool sequence = tp > 1 && option<bool>(e.strategy, "sequence_parallel");
    ModelCost shard = m;  // one tensor rank's
    shard_the_cost(e, tp, sequence, shard);
    const std::vector<int64_t>& layer_params = shard.layer_parameters;
    // interleaved_1f1b: pp · v chunks, global chunk g on stage g mod pp (one chunk per stage when
    // the options do not fit the model).
    int v = stages::chunks_of(e);
    if (pp < 2 || int64_t{pp} * v > layers) v = 1;
    const int parts = pp * v;
    const std::vector<size_t> bounds =
        m.layer_flops.size() == m.layer_parameters.size()
            ? stage_bounds_of(option<std::vector<int64_t>>(e.strategy, "split"), m.layer_flops, m.layer_parameters, parts)
            : stage_bounds_of({}, std::vector<int64_t>(m.layer_parameters.size(), 1), m.layer_parameters, parts);
    const int64_t micro = std::max<int64_t>(1, option<int64_t>(e.strategy, "micro_batches"));
    const stages::Schedule schedule = v > 1 ? stages::Schedule::interleaved_1f1b
                                      : stages::schedule_of(e) == stages::Schedule::gpipe ? stages::Schedule::gpipe
                                                                                          : stages::Schedule::one_f_one_b;
    const int64_t k = optimizer_state_per_parameter(e.optimizer);
    // zero 2 reduces each layer's gradients as its backward ends when it runs once a step.
    const bool eager = e.train.grad_accum == 1 && micro == 1 && !sequence && e.data.batch_size >= dp;
    const bool prefetch = option<bool>(e.strategy, "prefetch");
    const bool reshard = option<bool>(e.strategy, "reshard_after_forward");
    for (size_t i = 0; i < out.size(); ++i) {
        auto& d = out[i];
        if (static_cast<int>(i) >= mesh.size()) {
            d.role = "outside the mesh of " + std::to_string(mesh.size()) + " devices";
            continue;
        }
        const comm::MeshCoords at = mesh.coords(static_cast<int>(i));
        const int r = at.dp, st = at.pp;
        const int64_t rows = rows_of(e.data.batch_size, r, dp);
        const int64_t m_here = std::clamp<int64_t>(std::min(micro, rows), 1, 1 << 20);
        const int64_t micro_rows = (rows + m_here - 1) / m_here;
        // Per chunk: its micro-batches in flight at most (the largest flush part's schedule).
        const std::vector<int> in_flight =
            v > 1 ? stages::chunk_in_flight(stages::stage_schedule(schedule, st, pp,
                                                                   stages::flush_parts(schedule, pp, static_cast<int>(m_here)).front(), v),
                                            v)
                  : std::vector<int>{stages::contexts_needed(schedule, st, pp, static_cast<int>(m_here))};
        // units: at zero 3 its chunk of each top-level layer's parameters (sharded_units.h);
        // pair: the most two consecutive units of a chunk hold (prefetch)
        int64_t params = 0, acts = 0, transient = 0, largest = 0, units = 0, pair = 0;
        for (int c = 0; c < v; ++c) {
            const size_t g = static_cast<size_t>(c) * static_cast<size_t>(pp) + static_cast<size_t>(st);
            const auto first = static_cast<size_t>(bounds[g]);
            const auto last = static_cast<size_t>(bounds[g + 1]);
            int64_t previous = 0;  // the chunk's last unit so far
            for (size_t l = first; l < last; ++l) {
                params += layer_params[l];
                largest = std::max(largest, layer_params[l]);
                units += data::shard_of_dataset(layer_params[l], r, dp).count;
                if (layer_params[l] == 0) continue;
                pair = std::max(pair, previous + layer_params[l]);
                previous = layer_params[l];
            }
            const ModelCost::Held h = shard.held_of(first, last);
            acts += (h.kept + (static_cast<int>(g) == parts - 1 ? m.output_numel : 0)) * in_flight[static_cast<size_t>(c)];
            transient = std::max(transient, h.transient);
        }
        d.role = mesh.label(static_cast<int>(i));
        if (pp > 1) {
            d.role += ": layers ";
            for (int c = 0; c < v; ++c) {
                const size_t g = static_cast<size_t>(c) * static_cast<size_t>(pp) + static_cast<size_t>(st);
                if (c > 0) d.role += ", ";
                d.role += std::to_string(bounds[g]) + "–" + std::to_string(std::max(bounds[g] + 1, bounds[g + 1]) - 1);
            }
        }
        const bool sharded = dp > 1;
        const int64_t shard_count = zero >= 3 ? units : data::shard_of_dataset(params, r, dp).count;
        // zero 3: the units gathered at once: every one (kept from forward to backward), two
        // consecutive ones (prefetch) or the largest.
        const int64_t gathered = !reshard ? params : prefetch ? std::max(pair, largest) : largest;
        d.set(MemCategory::parameters, zero >= 3 && sharded ? shard_count + gathered : params);
        d.set(MemCategory::gradients, zero >= 3 && sharded   ? shard_count + largest
                                      : zero >= 2 && sharded ? shard_count + (eager ? largest : params)
                                                             : params);
        d.set(MemCategory::optimizer_state, zero >= 1 && sharded ? k * shard_count : k * params);
        // zero 2 layer by layer: a layer's gradients packed for their owners
        d.set(MemCategory::communication, zero == 2 && sharded && eager ? largest : 0);
        d.set(MemCategory::activations, (acts + transient) * micro_rows);
    }
    return out;
}

StepPicture hybrid_picture(const config::Experiment& e) {
    comm::MeshShape mesh = mesh_shape_of(e.strategy);
    mesh.dp = std::max(1, mesh.dp);
    mesh.tp = std::max(1, mesh.tp);
    mesh.pp = std::max(1, mesh.pp);
    const int zero = zero_of(e.strategy);
    StepPicture p;
    const bool fits = mesh.devices() == static_cast<int64_t>(e.devices.size());
    p.layout = fits ? StepPicture::Layout::mesh : StepPicture::Layout::shards;
    p.mesh = mesh;
    if (fits) {
        const comm::DeviceMesh grid(mesh);
        for (int k = 0; k < grid.size(); ++k) p.subtitles.push_back(grid.label(k));
    }
    p.down_label = "tp group: all-reduce after attention and after the MLP (forward and backward)";
    p.up_label = zero >= 3   ? "dp group: all-gather of a layer's parameters before its forward and its backward, "
                                    "reduce-scatter of its gradients after"
                 : zero == 2 ? "dp group: gradients summed into their owners' shards, all-gather of the parameters"
                 : zero == 1 ? "dp group: reduce-scatter of the gradients, all-gather of the parameters"
                                  : "dp group: all-reduce of the gradients";
    p.caption = mesh.pp > 1
                    ? "Each stage's runs of tp consecutive devices split its blocks; a stage's activations go "
                      "to the same tensor rank of the next stage, micro-batch after micro-batch; devices "
                      "of the same stage and tensor rank sum their gradients."
                    : "Each run of tp consecutive devices is one replica of the tensor-parallel model and "
                      "trains its 1/dp of the batch; devices of the same tensor rank sum their gradients.";
    if (mesh.pp > 1 && stages::chunks_of(e) > 1) {
        p.caption += " Interleaved: each stage holds ";
        p.caption += std::to_string(stages::chunks_of(e));
        p.caption += " chunks of layers, and the activations go around the stages once per chunk.";
    }
    if (zero == 2 && mesh.dp > 1)
        p.caption += " ZeRO-2: each device keeps the optimizer state and the gradients of its 1/dp of "
                     "its part only; a layer's gradients are freed once summed into their owners' shards.";
    if (zero >= 3 && mesh.dp > 1)
        p.caption += " ZeRO-3: each device keeps its 1/dp of its part's parameters, gradients and "
                     "optimizer state; a layer's parameters are whole only while it computes.";
    if (mesh.dp * mesh.tp * mesh.pp != static_cast<int>(e.devices.size()))
        p.note = "dp · tp · pp must be the number of devices (" + std::to_string(e.devices.size()) + ")";
    return p;
}

}  // namespace

std::unique_ptr<Strategy> make_hybrid(const char* name, HybridPreset preset, PresetCheck check,
                                      const char* dp_prefix) {
    return std::make_unique<Hybrid>(name, preset, check, dp_prefix);
}

std::vector<DeviceMemoryEstimate> hybrid_memory(const config::Experiment& e, const ModelCost& m, HybridPreset preset) {
    if (!preset) return mesh_memory(e, m);
    config::Experiment he = e;
    he.strategy = preset(e, std::max(1, static_cast<int>(e.devices.size())));
    return mesh_memory(he, m);
}

StrategyDescriptor hybrid_descriptor() {
    using config::OptionKind;
    return {
        .name = "hybrid",
        .options =
            {{.key = "dp", .kind = OptionKind::integer, .fallback = int64_t{1}, .min = 1, .max = 1 << 20, .label = "Data parallel",
              .help = "Replicas: groups of tp devices, each training its 1/dp of the global batch; "
                      "dp · tp · pp is the device count."},
             {.key = "tp", .kind = OptionKind::integer, .fallback = int64_t{1}, .min = 1, .max = 1 << 20, .label = "Tensor parallel",
              .help = "Consecutive devices that split every attention and transformer_block (heads and "
                      "ffn must divide by it)."},
             {.key = "pp", .kind = OptionKind::integer, .fallback = int64_t{1}, .min = 1, .max = 1 << 20, .label = "Pipeline stages",
              .help = "Pipeline stages of dp · tp devices each, the top-level layers balanced by forward "
                      "FLOPs."},
             {.key = "zero", .kind = OptionKind::integer, .fallback = int64_t{0}, .min = 0, .max = 3,
              .label = "ZeRO stage",
              .help = "Over the data-parallel group: 0 all-reduces the gradients; 1 shards the optimizer "
                      "state; 2 the gradients too; 3 the parameters too, each layer gathered for its "
                      "forward and backward."},
             {.key = "prefetch", .kind = OptionKind::boolean, .fallback = true, .label = "Prefetch the next layer",
              .help = "zero 3: the next layer's parameters are gathered before the current layer computes "
                      "(two layers whole at once); false: each just before its own use.",
              .shown_when_key = "zero", .shown_when_value = "3"},
             {.key = "reshard_after_forward", .kind = OptionKind::boolean, .fallback = true,
              .label = "Free parameters after forward",
              .help = "zero 3: a layer's gathered parameters are freed after its forward and gathered again "
                      "for its backward; false: kept until its backward.",
              .shown_when_key = "zero", .shown_when_value = "3"},
             [] {
                 config::OptionSpec o = sync_batchnorm_option();
                 o.label = "SyncBatchNorm (statistics over each dp group)";
                 o.help = "Batch-norm layers normalise with the statistics of every replica's rows of a "
                          "micro-batch, summed over the dp group; false: each replica its own rows'.";
                 return o;
             }(),
             {.key = "micro_batches", .kind = OptionKind::integer, .fallback = int64_t{1}, .min = 1,
              .max = 1 << 20, .label = "Micro-batches",
              .help = "Micro-batches per optimizer step per replica, flowing through the pipeline stages."},
             {.key = "schedule", .kind = OptionKind::choice, .fallback = std::string("1f1b"),
              .choices = {"gpipe", "1f1b", "interleaved_1f1b", "zb_h1"}, .label = "Schedule",
              .help = "gpipe: every forward, then every backward; 1f1b: one forward and one backward in "
                      "turn after a warm-up; interleaved_1f1b: 1f1b over `interleave` model chunks per "
                      "stage (micro-batches a multiple of pp)."},
             {.key = "interleave", .kind = OptionKind::integer, .fallback = int64_t{1}, .min = 1,
              .max = 1024, .label = "Chunks per device",
              .help = "interleaved_1f1b: the layers are cut into pp × interleave chunks and stage s holds "
                      "chunks s, s + pp, ...; the bubble shrinks by this factor. 1 with the other "
                      "schedules."},
             [] {
                 config::OptionSpec o = split_option();
                 o.help = "The first top-level layer index of each stage (interleaved: each chunk) after the "
                          "first: pp · interleave − 1 strictly increasing indices in (0, L); absent: balanced "
                          "by compute (each layer's forward FLOPs).";
                 return o;
             }(),
             {.key = "sequence_parallel", .kind = OptionKind::boolean, .fallback = false,
              .label = "Sequence parallelism",
              .help = "Megatron's sequence parallelism in the tensor-parallel groups: inside the blocks, "
                      "layernorms and dropout on 1/tp of the positions, all-gather and reduce-scatter "
                      "along the sequence in place of the all-reduces. data.seq_len must divide by tp."}},
        .explanation =
            "Hybrid: a mesh of `dp` × `tp` (× `pp`) devices. Each `tp` consecutive devices split every "
            "attention and transformer_block as tensor_parallel does, and together are one replica that "
            "trains 1/`dp` of the global batch; the devices of the same tensor rank sum their gradients "
            "(an all-reduce at `zero` 0; at `zero` 1 a reduce-scatter, each updating its 1/`dp` of the "
            "parameters with 1/`dp` of the optimizer state, then an all-gather; at `zero` 2 each keeps "
            "only its 1/`dp` of the gradients too, a layer's summed into their owners' shards as its "
            "backward ends; at `zero` 3 its 1/`dp` of the parameters too, a layer's gathered for each of "
            "its forwards and backwards). With `pp` stages the "
            "layers are split as a pipeline's, each stage `dp` × `tp` devices, `micro_batches` flowing "
            "through them in the `schedule` (interleaved_1f1b: `interleave` chunks of layers per stage, "
            "the activations going around the stages once per chunk). paralab plan predicts every option.",
        .color = "#393b79",
        .min_devices = 1,
        .max_devices = 0,
        .device_rule = "dp · tp · pp devices",
        .make = [] { return make_hybrid("hybrid", nullptr); },
        .check_options = check_hybrid,
        .memory = [](const config::Experiment& e, const ModelCost& m) { return hybrid_memory(e, m); },
        .picture = hybrid_picture,
        .variant = {{.key = "dp", .text = "dp {}"},
                    {.key = "tp", .text = "tp {}"},
                    {.key = "pp", .text = "pp {}"},
                    {.key = "zero", .text = "zero {}"},
                    {.key = "sequence_parallel", .text = "sequence parallel"}},
        .pipeline = [](const config::Experiment& e) {
            const comm::MeshShape mesh = mesh_shape_of(e.strategy);
            return PipelineShape{mesh.pp, static_cast<int>(option<int64_t>(e.strategy, "micro_batches")),
                                 option<std::string>(e.strategy, "schedule"), stages::chunks_of(e),
                                 static_cast<int>(mesh.devices())};
        },
    };
}

}  // namespace paralab::strategy
