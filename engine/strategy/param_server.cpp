// param_server: a parameter server (Li et al. 2014; DistBelief's "Downpour"). Rank 0 is the
// server: it holds the parameters and the optimizer and computes no gradients (its data role is
// none). Ranks 1..N-1 are workers over shards of the global batch (worker r takes shard r-1 of
// N-1); each step a worker runs forward and backward on the weights it last pulled, pushes its
// gradients to the server and pulls the weights back.
//
//   sync   the server receives every worker's gradients (in rank order), sums them in rank
//          order, steps once and sends the weights to every worker. Each worker's loss is
//          divided by the GLOBAL batch, so the sum is the single-device gradient of the global
//          batch and a sync run equals `single` to float rounding. Everyone waits for the
//          slowest worker: a straggler shows as idle time ("pull_weights") on all the others.
//   async  the server applies each worker's gradient as it arrives, alone (a step of the
//          optimizer per push), and answers that worker with the weights right after its own
//          update; a worker then runs on, ahead of the slowest worker by at most
//          strategy.staleness steps (stale-synchronous parallel; staleness 0 still applies the
//          pushes one at a time, each to weights the others' pushes of the step may have moved).
//          Gradients are computed on stale weights: the noise the staleness bound limits.
//
// Async plumbing. Communicators have no receive-from-any, so the server has one service thread
// per worker, each with its own two-rank group (server end 0, worker end 1): the service thread
// receives that worker's pushes and queues them in arrival order; the server's rank thread
// applies them (inside its step(), as "server_update" compute on device 0) and hands the new
// weights back to the service thread, which sends them. The rank thread's step s returns once
// every worker's s-th push is served; between its steps pushes wait in the queue.
#include <algorithm>
#include <array>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <initializer_list>
#include <thread>

#include <kernels/gpu/comm_reduce.h>
#include <kernels/gpu/memory.h>

#include "engine/device/gpu_values.h"
#include "engine/strategy/replicas.h"
#include "engine/strategy/registry.h"

namespace paralab::strategy {

namespace {

constexpr int kPushTag = 1;  // worker -> server: gradients (async: plus a trailing flag)
constexpr int kPullTag = 2;  // server -> worker: weights

// Async pushes carry three floats after the gradients: the kind (0 a gradient, 1 "this worker
// is done", which ends its service thread, 2 "tell me once every worker has had `need` pushes
// served", with `need` in the second float, for a worker in another process than the server,
// which cannot see the server's counts), that `need`, and the fp16 overflow flag (below).
constexpr float kPushGradient = 0.0f;
constexpr float kPushDone = 1.0f;
constexpr float kPushWait = 2.0f;
constexpr int kWaitTag = 3;  // server -> worker: the staleness bound is met (one float)
constexpr int64_t kAsyncExtra = 3;

// fp16 mixed precision (dynamic loss scaling). The server keeps the LossScaler and sends its
// scale after the weights (one float); a worker scales its loss by the scale it last pulled,
// unscales and checks its own gradients, and pushes them with a flag (sync: one float after
// the gradients; async: the trailer's third) saying whether one overflowed. The server skips
// a step (sync: the whole sum; async: that push) whose gradients overflowed, and its scaler
// backs off; every worker's next pull brings the new scale.

class ParamServer final : public ReplicaStrategy {
public:
    ParamServer() : ReplicaStrategy("param_server") {}

    ~ParamServer() override {
        // Service threads still running (a run that failed before finish_rank) are woken; an
        // MPI group is never aborted here, for that would end the whole job.
        if (std::any_of(m_service.begin(), m_service.end(), [](std::thread& t) { return t.joinable(); }))
            abort("param_server: the strategy is being destroyed");
        for (std::thread& t : m_service)
            if (t.joinable()) t.join();
    }

    DataRole data_role(int rank) const override {
        if (rank == 0) return {false, 0, 1};
        return {true, rank - 1, m_world - 1};
    }

    void start_rank(Rank& rank) override {
        if (!m_async || rank.index() != 0) return;
        for (int w = 1; w < m_world; ++w)
            m_service[static_cast<size_t>(w)] = std::thread([this, w] { service_loop(w); });
    }

    void finish_rank(Rank& rank) override {
        if (!m_async) return;
        const int r = rank.index();
        if (r != 0) {
            write_trailer(m_worker_flat[static_cast<size_t>(r)], {kPushDone, 0, 0});
            try {
                pair(r).send(m_worker_flat[static_cast<size_t>(r)].raw(), m_push_numel, DType::f32, 0, kPushTag);
            } catch (const comm::CommAborted&) {  // the run failed: the service thread is gone
            }
            return;
        }
        // Serves what is still queued (nothing, when every rank ran the same steps) until every
        // worker has said it is done, then ends the service threads. After an abort, at once.
        serve(nullptr, m_last_lr, [&] {
            return std::all_of(m_server.done.begin() + 1, m_server.done.end(),
                               [](bool d) { return d; });
        });
        for (std::thread& t : m_service)
            if (t.joinable()) t.join();
    }

    StepResult step(Rank& rank, const data::Batch& batch, int64_t offset, double lr) override {
        if (rank.index() == 0)
            return m_async ? server_step_async(rank, lr) : server_step_sync(rank, lr);
        return worker_step(rank, batch, offset);
    }

    void abort(const std::string& reason) override {
        {
            std::lock_guard lock(m_server.mutex);
            if (!m_server.aborted) {
                m_server.aborted = true;
                m_server.reason = reason;
            }
        }
        m_server.cv.notify_all();
        for (auto& g : m_pairs) g->abort(reason);
    }

    Tensor predict(const Tensor& x) override {
        gather_buffers();
        return ReplicaStrategy::predict(x);
    }
    std::vector<Tensor> buffers() override {
        if (m_ctx->spans_processes())
            reduce_buffers_across_processes();
        else
            gather_buffers();
        return ReplicaStrategy::buffers();
    }
    // parameters(): ReplicaStrategy's, the server's (rank 0's replica).

protected:
    void setup_impl(RunContext& ctx, nn::Model& reference) override {
        const config::Experiment& e = *ctx.experiment;
        m_async = option<std::string>(e.strategy, "mode") == "async";
        m_staleness = option<int64_t>(e.strategy, "staleness");
        m_scaler = loss_scaler_for(e);
        if (m_scaler) m_worker_scale.assign(static_cast<size_t>(m_world), m_scaler->scale());
        // Rank 0's replica is the server's copy (values, and gradients as the sum buffer); the
        // workers' replicas hold the weights they last pulled.
        build_replicas(ctx, reference, false);
        m_optimizers.push_back(optim::make_optimizer(e.optimizer));  // the server's only
        m_numel = total_numel(layout());

        const auto W = static_cast<size_t>(m_world);
        const bool server_here = ctx.is_local(0);
        auto comm_buffer = [](int64_t n, Device& d) {
            return Tensor::empty(Shape{n}, DType::f32, d, MemCategory::communication);
        };
        m_push_numel = m_numel + (m_async ? kAsyncExtra : m_scaler ? 1 : 0);
        m_pull_numel = m_numel + (m_scaler ? 1 : 0);
        m_worker_steps.assign(W, 0);
        m_worker_flat.resize(W);
        m_server_in.resize(W);
        for (int w = 1; w < m_world; ++w) {
            if (ctx.is_local(w))
                m_worker_flat[static_cast<size_t>(w)] =
                    comm_buffer(std::max(m_push_numel, m_pull_numel), *ctx.devices[static_cast<size_t>(w)]);
            if (server_here) m_server_in[static_cast<size_t>(w)] = comm_buffer(m_push_numel, *ctx.devices[0]);
        }
        if (m_async) {
            m_server_out.resize(W);
            for (int w = 1; w < m_world; ++w) {
                if (server_here) m_server_out[static_cast<size_t>(w)] = comm_buffer(m_pull_numel, *ctx.devices[0]);
                // A group of its own per worker (only ranks 0 and w talk in it); across
                // processes its creation is collective, made here in the same order by all.
                m_pairs.push_back(ctx.group->split());
            }
            m_service.resize(W);
            m_server.served.assign(W, 0);
            m_server.reply_ready.assign(W, false);
            m_server.done.assign(W, false);
            m_server.overflowed.assign(W, false);
        } else if (server_here) {
            m_server_out.push_back(comm_buffer(m_pull_numel, *ctx.devices[0]));
        }
    }

private:
    // ---- workers ------------------------------------------------------------------------------

    StepResult worker_step(Rank& rank, const data::Batch& batch, int64_t offset) {
        const config::Experiment& e = rank.experiment();
        const int r = rank.index();
        const int64_t s = ++m_worker_steps[static_cast<size_t>(r)];
        if (m_async) wait_staleness(rank, s);

        auto& ps = params(r);
        const double scale = m_scaler ? m_worker_scale[static_cast<size_t>(r)] : 1.0;
        LocalPass pass = forward_backward(rank, replica(r), batch, offset, {}, {}, scale);
        StepResult res{pass.loss_sum, pass.samples, pass.samples, 0};
        float overflow = 0;  // fp16: whether a gradient of this push overflowed
        if (m_scaler)
            overflow = rank.compute("unscale", [&] { return optim::unscale_checking(ps, rank.device(), scale); })
                           ? 1.0f : 0.0f;
        // Async: each push is one update, clipped alone (here, where it is made). Sync: the
        // server clips the sum.
        if (m_async && e.train.clip_norm && overflow == 0)
            res.grad_norm = clip_gradients(rank, ps, *e.train.clip_norm, false);

        const Tensor& flat = m_worker_flat[static_cast<size_t>(r)];
        float* f = flat.data<float>();
        pack_grads(ps, f);
        comm::Communicator& c = m_async ? pair(r) : rank.comm();
        if (m_async) write_trailer(flat, {kPushGradient, 0, overflow});
        else if (m_scaler) write_trailer(flat, {overflow});
        comm::CommRecord push = c.send(f, m_push_numel, DType::f32, 0, kPushTag);
        push.op = "push_grad";
        rank.record_comm(push);
        // Mostly waiting: for the server's update, and in sync mode for the slowest worker.
        comm::CommRecord pull = c.recv(f, m_pull_numel, DType::f32, 0, kPullTag);
        pull.op = "pull_weights";
        rank.record_comm(pull, true);
        unpack_values(f, ps);
        if (m_scaler) m_worker_scale[static_cast<size_t>(r)] = read_trailer(flat, 1)[0];
        return res;
    }

    // Stale-synchronous bound: a worker starting its step s has done s-1 steps and may be at
    // most `staleness` ahead of the slowest worker, so it waits until every worker has had at
    // least s-1-staleness pushes served.
    void wait_staleness(Rank& rank, int64_t s) {
        const int64_t need = s - 1 - m_staleness;
        if (need <= 0) return;
        if (!m_ctx->is_local(0)) {
            // The server is in another process: ask its service thread for this worker, which
            // answers once the bound is met (the same condition as below, evaluated there).
            const int r = rank.index();
            const Tensor& flat = m_worker_flat[static_cast<size_t>(r)];
            write_trailer(flat, {kPushWait, static_cast<float>(need), 0});
            const auto b = Clock::now();
            pair(r).send(flat.raw(), m_push_numel, DType::f32, 0, kPushTag);
            float met = 0;
            pair(r).recv(&met, 1, DType::f32, 0, kWaitTag);
            rank.record_idle("wait_staleness", b, Clock::now());
            return;
        }
        std::unique_lock lock(m_server.mutex);
        auto ready = [&] { return m_server.aborted || bound_met(need); };
        if (!ready()) {
            const auto b = Clock::now();
            m_server.cv.wait(lock, ready);
            rank.record_idle("wait_staleness", b, Clock::now());
        }
        if (m_server.aborted) throw comm::CommAborted(m_server.reason);
    }

    // Under m_server.mutex: every worker still running has had `need` pushes served.
    bool bound_met(int64_t need) const {
        for (int w = 1; w < m_world; ++w)
            if (!m_server.done[static_cast<size_t>(w)] && m_server.served[static_cast<size_t>(w)] < need)
                return false;
        return true;
    }

    // Async: worker w's group, where only the worker (rank w) and the server (rank 0) talk.
    comm::Communicator& pair(int worker) {
        return m_pairs[static_cast<size_t>(worker - 1)]->rank(worker);
    }
    comm::Communicator& server_end(int worker) {
        return m_pairs[static_cast<size_t>(worker - 1)]->rank(0);
    }

    // The floats after the m_numel gradients or weights of a message buffer (the async
    // trailer, the fp16 flag or scale). Written with host stores on the CPU; on a GPU with a
    // small copy ordered on the buffer's queue, before the send (which waits for that queue);
    // from pageable memory the runtime stages `v` before returning.
    void write_trailer(const Tensor& flat, std::initializer_list<float> v) const {
        float* dst = flat.data<float>() + m_numel;
        if (void* q = flat.queue())
            kernels::gpu::copy_host_to_device_async(dst, v.begin(), v.size() * sizeof(float), q);
        else
            std::copy(v.begin(), v.end(), dst);
    }
    // Read right after the recv that filled the buffer, which has finished writing it (a GPU's
    // communication stream is synchronised when recv returns): no queue to wait for.
    std::array<float, kAsyncExtra> read_trailer(const Tensor& flat, int64_t n) const {
        std::array<float, kAsyncExtra> v{};
        const float* src = flat.data<float>() + m_numel;
        if (!flat.on_gpu())
            std::copy(src, src + n, v.begin());
        else
            kernels::gpu::copy_device_to_host(v.data(), src, static_cast<size_t>(n) * sizeof(float));
        return v;
    }

    // ---- the server, sync ---------------------------------------------------------------------

    StepResult server_step_sync(Rank& rank, double lr) {
        const config::Experiment& e = rank.experiment();
        auto& ps = params(0);
        bool overflow = false;  // fp16: a worker's gradients overflowed; the step is skipped
        for (int w = 1; w < m_world; ++w) {
            const Tensor& in = m_server_in[static_cast<size_t>(w)];
            comm::CommRecord rec = rank.comm().recv(in.raw(), m_push_numel, DType::f32, w, kPushTag);
            rec.op = "push_grad";
            rank.record_comm(rec, true);  // mostly waiting for that worker's backward
            if (m_scaler) overflow |= read_trailer(in, 1)[0] != 0;
        }
        // The sum in rank order, whatever order the pushes arrived in: bit-identical run to run.
        rank.compute("server_update", [&] {
            unpack_grads(m_server_in[1].data<float>(), ps);
            for (int w = 2; w < m_world; ++w)
                add_grads(m_server_in[static_cast<size_t>(w)].data<float>(), ps);
        });
        StepResult res;
        if (m_scaler) m_scaler->update(overflow);
        if (e.train.clip_norm && !overflow) res.grad_norm = clip_gradients(rank, ps, *e.train.clip_norm, false);
        float* out = m_server_out[0].data<float>();
        rank.compute("server_update", [&] {
            if (!overflow) m_optimizers[0]->step(ps, lr);
            pack_values(ps, out);
            if (m_scaler) write_trailer(m_server_out[0], {static_cast<float>(m_scaler->scale())});
        });
        for (int w = 1; w < m_world; ++w) {
            comm::CommRecord rec = rank.comm().send(out, m_pull_numel, DType::f32, w, kPullTag);
            rec.op = "pull_weights";
            rank.record_comm(rec);
        }
        return res;
    }

    // g += flat, one IEEE add per element (on a GPU the communicators' combine kernel, so
    // both sum alike), in rank order.
    static void add_grads(const float* flat, const std::vector<nn::Param*>& params) {
        for (const nn::Param* p : params) {
            float* g = p->grad.data<float>();
            const int64_t n = p->grad.numel();
            if (void* q = p->grad.queue())
                kernels::gpu::comm_combine<float>(n, g, flat, false, q);
            else
                for (int64_t i = 0; i < n; ++i) g[i] += flat[i];
            flat += n;
        }
    }

    // ---- the server, async --------------------------------------------------------------------

    StepResult server_step_async(Rank& rank, double lr) {
        m_last_lr = lr;
        const int64_t s = ++m_server_steps;
        serve(&rank, lr, [&] {
            for (int w = 1; w < m_world; ++w)
                if (!m_server.done[static_cast<size_t>(w)] &&
                    m_server.served[static_cast<size_t>(w)] < s)
                    return false;
            return true;
        });
        std::vector<comm::CommRecord> log;
        {
            std::lock_guard lock(m_server.mutex);
            log.swap(m_server.log);
            if (m_server.error) std::rethrow_exception(m_server.error);
            if (m_server.aborted) throw comm::CommAborted(m_server.reason);
        }
        for (const auto& rec : log) rank.record_async_comm(rec);
        return {};
    }

    // The server's rank thread: applies queued pushes, in arrival order, until `until()` (called
    // under the lock) holds or the run is aborted. `rank` null: record nothing (finish_rank).
    void serve(Rank* rank, double lr, const std::function<bool()>& until) {
        std::unique_lock lock(m_server.mutex);
        for (;;) {
            if (m_server.aborted || until()) return;
            if (m_server.arrivals.empty()) {
                const auto b = Clock::now();
                m_server.cv.wait(lock, [&] {
                    return m_server.aborted || !m_server.arrivals.empty() || until();
                });
                if (rank) rank->record_idle("wait_push", b, Clock::now());
                continue;
            }
            const int w = m_server.arrivals.front();
            m_server.arrivals.pop_front();
            const bool overflow = m_server.overflowed[static_cast<size_t>(w)];
            lock.unlock();
            auto apply = [&] {
                auto& ps = params(0);
                if (m_scaler) m_scaler->update(overflow);
                if (!overflow) {
                    unpack_grads(m_server_in[static_cast<size_t>(w)].data<float>(), ps);
                    m_optimizers[0]->step(ps, lr);
                }
                const Tensor& out = m_server_out[static_cast<size_t>(w)];
                pack_values(ps, out.data<float>());
                if (m_scaler) write_trailer(out, {static_cast<float>(m_scaler->scale())});
            };
            if (rank)
                rank->compute("server_update", apply);
            else
                apply();
            lock.lock();
            ++m_server.served[static_cast<size_t>(w)];
            m_server.reply_ready[static_cast<size_t>(w)] = true;
            m_server.cv.notify_all();
        }
    }

    // Worker w's service thread: receive a push, queue it, wait for the update, send the
    // weights back; until the worker says it is done or the run is aborted.
    void service_loop(int w) {
        const auto wi = static_cast<size_t>(w);
        comm::Communicator& c = server_end(w);
        float* in = m_server_in[wi].data<float>();
        const float* out = m_server_out[wi].data<float>();
        try {
            for (;;) {
                // Not recorded: its time is mostly waiting for the worker, whose own "push_grad"
                // span is the message on the timeline.
                c.recv(in, m_push_numel, DType::f32, w, kPushTag);
                const auto [kind, need_f, overflow] = read_trailer(m_server_in[wi], kAsyncExtra);
                if (kind == kPushWait) {
                    const auto need = static_cast<int64_t>(need_f);
                    {
                        std::unique_lock lock(m_server.mutex);
                        m_server.cv.wait(lock, [&] { return m_server.aborted || bound_met(need); });
                        if (m_server.aborted) return;
                    }
                    const float met = 1;
                    c.send(&met, 1, DType::f32, w, kWaitTag);
                    continue;
                }
                {
                    std::unique_lock lock(m_server.mutex);
                    if (kind == kPushDone) {
                        m_server.done[wi] = true;
                        m_server.cv.notify_all();
                        return;
                    }
                    m_server.arrivals.push_back(w);
                    m_server.overflowed[wi] = overflow != 0;
                    m_server.cv.notify_all();
                    m_server.cv.wait(lock,
                                     [&] { return m_server.aborted || m_server.reply_ready[wi]; });
                    if (m_server.aborted) return;
                    m_server.reply_ready[wi] = false;
                }
                comm::CommRecord rec = c.send(out, m_pull_numel, DType::f32, w, kPullTag);
                rec.op = "pull_weights";
                std::lock_guard lock(m_server.mutex);
                m_server.log.push_back(rec);
            }
        } catch (const comm::CommAborted&) {
        } catch (const std::exception& ex) {
            // The server's rank thread rethrows it as the run's failure (see server_step_async).
            {
                std::lock_guard lock(m_server.mutex);
                if (!m_server.error) m_server.error = std::current_exception();
            }
            abort("param_server: the server's service thread for worker " + std::to_string(w) +
                  " failed: " + ex.what());
        }
    }

    // Batchnorm running statistics: the workers ran every forward, the server none, so the
    // server's model takes the mean of the workers' (their shards are random draws of one batch).
    // On the host (a few floats per channel; on GPUs host copies, the mean copied back).
    void gather_buffers() {
        auto to = replica(0).buffers();
        for (size_t i = 0; i < to.size(); ++i) {
            const int64_t n = to[i].numel();
            Tensor mean = Tensor::zeros(to[i].shape(), DType::f32, detached_host_device(), MemCategory::workspace);
            float* t = mean.data<float>();
            for (int w = 1; w < m_world; ++w) {
                const Tensor from = gpu::on_host(replica(w).buffers()[i]);
                const float* f = from.data<float>();
                for (int64_t k = 0; k < n; ++k) t[k] += f[k] / static_cast<float>(m_world - 1);
            }
            to[i].copy_from(mean);
        }
    }

    // gather_buffers for a run across processes: a collective over the processes (every process
    // calls buffers() at the same point of the run, between steps, on one thread), each adding
    // its workers' statistics; the server's process divides.
    void reduce_buffers_across_processes() {
        int me = 0;
        while (!m_ctx->is_local(me)) ++me;
        std::vector<Tensor> bufs = replica(me).buffers();
        int64_t n = 0;
        for (const Tensor& b : bufs) n += b.numel();
        if (n == 0) return;
        std::vector<float> flat(static_cast<size_t>(n), 0.0f);
        for (int w = 1; w < m_world; ++w) {
            if (!m_ctx->is_local(w)) continue;
            int64_t at = 0;
            for (const Tensor& b : replica(w).buffers()) {
                const float* f = b.data<float>();
                for (int64_t k = 0; k < b.numel(); ++k) flat[static_cast<size_t>(at + k)] += f[k];
                at += b.numel();
            }
        }
        m_ctx->processes->reduce(flat.data(), n, DType::f32, comm::ReduceOp::sum, 0);
        if (!m_ctx->is_local(0)) return;
        bufs = replica(0).buffers();
        int64_t at = 0;
        for (Tensor& b : bufs) {
            float* t = b.data<float>();
            for (int64_t k = 0; k < b.numel(); ++k) t[k] = flat[static_cast<size_t>(at + k)] / static_cast<float>(m_world - 1);
            at += b.numel();
        }
    }

    bool m_async = false;
    int64_t m_staleness = 0;
    int64_t m_numel = 0;
    int64_t m_push_numel = 0, m_pull_numel = 0;  // floats a push and a pull carry
    std::unique_ptr<optim::LossScaler> m_scaler;  // fp16: the server's
    std::vector<double> m_worker_scale;           // fp16: per worker, the scale it last pulled
    std::vector<Tensor> m_worker_flat;    // per worker, on its device: grads out, weights in
    std::vector<Tensor> m_server_in;      // per worker, on device 0: its last push
    std::vector<Tensor> m_server_out;     // async: per worker, its reply; sync: [0] for all
    std::vector<int64_t> m_worker_steps;  // per rank: steps run (each by its own rank thread)
    int64_t m_server_steps = 0;           // the server's rank thread only
    double m_last_lr = 0;                 // likewise

    std::vector<std::unique_ptr<comm::Group>> m_pairs;  // async: per worker w at [w-1]
    std::vector<std::thread> m_service;                      // async: per worker w at [w]

    // What the server's rank thread and the service threads share (indexed by worker rank).
    struct ServerState {
        std::mutex mutex;
        std::condition_variable cv;
        std::deque<int> arrivals;           // guarded by mutex: workers whose push waits
        std::vector<int64_t> served;        // guarded by mutex: pushes applied, per worker
        std::vector<bool> reply_ready;      // guarded by mutex: weights packed for the reply
        std::vector<bool> done;             // guarded by mutex: the worker has finished
        std::vector<bool> overflowed;       // guarded by mutex: fp16, the queued push overflowed
        std::vector<comm::CommRecord> log;  // guarded by mutex: service threads' sends
        std::exception_ptr error;           // guarded by mutex: a service thread's failure
        bool aborted = false;               // guarded by mutex
        std::string reason;                 // guarded by mutex
    } m_server;
};

}  // namespace

namespace {

// The server: the parameters, the workers' pushes summed, the optimizer state and a buffer per
// worker plus one to send; a worker: a replica (no optimizer) for its rows and one buffer.
std::vector<DeviceMemoryEstimate> memory(const config::Experiment& e, const ModelCost& m) {
    auto out = blank_estimates(e);
    const int n = static_cast<int>(out.size());
    const int workers = n - 1;
    const int64_t p = m.parameters();
    out[0].role = "server";
    out[0].set(MemCategory::parameters, p);
    out[0].set(MemCategory::gradients, p);
    out[0].set(MemCategory::optimizer_state, optimizer_state_per_parameter(e.optimizer) * p);
    out[0].set(MemCategory::communication, (workers + 1) * p);
    for (int r = 1; r < n; ++r) {
        whole_replica(out[r], e, m, rows_of(e.data.batch_size, r - 1, workers));
        out[r].role = "worker";
        out[r].set(MemCategory::optimizer_state, 0);
        out[r].set(MemCategory::communication, p);
    }
    return out;
}

StepPicture picture(const config::Experiment& e) {
    const bool async = option<std::string>(e.strategy, "mode") == "async";
    StepPicture p;
    p.layout = StepPicture::Layout::hub;
    p.hub_is_device = true;
    p.hub_title = e.devices[0] + " · server";
    p.hub_subtitle = "parameters + optimizer, " + option<std::string>(e.strategy, "mode");
    p.subtitles.assign(e.devices.size(), "worker");
    p.down_label = "pull weights";
    p.caption = std::string("↑ push gradients   ↓ pull weights") +
                (async ? " · async: at most " + std::to_string(option<int64_t>(e.strategy, "staleness")) +
                             " steps ahead"
                       : " · sync: waits for every worker");
    return p;
}

}  // namespace

StrategyDescriptor param_server_descriptor() {
    using config::OptionKind;
    return {
        .name = "param_server",
        .options = {{.key = "mode", .kind = OptionKind::choice, .fallback = std::string("sync"),
                     .choices = {"sync", "async"}, .label = "Mode",
                     .help = "sync: the server sums every worker's push and steps once; async: each "
                             "push is applied as it arrives."},
                    {.key = "staleness", .kind = OptionKind::integer, .fallback = int64_t{0}, .min = 0,
                     .label = "Staleness bound", .unit = "steps",
                     .help = "async: how many steps a worker may run ahead of the slowest.",
                     .shown_when_key = "mode", .shown_when_value = "async"}},
        .explanation =
            "A parameter server: device 0 holds the parameters and the optimizer and computes no "
            "gradients; the other devices are workers that push gradients and pull weights. `sync`: "
            "the server sums every worker's push and steps once, so everyone waits for the slowest. "
            "`async`: each push is applied as it arrives, and a worker may run at most `staleness` "
            "steps ahead of the slowest.",
        .color = "#8c564b",
        .min_devices = 2,
        .device_rule = "the first is the server, the others are workers",
        .make = [] { return std::unique_ptr<Strategy>(std::make_unique<ParamServer>()); },
        .memory = memory,
        .picture = picture,
        .variant = {{.key = "mode", .text = "{}"}, {.key = "staleness", .text = "staleness {}"}},
    };
}

}  // namespace paralab::strategy
