// zero stage 3: ZeRO-3 (Rajbhandari et al.) with the schedule of torch's FullyShardedDataParallel.
// Each top-level layer with parameters (a transformer block, a linear, ...) is a *unit*: its
// parameters laid end to end in model order, [n] floats, cut into one chunk per rank
// (shard_of_dataset(n, r, N)). Between uses a rank holds only its chunk of every unit (its
// *shard*), the gradient of that shard and the optimizer state of it. In one step, per unit:
//   forward:  all-gather the unit's parameters just before its forward; free them after it
//             (reshard_after_forward; otherwise keep them until its backward);
//   backward: all-gather them again (unless kept), create the unit's gradients, run its
//             backward, reduce-scatter the gradients (each rank receives the sum of its chunk,
//             added to its shard gradient), free gradients and parameters.
// The optimizer then updates each rank's shard only (optimizers are element-wise, so the
// shards' steps are the single device's step). Collectives run in place on the unit's buffer:
// the all-gather on the gathered parameters (parameters memory), the reduce-scatter on the
// unit's gradients (gradients memory).
//
// prefetch: the next unit's all-gather (in forward the next layer's, in backward the previous
// one's) is issued before the current unit computes, so at most two units are gathered at once.
// The communicator's collectives block, so with prefetch every all-gather runs on a second
// thread of the rank with a communicator of its own (Group::split, as DDP's buckets), in the
// order the rank issues them: the next unit's gather overlaps the current unit's compute, and
// the rank thread waits for a unit only if its gather is not done (`wait_all_gather`, idle).
// Without prefetch each unit is gathered on the rank thread just before its use.
//
// Micro-batches (train.grad_accum) each run the whole schedule, their reduce-scattered sums
// added into the shard gradient. Every rank must make the same collectives: a rank with fewer
// rows (or none) than the others runs the schedule without compute for the micro-batches it
// lacks, contributing zero gradients.
//
// Across the processes of an MPI job each process builds only its own ranks' replicas, shards
// and optimizers, and the all-gathers and reduce-scatters above run over the job's group (the
// gather threads' over a split of it). parameters() is then collective over the processes (one
// thread each, as the job calls it between steps): every process sends its ranks' shards to
// rank 0's process, which puts the whole model together there and offers it to the job's
// gather (evaluation, the summary, the store); the others offer nothing. Checkpoints stay in
// one process.
#include "engine/strategy/zero3.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "engine/nn/ops.h"
#include "engine/optim/clip.h"
#include "engine/strategy/replicas.h"

namespace paralab::strategy {

namespace {

// A top-level layer with parameters.
struct Unit {
    std::vector<size_t> params;  // indices into the parameter layout
    int64_t numel = 0;
};

constexpr size_t kNone = SIZE_MAX;

class Zero3 final : public ReplicaStrategy {
public:
    Zero3() : ReplicaStrategy("zero") {}

    void start_rank(Rank& rank) override {
        const int r = rank.index();
        RankState& s = *m_state[static_cast<size_t>(r)];
        m_rank_slots[static_cast<size_t>(r)] = &rank;
        auto& ps = params(r);
        // The shard: this rank's chunk of each unit, unit after unit, copied from the replica's
        // whole parameters (every replica starts from the reference's), which then go. The
        // copy's moment of shard plus whole model is setup: the peaks are reset below.
        // (A rank with no chunk at all keeps one unused zero, so that its tensors exist.)
        s.shard = Tensor::zeros(Shape{std::max<int64_t>(m_shard_numel[static_cast<size_t>(r)], 1)}, DType::f32,
                                rank.device(), MemCategory::parameters);
        float* shard = s.shard.data<float>();
        for (size_t u = 0; u < m_units.size(); ++u) {
            const auto c = chunk(u, r);
            Tensor whole = Tensor::empty(Shape{m_units[u].numel}, DType::f32, rank.device(), MemCategory::workspace);
            std::vector<nn::Param*> part = unit_params(ps, u);
            pack_values(part, whole.data<float>());
            copy_floats(shard + at(u, r), whole.data<float>() + c.offset, c.count, whole.queue());
            rank.device().finish_queued();
        }
        for (nn::Param* p : ps) {
            p->value = Tensor();
            p->grad = Tensor();
        }
        s.gathered.assign(m_units.size(), Tensor());
        s.ready.assign(m_units.size(), false);
        s.grads.assign(m_units.size(), Tensor());
        s.shard_param.name = "zero3_shard";
        s.shard_param.value = s.shard;
        s.shard_param.grad = Tensor::zeros(s.shard.shape(), DType::f32, rank.device(), MemCategory::gradients);
        rank.device().allocator().reset_peak();
        if (m_loaded) load_shard_state(r, *m_loaded);
        if (m_gather_group) s.thread = std::thread([this, &s, &rank] { gather_loop(rank, s); });
    }

    // A checkpoint holds the parameters and the optimizer state whole, per parameter: every
    // rank's chunks of each unit put together, so that a resume may shard them again.
    const char* why_no_checkpoint_impl() const override { return nullptr; }
    TrainingState save_state() override {
        if (why_no_checkpoint()) return Strategy::save_state();
        const optim::Optimizer& opt0 = *m_optimizers[0];
        TrainingState st = whole_model_state(*this, opt0, m_state[0]->scaler.get());
        if (opt0.state().empty()) return st;
        for (size_t j = 0; j < st.optimizer_state_names.size(); ++j)
            for (size_t u = 0; u < m_units.size(); ++u) {
                Tensor whole = Tensor::empty(Shape{m_units[u].numel}, DType::f32, detached_host_device(), MemCategory::workspace);
                for (int r = 0; r < m_world; ++r) {
                    const auto c = chunk(u, r);
                    if (c.count == 0) continue;
                    whole.view(c.offset, Shape{c.count})
                        .copy_from(m_optimizers[static_cast<size_t>(r)]->state()[0][j].view(at(u, r), Shape{c.count}));
                }
                int64_t from = 0;
                for (size_t i : m_units[u].params) {
                    st.optimizer_state[i].push_back(whole.view(from, m_shapes[i]).clone(MemCategory::workspace));
                    from += m_shapes[i].numel();
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
        RankState& s = *m_state[static_cast<size_t>(rank.index())];
        {
            std::lock_guard lock(s.mutex);
            s.stop = true;
        }
        s.cv.notify_all();
        if (s.thread.joinable()) s.thread.join();
    }

    void abort(const std::string& reason) override {
        if (m_gather_group) m_gather_group->abort(reason);
        for (auto& s : m_state) {
            std::lock_guard lock(s->mutex);
            s->stop = true;
            s->cv.notify_all();
        }
    }

    StepResult step(Rank& rank, const data::Batch& batch, int64_t offset, double lr) override {
        const config::Experiment& e = rank.experiment();
        const RunContext& ctx = rank.context();
        const int r = rank.index();
        RankState& s = *m_state[static_cast<size_t>(r)];
        nn::Model& model = replica(r);
        nn::Sequential& net = model.net();
        s.shard_param.grad.zero();

        // Every rank runs as many micro-batches as the rank with the most rows (rank 0).
        const int64_t own_parts = std::min<int64_t>(e.train.grad_accum, batch.size);
        const int64_t rounds = std::max<int64_t>(
            1, std::min<int64_t>(e.train.grad_accum, data::shard_of_batch(batch.global_size, 0, m_world).count));
        const double loss_scale = s.scaler ? s.scaler->scale() : 1.0;

        net.set_forward_hooks([&](size_t i) { before_forward(rank, s, i); },
                              [&](size_t i) { after_forward(rank, s, i); });
        struct ClearHooks {
            nn::Sequential& net;
            ~ClearHooks() { net.set_forward_hooks({}, {}); }
        } clear{net};

        StepResult res;
        for (int64_t k = 0; k < rounds; ++k) {
            if (k >= own_parts) {  // no rows for this micro-batch: the collectives only
                rank.compute("forward", [&] {
                    for (size_t i = 0; i < net.size(); ++i) {
                        before_forward(rank, s, i);
                        after_forward(rank, s, i);
                    }
                });
                rank.compute("backward", [&] {
                    for (size_t i = net.size(); i-- > 0;) {
                        before_backward(rank, s, i);
                        after_backward(rank, s, i);
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
                    before_backward(rank, s, i);
                    net.recompute_before_backward(i);
                    // Only the first layer gives no input gradient (nn::Sequential's rule).
                    if (g.defined()) g = net.at(i).backward(g);
                    after_backward(rank, s, i);
                }
            });
        }
        res.loss_samples = res.samples = batch.size;

        std::vector<nn::Param*> shard{&s.shard_param};
        // fp16: each rank checks its shard and all agree; an overflow skips every rank's update.
        if (s.scaler && !unscale_gradients(rank, shard, *s.scaler, true)) return res;
        if (e.train.clip_norm) res.grad_norm = clip_gradients(rank, shard, *e.train.clip_norm, true);
        rank.compute("optimizer", [&] { m_optimizers[static_cast<size_t>(r)]->step(shard, lr); });
        return res;
    }

    // Device 0's replica, each unit put together from every rank's chunk just before its
    // forward and freed after it (no collective: no rank is stepping, and all are in memory;
    // across processes predict is not called: rank 0's process evaluates parameters()).
    Tensor predict(const Tensor& x) override {
        nn::Model& model = replica(0);
        std::vector<Tensor> held(m_units.size());
        model.net().set_forward_hooks(
            [&](size_t i) {
                const size_t u = m_unit_of_layer[i];
                if (u == kNone) return;
                held[u] = assemble(u, model.device(), MemCategory::parameters);
                set_values(params(0), u, held[u]);
            },
            [&](size_t i) {
                const size_t u = m_unit_of_layer[i];
                if (u == kNone) return;
                for (nn::Param* p : unit_params(params(0), u)) p->value = Tensor();
                held[u] = Tensor();
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
        std::vector<Tensor> out;
        for (size_t u = 0; u < m_units.size(); ++u) {
            const Tensor whole = assemble(u, shards, detached_host_device(), MemCategory::workspace);
            int64_t from = 0;
            for (size_t i : m_units[u].params) {
                out.push_back(whole.view(from, m_shapes[i]).clone(MemCategory::workspace));
                from += m_shapes[i].numel();
            }
        }
        return out;
    }

protected:
    void setup_impl(RunContext& ctx, nn::Model& reference) override {
        const config::Experiment& e = *ctx.experiment;
        m_prefetch = option<bool>(e.strategy, "prefetch");
        m_reshard = option<bool>(e.strategy, "reshard_after_forward");
        build_replicas(ctx, reference, false);
        for (const nn::Param* p : layout()) m_shapes.push_back(p->value.shape());
        const size_t layers = params_of_layer().size();
        m_unit_of_layer.assign(layers, kNone);
        for (size_t i = 0; i < layers; ++i) {
            if (params_of_layer()[i].empty()) continue;
            Unit u{params_of_layer()[i], 0};
            for (size_t p : u.params) u.numel += m_shapes[p].numel();
            m_unit_of_layer[i] = m_units.size();
            m_units.push_back(std::move(u));
        }
        // The unit after layer i (forward's prefetch) and the one before it (backward's).
        m_next_unit.assign(layers, kNone);
        m_prev_unit.assign(layers, kNone);
        for (size_t i = layers; i-- > 0;)
            if (i + 1 < layers) m_next_unit[i] = m_unit_of_layer[i + 1] != kNone ? m_unit_of_layer[i + 1] : m_next_unit[i + 1];
        for (size_t i = 1; i < layers; ++i)
            m_prev_unit[i] = m_unit_of_layer[i - 1] != kNone ? m_unit_of_layer[i - 1] : m_prev_unit[i - 1];
        // Where each unit's chunk starts in each rank's shard.
        m_shard_at.assign(static_cast<size_t>(m_world), std::vector<int64_t>(m_units.size()));
        m_shard_numel.assign(static_cast<size_t>(m_world), 0);
        for (int r = 0; r < m_world; ++r)
            for (size_t u = 0; u < m_units.size(); ++u) {
                m_shard_at[static_cast<size_t>(r)][u] = m_shard_numel[static_cast<size_t>(r)];
                m_shard_numel[static_cast<size_t>(r)] += chunk(u, r).count;
            }
        m_rank_slots.assign(static_cast<size_t>(m_world), nullptr);
        if (option<bool>(e.strategy, "sync_batchnorm")) install_sync_batchnorm_on_local(m_rank_slots);
        // A rank of another process keeps an empty state and no optimizer here.
        for (int r = 0; r < m_world; ++r) {
            const bool local = ctx.is_local(r);
            m_optimizers.push_back(local ? optim::make_optimizer(e.optimizer) : nullptr);
            m_state.push_back(std::make_unique<RankState>());
            if (local) m_state.back()->scaler = loss_scaler_for(e);
        }
        if (m_prefetch && m_world > 1) m_gather_group = ctx.group->split();
    }

private:
    // Rank thread, in start_rank: this rank's chunks of the restored optimizer state.
    void load_shard_state(int r, const TrainingState& st) {
        RankState& s = *m_state[static_cast<size_t>(r)];
        std::vector<std::vector<Tensor>> shard_state(1);
        const bool stepped = !st.optimizer_state.empty() && !st.optimizer_state[0].empty();
        for (size_t j = 0; stepped && j < st.optimizer_state_names.size(); ++j) {
            Tensor mine = Tensor::zeros(s.shard.shape(), DType::f32, detached_host_device(), MemCategory::workspace);
            for (size_t u = 0; u < m_units.size(); ++u) {
                const auto c = chunk(u, r);
                if (c.count == 0) continue;
                Tensor whole = Tensor::empty(Shape{m_units[u].numel}, DType::f32, detached_host_device(), MemCategory::workspace);
                int64_t from = 0;
                for (size_t i : m_units[u].params) {
                    whole.view(from, m_shapes[i]).copy_from(st.optimizer_state[i][j]);
                    from += m_shapes[i].numel();
                }
                mine.view(at(u, r), Shape{c.count}).copy_from(whole.view(c.offset, Shape{c.count}));
            }
            shard_state[0].push_back(std::move(mine));
        }
        m_optimizers[static_cast<size_t>(r)]->load_state({&s.shard_param}, shard_state, st.optimizer_steps);
        if (s.scaler && st.has_scaler) s.scaler->load_state(st.scaler);
    }

    std::unique_ptr<TrainingState> m_loaded;  // a checkpoint to resume from, until every rank started

    struct RankState {
        Tensor shard;                 // this rank's chunk of every unit (parameters memory)
        nn::Param shard_param;        // value: `shard`; grad: its summed gradient
        std::vector<Tensor> gathered;  // by unit: the whole unit's buffer from its gather's issue to its release
        std::vector<Tensor> grads;     // by unit: the unit's gradients while its backward runs
        std::unique_ptr<optim::LossScaler> scaler;  // fp16 mixed precision
        // The gather thread (prefetch): it all-gathers the queued units in order.
        struct Queued {
            size_t unit;
            float* data;
        };
        std::thread thread;
        std::mutex mutex;
        std::condition_variable cv;
        std::deque<Queued> queue;   // guarded by mutex
        std::vector<bool> ready;    // guarded by mutex: by unit, its gather is done
        std::exception_ptr error;   // guarded by mutex
        bool stop = false;          // guarded by mutex
    };

    data::ShardRange chunk(size_t u, int r) const { return data::shard_of_dataset(m_units[u].numel, r, m_world); }
    int64_t at(size_t u, int r) const { return m_shard_at[static_cast<size_t>(r)][u]; }

    std::vector<nn::Param*> unit_params(const std::vector<nn::Param*>& ps, size_t u) const {
        std::vector<nn::Param*> out;
        for (size_t i : m_units[u].params) out.push_back(ps[i]);
        return out;
    }

    // The unit's parameters become views of `whole` [n].
    void set_values(const std::vector<nn::Param*>& ps, size_t u, const Tensor& whole) const {
        int64_t from = 0;
        for (size_t i : m_units[u].params) {
            ps[i]->value = whole.view(from, m_shapes[i]);
            from += m_shapes[i].numel();
        }
    }

    // Unit u whole on `device`, copied from every rank's shard (shards[q]: rank q's).
    Tensor assemble(size_t u, const std::vector<Tensor>& shards, Device& device, MemCategory category) {
        Tensor whole = Tensor::empty(Shape{m_units[u].numel}, DType::f32, device, category);
        for (int q = 0; q < m_world; ++q) {
            const auto c = chunk(u, q);
            if (c.count == 0) continue;
            whole.view(c.offset, Shape{c.count}).copy_from(shards[static_cast<size_t>(q)].view(at(u, q), Shape{c.count}));
        }
        return whole;
    }
    Tensor assemble(size_t u, Device& device, MemCategory category) {
        std::vector<Tensor> shards;
        for (const auto& s : m_state) shards.push_back(s->shard);
        return assemble(u, shards, device, category);
    }

    // Every rank's shard ([rank]), where the whole model is put together: in one process, the
    // ranks' own (in their devices' memory); across processes, host copies on rank 0's process,
    // received from the others (lists_on_rank0), and nothing on the others.
    std::vector<Tensor> shards_on_rank0() {
        const size_t world = static_cast<size_t>(m_world);
        std::vector<Tensor> shards(world);
        if (!m_ctx->spans_processes()) {
            for (size_t r = 0; r < world; ++r) shards[r] = m_state[r]->shard;
            return shards;
        }
        std::vector<std::vector<Tensor>> mine(world);
        for (size_t r = 0; r < world; ++r)
            if (m_ctx->is_local(static_cast<int>(r))) mine[r] = host_copies(std::vector<Tensor>{m_state[r]->shard});
        std::vector<std::vector<Tensor>> all = lists_on_rank0(*m_ctx, std::move(mine));
        if (all.empty()) return {};
        for (size_t r = 0; r < world; ++r) {
            PARALAB_CHECK(all[r].size() == 1, "zero stage 3: no process sent rank " + std::to_string(r) + "'s shard");
            shards[r] = std::move(all[r][0]);
        }
        return shards;
    }

    // Issues unit u's all-gather (once until it is released): on the gather thread with
    // prefetch, else here.
    void gather(Rank& rank, RankState& s, size_t u) {
        if (u == kNone || s.gathered[u].defined()) return;
        const int r = rank.index();
        const auto c = chunk(u, r);
        Tensor whole = Tensor::empty(Shape{m_units[u].numel}, DType::f32, rank.device(), MemCategory::parameters);
        copy_floats(whole.data<float>() + c.offset, s.shard.data<float>() + at(u, r), c.count, whole.queue());
        s.gathered[u] = whole;
        if (!m_gather_group) {
            rank.record_comm(named(rank.comm().all_gather(whole.raw(), m_units[u].numel, DType::f32),
                                   "all_gather_params"));
            s.ready[u] = true;
            return;
        }
        rank.device().finish_queued();  // the own chunk is in place before another thread sends it
        std::lock_guard lock(s.mutex);
        s.queue.push_back({u, whole.data<float>()});
        s.cv.notify_all();
    }

    // Unit u's gather is done (waiting for the gather thread if need be): its parameters become
    // views of the gathered buffer.
    void use(Rank& rank, RankState& s, size_t u) {
        if (u == kNone) return;
        if (m_gather_group) {
            std::unique_lock lock(s.mutex);
            if (!s.ready[u] && !s.error && !s.stop) {
                const auto t0 = Clock::now();
                s.cv.wait(lock, [&] { return s.ready[u] || s.error || s.stop; });
                lock.unlock();
                rank.record_idle("wait_all_gather", t0, Clock::now());
                lock.lock();
            }
            if (s.error) std::rethrow_exception(s.error);
            if (!s.ready[u]) throw comm::CommAborted("the run was aborted");
        }
        set_values(params(rank.index()), u, s.gathered[u]);
    }

    void release(Rank& rank, RankState& s, size_t u) {
        for (nn::Param* p : unit_params(params(rank.index()), u)) p->value = Tensor();
        s.gathered[u] = Tensor();
        std::lock_guard lock(s.mutex);
        s.ready[u] = false;
    }

    void gather_loop(Rank& rank, RankState& s) {
        comm::Communicator& comm = m_gather_group->rank(rank.index());
        for (;;) {
            RankState::Queued q{};
            {
                std::unique_lock lock(s.mutex);
                s.cv.wait(lock, [&] { return s.stop || !s.queue.empty(); });
                if (s.stop) return;
                q = s.queue.front();
                s.queue.pop_front();
            }
            try {
                rank.record_async_comm(named(comm.all_gather(q.data, m_units[q.unit].numel, DType::f32),
                                             "all_gather_params"));
            } catch (...) {
                std::lock_guard lock(s.mutex);
                s.error = std::current_exception();
                s.cv.notify_all();
                return;
            }
            std::lock_guard lock(s.mutex);
            s.ready[q.unit] = true;
            s.cv.notify_all();
        }
    }

    void before_forward(Rank& rank, RankState& s, size_t layer) {
        gather(rank, s, m_unit_of_layer[layer]);
        if (m_prefetch) gather(rank, s, m_next_unit[layer]);
        use(rank, s, m_unit_of_layer[layer]);
    }

    void after_forward(Rank& rank, RankState& s, size_t layer) {
        const size_t u = m_unit_of_layer[layer];
        if (u != kNone && m_reshard) release(rank, s, u);
    }

    void before_backward(Rank& rank, RankState& s, size_t layer) {
        const size_t u = m_unit_of_layer[layer];
        gather(rank, s, u);
        if (m_prefetch) gather(rank, s, m_prev_unit[layer]);
        use(rank, s, u);
        if (u == kNone) return;
        s.grads[u] = Tensor::zeros(Shape{m_units[u].numel}, DType::f32, rank.device(), MemCategory::gradients);
        int64_t from = 0;
        auto& ps = params(rank.index());
        for (size_t i : m_units[u].params) {
            ps[i]->grad = s.grads[u].view(from, m_shapes[i]);
            from += m_shapes[i].numel();
        }
    }

    // The unit's gradients are final: each rank receives the sum of its chunk, added to its
    // shard gradient; the unit's gradients and parameters go.
    void after_backward(Rank& rank, RankState& s, size_t layer) {
        const size_t u = m_unit_of_layer[layer];
        if (u == kNone) return;
        const int r = rank.index();
        Tensor& g = s.grads[u];
        rank.record_comm(named(rank.comm().reduce_scatter(g.raw(), m_units[u].numel, DType::f32, comm::ReduceOp::sum),
                               "reduce_scatter_grads"));
        const auto c = chunk(u, r);
        float* own = s.shard_param.grad.data<float>() + at(u, r);
        if (c.count > 0) nn::ops_for(g).add<float>(c.count, own, g.data<float>() + c.offset, own);
        for (nn::Param* p : unit_params(params(r), u)) p->grad = Tensor();
        g = Tensor();
        release(rank, s, u);
    }

    bool m_prefetch = true, m_reshard = true;
    std::vector<Shape> m_shapes;            // by parameter, in layout order
    std::vector<Unit> m_units;
    std::vector<size_t> m_unit_of_layer;    // by top-level layer: its unit, or kNone
    std::vector<size_t> m_next_unit, m_prev_unit;  // by top-level layer: the unit after / before it
    std::vector<std::vector<int64_t>> m_shard_at;  // [rank][unit]: the chunk's offset in the shard
    std::vector<int64_t> m_shard_numel;     // by rank
    std::vector<std::unique_ptr<RankState>> m_state;  // by rank; each touched by its own threads while training
    std::vector<Rank*> m_rank_slots;        // by rank, set in start_rank (SyncBatchNorm reads them)
    std::unique_ptr<comm::Group> m_gather_group;  // the gather threads' communicators (prefetch)
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
