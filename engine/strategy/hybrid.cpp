// hybrid: the dp × tp × pp mesh (docs/strategies.md, "hybrid"), composed of the parts every
// strategy shares: a comm::DeviceMesh gives each device its place and its tp and dp groups;
// tensor_shards cuts the attentions and blocks of a stage over its tp group; the pipeline
// executor runs the stages' schedule; the data-parallel reducer sums the gradients over the dp
// group and steps at ZeRO 0 to 3. A checkpoint holds the single device's layout.
#include <algorithm>
#include <atomic>

#include "engine/comm/device_mesh.h"
#include "engine/comm/sub_groups.h"
#include "engine/strategy/dp_reducer.h"
#include "engine/strategy/hybrid.h"
#include "engine/strategy/pipeline_executor.h"
#include "engine/strategy/replicas.h"
#include "engine/strategy/stages.h"
#include "engine/strategy/tensor_shards.h"

namespace paralab::strategy {

namespace {

using comm::Axis;
using namespace tensor_shards;

// The tags of the tensor- and data-parallel groups' messages when they span processes
// (comm::SubGroups): above every stage message's (PipelineExecutor::tags_used), below MPI's least tag bound.
constexpr int kTpGroupTag = 32760, kDpGroupTag = 32761;

class Hybrid final : public Strategy {
public:
    Hybrid(const char* name, HybridPreset preset, PresetCheck check, const char* dp_prefix)
        : Strategy(name), m_preset(preset), m_check(check), m_dp_prefix(dp_prefix) {}

    // A replica's first stage reads the inputs of its rows, its last the targets; every tensor
    // rank of them alike.
    DataRole data_role(int rank) const override {
        const int s = stage_of(rank);
        return {s == 0 || s == m_mesh.size(Axis::pp) - 1, data_rank(rank), m_mesh.size(Axis::dp)};
    }

    void start_rank(Rank& rank) override {
        m_rank_of[static_cast<size_t>(rank.index())] = &rank;
        m_dp.start_rank(rank);
    }

    StepResult step(Rank& rank, const data::Batch& batch, int64_t offset, double lr) override {
        const config::Experiment& e = rank.experiment();
        const int r = rank.index(), dp = m_mesh.size(Axis::dp);
        DevicePart& part = m_parts[static_cast<size_t>(r)];
        StepResult res;
        // Each chunk runs one backward this step, the same on every device of a dp group (each
        // replica has rows and one micro-batch of them).
        m_dp.begin_step(rank, e.train.grad_accum == 1 && m_micro_batches == 1 && !m_sequence && batch.global_size >= dp);
        // This replica's rows of the global batch, in grad_accum parts, each a flush of the
        // schedule over its micro-batches. zero 3: every device of a dp group gathers the same
        // layers in the same order, so each runs the flushes of replica 0 (the most rows), its
        // own micro-batches in the first slots of each and no compute in the slots it lacks.
        const auto rows = data::shard_of_batch(batch.global_size, data_rank(r), dp);
        const int64_t plan_rows =
            m_dp.params_sharded() ? data::shard_of_batch(batch.global_size, 0, dp).count : rows.count;
        if (plan_rows > 0) {
            PipelineExecutor::Hooks hooks;
            hooks.scaler = m_scalers[static_cast<size_t>(r)].get();
            m_dp.add_hooks(rank, hooks, [this](Rank& k, const std::vector<nn::Param*>& partial) {
                sum_sequence_partial(k, m_tp_groups->of(k.index()), partial);
            });
            const int parts = static_cast<int>(std::min<int64_t>(e.train.grad_accum, plan_rows));
            for (int k = 0; k < parts; ++k) {
                const int slots = static_cast<int>(
                    std::min<int64_t>(m_micro_batches, data::shard_of_batch(plan_rows, k, parts).count));
                const auto share = data::shard_of_batch(rows.count, k, parts);
                const int m = static_cast<int>(std::min<int64_t>(slots, share.count));
                std::vector<data::ShardRange> micro;
                for (int i = 0; i < m; ++i) {
                    const auto mb = data::shard_of_batch(share.count, i, m);
                    micro.push_back({rows.offset + share.offset + mb.offset, mb.count});
                }
                m_executor.run_flush(rank, part.chunks, batch, offset, micro, slots, res, hooks);
            }
            res.samples = rows.count;
        }
        // (zero 3: summed layer by layer in backward already.)
        if (!part.sequence_partial.empty() && !m_dp.params_sharded())
            sum_sequence_partial(rank, m_tp_groups->of(r), part.sequence_partial);
        m_dp.reduce(rank);
        // The replicated parameters' gradients count on tensor rank 0 only.
        const bool counts_whole = tensor_rank(r) == 0;
        const auto counted = [&](size_t l) {
            return counts_whole || m_cuts[part.param_index[l]].kind != Cut::Kind::whole;
        };
        // (A step skipped for an fp16 overflow changes no values.)
        if (!m_dp.step(rank, lr, m_scalers[static_cast<size_t>(r)].get(), e.train.clip_norm, counted, res.grad_norm))
            return res;
        if (r == 0) ++m_steps;
        return res;
    }

    void finish_rank(Rank& rank) override { m_dp.finish_rank(rank); }

    void abort(const std::string& reason) override {
        if (m_tp_groups) m_tp_groups->abort(reason);
        if (m_dp_groups) m_dp_groups->abort(reason);
        m_dp.abort(reason);
    }

    // The whole model on the host, put together from replica 0's shards when they have changed.
    Tensor predict(const Tensor& x) override { return m_whole.predict(*this, *m_ctx, m_steps.load(), x); }

    // The whole model's parameters in the single device's order: chunk after chunk (stage after
    // stage without interleaving), each put together from the shards of replica 0's tensor ranks
    // (every replica holds the same values). Across processes, on rank 0's process (the others
    // list empty tensors).
    std::vector<Tensor> parameters() override {
        const std::vector<std::vector<Tensor>> values = m_dp.replica_values();
        if (values.empty()) return std::vector<Tensor>(m_shapes.size());
        std::vector<Tensor> out;
        for_each_whole_param([&](size_t whole, int first_rank, size_t local) {
            std::vector<const Tensor*> of_i;
            for (int t = 0; t < m_mesh.size(Axis::tp); ++t) of_i.push_back(&values[static_cast<size_t>(first_rank + t)][local]);
            out.push_back(join_shards(m_shapes[whole], m_cuts[whole], of_i));
        });
        return out;
    }

    // Chunk after chunk, the buffers of the stage's first device (a device of another process
    // lists empty tensors).
    std::vector<Tensor> buffers() override {
        std::vector<Tensor> out;
        for (int g = 0; g < m_mesh.size(Axis::pp) * m_chunks; ++g) {
            const int k = first_of_stage(g % m_mesh.size(Axis::pp));
            const ModelChunk& ch = m_parts[static_cast<size_t>(k)].chunks[static_cast<size_t>(g / m_mesh.size(Axis::pp))];
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
    // slice; a replicated parameter's is tensor rank 0's, the same on every tensor rank), each
    // device's state laid together from its dp group's shards at zero 1 to 3 (the reducer's).
    const char* why_no_checkpoint_impl() const override { return nullptr; }

    TrainingState save_state() override {
        if (why_no_checkpoint()) return Strategy::save_state();
        const optim::Optimizer& opt0 = m_dp.optimizer(0);
        // (Every device's scaler is the same.)
        TrainingState st = whole_model_state(*this, opt0, m_scalers[0].get());
        // Before the first step there is no state. (Rank 0's optimizer may hold none after it
        // either: its stage may have no parameters; every rank steps at every step.)
        if (opt0.steps_taken() == 0) return st;
        // Each device of replica 0's state ([tensor rank][local parameter][state]), by stage.
        std::vector<std::vector<std::vector<std::vector<Tensor>>>> of_stage(static_cast<size_t>(m_mesh.size(Axis::pp)));
        for_each_whole_param([&](size_t whole, int first_rank, size_t local) {
            auto& shards = of_stage[static_cast<size_t>(stage_of(first_rank))];
            if (shards.empty())
                for (int t = 0; t < m_mesh.size(Axis::tp); ++t) shards.push_back(m_dp.local_state(first_rank + t));
            for (size_t j = 0; j < st.optimizer_state_names.size(); ++j) {
                std::vector<const Tensor*> of_i;
                for (const auto& shard : shards) of_i.push_back(&shard[local][j]);
                st.optimizer_state[whole].push_back(join_shards(m_shapes[whole], m_cuts[whole], of_i));
            }
        });
        return st;
    }

    // Each device's slices of the checkpoint's parameters and optimizer state, cut as setup cuts
    // the reference's (at zero 1 to 3 the reducer keeps its shard of the state for start_rank).
    // Everything is checked and cut before anything changes, so that a checkpoint that does not
    // fit leaves the devices as they were.
    void load_state(const TrainingState& st) override {
        const size_t per_param = m_dp.state_per_parameter();
        WholeCheckpoint checkpoint = read_whole_checkpoint(st, m_shapes, buffers(), per_param);
        // Before the first step an optimizer with state has none yet: the fresh one is it.
        const bool restore_state = checkpoint.stepped || per_param == 0;
        const int tp = m_mesh.size(Axis::tp);
        // Each device's slices: of the values, and of the state ([local parameter][state]).
        std::vector<std::vector<Tensor>> my_values(static_cast<size_t>(m_world));
        std::vector<std::vector<std::vector<Tensor>>> my_state(static_cast<size_t>(m_world));
        for (int k = 0; k < m_world; ++k) {
            const DevicePart& part = m_parts[static_cast<size_t>(k)];
            for (size_t l = 0; l < part.params.size(); ++l) {
                const size_t i = part.param_index[l];
                my_values[static_cast<size_t>(k)].push_back(
                    slice_of(checkpoint.values[i], part.shapes[l], m_cuts[i], tensor_rank(k), tp));
                std::vector<Tensor> mine;
                if (restore_state)
                    for (const Tensor& s : checkpoint.state[i])
                        mine.push_back(slice_of(s, part.shapes[l], m_cuts[i], tensor_rank(k), tp));
                my_state[static_cast<size_t>(k)].push_back(std::move(mine));
            }
        }
        for (int k = 0; k < m_world; ++k) {
            DevicePart& part = m_parts[static_cast<size_t>(k)];
            for (size_t l = 0; l < part.params.size(); ++l) part.params[l]->value.copy_from(my_values[static_cast<size_t>(k)][l]);
            // Every device of a chunk's stage holds its buffers: the checkpoint's, chunk by chunk.
            for (ModelChunk& ch : part.chunks)
                for (size_t i = 0; i < ch.buffers.size(); ++i) ch.buffers[i].copy_from(st.buffers[ch.first_buffer + i]);
            if (m_scalers[static_cast<size_t>(k)] && st.has_scaler) m_scalers[static_cast<size_t>(k)]->load_state(st.scaler);
            if (restore_state) m_dp.load_state(k, my_state[static_cast<size_t>(k)], st.optimizer_steps);
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
        m_micro_batches = option<int64_t>(e.strategy, "micro_batches");
        const stages::Schedule schedule = stages::schedule_of(e);
        m_chunks = stages::chunks_of(e);
        m_executor = PipelineExecutor(m_mesh, schedule, m_chunks);
        m_sequence = option<bool>(e.strategy, "sequence_parallel") && m_mesh.size(Axis::tp) > 1;
        const int tp = m_mesh.size(Axis::tp), dp = m_mesh.size(Axis::dp), pp = m_mesh.size(Axis::pp);
        // Across processes a group with members in several processes sends messages over the
        // run's group, on tags apart from the stages'.
        m_tp_groups = m_mesh.communicators({Axis::tp}, ctx.devices, ctx.group, kTpGroupTag);
        m_dp_groups = m_mesh.communicators({Axis::dp}, ctx.devices, ctx.group, kDpGroupTag);
        m_rank_of.assign(static_cast<size_t>(m_world), nullptr);
        m_parts.resize(static_cast<size_t>(m_world));
        m_scalers.resize(static_cast<size_t>(m_world));
        // SyncBatchNorm over each dp group: every replica runs every micro-batch's forward.
        const bool sync_batchnorm = option<bool>(e.strategy, "sync_batchnorm") && dp > 1 && has_batchnorm(reference.net());
        if (sync_batchnorm) check_sync_batchnorm_rows(ctx, dp, m_micro_batches);

        // The stages (interleaved: pp · v chunks): strategy.split, or the top-level layers balanced
        // by forward FLOPs.
        nn::Sequential& net = reference.net();
        const std::vector<ChunkPlace> layout = lay_out_chunks(reference, stage_bounds_of(e.strategy, net, pp * m_chunks));
        const std::vector<nn::LayerSpec> layers = nn::expand_repeats(e.layers);  // as reference.net()
        const auto ref_params = reference.parameters();
        const auto ref_buffers = reference.buffers();
        for (const nn::Param* p : ref_params) m_shapes.push_back(p->value.shape());
        m_cuts.assign(ref_params.size(), Cut{});
        std::vector<bool> cut(static_cast<size_t>(pp * m_chunks), false);  // global chunk g's cuts are known
        for (int k = 0; k < m_world; ++k)
            for (int c = 0; c < m_chunks; ++c)
                m_parts[static_cast<size_t>(k)].chunks.emplace_back(layout[static_cast<size_t>(c * pp + stage_of(k))]);
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
            DevicePart& part = m_parts[static_cast<size_t>(k)];
            nn::TensorShard shard;
            shard.rank = t;
            shard.world = tp;
            if (tp > 1) shard.all_reduce = [this, k](const Tensor& x) { tp_collective(k, TpOp::all_reduce, x); };
            if (tp > 1 && m_sequence) {
                shard.all_gather = [this, k](const Tensor& x) { tp_collective(k, TpOp::all_gather, x); };
                shard.reduce_scatter = [this, k](const Tensor& x) { tp_collective(k, TpOp::reduce_scatter, x); };
            }
            const std::vector<int> contexts =
                stages::chunk_contexts(schedule, st, pp, static_cast<int>(std::max<int64_t>(1, most)), m_chunks);
            for (int c = 0; c < m_chunks; ++c) {
                ModelChunk& ch = part.chunks[static_cast<size_t>(c)];
                const size_t g = static_cast<size_t>(c) * static_cast<size_t>(pp) + static_cast<size_t>(st);
                // Under sequence parallelism a run of split layers ends at the chunk's edge.
                build_chunk(ch, e, layers, device, contexts[static_cast<size_t>(c)],
                            [&] { return shard_preparer(layers, ch.first, ch.last, shard); });
                if (tp > 1 && m_sequence)
                    for (nn::Param* q : sequence_partial_parameters(ch.master().net())) part.sequence_partial.push_back(q);
                // The chunk's cuts, from the first of its devices (the same on every tensor rank).
                if (!cut[g]) {
                    std::vector<Cut> cuts;
                    collect_cuts(ch.master().net(), cuts);
                    set_chunk_cuts(cuts, ch);
                    cut[g] = true;
                }
                // This device's slices of the reference.
                for (size_t i = 0; i < ch.params.size(); ++i) {
                    const size_t whole = ch.first_param + i;
                    ch.params[i]->value.copy_from(
                        slice_of(ref_params[whole]->value, ch.params[i]->value.shape(), m_cuts[whole], t, tp));
                    part.params.push_back(ch.params[i]);
                }
                for (size_t i = 0; i < ch.buffers.size(); ++i) ch.buffers[i].copy_from(ref_buffers[ch.first_buffer + i]);
            }
            if (sync_batchnorm)
                for (ModelChunk& ch : part.chunks)
                    for (auto& context : ch.contexts)
                        install_sync_batchnorm(m_rank_of[static_cast<size_t>(k)], *context, &m_dp_groups->of(k));
            m_scalers[static_cast<size_t>(k)] = loss_scaler_for(e);
        }
        // A chunk held only by other processes: its cuts from a shard of it built on the host.
        for (size_t g = 0; g < cut.size(); ++g) {
            if (cut[g]) continue;
            const int k = first_of_stage(static_cast<int>(g % static_cast<size_t>(pp)));  // a device of the chunk
            const ModelChunk& ch = m_parts[static_cast<size_t>(k)].chunks[g / static_cast<size_t>(pp)];
            set_chunk_cuts(stage_cuts(layers, ch.first, ch.last, ch.input, e.loss, tp, m_sequence), ch);
        }
        // Every device's parameters (its slices), laid end to end chunk after chunk: their indices
        // in the whole model's list, shapes and flat offsets (zero 3 releases the values and keeps
        // these).
        for (int k = 0; k < m_world; ++k) {
            DevicePart& part = m_parts[static_cast<size_t>(k)];
            int64_t at = 0;
            for (const ModelChunk& ch : part.chunks)
                for (size_t i = 0; i < ch.param_count; ++i) {
                    const size_t whole = ch.first_param + i;
                    const Shape shape = shard_shape(m_shapes[whole], m_cuts[whole], tp);
                    PARALAB_CHECK(!ctx.is_local(k) || shape == part.params[part.shapes.size()]->value.shape(),
                                  "hybrid: a slice's shape does not match its cut");
                    part.param_index.push_back(whole);
                    part.offsets.push_back(at);
                    part.shapes.push_back(shape);
                    at += shape.numel();
                }
        }
        DpReducer::Options o;
        o.zero = static_cast<int>(option<int64_t>(e.strategy, "zero"));
        o.prefetch = option<bool>(e.strategy, "prefetch");
        o.reshard_after_forward = option<bool>(e.strategy, "reshard_after_forward");
        o.op_prefix = m_dp_prefix;
        o.tag = kDpGroupTag;
        m_dp.setup(o, m_mesh, ctx, m_parts, *m_dp_groups, e.optimizer, net);
    }

private:
    int tensor_rank(int k) const { return m_mesh.coord(k, Axis::tp); }
    int data_rank(int k) const { return m_mesh.coord(k, Axis::dp); }
    int stage_of(int k) const { return m_mesh.coord(k, Axis::pp); }
    // The first device of stage s (tensor and data rank 0).
    int first_of_stage(int s) const { return m_mesh.rank_of({.pp = s}); }

    // fn(whole, first_rank, local) for each parameter of the whole model in its order: its
    // index, the first device of its chunk's stage, and its index in that device's list.
    template <class Fn>
    void for_each_whole_param(Fn fn) const {
        for (int g = 0; g < m_mesh.size(Axis::pp) * m_chunks; ++g) {
            const int first_rank = first_of_stage(g % m_mesh.size(Axis::pp));
            const size_t c = static_cast<size_t>(g / m_mesh.size(Axis::pp));
            const DevicePart& part = m_parts[static_cast<size_t>(first_rank)];
            const ModelChunk& ch = part.chunks[c];
            const size_t at = part.chunk_offset(c);
            for (size_t i = 0; i < ch.param_count; ++i) fn(ch.first_param + i, first_rank, at + i);
        }
    }

    // The cuts of a chunk's parameters, at their places in the whole model's list.
    void set_chunk_cuts(const std::vector<Cut>& cuts, const ModelChunk& ch) {
        PARALAB_CHECK(cuts.size() == ch.param_count, "hybrid: the chunk's cuts do not match");
        std::copy(cuts.begin(), cuts.end(), m_cuts.begin() + static_cast<std::ptrdiff_t>(ch.first_param));
    }

    // The tensor group's collectives, in place over `x`: the all-reduce of split layers, and
    // sequence_parallel's all-gather and reduce-scatter along the sequence (tp equal chunks).
    enum class TpOp { all_reduce, all_gather, reduce_scatter };
    void tp_collective(int k, TpOp op, const Tensor& x) {
        comm::Communicator& g = m_tp_groups->of(k);
        m_rank_of[static_cast<size_t>(k)]->record_comm(
            op == TpOp::all_reduce   ? named(g.all_reduce(x, comm::ReduceOp::sum), "tp_all_reduce")
            : op == TpOp::all_gather ? named(g.all_gather(x.raw(), x.numel(), x.dtype()), "tp_all_gather")
                                     : named(g.reduce_scatter(x.raw(), x.numel(), x.dtype(), comm::ReduceOp::sum),
                                             "tp_reduce_scatter"));
    }

    HybridPreset m_preset = nullptr;
    PresetCheck m_check = nullptr;
    const char* m_dp_prefix = "";
    comm::DeviceMesh m_mesh;
    int64_t m_micro_batches = 1;
    int m_chunks = 1;  // model chunks per device (interleaved_1f1b)
    PipelineExecutor m_executor;
    std::unique_ptr<comm::SubGroups> m_tp_groups, m_dp_groups;
    bool m_sequence = false;         // sequence_parallel with tp > 1
    std::vector<DevicePart> m_parts;  // by rank; each rank thread touches its own
    DpReducer m_dp;
    std::vector<std::unique_ptr<optim::LossScaler>> m_scalers;  // fp16: every device's, kept equal
    std::vector<Rank*> m_rank_of;    // each rank thread sets its own in start_rank
    std::vector<Cut> m_cuts;         // by parameter of the whole model
    std::vector<Shape> m_shapes;     // the whole model's parameter shapes
    std::atomic<int64_t> m_steps{0};
    WholeOnHost m_whole;
};

}  // namespace

std::unique_ptr<Strategy> make_hybrid(const char* name, HybridPreset preset, PresetCheck check,
                                      const char* dp_prefix) {
    return std::make_unique<Hybrid>(name, preset, check, dp_prefix);
}

}  // namespace paralab::strategy
