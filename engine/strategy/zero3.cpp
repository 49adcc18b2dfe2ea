// zero stage 3: ZeRO-3 (Rajbhandari et al.) with the schedule of torch's FullyShardedDataParallel,
// the sharded_units.h part over the run's whole group (docs/strategies.md, "zero stage 3"). Each
// rank runs a replica whose top-level layers with parameters are the units; micro-batches
// (train.grad_accum) each run the whole schedule, and a rank with fewer rows than the others
// runs it without compute for the micro-batches it lacks. Across the processes of an MPI job each
// process builds only its own ranks; parameters() puts the whole model together on rank 0's
// process from every process's shards. Checkpoints stay in one process.
#include "engine/strategy/zero3.h"

#include <algorithm>

#include "engine/optim/clip.h"
#include "engine/strategy/replicas.h"
#include "engine/strategy/sharded_units.h"

namespace paralab::strategy {

namespace {

constexpr size_t kNone = ShardedUnits::kNone;

class Zero3 final : public ReplicaStrategy {
public:
    Zero3() : ReplicaStrategy("zero") {}

    void start_rank(Rank& rank) override {
        const int r = rank.index();
        m_rank_slots[static_cast<size_t>(r)] = &rank;
        ShardedUnits& units = *m_units[static_cast<size_t>(r)];
        // The copy's moment of shard plus whole model is setup: the peaks are reset below.
        std::vector<std::vector<std::vector<nn::Param*>>> views;
        for (size_t u = 0; u < m_params_of_unit.size(); ++u) views.push_back({unit_params(params(r), u)});
        units.start(rank, std::move(views), m_gather_group ? &m_gather_group->rank(r) : nullptr);
        rank.device().allocator().reset_peak();
        if (m_loaded) load_shard_state(r, *m_loaded);
    }

    // A checkpoint holds the parameters and the optimizer state whole, per parameter: every
    // rank's chunks of each unit put together, so that a resume may shard them again.
    const char* why_no_checkpoint_impl() const override { return nullptr; }
    TrainingState save_state() override {
        if (why_no_checkpoint()) return Strategy::save_state();
        const optim::Optimizer& opt0 = *m_optimizers[0];
        TrainingState st = whole_model_state(*this, opt0, m_scalers[0].get());
        if (opt0.state().empty()) return st;
        const ShardedUnits& units = *m_units[0];
        for (size_t j = 0; j < st.optimizer_state_names.size(); ++j) {
            std::vector<Tensor> shards;
            for (int r = 0; r < m_world; ++r) shards.push_back(m_optimizers[static_cast<size_t>(r)]->state()[0][j]);
            for (size_t u = 0; u < units.units(); ++u) {
                const Tensor whole = units.assemble(u, shards, detached_host_device(), MemCategory::workspace);
                int64_t from = 0;
                for (size_t i : m_params_of_unit[u]) {
                    st.optimizer_state[i].push_back(whole.view(from, m_shapes[i]).clone(MemCategory::workspace));
                    from += m_shapes[i].numel();
                }
            }
        }
        return st;
    }
    void load_state(const TrainingState& st) override {
        if (why_no_checkpoint()) return Strategy::load_state(st);
        load_replicas(st);  // start_rank shards them
        m_loaded = std::make_unique<TrainingState>(st);
    }

    void finish_rank(Rank& rank) override {
        if (auto& units = m_units[static_cast<size_t>(rank.index())]) units->stop();
    }

    void abort(const std::string& reason) override {
        if (m_gather_group) m_gather_group->abort(reason);
        for (auto& units : m_units)
            if (units) units->interrupt();
    }

    StepResult step(Rank& rank, const data::Batch& batch, int64_t offset, double lr) override {
        const config::Experiment& e = rank.experiment();
        const RunContext& ctx = rank.context();
        const int r = rank.index();
        ShardedUnits& units = *m_units[static_cast<size_t>(r)];
        comm::Communicator& group = rank.comm();
        nn::Model& model = replica(r);
        nn::Sequential& net = model.net();
        units.shard().grad.zero();
        const auto before_forward = [&](size_t i) { units.before_forward(rank, group, m_unit_of_layer[i], m_next_unit[i]); };
        const auto after_forward = [&](size_t i) { units.after_forward(m_unit_of_layer[i]); };
        const auto before_backward = [&](size_t i) {
            units.before_backward(rank, group, m_unit_of_layer[i], m_prev_unit[i]);
        };
        const auto after_backward = [&](size_t i) { units.after_backward(rank, group, m_unit_of_layer[i]); };

        // Every rank runs as many micro-batches as the rank with the most rows (rank 0).
        const int64_t own_parts = std::min<int64_t>(e.train.grad_accum, batch.size);
        const int64_t rounds = std::max<int64_t>(
            1, std::min<int64_t>(e.train.grad_accum, data::shard_of_batch(batch.global_size, 0, m_world).count));
        const optim::LossScaler* scaler = m_scalers[static_cast<size_t>(r)].get();
        const double loss_scale = scaler ? scaler->scale() : 1.0;

        net.set_forward_hooks(before_forward, after_forward);
        struct ClearHooks {
            nn::Sequential& net;
            ~ClearHooks() { net.set_forward_hooks({}, {}); }
        } clear{net};

        StepResult res;
        for (int64_t k = 0; k < rounds; ++k) {
            if (k >= own_parts) {  // no rows for this micro-batch: the collectives only
                rank.compute("forward", [&] {
                    for (size_t i = 0; i < net.size(); ++i) {
                        before_forward(i);
                        after_forward(i);
                    }
                });
                rank.compute("backward", [&] {
                    for (size_t i = net.size(); i-- > 0;) {
                        before_backward(i);
                        after_backward(i);
                    }
                });
                continue;
            }
            const auto part = data::shard_of_batch(batch.size, static_cast<int>(k), static_cast<int>(own_parts));
            DeviceBatch db = to_device(batch, part.offset, part.count, ctx.input, ctx.target, rank.device());
            model.set_random_state(e.seed, static_cast<uint64_t>(rank.step() - 1), offset + part.offset);
            rank.compute("forward", [&] {
                rank.straggle();
                Tensor out = model.forward(db.x, nn::Mode::train);
                res.loss_sum +=
                    model.loss().forward(out, db.y, batch.global_size) * static_cast<double>(batch.global_size);
            });
            rank.compute("backward", [&] {
                Tensor g = model.loss().backward();
                if (loss_scale != 1.0) optim::scale_in_place(g, loss_scale);
                for (size_t i = net.size(); i-- > 0;) {
                    before_backward(i);
                    net.recompute_before_backward(i);
                    // Only the first layer gives no input gradient (nn::Sequential's rule).
                    if (g.defined()) g = net.at(i).backward(g);
                    after_backward(i);
                }
            });
        }
        res.loss_samples = res.samples = batch.size;

        std::vector<nn::Param*> shard{&units.shard()};
        // fp16: each rank checks its shard and all agree; an overflow skips every rank's update.
        if (m_scalers[static_cast<size_t>(r)] &&
            !unscale_gradients(rank, shard, *m_scalers[static_cast<size_t>(r)], true))
            return res;
        if (e.train.clip_norm) res.grad_norm = clip_gradients(rank, shard, *e.train.clip_norm, true);
        rank.compute("optimizer", [&] { m_optimizers[static_cast<size_t>(r)]->step(shard, lr); });
        return res;
    }

    // Device 0's replica, each unit put together from every rank's chunk just before its
    // forward and freed after it (no collective: no rank is stepping, and all are in memory;
    // across processes predict is not called: rank 0's process evaluates parameters()).
    Tensor predict(const Tensor& x) override {
        nn::Model& model = replica(0);
        std::vector<Tensor> shards;
        for (const auto& units : m_units) shards.push_back(units->shard().value);
        model.net().set_forward_hooks(
            [&](size_t i) {
                const size_t u = m_unit_of_layer[i];
                if (u == kNone) return;
                const Tensor whole = m_units[0]->assemble(u, shards, model.device(), MemCategory::parameters);
                int64_t from = 0;
                for (size_t p : m_params_of_unit[u]) {
                    params(0)[p]->value = whole.view(from, m_shapes[p]);
                    from += m_shapes[p].numel();
                }
            },
            [&](size_t i) {
                const size_t u = m_unit_of_layer[i];
                if (u == kNone) return;
                for (nn::Param* p : unit_params(params(0), u)) p->value = Tensor();
            });
        struct ClearHooks {
            nn::Sequential& net;
            ~ClearHooks() { net.set_forward_hooks({}, {}); }
        } clear{model.net()};
        return model.forward(x, nn::Mode::eval);
    }

    // The whole parameters in the model's order, put together from the shards on the host.
    // Across processes, on rank 0's process (the others list empty tensors: they hold no whole
    // parameter).
    std::vector<Tensor> parameters() override {
        const std::vector<Tensor> shards = shards_on_rank0();
        if (shards.empty()) return std::vector<Tensor>(m_shapes.size());
        const ShardedUnits& units = *local_units();
        std::vector<Tensor> out;
        for (size_t u = 0; u < units.units(); ++u) {
            const Tensor whole = units.assemble(u, shards, detached_host_device(), MemCategory::workspace);
            int64_t from = 0;
            for (size_t i : m_params_of_unit[u]) {
                out.push_back(whole.view(from, m_shapes[i]).clone(MemCategory::workspace));
                from += m_shapes[i].numel();
            }
        }
        return out;
    }

protected:
    void setup_impl(RunContext& ctx, nn::Model& reference) override {
        const config::Experiment& e = *ctx.experiment;
        ShardedUnits::Options options;
        options.prefetch = option<bool>(e.strategy, "prefetch");
        options.reshard_after_forward = option<bool>(e.strategy, "reshard_after_forward");
        build_replicas(ctx, reference, false);
        for (const nn::Param* p : layout()) m_shapes.push_back(p->value.shape());
        // The units: the top-level layers with parameters.
        const size_t layers = params_of_layer().size();
        m_unit_of_layer.assign(layers, kNone);
        std::vector<std::vector<Shape>> unit_shapes;
        for (size_t i = 0; i < layers; ++i) {
            if (params_of_layer()[i].empty()) continue;
            m_unit_of_layer[i] = m_params_of_unit.size();
            m_params_of_unit.push_back(params_of_layer()[i]);
            unit_shapes.emplace_back();
            for (size_t p : params_of_layer()[i]) unit_shapes.back().push_back(m_shapes[p]);
        }
        // The unit after layer i (forward's prefetch) and the one before it (backward's).
        m_next_unit.assign(layers, kNone);
        m_prev_unit.assign(layers, kNone);
        for (size_t i = layers; i-- > 0;)
            if (i + 1 < layers) m_next_unit[i] = m_unit_of_layer[i + 1] != kNone ? m_unit_of_layer[i + 1] : m_next_unit[i + 1];
        for (size_t i = 1; i < layers; ++i)
            m_prev_unit[i] = m_unit_of_layer[i - 1] != kNone ? m_unit_of_layer[i - 1] : m_prev_unit[i - 1];
        m_rank_slots.assign(static_cast<size_t>(m_world), nullptr);
        if (option<bool>(e.strategy, "sync_batchnorm")) install_sync_batchnorm_on_local(m_rank_slots);
        // A rank of another process keeps no units and no optimizer here.
        for (int r = 0; r < m_world; ++r) {
            const bool local = ctx.is_local(r);
            m_units.push_back(local ? std::make_unique<ShardedUnits>(unit_shapes, r, m_world, options) : nullptr);
            m_optimizers.push_back(local ? optim::make_optimizer(e.optimizer) : nullptr);
            m_scalers.push_back(local ? loss_scaler_for(e) : nullptr);
        }
        if (options.prefetch && m_world > 1) m_gather_group = ctx.group->split();
    }

private:
    // Rank thread, in start_rank: this rank's chunks of the restored optimizer state.
    void load_shard_state(int r, const TrainingState& st) {
        const ShardedUnits& units = *m_units[static_cast<size_t>(r)];
        nn::Param& shard = m_units[static_cast<size_t>(r)]->shard();
        std::vector<std::vector<Tensor>> shard_state(1);
        const bool stepped = !st.optimizer_state.empty() && !st.optimizer_state[0].empty();
        for (size_t j = 0; stepped && j < st.optimizer_state_names.size(); ++j) {
            std::vector<std::vector<Tensor>> whole;
            for (const auto& of_unit : m_params_of_unit) {
                whole.emplace_back();
                for (size_t i : of_unit) whole.back().push_back(st.optimizer_state[i][j]);
            }
            shard_state[0].push_back(units.shard_of(whole, r));
        }
        m_optimizers[static_cast<size_t>(r)]->load_state({&shard}, shard_state, st.optimizer_steps);
        if (m_scalers[static_cast<size_t>(r)] && st.has_scaler) m_scalers[static_cast<size_t>(r)]->load_state(st.scaler);
    }

    std::vector<nn::Param*> unit_params(const std::vector<nn::Param*>& ps, size_t u) const {
        std::vector<nn::Param*> out;
        for (size_t i : m_params_of_unit[u]) out.push_back(ps[i]);
        return out;
    }

    // The units of a rank of this process (every rank's layout is the same).
    const ShardedUnits* local_units() const {
        for (const auto& units : m_units)
            if (units) return units.get();
        return nullptr;
    }

    // Every rank's shard ([rank]), where the whole model is put together: in one process, the
    // ranks' own (in their devices' memory); across processes, host copies on rank 0's process,
    // received from the others (lists_on_rank0), and nothing on the others.
    std::vector<Tensor> shards_on_rank0() {
        const size_t world = static_cast<size_t>(m_world);
        std::vector<Tensor> shards(world);
        if (!m_ctx->spans_processes()) {
            for (size_t r = 0; r < world; ++r) shards[r] = m_units[r]->shard().value;
            return shards;
        }
        std::vector<std::vector<Tensor>> mine(world);
        for (size_t r = 0; r < world; ++r)
            if (m_units[r]) mine[r] = host_copies(std::vector<Tensor>{m_units[r]->shard().value});
        std::vector<std::vector<Tensor>> all = lists_on_rank0(*m_ctx, std::move(mine));
        if (all.empty()) return {};
        for (size_t r = 0; r < world; ++r) {
            PARALAB_CHECK(all[r].size() == 1, "zero stage 3: no process sent rank " + std::to_string(r) + "'s shard");
            shards[r] = std::move(all[r][0]);
        }
        return shards;
    }

    std::unique_ptr<TrainingState> m_loaded;  // a checkpoint to resume from, until every rank started
    std::vector<Shape> m_shapes;                      // by parameter, in layout order
    std::vector<std::vector<size_t>> m_params_of_unit;  // by unit: its parameters in the layout
    std::vector<size_t> m_unit_of_layer;              // by top-level layer: its unit, or kNone
    std::vector<size_t> m_next_unit, m_prev_unit;     // by top-level layer: the unit after / before it
    std::vector<std::unique_ptr<ShardedUnits>> m_units;             // by rank; null for another process's
    std::vector<std::unique_ptr<optim::LossScaler>> m_scalers;     // by rank: fp16 mixed precision
    std::vector<Rank*> m_rank_slots;                  // by rank, set in start_rank (SyncBatchNorm reads them)
    std::unique_ptr<comm::Group> m_gather_group;      // the prefetch threads' communicators
};

}  // namespace

std::unique_ptr<Strategy> make_zero_stage3() { return std::make_unique<Zero3>(); }

// Per device r, with n_u the numbers of unit u, c_u(r) its chunk on r and S(r) = Σ c_u(r):
//   parameters:      S(r) + the units gathered at once: the largest n_u (without prefetch), the
//                    largest n_u + n_next of consecutive units (prefetch), every unit (without
//                    reshard_after_forward: all are gathered by the end of forward);
//   gradients:       S(r) + the largest n_u (one unit's gradients while its backward runs);
//   optimizer state: k · S(r);
//   activations:     a replica's for its rows; communication: none (collectives run in place).
std::vector<DeviceMemoryEstimate> zero_stage3_memory(const config::Experiment& e, const ModelCost& m) {
    auto out = blank_estimates(e);
    const int n = static_cast<int>(out.size());
    std::vector<int64_t> units;
    for (int64_t p : m.layer_parameters)
        if (p > 0) units.push_back(p);
    const bool prefetch = option<bool>(e.strategy, "prefetch");
    const bool reshard = option<bool>(e.strategy, "reshard_after_forward");
    int64_t largest = 0, pair = 0;
    for (size_t u = 0; u < units.size(); ++u) {
        largest = std::max(largest, units[u]);
        pair = std::max(pair, units[u] + (u + 1 < units.size() ? units[u + 1] : 0));
    }
    const int64_t in_flight = !reshard ? m.parameters() : prefetch ? pair : largest;
    const int64_t k = optimizer_state_per_parameter(e.optimizer);
    for (int r = 0; r < n; ++r) {
        int64_t shard = 0;
        for (int64_t p : units) shard += data::shard_of_dataset(p, r, n).count;
        whole_replica(out[r], e, m, rows_of(e.data.batch_size, r, n));
        out[r].set(MemCategory::parameters, shard + in_flight);
        out[r].set(MemCategory::gradients, shard + largest);
        out[r].set(MemCategory::optimizer_state, k * shard);
        out[r].set(MemCategory::communication, 0);
    }
    return out;
}

}  // namespace paralab::strategy
