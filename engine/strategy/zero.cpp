// zero: ZeRO data parallelism (Rajbhandari et al.), stages 1 and 2, on top of DDP's replicas;
// stage 3 (parameters sharded too, FSDP's schedule) is zero3.cpp, chosen when the run sets up.
// The parameters, laid end to end in model order ([T] floats), are cut into one contiguous
// shard per rank (shard_of_dataset(T, r, N)). Each rank keeps the optimizer state of its shard
// only, and updates only its shard; an all-gather then gives every rank the whole new
// parameters.
//   stage 1: after backward, the flat gradient [T] is reduce-scattered: each rank receives
//            the sum of its shard.
//   stage 2: gradients are sharded too: a top-level layer's gradients are created just before
//            its backward and, as soon as it is done, reduced onto the ranks that own them
//            (one reduce per owner of the layer's range) and freed, so a rank holds at most
//            one layer's gradients besides its shard, never the whole gradient.
// Optimizers are element-wise, so updating shards gives the single-device step exactly.
//
// Each rank's parameters are views of one flat buffer [T] (and, at stage 1, its gradients of
// another), as torch's ZeRO keeps flat parameter groups: the reduce-scatter and the all-gather
// run in place, with nothing packed or unpacked; only the updated shard is copied in.
#include "engine/strategy/flat_shard.h"
#include "engine/strategy/replicas.h"
#include "engine/strategy/registry.h"
#include "engine/strategy/zero3.h"

namespace paralab::strategy {

namespace {

class Zero final : public ReplicaStrategy {
public:
    Zero() : ReplicaStrategy("zero") {}

    void start_rank(Rank& rank) override {
        const size_t r = static_cast<size_t>(rank.index());
        m_rank_slots[r] = &rank;
        RankState& s = m_state[r];
        auto& ps = params(rank.index());
        // Stage 1: the gradients are views of one flat buffer too, reduce-scattered in place;
        // stage 2: between steps a rank holds only its shard of the gradients.
        if (m_stage == 1) s.grads = grads_as_views(ps, 0, ps.size(), rank.device());
        else
            for (nn::Param* p : ps) p->grad = Tensor();
        // The parameters become views of one flat buffer. Their old tensors go once copied; the
        // copy's moment of twice the parameters is setup, not training: the peaks are reset
        // below, before the broadcast (whose flat buffer is counted as communication). The
        // shard the optimizer sees is a private master copy, copied into the flat parameters
        // after each update. Updating the flat parameters in place instead writes cache lines
        // the other ranks read in the last all-gather, which makes the step slower where those
        // lines must move between cores (docs/benchmarks.md, "Strategies on virtual CPU devices").
        s.shard.make(ps, rank.index(), rank.world(), rank.device(), MemCategory::workspace, s.grads);
        rank.device().allocator().reset_peak();
        broadcast_parameters(rank);
        s.shard.refresh_param();
        if (m_loaded) load_shard_state(rank.index(), *m_loaded);
    }

    // A checkpoint holds the optimizer state whole, per parameter: each rank's shard of the
    // flat state vectors put together, so that a resume may shard it again.
    const char* why_no_checkpoint_impl() const override { return nullptr; }
    TrainingState save_state() override {
        if (why_no_checkpoint()) return Strategy::save_state();
        TrainingState st = replica_state(0, *m_optimizers[0], m_state[0].scaler.get());
        const auto& ps = params(0);
        const size_t k = st.optimizer_state_names.size();
        st.optimizer_state.assign(ps.size(), {});
        if (k == 0 || m_optimizers[0]->state().empty()) return st;
        std::vector<Shape> shapes;
        for (const nn::Param* p : ps) shapes.push_back(p->value.shape());
        const Tensor none;
        for (size_t j = 0; j < k; ++j) {
            std::vector<const Tensor*> ranges;
            for (int r = 0; r < m_world; ++r) {
                const auto& state = m_optimizers[static_cast<size_t>(r)]->state();
                ranges.push_back(state.empty() ? &none : &state[0][j]);
            }
            std::vector<Tensor> whole = join_flat(ranges, shapes);
            for (size_t i = 0; i < ps.size(); ++i) st.optimizer_state[i].push_back(std::move(whole[i]));
        }
        return st;
    }
    void load_state(const TrainingState& st) override {
        if (why_no_checkpoint()) return Strategy::load_state(st);
        load_replicas(st);
        m_loaded = std::make_unique<TrainingState>(st);  // the shards are made in start_rank
    }

    StepResult step(Rank& rank, const data::Batch& batch, int64_t offset, double lr) override {
        const config::Experiment& e = rank.experiment();
        const int r = rank.index();
        RankState& s = m_state[static_cast<size_t>(r)];
        auto& ps = params(r);
        comm::Communicator& comm = rank.comm();

        const double loss_scale = s.scaler ? s.scaler->scale() : 1.0;
        LocalPass pass;
        if (m_stage == 1) {
            pass = forward_backward(rank, replica(r), batch, offset, {}, {}, loss_scale);
            // Leaves the sum of this rank's shard in its part of the flat gradients.
            rank.record_comm(named(comm.reduce_scatter(s.grads.raw(), s.grads.numel(), DType::f32, comm::ReduceOp::sum),
                                   "reduce_scatter_grads"));
        } else {
            // A layer's gradients exist only from just before its backward until they are
            // reduced to their owners. (With grad_accum they must exist through every
            // micro-batch's backward: all are made up front.)
            auto make_grads = [&](const std::vector<size_t>& which) {
                for (size_t i : which)
                    if (!ps[i]->grad.defined())
                        ps[i]->grad = Tensor::zeros(ps[i]->value.shape(), DType::f32, rank.device(), MemCategory::gradients);
            };
            if (e.train.grad_accum > 1)
                for (const auto& own : params_of_layer()) make_grads(own);
            auto layer_begin = [&](size_t layer) { make_grads(params_of_layer()[layer]); };
            auto layer_done = [&](size_t layer) { reduce_layer_to_owners(rank, s, layer); };
            pass = forward_backward(rank, replica(r), batch, offset, layer_done, layer_begin, loss_scale);
        }

        StepResult res{pass.loss_sum, pass.samples, pass.samples, 0};
        std::vector<nn::Param*> shard{&s.shard.param()};
        // fp16: each rank checks its shard and all agree; an overflow skips the update and the
        // all-gather alike (no rank's parameters change).
        if (s.scaler && !unscale_gradients(rank, shard, *s.scaler, true)) return res;
        if (e.train.clip_norm) res.grad_norm = clip_gradients(rank, shard, *e.train.clip_norm, true);

        // Update the own shard, then gather everyone's into the flat parameters.
        rank.compute("optimizer", [&] {
            m_optimizers[static_cast<size_t>(r)]->step(shard, lr);
            s.shard.store_param();
        });
        rank.record_comm(named(s.shard.all_gather(comm), "all_gather_params"));
        return res;
    }

protected:
    void setup_impl(RunContext& ctx, nn::Model& reference) override {
        const config::Experiment& e = *ctx.experiment;
        m_stage = static_cast<int>(option<int64_t>(e.strategy, "stage"));
        build_replicas(ctx, reference, true);
        m_rank_slots.assign(static_cast<size_t>(m_world), nullptr);
        if (option<bool>(e.strategy, "sync_batchnorm")) install_sync_batchnorm_on_local(m_rank_slots);
        m_state.resize(static_cast<size_t>(m_world));
        for (int r = 0; r < m_world; ++r) {
            m_optimizers.push_back(optim::make_optimizer(e.optimizer));
            m_state[static_cast<size_t>(r)].scaler = loss_scaler_for(e);
        }
        // Where each parameter starts in the flat layout.
        int64_t at = 0;
        for (const nn::Param* p : layout()) {
            m_offset.push_back(at);
            at += p->value.numel();
        }
    }

private:
    struct RankState {
        FlatShard shard;  // the flat parameters and this rank's range of them
        Tensor grads;     // stage 1, [T]: the gradients are views of it
        std::unique_ptr<optim::LossScaler> scaler;  // fp16 mixed precision
    };

    // Stage 2: layer `layer`'s gradients are final. Its parameters cover the flat range
    // [a, b); each owner q of part of it receives the sum of that part, which it copies into
    // its shard gradient; then the layer's gradients are freed.
    void reduce_layer_to_owners(Rank& rank, RankState& s, size_t layer) {
        const auto& own = params_of_layer()[layer];
        if (own.empty()) return;
        auto& ps = params(rank.index());
        std::vector<nn::Param*> part;
        for (size_t i : own) part.push_back(ps[i]);
        Tensor buf = Tensor::empty(Shape{total_numel(part)}, DType::f32, rank.device(), MemCategory::communication);
        pack_grads(part, buf.data<float>());
        s.shard.reduce_to_owners(rank, rank.comm(), buf, m_offset[own.front()], "reduce_grads_to_owner");
        for (nn::Param* p : part) p->grad = Tensor();
    }

    // Rank thread, at the end of start_rank: this rank's shard of the restored optimizer state.
    void load_shard_state(int r, const TrainingState& st) {
        RankState& s = m_state[static_cast<size_t>(r)];
        std::vector<std::vector<Tensor>> shard_state(1);
        const bool stepped = !st.optimizer_state.empty() && !st.optimizer_state[0].empty();
        for (size_t j = 0; stepped && j < st.optimizer_state_names.size(); ++j) {
            std::vector<Tensor> of_j;
            for (const auto& state : st.optimizer_state) of_j.push_back(state[j]);
            shard_state[0].push_back(range_of_flat(of_j, r, m_world));
        }
        m_optimizers[static_cast<size_t>(r)]->load_state({&s.shard.param()}, shard_state, st.optimizer_steps);
        if (s.scaler && st.has_scaler) s.scaler->load_state(st.scaler);
    }

    std::unique_ptr<TrainingState> m_loaded;  // a checkpoint to resume from, until every rank started
    int m_stage = 1;
    std::vector<int64_t> m_offset;      // flat offset of each parameter
    std::vector<RankState> m_state;     // per rank; each touched by its own thread only
    std::vector<Rank*> m_rank_slots;
};

// What the registry makes: stages 1 and 2 (Zero, above) or stage 3 (zero3.cpp), chosen from
// strategy.stage when the run sets it up; every call goes to the chosen one.
class ZeroByStage final : public Strategy {
public:
    ZeroByStage() : Strategy("zero") {}

    DataRole data_role(int rank) const override { return m_impl->data_role(rank); }
    void start_rank(Rank& rank) override { m_impl->start_rank(rank); }
    void finish_rank(Rank& rank) override {
        if (m_impl) m_impl->finish_rank(rank);
    }
    StepResult step(Rank& rank, const data::Batch& batch, int64_t offset, double lr) override {
        return m_impl->step(rank, batch, offset, lr);
    }
    Tensor predict(const Tensor& x) override { return m_impl->predict(x); }
    std::vector<Tensor> parameters() override { return m_impl->parameters(); }
    std::vector<Tensor> buffers() override { return m_impl->buffers(); }
    void abort(const std::string& reason) override {
        if (m_impl) m_impl->abort(reason);
    }
    const char* why_no_checkpoint_impl() const override {
        return m_impl ? m_impl->why_no_checkpoint() : nullptr;
    }
    TrainingState save_state() override { return m_impl->save_state(); }
    void load_state(const TrainingState& st) override { m_impl->load_state(st); }

protected:
    void setup_impl(RunContext& ctx, nn::Model& reference) override {
        if (option<int64_t>(ctx.experiment->strategy, "stage") == 3) m_impl = make_zero_stage3();
        else m_impl = std::make_unique<Zero>();
        m_impl->setup(ctx, reference);
    }

private:
    std::unique_ptr<Strategy> m_impl;
};

// A replica per device for its rows with 1/N of the optimizer state; stage 1 keeps the full
// gradients (the shard is a view of them), stage 2 the shard and the gradients of the layer
// whose backward is running (the largest, at the peak); the flat buffer the parameters are
// broadcast through at the start (they are all-gathered in place).
std::vector<DeviceMemoryEstimate> memory(const config::Experiment& e, const ModelCost& m) {
    if (option<int64_t>(e.strategy, "stage") == 3) return zero_stage3_memory(e, m);
    auto out = blank_estimates(e);
    const int n = static_cast<int>(out.size());
    const int64_t p = m.parameters();
    const int64_t k = optimizer_state_per_parameter(e.optimizer);
    const int64_t largest =
        m.layer_parameters.empty() ? 0 : *std::max_element(m.layer_parameters.begin(), m.layer_parameters.end());
    const bool stage2 = option<int64_t>(e.strategy, "stage") == 2;
    for (int r = 0; r < n; ++r) {
        whole_replica(out[r], e, m, rows_of(e.data.batch_size, r, n));
        out[r].set(MemCategory::optimizer_state, (k * p + n - 1) / n);
        out[r].set(MemCategory::gradients, stage2 ? (p + n - 1) / n + largest : p);
        out[r].set(MemCategory::communication, p);
    }
    return out;
}

StepPicture picture(const config::Experiment& e) {
    const int64_t stage = option<int64_t>(e.strategy, "stage");
    StepPicture p;
    p.layout = StepPicture::Layout::shards;
    if (stage == 3) {
        p.subtitles.assign(e.devices.size(), "owns 1/" + std::to_string(e.devices.size()) + " of everything");
        p.down_label = "all-gather: a layer's parameters, before its forward and its backward";
        p.up_label = "reduce-scatter: a layer's gradients to their owners, after its backward";
        p.note = "Coloured cell: the shard of parameters, gradients and optimizer state a device keeps "
                 "(stage 3); a layer is whole only while it computes.";
        return p;
    }
    p.subtitles.assign(e.devices.size(), stage == 2 ? "own optimizer + grads"
                                                    : "owns 1/" + std::to_string(e.devices.size()));
    p.down_label = "all-gather: every device sends its updated shard to all";
    p.up_label = "reduce-scatter: shard k of the summed gradients goes to device k";
    p.note = std::string("Coloured cell: the shard of optimizer state") + (stage == 2 ? " and gradients" : "") +
             " a device keeps (stage " + std::to_string(stage) + ").";
    return p;
}

}  // namespace

StrategyDescriptor zero_descriptor() {
    return {
        .name = "zero",
        .options = {{.key = "stage", .kind = config::OptionKind::integer, .fallback = int64_t{1}, .min = 1,
                     .max = 3, .label = "ZeRO stage",
                     .help = "1: the optimizer state is sharded; 2: the gradients too; 3: the parameters "
                             "too (each layer gathered only while it computes)."},
                    {.key = "prefetch", .kind = config::OptionKind::boolean, .fallback = true,
                     .label = "Prefetch the next layer",
                     .help = "Stage 3: the next layer's parameters are gathered before the current layer "
                             "computes (two layers whole at once); false: each just before its own use.",
                     .shown_when_key = "stage", .shown_when_value = "3"},
                    {.key = "reshard_after_forward", .kind = config::OptionKind::boolean, .fallback = true,
                     .label = "Free parameters after forward",
                     .help = "Stage 3: a layer's gathered parameters are freed after its forward and "
                             "gathered again for its backward; false: kept until its backward.",
                     .shown_when_key = "stage", .shown_when_value = "3"},
                    sync_batchnorm_option()},
        .explanation =
            "ZeRO: like DDP, but each device keeps the optimizer state of only 1/N of the parameters "
            "and updates only that shard. Gradients are reduce-scattered (each device receives the "
            "sum for its shard) and the updated parameters are all-gathered. Stage 2 shards the "
            "gradients too: each layer's gradients go to their owners as soon as its backward is "
            "done, then are freed. Stage 3 shards the parameters too (FSDP): a layer's parameters "
            "are all-gathered just before its forward and again before its backward, and freed "
            "after each (`reshard_after_forward`); with `prefetch` the next layer's gather is made "
            "before the current layer computes.",
        .color = "#d62728",
        .make = [] { return std::unique_ptr<Strategy>(std::make_unique<ZeroByStage>()); },
        .memory = memory,
        .picture = picture,
        .variant = {{.key = "stage", .text = "stage {}"},
                    {.key = "prefetch", .text_if_false = "no prefetch"},
                    {.key = "reshard_after_forward", .text_if_false = "kept after forward"}},
    };
}

}  // namespace paralab::strategy
