// hybrid: a dp × tp × pp mesh (docs/strategies.md, "hybrid"; ../shared/EXPERIMENT.md). Device k
// of the run has tensor rank t = k mod tp, data rank d = (k div tp) mod dp and pipeline stage
// s = k div (tp·dp).
//
//   - Stages: the model's top-level layers in pp contiguous ranges balanced by forward FLOPs (the
//     pipeline strategy's automatic split). Device k runs stage s; its activations go to device
//     k + tp·dp (the same tensor and data rank of the next stage) and their gradients come back,
//     micro-batch by micro-batch in the gpipe, 1f1b or interleaved_1f1b schedule of stages.h
//     (`micro_batches` per replica and step; a stage keeps one build of its layers per
//     micro-batch in flight, all sharing its parameters and gradients). interleaved_1f1b cuts
//     the layers into pp · `interleave` chunks instead, global chunk g on stage g mod pp, so that
//     stage pp − 1 sends chunk c's activations to stage 0's chunk c + 1 (device k − (pp−1)·tp·dp).
//   - The tp consecutive devices of one (stage, data rank) form a tensor-parallel group: each
//     holds its Megatron shard of every attention and transformer_block of the stage
//     (tensor_parallel.cpp's cut: heads and MLP units, nn::TensorShard) and the stage's other
//     layers whole, with 4 all-reduces of b·s·h numbers per block per micro-batch among them.
//   - The tp · pp devices of data rank d are one replica: rows shard_of_batch(B, d, dp) of the
//     global batch. The dp devices of one (stage, tensor rank) form a data-parallel group. After
//     the schedule, each device's gradients (its slices and its replicated parameters, laid end
//     to end in one flat buffer) are summed over that group:
//       zero 0: all-reduced; every device steps all its parameters;
//       zero 1: reduce-scattered: each device keeps the optimizer state of its 1/dp of the flat
//               parameters, steps that shard and all-gathers the flat parameters.
//       zero 2: as zero 1 with the gradients sharded too: a device keeps only its shard's
//               gradient between steps. When each chunk runs one backward a step (one
//               micro-batch, no grad_accum, no sequence_parallel), a top-level layer's gradients
//               exist from just before its backward until they are reduced to the owners of
//               their flat range over the dp group (as zero.cpp's stage 2); otherwise they
//               accumulate over the micro-batches in a flat buffer made for the step, which is
//               reduce-scattered into the shard and freed.
//       zero 3: as zero 2 with the parameters sharded too (FSDP over the dp group): between uses a
//               device holds only its 1/dp of its flat parameters. In each forward and each
//               backward of one of its chunks, a top-level layer's values are put together over
//               the dp group just before its compute (each owner of part of the layer's range
//               broadcasts it) and freed just after; the optimizer steps the shard and nothing
//               is all-gathered after the step. A replica with fewer rows runs replica 0's flushes,
//               gathering for the micro-batches it lacks without computing, so that every device
//               of a dp group makes the same collectives.
//   - train.clip_norm: the squared norm of the whole model's gradient is summed over the
//     world: each device counts the slices of its part (all of it at zero 0 on data rank 0,
//     its shard at zero 1 to 3) and the replicated parameters of that part only on tensor
//     rank 0.
// The last stage's loss is divided by the global batch, so the sums over dp are the single
// device's gradients; optimizers are element-wise, so the shards' steps are its step.
//   - train.precision fp16: the last stage scales the loss gradient by the loss scaler's factor;
//     after the data-parallel collective each device unscales what it steps (its shard at zero 1
//     to 3), and one all-reduce over the world agrees on an overflow, so that every device skips
//     or steps with the others and their scalers stay equal.
//
//   - sequence_parallel (tp > 1): each tensor-parallel group runs its split layers as
//     tensor_parallel.cpp's sequence parallelism does (all-gathers and reduce-scatters along the
//     sequence in place of the all-reduces, the layers between them on T/tp positions); a run of
//     split layers ends at a stage's edge, so activations between stages are whole. The
//     layernorm and row-bias gradients those positions leave partial are all-reduced over the
//     tensor group after the schedule, before the data-parallel collective.
//
// A checkpoint holds the single device's layout: the whole model and its whole optimizer state,
// joined from replica 0's tensor ranks (at zero 1 to 3 from the data-parallel shards first; at
// zero 3 the values too); a resume cuts them again (save_state, load_state).
//
// Across the processes of an MPI job each process builds only its own devices' chunks. A tensor-
// or data-parallel group whose devices are in several processes runs its collectives as messages
// over the job's group (comm::SubGroups: the local ring's steps, the same sums); the stages'
// activations and gradients go over it as in one process. parameters() is then collective over
// the processes (one thread each, as the job calls it between steps): every process sends its
// devices' values (replica 0's slices; at zero 3 every device's shard) to rank 0's process, which
// puts the whole model together there (lists_on_rank0); buffers() lists the stages this process
// holds. Checkpoints stay in one process.
//
// check_hybrid refuses, naming the option, a mesh that is not the device count and interleave
// options the schedule cannot take (stages::check_schedule).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>

#include "engine/comm/sub_groups.h"
#include "engine/device/gpu_values.h"
#include "engine/nn/attention.h"
#include "engine/optim/clip.h"
#include "engine/strategy/registry.h"
#include "engine/strategy/replicas.h"
#include "engine/strategy/stages.h"
#include "engine/strategy/strategy.h"
#include "engine/strategy/tensor_shards.h"

namespace paralab::strategy {

namespace {

struct Mesh {
    int dp = 1, tp = 1, pp = 1, zero = 0;
};

Mesh mesh_of(const config::StrategyConfig& s) {
    Mesh m;
    m.dp = static_cast<int>(option<int64_t>(s, "dp"));
    m.tp = static_cast<int>(option<int64_t>(s, "tp"));
    m.pp = static_cast<int>(option<int64_t>(s, "pp"));
    m.zero = static_cast<int>(option<int64_t>(s, "zero"));
    return m;
}

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
    const Mesh m = mesh_of(e.strategy);
    const int64_t mesh = int64_t{m.dp} * m.tp * m.pp;
    if (mesh != world)
        throw ConfigError("strategy", "the mesh dp · tp · pp = " + std::to_string(m.dp) + " · " +
                                          std::to_string(m.tp) + " · " + std::to_string(m.pp) + " = " +
                                          std::to_string(mesh) + " devices, but the run has " +
                                          std::to_string(world));
    const size_t layers = nn::expand_repeats(e.layers).size();
    if (static_cast<size_t>(m.pp) > layers)
        throw ConfigError("strategy.pp", std::to_string(m.pp) + " pipeline stages for a model of " +
                                             std::to_string(layers) +
                                             " top-level layers: each stage holds at least one");
    stages::check_schedule(option<std::string>(e.strategy, "schedule"), option<int64_t>(e.strategy, "interleave"),
                           option<int64_t>(e.strategy, "micro_batches"), m.pp, "strategy.pp");
    stages::check_stage_count(m.pp, layers, "hybrid", stages::chunks_of(e));
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

// The top-level layer bounds [0, b1, ..., L] of `parts` stages or chunks, balanced by forward
// FLOPs as the pipeline strategy's automatic split (stages::balanced_split).
std::vector<size_t> stage_bounds_of(const std::vector<int64_t>& flops, const std::vector<int64_t>& params, int parts) {
    std::vector<size_t> bounds{0};
    if (parts > 1)
        for (int64_t b : stages::balanced_split(flops, parts, params)) bounds.push_back(static_cast<size_t>(b));
    bounds.push_back(flops.size());
    return bounds;
}

constexpr int kForwardTag = 0, kBackwardTag = 1;
// The tags of the tensor- and data-parallel groups' messages when they span processes
// (comm::SubGroups): above every stage message's (message_tag), below MPI's least tag bound.
constexpr int kTpGroupTag = 32760, kDpGroupTag = 32761;

class Hybrid final : public Strategy {
public:
    Hybrid() : Strategy("hybrid") {}

    // A replica's first stage reads the inputs of its rows, its last the targets; every tensor
    // rank of them alike.
    DataRole data_role(int rank) const override {
        const int s = stage_of(rank);
        return {s == 0 || s == m_mesh.pp - 1, data_rank(rank), m_mesh.dp};
    }

    void start_rank(Rank& rank) override {
        const int r = rank.index();
        m_rank_of[static_cast<size_t>(r)] = &rank;
        RankState& s = m_state[static_cast<size_t>(r)];
        Piece& piece = m_pieces[static_cast<size_t>(r)];
        auto& ps = piece.params;
        const int64_t total = total_numel_of(piece);
        // zero 2 keeps no gradient of the whole between steps: it is made during the step.
        if (grads_sharded()) release_grads(piece);
        else if (m_mesh.dp > 1) s.grads = grads_as_views(ps, 0, ps.size(), rank.device());
        if (sharded()) {
            // The parameters become views of one flat buffer, all-gathered in place; the shard the
            // optimizer sees is a parameter of its own (a private copy of the values, a view of
            // the flat gradients), as in zero.cpp.
            s.values = Tensor::empty(Shape{total}, DType::f32, rank.device(), MemCategory::parameters);
            int64_t at = 0;
            for (nn::Param* p : ps) {
                Tensor view = s.values.view(at, p->value.shape());
                view.copy_from(p->value);
                p->value = view;
                at += view.numel();
            }
            s.shard = data::shard_of_dataset(total, data_rank(r), m_mesh.dp);
            s.shard_param.name = "hybrid_shard";
            // (zero 3: the only values kept between uses, the device's parameters memory.)
            s.shard_param.value = Tensor::empty(Shape{s.shard.count}, DType::f32, rank.device(),
                                                params_sharded() ? MemCategory::parameters : MemCategory::workspace);
            s.shard_param.value.copy_from(s.values.view(s.shard.offset, Shape{s.shard.count}));
            s.shard_param.grad = grads_sharded()
                                     ? Tensor::zeros(Shape{s.shard.count}, DType::f32, rank.device(),
                                                     MemCategory::gradients)
                                     : s.grads.view(s.shard.offset, Shape{s.shard.count});
        } else {
            s.shard = {0, data_rank(r) == 0 ? total : 0};
        }
        // The other contexts use the master's (now flat) values and gradients.
        for (Chunk& ch : piece.chunks)
            for (size_t c = 1; c < ch.contexts.size(); ++c) {
                auto own = ch.contexts[c]->parameters();
                for (size_t i = 0; i < own.size(); ++i) {
                    own[i]->value = ch.params[i]->value;
                    own[i]->grad = ch.params[i]->grad;
                }
            }
        // zero 3: between uses a device holds its shard only; a top-level layer's values are
        // gathered for each of its forwards and backwards (gather_values).
        if (params_sharded()) {
            s.values = Tensor();
            for (size_t c = 0; c < piece.chunks.size(); ++c) {
                release_values(piece, c, param_range(piece, c, 0, piece.chunks[c].params.size()));
                // A top-level layer's values exist from just before its forward until just after.
                for (auto& context : piece.chunks[c].contexts)
                    context->net().set_forward_hooks(
                        [this, r, c](size_t layer) {
                            gather_values(*m_rank_of[static_cast<size_t>(r)], m_pieces[static_cast<size_t>(r)], c,
                                          layer_range(m_pieces[static_cast<size_t>(r)], c, layer));
                        },
                        [this, r, c](size_t layer) {
                            release_values(m_pieces[static_cast<size_t>(r)], c,
                                           layer_range(m_pieces[static_cast<size_t>(r)], c, layer));
                        });
            }
            s.released = true;
        }
        // Setup's copies (the contexts' own parameters, the flat buffers' sources) are not
        // training's peak.
        rank.device().allocator().reset_peak();
        // A resumed zero 1 to 3 run: this device's range of the checkpoint's optimizer state.
        if (sharded() && m_loaded_steps >= 0) {
            m_optimizers[static_cast<size_t>(r)]->load_state({&s.shard_param}, {m_loaded[static_cast<size_t>(r)]},
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
        // zero 2 and 3: layer by layer when every chunk runs one backward this step (the same on every
        // device of a dp group: each replica has rows and one micro-batch of them); otherwise a
        // flat gradient buffer for the step.
        s.eager = grads_sharded() && e.train.grad_accum == 1 && m_micro_batches == 1 && !m_sequence &&
                  batch.global_size >= m_mesh.dp;
        if (grads_sharded() && !s.eager) {
            s.grads = flat_grads(piece, rank.device());
            share_grads(piece);
        }
        for (Chunk& ch : piece.chunks) ch.master().zero_grad();
        // This replica's rows of the global batch, in grad_accum parts, each a flush of the
        // schedule over its micro-batches. zero 3: every device of a dp group gathers the same
        // layers in the same order, so each runs the flushes of replica 0 (the most rows), its
        // own micro-batches in the first slots of each and no compute in the slots it lacks.
        const auto rows = data::shard_of_batch(batch.global_size, data_rank(r), m_mesh.dp);
        const int64_t plan_rows = params_sharded() ? data::shard_of_batch(batch.global_size, 0, m_mesh.dp).count
                                                   : rows.count;
        if (plan_rows > 0) {
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
                run_flush(rank, piece, batch, offset, micro, slots, res);
            }
            res.samples = rows.count;
        }
        if (!piece.sequence_partial.empty())
            sum_sequence_partial(rank, m_tp_groups->of(rank.index()), piece.sequence_partial);
        // (zero 2 and 3 layer by layer: reduced to their owners in backward already.)
        if (m_mesh.dp > 1 && !s.eager) {
            comm::Communicator& dp = m_dp_groups->of(r);
            const int64_t n = s.grads.numel();
            if (sharded()) {
                rank.record_comm(named(dp.reduce_scatter(s.grads.raw(), n, DType::f32, comm::ReduceOp::sum),
                                       "dp_reduce_scatter_grads"));
                if (grads_sharded()) {
                    // Keep the shard's sum; the step's whole gradients go.
                    rank.compute("optimizer", [&] {
                        s.shard_param.grad.copy_from(s.grads.view(s.shard.offset, Shape{s.shard.count}));
                    });
                    s.grads = Tensor();
                    release_grads(piece);
                }
            } else
                rank.record_comm(
                    named(dp.all_reduce(s.grads.raw(), n, DType::f32, comm::ReduceOp::sum), "dp_all_reduce_grads"));
        }
        std::vector<nn::Param*> shard{&s.shard_param};
        std::vector<nn::Param*>& stepped = sharded() ? shard : ps;
        // fp16: the last stage scaled the loss gradient, so every device's gradients (and shards)
        // are scaled; each checks its own and all agree, so they skip or step together (a skipped
        // step changes no values: nothing to gather).
        if (s.scaler && !unscale_gradients(rank, stepped, *s.scaler, true)) return res;
        if (e.train.clip_norm) res.grad_norm = clip(rank, s, stepped, *e.train.clip_norm);
        rank.compute("optimizer", [&] {
            m_optimizers[static_cast<size_t>(r)]->step(stepped, lr);
            if (sharded() && !params_sharded())
                s.values.view(s.shard.offset, Shape{s.shard.count}).copy_from(s.shard_param.value);
        });
        // (zero 3: the shards are gathered where they are used, layer by layer.)
        if (sharded() && !params_sharded())
            rank.record_comm(named(m_dp_groups->of(r).all_gather(s.values.raw(), s.values.numel(), DType::f32),
                                   "dp_all_gather_params"));
        if (r == 0) ++m_steps;
        return res;
    }

    void abort(const std::string& reason) override {
        if (m_tp_groups) m_tp_groups->abort(reason);
        if (m_dp_groups) m_dp_groups->abort(reason);
    }

    // The whole model on the host, put together from replica 0's shards when they have changed.
    Tensor predict(const Tensor& x) override {
        const config::Experiment& e = *m_ctx->experiment;
        Device& host = detached_host_device();
        if (!m_whole) m_whole = std::make_unique<nn::Model>(e.layers, m_ctx->input, e.loss, DType::f32, host);
        if (m_whole_at != m_steps.load()) {
            const std::vector<Tensor> values = parameters();
            const auto to = m_whole->parameters();
            for (size_t i = 0; i < to.size(); ++i) to[i]->value.copy_from(values[i]);
            const std::vector<Tensor> from = buffers();
            const auto bufs = m_whole->buffers();
            for (size_t i = 0; i < bufs.size(); ++i) bufs[i].copy_from(from[i]);
            m_whole_at = m_steps.load();
        }
        const Tensor out = m_whole->forward(gpu::on_device(x, host, MemCategory::activations), nn::Mode::eval);
        return gpu::on_device(out, *m_ctx->devices[0], MemCategory::activations);
    }

    // The whole model's parameters in the single device's order: chunk after chunk (stage after
    // stage without interleaving), each put together from the shards of replica 0's tensor ranks
    // (every replica holds the same values). Across processes, on rank 0's process (the others
    // list empty tensors).
    std::vector<Tensor> parameters() override {
        const std::vector<std::vector<Tensor>> values = replica_values();
        if (values.empty()) return std::vector<Tensor>(m_shapes.size());
        const int tp = m_mesh.tp;
        std::vector<Tensor> out;
        for (int g = 0; g < m_mesh.pp * m_chunks; ++g) {
            const int first_rank = (g % m_mesh.pp) * tp * m_mesh.dp;
            const size_t c = static_cast<size_t>(g / m_mesh.pp);
            const Piece& piece = m_pieces[static_cast<size_t>(first_rank)];
            const Chunk& ch = piece.chunks[c];
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
        for (int g = 0; g < m_mesh.pp * m_chunks; ++g) {
            const int k = (g % m_mesh.pp) * m_mesh.tp * m_mesh.dp;
            const Chunk& ch = m_pieces[static_cast<size_t>(k)].chunks[static_cast<size_t>(g / m_mesh.pp)];
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
    // data-parallel group's shards are laid end to end first, as zero.cpp's. A resume cuts them
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
        const int tp = m_mesh.tp;
        // Each device of replica 0 ([tensor rank][local parameter][state]), stage after stage.
        std::vector<std::vector<std::vector<std::vector<Tensor>>>> of_stage(static_cast<size_t>(m_mesh.pp));
        for (int g = 0; g < m_mesh.pp * m_chunks; ++g) {
            const int first_rank = (g % m_mesh.pp) * tp * m_mesh.dp;
            const size_t c = static_cast<size_t>(g / m_mesh.pp);
            auto& shards = of_stage[static_cast<size_t>(g % m_mesh.pp)];
            if (shards.empty())
                for (int t = 0; t < tp; ++t) shards.push_back(local_state(first_rank + t));
            const Piece& piece = m_pieces[static_cast<size_t>(first_rank)];
            const Chunk& ch = piece.chunks[c];
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
                my_values[static_cast<size_t>(k)].push_back(slice_of(values[i], shape, m_cuts[i], t, m_mesh.tp));
                std::vector<Tensor> mine;
                if (restore_state)
                    for (const Tensor& s : state[i]) mine.push_back(slice_of(s, shape, m_cuts[i], t, m_mesh.tp));
                my_state[static_cast<size_t>(k)].push_back(std::move(mine));
            }
        }
        // zero 1 to 3: each device's range of its flat state vectors.
        std::vector<std::vector<Tensor>> shard_state(static_cast<size_t>(m_world));
        if (sharded() && restore_state)
            for (int k = 0; k < m_world; ++k) {
                const Piece& piece = m_pieces[static_cast<size_t>(k)];
                const int64_t total = total_numel_of(piece);
                const data::ShardRange range = data::shard_of_dataset(total, data_rank(k), m_mesh.dp);
                for (size_t j = 0; j < per_param; ++j) {
                    Tensor flat =
                        Tensor::empty(Shape{total}, DType::f32, detached_host_device(), MemCategory::workspace);
                    int64_t at = 0;
                    for (size_t l = 0; l < piece.params.size(); ++l) {
                        const Tensor& s = my_state[static_cast<size_t>(k)][l][j];
                        flat.view(at, s.shape()).copy_from(s);
                        at += s.numel();
                    }
                    Tensor mine = Tensor::empty(Shape{range.count}, DType::f32, detached_host_device(),
                                                MemCategory::workspace);
                    mine.copy_from(flat.view(range.offset, Shape{range.count}));
                    shard_state[static_cast<size_t>(k)].push_back(std::move(mine));
                }
            }
        for (int k = 0; k < m_world; ++k) {
            Piece& piece = m_pieces[static_cast<size_t>(k)];
            for (size_t l = 0; l < piece.params.size(); ++l)
                piece.params[l]->value.copy_from(my_values[static_cast<size_t>(k)][l]);
            // Every device of a chunk's stage holds its buffers: the checkpoint's, chunk by chunk.
            for (Chunk& ch : piece.chunks)
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
        m_whole_at = -1;
    }

protected:
    void setup_impl(RunContext& ctx, nn::Model& reference) override {
        const config::Experiment& e = *ctx.experiment;
        check_mesh(e, m_world);
        m_mesh = mesh_of(e.strategy);
        m_micro_batches = option<int64_t>(e.strategy, "micro_batches");
        m_schedule = stages::schedule_of(e);
        m_chunks = stages::chunks_of(e);
        m_sequence = option<bool>(e.strategy, "sequence_parallel") && m_mesh.tp > 1;
        const int tp = m_mesh.tp, dp = m_mesh.dp, pp = m_mesh.pp;
        // Tensor-parallel groups: the tp consecutive devices of one (stage, data rank);
        // data-parallel groups: the devices of one (stage, tensor rank).
        std::vector<std::vector<int>> tp_members(static_cast<size_t>(dp * pp)), dp_members(static_cast<size_t>(tp * pp));
        for (int k = 0; k < m_world; ++k) {
            tp_members[static_cast<size_t>(stage_of(k) * dp + data_rank(k))].push_back(k);
            dp_members[static_cast<size_t>(stage_of(k) * tp + tensor_rank(k))].push_back(k);
        }
        // Across processes a group with members in several processes sends messages over the
        // run's group, on tags apart from the stages' (message_tag stays below them).
        m_tp_groups = std::make_unique<comm::SubGroups>(ctx.devices, tp_members, ctx.group, kTpGroupTag);
        m_dp_groups = std::make_unique<comm::SubGroups>(ctx.devices, dp_members, ctx.group, kDpGroupTag);
        m_rank_of.assign(static_cast<size_t>(m_world), nullptr);
        m_state.resize(static_cast<size_t>(m_world));
        m_pieces.resize(static_cast<size_t>(m_world));
        m_loaded.assign(static_cast<size_t>(m_world), {});
        m_optimizers.resize(static_cast<size_t>(m_world));

        // The stages (interleaved: pp · v chunks): top-level layers balanced by forward FLOPs, as
        // the pipeline strategy's.
        nn::Sequential& net = reference.net();
        std::vector<int64_t> flops, counts;
        std::vector<size_t> param_start{0}, buffer_start{0};
        for (size_t i = 0; i < net.size(); ++i) {
            flops.push_back(net.at(i).flops_per_sample());
            counts.push_back(net.at(i).parameter_count());
            param_start.push_back(param_start.back() + net.at(i).parameters().size());
            buffer_start.push_back(buffer_start.back() + net.at(i).buffers().size());
        }
        const std::vector<size_t> bounds = stage_bounds_of(flops, counts, pp * m_chunks);
        const std::vector<nn::LayerSpec> layers = nn::expand_repeats(e.layers);  // as reference.net()
        const auto ref_params = reference.parameters();
        const auto ref_buffers = reference.buffers();
        for (const nn::Param* p : ref_params) m_shapes.push_back(p->value.shape());
        m_cuts.assign(ref_params.size(), Cut{});
        std::vector<bool> cut(static_cast<size_t>(pp * m_chunks), false);  // global chunk g's cuts are known
        // Every device's chunks: their layers, and their parameters and buffers in the model's lists.
        for (int k = 0; k < m_world; ++k) {
            Piece& piece = m_pieces[static_cast<size_t>(k)];
            piece.chunks.resize(static_cast<size_t>(m_chunks));
            for (int c = 0; c < m_chunks; ++c) {
                Chunk& ch = piece.chunks[static_cast<size_t>(c)];
                const size_t g = static_cast<size_t>(c) * static_cast<size_t>(pp) + static_cast<size_t>(stage_of(k));
                ch.first = bounds[g];
                ch.last = bounds[g + 1];
                ch.input = net.at(ch.first).input_shape();
                ch.output = net.at(ch.last - 1).output_shape();
                ch.first_param = param_start[ch.first];
                ch.param_count = param_start[ch.last] - ch.first_param;
                ch.first_buffer = buffer_start[ch.first];
                ch.buffer_count = buffer_start[ch.last] - ch.first_buffer;
            }
        }
        // No flush has more micro-batches than the largest replica has rows.
        const int64_t most = std::min(m_micro_batches, (e.data.batch_size + dp - 1) / dp);
        // Across processes every stage message's tag stays below the groups' (MPI's tags end at
        // 32767 at least).
        if (ctx.spans_processes() && 2 * most * m_chunks > kTpGroupTag)
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
                Chunk& ch = piece.chunks[static_cast<size_t>(c)];
                const size_t g = static_cast<size_t>(c) * static_cast<size_t>(pp) + static_cast<size_t>(st);
                for (int i = 0; i < contexts[static_cast<size_t>(c)]; ++i) {
                    // Under sequence parallelism a run of split layers ends at the chunk's edge.
                    auto model = nn::Model::stage(layers, ch.first, ch.last, ch.input, e.loss, DType::f32, device,
                                                  shard_preparer(layers, ch.first, ch.last, shard));
                    model->set_recompute(nn::recompute_from_name(e.train.recompute));
                    ch.contexts.push_back(std::move(model));
                }
                nn::Model& master = ch.master();
                ch.params = master.parameters();
                ch.buffers = master.buffers();
                for (size_t i = 0, n = 0; i < master.net().size(); ++i) {
                    n += master.net().at(i).parameters().size();
                    ch.layer_ends.push_back(n);
                }
                if (tp > 1 && m_sequence)
                    for (nn::Param* q : sequence_partial_parameters(master.net())) piece.sequence_partial.push_back(q);
                PARALAB_CHECK(ch.params.size() == ch.param_count && ch.buffers.size() == ch.buffer_count,
                              "hybrid: the chunk's parameters do not match the model's");
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
                    ch.buffers[i].copy_from(ref_buffers[buffer_start[ch.first] + i]);
            }
            m_optimizers[static_cast<size_t>(k)] = optim::make_optimizer(e.optimizer);
            m_state[static_cast<size_t>(k)].scaler = loss_scaler_for(e);
        }
        // A chunk held only by other processes: its cuts from a shard of it built on the host.
        for (size_t g = 0; g < cut.size(); ++g) {
            if (cut[g]) continue;
            const int k = static_cast<int>(g % static_cast<size_t>(pp)) * tp * dp;  // any device of the chunk
            const Chunk& ch = m_pieces[static_cast<size_t>(k)].chunks[g / static_cast<size_t>(pp)];
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
            for (const Chunk& ch : piece.chunks)
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
    }

private:
    // One model chunk of a device (its stage's layers without interleaving): layers [first,
    // last), as `contexts` builds of its tensor shard that share parameters and gradients
    // (stages.h), each holding one micro-batch in flight.
    struct Chunk {
        size_t first = 0, last = 0;
        Shape input, output;  // per example
        size_t first_param = 0, param_count = 0;    // its parameters in the whole model's list
        size_t first_buffer = 0, buffer_count = 0;  // its buffers in the whole model's list
        // The builds below exist on a device of this process only.
        std::vector<std::unique_ptr<nn::Model>> contexts;
        std::vector<nn::Param*> params;  // the master's (context 0)
        std::vector<Tensor> buffers;     // the master's
        // The master's top-level layer i holds params [layer_ends[i − 1], layer_ends[i]).
        std::vector<size_t> layer_ends;

        nn::Model& master() { return *contexts.front(); }
    };
    // One device's part of the mesh: its chunks (local chunk c is global chunk c·pp + stage).
    struct Piece {
        std::vector<Chunk> chunks;
        std::vector<nn::Param*> params;   // every chunk's, chunk after chunk
        std::vector<size_t> param_index;  // each one's index in the whole model's list
        std::vector<int64_t> offsets;     // each one's offset in the flat parameters
        std::vector<Shape> shapes;        // each one's shape
        // sequence_parallel: the whole parameters whose gradients hold this device's positions
        // only (tensor_shards::sequence_partial_parameters of each chunk)
        std::vector<nn::Param*> sequence_partial;
    };

    struct RankState {
        Tensor grads;            // dp > 1, [T]: the gradients are views of it (zero 2: during a step only)
        Tensor values;           // zero 1 and 2 (zero 3: setup only), [T]: the parameters are views of it
        data::ShardRange shard;  // the flat range whose gradient norm (and, at zero 1 to 3, update) is this rank's
        // zero 1 to 3: the shard's value (a private copy) and gradient (zero 1: a view of
        // grads; zero 2: its own, the only gradient kept between steps)
        nn::Param shard_param;
        bool eager = false;  // zero 2 and 3, this step: each layer's gradients reduced as its backward ends
        bool released = false;  // zero 3: the values are the shard only (start_rank has run)
        // fp16 mixed precision: every device's, kept equal (they agree on every overflow)
        std::unique_ptr<optim::LossScaler> scaler;
    };

    int tensor_rank(int k) const { return k % m_mesh.tp; }
    int data_rank(int k) const { return (k / m_mesh.tp) % m_mesh.dp; }
    int stage_of(int k) const { return k / (m_mesh.tp * m_mesh.dp); }
    bool sharded() const { return m_mesh.zero >= 1 && m_mesh.dp > 1; }
    bool grads_sharded() const { return m_mesh.zero >= 2 && m_mesh.dp > 1; }
    bool params_sharded() const { return m_mesh.zero >= 3 && m_mesh.dp > 1; }

    // Local chunk c's parameters [a, b) (the chunk's own indices) as [first, last) of the device's
    // list, and their flat range [begin, end).
    struct ParamRange {
        size_t first = 0, last = 0;
        int64_t begin = 0, end = 0;
    };
    static ParamRange param_range(const Piece& piece, size_t c, size_t a, size_t b) {
        ParamRange out;
        out.first = chunk_offset(piece, c) + a;
        out.last = chunk_offset(piece, c) + b;
        if (out.first == out.last) return out;
        out.begin = piece.offsets[out.first];
        out.end = piece.offsets[out.last - 1] + piece.shapes[out.last - 1].numel();
        return out;
    }
    static ParamRange layer_range(const Piece& piece, size_t c, size_t layer) {
        const Chunk& ch = piece.chunks[c];
        return param_range(piece, c, layer == 0 ? 0 : ch.layer_ends[layer - 1], ch.layer_ends[layer]);
    }
    // zero 3: local chunk c's values of `range` dropped in every context (the gathered buffer goes
    // with the last view).
    static void release_values(Piece& piece, size_t c, const ParamRange& range) {
        const size_t at = chunk_offset(piece, c);
        for (auto& context : piece.chunks[c].contexts) {
            const auto own = context->parameters();
            for (size_t i = range.first; i < range.last; ++i) own[i - at]->value = Tensor();
        }
    }
    // zero 3: the values of `range` of local chunk c put together over the dp group, just before
    // a top-level layer's forward or backward: each owner (data rank q) of part of the range
    // broadcasts that part of its shard into one buffer (parameters memory), whose views every
    // context of the chunk uses.
    void gather_values(Rank& rank, Piece& piece, size_t c, const ParamRange& range) {
        if (range.first == range.last) return;
        const RankState& s = m_state[static_cast<size_t>(rank.index())];
        const int64_t n = range.end - range.begin, total = total_numel_of(piece);
        const Tensor buf = Tensor::empty(Shape{n}, DType::f32, rank.device(), MemCategory::parameters);
        comm::Communicator& dp = m_dp_groups->of(rank.index());
        for (int q = 0; q < m_mesh.dp; ++q) {
            const auto sq = data::shard_of_dataset(total, q, m_mesh.dp);
            const int64_t lo = std::max(range.begin, sq.offset), hi = std::min(range.end, sq.offset + sq.count);
            if (lo >= hi) continue;
            const Tensor part = buf.view(lo - range.begin, Shape{hi - lo});
            if (q == dp.rank()) part.copy_from(s.shard_param.value.view(lo - s.shard.offset, Shape{hi - lo}));
            rank.record_comm(named(dp.broadcast(part.raw(), hi - lo, DType::f32, q), "dp_gather_params"));
        }
        const size_t at = chunk_offset(piece, c);
        for (auto& context : piece.chunks[c].contexts) {
            const auto own = context->parameters();
            for (size_t i = range.first; i < range.last; ++i)
                own[i - at]->value = buf.view(piece.offsets[i] - range.begin, piece.shapes[i]);
        }
    }
    // zero 3, a micro-batch slot this replica lacks: the gathers of a forward (layer after layer)
    // or a backward (in reverse) of local chunk c, without compute.
    void gather_without_compute(Rank& rank, Piece& piece, size_t c, bool forward) {
        const size_t layers = piece.chunks[c].layer_ends.size();
        for (size_t j = 0; j < layers; ++j) {
            const ParamRange range = layer_range(piece, c, forward ? j : layers - 1 - j);
            gather_values(rank, piece, c, range);
            release_values(piece, c, range);
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
            for (Tensor& t : shard ? host_copies(std::vector<Tensor>{m_state[k].shard_param.value})
                                   : host_copies(m_pieces[k].params))
                mine[k].push_back(std::move(t));
        }
        std::vector<std::vector<Tensor>> all = lists_on_rank0(*m_ctx, std::move(mine));
        if (all.empty()) return {};
        std::vector<std::vector<Tensor>> out(world);
        for (size_t k = 0; k < world; ++k) {
            if (data_rank(static_cast<int>(k)) != 0) continue;
            PARALAB_CHECK(!all[k].empty(), "hybrid: no process gave rank " + std::to_string(k) + "'s values");
            const Piece& piece = m_pieces[k];
            if (all[k][0].data<float>()[0] == 0.0f) {
                out[k].assign(all[k].begin() + 1, all[k].end());
                continue;
            }
            // zero 3: the flat values laid together from the dp group's shards, cut per parameter.
            Tensor flat = Tensor::empty(Shape{total_numel_of(piece)}, DType::f32, detached_host_device(),
                                        MemCategory::workspace);
            for (int d = 0; d < m_mesh.dp; ++d) {
                const auto q = k + static_cast<size_t>(d * m_mesh.tp);
                PARALAB_CHECK(all[q].size() == 2, "hybrid: no process gave rank " + std::to_string(q) + "'s shard");
                const data::ShardRange range = data::shard_of_dataset(flat.numel(), d, m_mesh.dp);
                if (range.count > 0) flat.view(range.offset, Shape{range.count}).copy_from(all[q][1]);
            }
            for (size_t i = 0; i < piece.shapes.size(); ++i) {
                Tensor t = Tensor::empty(piece.shapes[i], DType::f32, detached_host_device(), MemCategory::workspace);
                t.copy_from(flat.view(piece.offsets[i], piece.shapes[i]));
                out[k].push_back(std::move(t));
            }
        }
        return out;
    }
    // The cuts of a chunk's parameters (their places in the whole model's list) from a build of it.
    void collect_chunk_cuts(nn::Layer& net, const Chunk& ch) {
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
        for (Chunk& ch : piece.chunks)
            for (auto& context : ch.contexts)
                for (nn::Param* p : context->parameters()) p->grad = Tensor();
    }
    // zero 2: the other contexts use the master's gradients.
    static void share_grads(Piece& piece) {
        for (Chunk& ch : piece.chunks)
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
        Chunk& ch = piece.chunks[chunk];
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
        Chunk& ch = piece.chunks[chunk];
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
        comm::Communicator& dp = m_dp_groups->of(rank.index());
        const int64_t total = total_numel_of(piece);
        for (int q = 0; q < m_mesh.dp; ++q) {
            const auto sq = data::shard_of_dataset(total, q, m_mesh.dp);
            const int64_t lo = std::max(a, sq.offset), hi = std::min(a + n, sq.offset + sq.count);
            if (lo >= hi) continue;
            const Tensor part = buf.view(lo - a, Shape{hi - lo});
            rank.record_comm(
                named(dp.reduce(part.raw(), hi - lo, DType::f32, comm::ReduceOp::sum, q), "dp_reduce_grads_to_owner"));
            if (q == dp.rank()) s.shard_param.grad.view(lo - s.shard.offset, Shape{hi - lo}).copy_from(part);
        }
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
        const int64_t total = total_numel_of(piece);
        const int first = stage_of(k) * m_mesh.tp * m_mesh.dp + tensor_rank(k);
        const size_t per_param = m_optimizers[static_cast<size_t>(k)]->state_names().size();
        for (size_t j = 0; j < per_param; ++j) {
            Tensor flat = Tensor::empty(Shape{total}, DType::f32, detached_host_device(), MemCategory::workspace);
            for (int d = 0; d < m_mesh.dp; ++d) {
                const int q = first + d * m_mesh.tp;
                const RankState& s = m_state[static_cast<size_t>(q)];
                if (s.shard.count == 0) continue;
                flat.view(s.shard.offset, Shape{s.shard.count})
                    .copy_from(m_optimizers[static_cast<size_t>(q)]->state()[0][j]);
            }
            int64_t at = 0;
            for (size_t l = 0; l < piece.params.size(); ++l) {
                const Shape& shape = piece.shapes[l];
                Tensor t = Tensor::empty(shape, DType::f32, detached_host_device(), MemCategory::workspace);
                t.copy_from(flat.view(at, shape));
                at += t.numel();
                out[l].push_back(std::move(t));
            }
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
    // The device that runs global chunk g for tensor and data ranks of device k.
    int device_of_chunk(int g, int k) const {
        const int hop = m_mesh.tp * m_mesh.dp;
        return (g % m_mesh.pp) * hop + k % hop;
    }
    // The tag of micro-batch `index`'s message sent by local chunk `chunk`.
    int message_tag(int index, int chunk, int direction) const { return 2 * (index * m_chunks + chunk) + direction; }

    // One flush of `slots` micro-batch slots, the first micro.size() of them this replica's
    // micro-batches (fewer only at zero 3: the others gather and free their chunk, no more).
    void run_flush(Rank& rank, Piece& piece, const data::Batch& batch, int64_t offset,
                   const std::vector<data::ShardRange>& micro, int slots, StepResult& res) {
        const int st = stage_of(rank.index());
        int first = 0;  // the part's first micro-batch
        for (const int m : stages::flush_parts(m_schedule, m_mesh.pp, slots)) {
            const std::vector<stages::Op> ops = stages::stage_schedule(m_schedule, st, m_mesh.pp, m, m_chunks);
            const std::vector<int> contexts = stages::chunk_in_flight(ops, m_chunks);
            for (int c = 0; c < m_chunks; ++c)
                PARALAB_CHECK(contexts[static_cast<size_t>(c)] <=
                                  static_cast<int>(piece.chunks[static_cast<size_t>(c)].contexts.size()),
                              "hybrid: too few contexts");
            for (const stages::Op& op : ops) {
                Chunk& ch = piece.chunks[static_cast<size_t>(op.chunk)];
                nn::Model& c = *ch.contexts[static_cast<size_t>(op.micro % std::max(1, contexts[static_cast<size_t>(op.chunk)]))];
                const int index = first + op.micro;
                if (index >= static_cast<int>(micro.size())) {
                    gather_without_compute(rank, piece, static_cast<size_t>(op.chunk), op.forward);
                    continue;
                }
                const data::ShardRange& mb = micro[static_cast<size_t>(index)];
                if (op.forward) forward(rank, ch, op.chunk, c, batch, offset, index, mb, res);
                else backward(rank, ch, op.chunk, c, index, mb);
            }
            first += m;
        }
    }

    void forward(Rank& rank, Chunk& ch, int chunk, nn::Model& c, const data::Batch& batch, int64_t offset,
                 int index, const data::ShardRange& mb, StepResult& res) {
        const config::Experiment& e = rank.experiment();
        const RunContext& ctx = rank.context();
        const int k = rank.index(), g = chunk * m_mesh.pp + stage_of(k);
        const bool first = g == 0, last = g == m_mesh.pp * m_chunks - 1;
        DeviceBatch rows;
        if (first || last) rows = to_device(batch, mb.offset - offset, mb.count, ctx.input, ctx.target, rank.device());
        Tensor x = rows.x;
        if (!first) {
            x = Tensor::empty(ch.input.with_batch(mb.count), DType::f32, rank.device(), MemCategory::activations);
            const std::string phase = stages::chunk_phase("recv_activation", chunk, m_chunks);
            rank.record_comm(named(rank.comm().recv(x.raw(), x.numel(), DType::f32, device_of_chunk(g - 1, k),
                                                    message_tag(index, (g - 1) / m_mesh.pp, kForwardTag)),
                                   phase.c_str()),
                             /*waiting=*/true);
        }
        // A context other than the master runs on the master's running statistics.
        const bool own_buffers = &c != &ch.master() && !ch.buffers.empty();
        std::vector<Tensor> buffers = own_buffers ? c.buffers() : std::vector<Tensor>{};
        for (size_t i = 0; i < buffers.size(); ++i) buffers[i].copy_from(ch.buffers[i]);
        c.set_random_state(e.seed, static_cast<uint64_t>(rank.step() - 1), mb.offset);
        const int64_t total = batch.global_size;
        const std::string phase = stages::chunk_phase("forward", chunk, m_chunks);
        Tensor out = rank.compute(phase.c_str(), [&] {
            rank.straggle();
            Tensor o = c.forward(x, nn::Mode::train);
            if (last) {
                const double loss = c.loss().forward(o, rows.y, total) * static_cast<double>(total);
                // The tensor ranks of a replica compute the same loss: rank 0 reports it.
                if (tensor_rank(k) == 0) {
                    res.loss_sum += loss;
                    res.loss_samples += mb.count;
                }
            }
            return o;
        });
        for (size_t i = 0; i < buffers.size(); ++i) ch.buffers[i].copy_from(buffers[i]);
        if (!last) {
            const std::string send = stages::chunk_phase("send_activation", chunk, m_chunks);
            rank.record_comm(named(rank.comm().send(out.raw(), out.numel(), DType::f32, device_of_chunk(g + 1, k),
                                                    message_tag(index, chunk, kForwardTag)),
                                   send.c_str()));
        }
    }

    void backward(Rank& rank, Chunk& ch, int chunk, nn::Model& c, int index, const data::ShardRange& mb) {
        const int k = rank.index(), g = chunk * m_mesh.pp + stage_of(k);
        const bool last = g == m_mesh.pp * m_chunks - 1;
        Tensor dy;
        if (!last) {
            dy = Tensor::empty(ch.output.with_batch(mb.count), DType::f32, rank.device(), MemCategory::activations);
            const std::string phase = stages::chunk_phase("recv_grad", chunk, m_chunks);
            rank.record_comm(named(rank.comm().recv(dy.raw(), dy.numel(), DType::f32, device_of_chunk(g + 1, k),
                                                    message_tag(index, (g + 1) / m_mesh.pp, kBackwardTag)),
                                   phase.c_str()),
                             /*waiting=*/true);
        }
        const std::string phase = stages::chunk_phase("backward", chunk, m_chunks);
        const bool eager = m_state[static_cast<size_t>(k)].eager;
        Piece& piece = m_pieces[static_cast<size_t>(k)];
        const auto local = static_cast<size_t>(chunk);
        const optim::LossScaler* scaler = m_state[static_cast<size_t>(k)].scaler.get();
        Tensor dx = rank.compute(phase.c_str(), [&] {
            if (last) {
                dy = c.loss().backward();
                if (scaler) optim::scale_in_place(dy, scaler->scale());
            }
            if (!eager && !params_sharded()) {
                Tensor grad = c.net().backward(dy);
                dy = Tensor();
                return grad;
            }
            // A top-level layer at a time: zero 3 gathers its values just before (its
            // recomputation's too) and frees them just after; zero 2 and 3 in this chunk's only
            // backward of the step make its gradients just before and reduce them to their
            // owners just after. Layers before an embedding (none by construction) are walked
            // for their collectives only.
            nn::Sequential& net = c.net();
            Tensor grad = dy;
            dy = Tensor();
            bool computing = true;
            for (size_t i = net.size(); i-- > 0;) {
                const ParamRange range = layer_range(piece, local, i);
                if (params_sharded()) gather_values(rank, piece, local, range);
                if (eager) make_layer_grads(piece, local, c, i);
                if (computing) {
                    net.recompute_before_backward(i);
                    grad = net.at(i).backward(grad);
                    computing = grad.defined();
                }
                if (eager) reduce_layer_to_owners(rank, piece, local, c, i);
                if (params_sharded()) release_values(piece, local, range);
            }
            return grad;
        });
        if (g > 0) {
            PARALAB_CHECK(dx.defined(), "hybrid: chunk " + std::to_string(g) + " computed no input gradient");
            const std::string send = stages::chunk_phase("send_grad", chunk, m_chunks);
            rank.record_comm(named(rank.comm().send(dx.raw(), dx.numel(), DType::f32, device_of_chunk(g - 1, k),
                                                    message_tag(index, chunk, kBackwardTag)),
                                   send.c_str()));
        }
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
            int64_t at = 0;
            const int64_t lo = s.shard.offset, hi = s.shard.offset + s.shard.count;
            // On a GPU the gradients are read back to sum their ranges on the host.
            const Tensor shard = sharded() ? gpu::on_host(s.shard_param.grad) : Tensor();
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

    Mesh m_mesh;
    int64_t m_micro_batches = 1;
    stages::Schedule m_schedule = stages::Schedule::one_f_one_b;
    int m_chunks = 1;  // model chunks per device (interleaved_1f1b)
    std::unique_ptr<comm::SubGroups> m_tp_groups, m_dp_groups;
    bool m_sequence = false;  // sequence_parallel with tp > 1
    std::vector<Piece> m_pieces;  // by rank; each rank thread touches its own
    std::vector<std::unique_ptr<optim::Optimizer>> m_optimizers;
    std::vector<RankState> m_state;  // by rank; each touched by its own thread
    std::vector<Rank*> m_rank_of;    // each rank thread sets its own in start_rank
    std::vector<Cut> m_cuts;         // by parameter of the whole model
    std::vector<Shape> m_shapes;     // the whole model's parameter shapes
    std::atomic<int64_t> m_steps{0};
    std::unique_ptr<nn::Model> m_whole;
    int64_t m_whole_at = -1;
    // zero 1 to 3, a checkpoint to resume from: each device's range of the flat optimizer state
    // ([state]), loaded into its shard in start_rank; the optimizer's steps (-1: none).
    std::vector<std::vector<Tensor>> m_loaded;
    int64_t m_loaded_steps = -1;
};

// ---- the registry's memory model and picture --------------------------------------------------

// The numbers of a layer's parameters that stay whole on every tensor rank (tensor_parallel.cpp's
// rule, from the width D the parameter count gives): attention's proj bias (D); a block's two
// layernorms and two row-parallel biases (6D).
int64_t whole_params_of(const nn::LayerSpec& s, int64_t params) {
    const double f = static_cast<double>(s.ffn), p = static_cast<double>(params);
    if (s.type == "attention") return std::llround((-1.0 + std::sqrt(1.0 + p)) / 2.0);
    const double b = 2 * f + 9;
    return 6 * std::llround((-b + std::sqrt(b * b - 16.0 * (f - p))) / 8.0);
}

// Per device: parameters and gradients of its stage's tensor shard (the replicated layers whole,
// 1/tp of every attention and block); optimizer state for them, 1/dp of it under zero 1 to 3;
// at zero 2 the gradients of its 1/dp shard plus, layer by layer (one micro-batch, no
// grad_accum, no sequence_parallel), its largest top-level layer's, otherwise the whole flat
// gradients of the step; at zero 3 the parameters of its shard plus its largest top-level
// layer's, gathered;
// activations of its stage's layers as its tensor shard holds them (tensor_shards::
// shard_activations, sequence parallelism included) for a micro-batch of
// its replica's rows, times the micro-batches its schedule holds in flight (stages.h), the
// loss's copy of the output on the last stage.
std::vector<DeviceMemoryEstimate> hybrid_memory(const config::Experiment& e, const ModelCost& m) {
    auto out = blank_estimates(e);
    const Mesh mesh = mesh_of(e.strategy);
    const int tp = std::max(1, mesh.tp), dp = std::max(1, mesh.dp), pp = std::max(1, mesh.pp);
    const int64_t layers = static_cast<int64_t>(m.layer_parameters.size());
    const bool sequence = tp > 1 && option<bool>(e.strategy, "sequence_parallel");
    ModelCost shard = m;
    std::vector<int64_t> layer_params = m.layer_parameters;  // one tensor rank's
    const std::vector<nn::LayerSpec> specs = nn::expand_repeats(e.layers);
    for (size_t l = 0; l < m.layer_parameters.size(); ++l) {
        const nn::LayerSpec* s = l < specs.size() ? &specs[l] : nullptr;
        const bool split = tp > 1 && s && (s->type == "attention" || s->type == "transformer_block") &&
                           s->heads % tp == 0 && (s->type == "attention" || s->ffn % tp == 0);
        if (!split) continue;
        const int64_t whole = whole_params_of(*s, m.layer_parameters[l]);
        layer_params[l] = whole + (m.layer_parameters[l] - whole) / tp;
    }
    shard_the_activations(e, tp, sequence, shard);
    // interleaved_1f1b: pp · v chunks, global chunk g on stage g mod pp (one chunk per stage when
    // the options do not fit the model).
    int v = stages::chunks_of(e);
    if (pp < 2 || int64_t{pp} * v > layers) v = 1;
    const int parts = pp * v;
    std::vector<int64_t> bounds{0};
    if (parts > 1 && parts <= layers && m.layer_flops.size() == m.layer_parameters.size())
        for (int64_t b : stages::balanced_split(m.layer_flops, parts, m.layer_parameters)) bounds.push_back(b);
    while (static_cast<int>(bounds.size()) < parts) bounds.push_back(layers);
    bounds.push_back(layers);
    const int64_t micro = std::max<int64_t>(1, option<int64_t>(e.strategy, "micro_batches"));
    const stages::Schedule schedule = v > 1 ? stages::Schedule::interleaved_1f1b
                                      : stages::schedule_of(e) == stages::Schedule::gpipe ? stages::Schedule::gpipe
                                                                                          : stages::Schedule::one_f_one_b;
    const int64_t k = optimizer_state_per_parameter(e.optimizer);
    // zero 2 reduces each layer's gradients as its backward ends when it runs once a step.
    const bool eager = e.train.grad_accum == 1 && micro == 1 && !sequence && e.data.batch_size >= dp;
    for (size_t i = 0; i < out.size(); ++i) {
        auto& d = out[i];
        const int t = static_cast<int>(i) % tp, r = (static_cast<int>(i) / tp) % dp;
        const int st = std::min(pp - 1, static_cast<int>(i) / (tp * dp));
        const int64_t rows = rows_of(e.data.batch_size, r, dp);
        const int64_t m_here = std::clamp<int64_t>(std::min(micro, rows), 1, 1 << 20);
        const int64_t micro_rows = (rows + m_here - 1) / m_here;
        // Per chunk: its micro-batches in flight at most (the largest flush part's schedule).
        const std::vector<int> in_flight =
            v > 1 ? stages::chunk_in_flight(stages::stage_schedule(schedule, st, pp,
                                                                   stages::flush_parts(schedule, pp, static_cast<int>(m_here)).front(), v),
                                            v)
                  : std::vector<int>{stages::contexts_needed(schedule, st, pp, static_cast<int>(m_here))};
        int64_t params = 0, acts = 0, transient = 0, largest = 0;
        for (int c = 0; c < v; ++c) {
            const size_t g = static_cast<size_t>(c) * static_cast<size_t>(pp) + static_cast<size_t>(st);
            const auto first = static_cast<size_t>(bounds[g]);
            const auto last = static_cast<size_t>(bounds[g + 1]);
            for (size_t l = first; l < last; ++l) {
                params += layer_params[l];
                largest = std::max(largest, layer_params[l]);
            }
            const ModelCost::Held h = shard.held_of(first, last);
            acts += (h.kept + (static_cast<int>(g) == parts - 1 ? m.output_numel : 0)) * in_flight[static_cast<size_t>(c)];
            transient = std::max(transient, h.transient);
        }
        d.role = "tp " + std::to_string(t) + " · dp " + std::to_string(r);
        if (pp > 1) d.role += " · stage " + std::to_string(st + 1);
        const int64_t shard_count = data::shard_of_dataset(params, r, dp).count;
        d.set(MemCategory::parameters, mesh.zero >= 3 && dp > 1 ? shard_count + largest : params);
        d.set(MemCategory::gradients, mesh.zero >= 2 && dp > 1 ? shard_count + (eager ? largest : params) : params);
        d.set(MemCategory::optimizer_state, mesh.zero >= 1 ? k * shard_count : k * params);
        d.set(MemCategory::activations, (acts + transient) * micro_rows);
    }
    return out;
}

StepPicture hybrid_picture(const config::Experiment& e) {
    const Mesh mesh = mesh_of(e.strategy);
    const int64_t tp = std::max(1, mesh.tp), dp = std::max(1, mesh.dp);
    StepPicture p;
    const bool fits = mesh.dp * mesh.tp * mesh.pp == static_cast<int>(e.devices.size());
    p.layout = fits ? StepPicture::Layout::mesh : StepPicture::Layout::shards;
    p.mesh_dp = mesh.dp;
    p.mesh_tp = mesh.tp;
    p.mesh_pp = mesh.pp;
    for (size_t i = 0; i < e.devices.size(); ++i) {
        const auto k = static_cast<int64_t>(i);
        std::string sub = "tp " + std::to_string(k % tp) + " · dp " + std::to_string((k / tp) % dp);
        if (mesh.pp > 1) sub += " · stage " + std::to_string(k / (tp * dp) + 1);
        p.subtitles.push_back(std::move(sub));
    }
    p.down_label = "tp group: all-reduce after attention and after the MLP (forward and backward)";
    p.up_label = mesh.zero >= 3   ? "dp group: a layer's parameters gathered before its forward and its backward, "
                                    "gradients summed into their owners' shards"
                 : mesh.zero == 2 ? "dp group: gradients summed into their owners' shards, all-gather of the parameters"
                 : mesh.zero == 1 ? "dp group: reduce-scatter of the gradients, all-gather of the parameters"
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
    if (mesh.zero == 2 && mesh.dp > 1)
        p.caption += " ZeRO-2: each device keeps the optimizer state and the gradients of its 1/dp of "
                     "its part only; a layer's gradients are freed once summed into their owners' shards.";
    if (mesh.zero >= 3 && mesh.dp > 1)
        p.caption += " ZeRO-3: each device keeps its 1/dp of its part's parameters, gradients and "
                     "optimizer state; a layer's parameters are whole only while it computes.";
    if (mesh.dp * mesh.tp * mesh.pp != static_cast<int>(e.devices.size()))
        p.note = "dp · tp · pp must be the number of devices (" + std::to_string(e.devices.size()) + ")";
    return p;
}

}  // namespace

StrategyDescriptor hybrid_descriptor() {
    using config::OptionKind;
    return {
        .name = "hybrid",
        .options =
            {{.key = "dp", .kind = OptionKind::integer, .fallback = int64_t{1}, .min = 1, .label = "Data parallel",
              .help = "Replicas: groups of tp devices, each training its 1/dp of the global batch; "
                      "dp · tp · pp is the device count."},
             {.key = "tp", .kind = OptionKind::integer, .fallback = int64_t{1}, .min = 1, .label = "Tensor parallel",
              .help = "Consecutive devices that split every attention and transformer_block (heads and "
                      "ffn must divide by it)."},
             {.key = "pp", .kind = OptionKind::integer, .fallback = int64_t{1}, .min = 1, .label = "Pipeline stages",
              .help = "Pipeline stages of dp · tp devices each, the top-level layers balanced by forward "
                      "FLOPs."},
             {.key = "zero", .kind = OptionKind::integer, .fallback = int64_t{0}, .min = 0, .max = 3,
              .label = "ZeRO stage",
              .help = "Over the data-parallel group: 0 all-reduces the gradients; 1 shards the optimizer "
                      "state; 2 the gradients too; 3 the parameters too, each layer gathered for its "
                      "forward and backward."},
             {.key = "micro_batches", .kind = OptionKind::integer, .fallback = int64_t{1}, .min = 1,
              .label = "Micro-batches",
              .help = "Micro-batches per optimizer step per replica, flowing through the pipeline stages."},
             {.key = "schedule", .kind = OptionKind::choice, .fallback = std::string("1f1b"),
              .choices = {"gpipe", "1f1b", "interleaved_1f1b"}, .label = "Schedule",
              .help = "gpipe: every forward, then every backward; 1f1b: one forward and one backward in "
                      "turn after a warm-up; interleaved_1f1b: 1f1b over `interleave` model chunks per "
                      "stage (micro-batches a multiple of pp)."},
             {.key = "interleave", .kind = OptionKind::integer, .fallback = int64_t{1}, .min = 1,
              .max = 1024, .label = "Chunks per device",
              .help = "interleaved_1f1b: the layers are cut into pp × interleave chunks and stage s holds "
                      "chunks s, s + pp, ...; the bubble shrinks by this factor. 1 with the other "
                      "schedules."},
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
        .make = [] { return std::unique_ptr<Strategy>(std::make_unique<Hybrid>()); },
        .check_options = check_hybrid,
        .memory = hybrid_memory,
        .picture = hybrid_picture,
        .variant = {{.key = "dp", .text = "dp {}"},
                    {.key = "tp", .text = "tp {}"},
                    {.key = "pp", .text = "pp {}"},
                    {.key = "zero", .text = "zero {}"},
                    {.key = "sequence_parallel", .text = "sequence parallel"}},
    };
}

}  // namespace paralab::strategy
