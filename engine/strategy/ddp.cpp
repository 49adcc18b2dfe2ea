// ddp: torch.nn.parallel.DistributedDataParallel. One replica per device, rank 0's parameters
// broadcast at the start; each rank runs its shard of the global batch; gradients are summed
// over the ranks in buckets of strategy.bucket_mb, filled in reverse layer order. With overlap
// (the default) a bucket's all-reduce starts on the rank's communication thread as soon as the
// layers that fill it are done, while backward goes on through the earlier layers; without it,
// every bucket is reduced after backward, on the rank thread.
//
// The loss of each rank is divided by the GLOBAL batch, so the summed gradients are the
// single-device gradient of the global batch, and every replica takes the same step.
#include <condition_variable>
#include <deque>
#include <exception>
#include <thread>

#include "engine/strategy/replicas.h"
#include "engine/strategy/strategies.h"

namespace paralab::strategy {

namespace {

struct Bucket {
    size_t first = 0, last = 0;  // parameters [first, last) in model order
    int64_t numel = 0;
};

class Ddp final : public ReplicaStrategy {
public:
    Ddp() : ReplicaStrategy("ddp") {}

    void abort(const std::string& reason) override {
        if (m_bucket_group) m_bucket_group->abort(reason);
        for (auto& s : m_state) {
            std::lock_guard lock(s->mutex);
            s->stop = true;
            s->cv.notify_all();
        }
    }

    void start_rank(Rank& rank) override {
        RankState& s = state(rank);
        s.rank = &rank;
        for (const Bucket& b : m_buckets)
            s.flat.push_back(Tensor::empty(Shape{b.numel}, DType::f32, rank.device(), MemCategory::communication));
        broadcast_parameters(rank);
        if (m_overlap) s.thread = std::thread([this, &s] { comm_loop(s); });
    }

    void finish_rank(Rank& rank) override {
        RankState& s = state(rank);
        {
            std::lock_guard lock(s.mutex);
            s.stop = true;
        }
        s.cv.notify_all();
        if (s.thread.joinable()) s.thread.join();
    }

    StepResult step(Rank& rank, const data::Batch& batch, int64_t offset, double lr) override {
        const run::Experiment& e = rank.experiment();
        const int r = rank.index();
        RankState& s = state(rank);
        std::vector<int> pending(m_buckets.size());
        for (size_t b = 0; b < m_buckets.size(); ++b)
            pending[b] = static_cast<int>(m_buckets[b].last - m_buckets[b].first);
        {
            std::lock_guard lock(s.mutex);
            s.done = 0;
        }
        auto layer_done = [&](size_t layer) {
            for (size_t p : params_of_layer()[layer]) {
                const size_t b = m_bucket_of[p];
                if (--pending[b] == 0 && m_overlap) {
                    std::lock_guard lock(s.mutex);
                    s.queue.push_back(b);
                    s.cv.notify_all();
                }
            }
        };
        LocalPass pass = forward_backward(rank, replica(r), batch, offset, layer_done);

        if (m_overlap) {
            const auto t0 = Clock::now();
            std::unique_lock lock(s.mutex);
            s.cv.wait(lock, [&] { return s.done == m_buckets.size() || s.error || s.stop; });
            if (s.error) std::rethrow_exception(s.error);
            if (s.stop) throw comm::CommAborted("the run was aborted");
            lock.unlock();
            rank.record_idle("wait_all_reduce", t0, Clock::now());
        } else {
            for (size_t b = 0; b < m_buckets.size(); ++b) rank.record_comm(reduce_bucket(s, b));
        }

        StepResult res{pass.loss_sum, pass.samples, pass.samples, 0};
        if (e.train.clip_norm) res.grad_norm = clip_gradients(rank, params(r), *e.train.clip_norm, false);
        rank.compute("optimizer", [&] { m_optimizers[static_cast<size_t>(r)]->step(params(r), lr); });
        return res;
    }

protected:
    void setup_impl(RunContext& ctx, nn::Model& reference) override {
        const run::Experiment& e = *ctx.experiment;
        m_overlap = e.strategy.overlap;
        build_replicas(ctx, reference, true);
        for (int r = 0; r < m_world; ++r) {
            m_optimizers.push_back(optim::make_optimizer(e.optimizer));
            m_state.push_back(std::make_unique<RankState>());
            if (e.strategy.sync_batchnorm && m_world > 1)
                install_sync_batchnorm(m_state.back()->rank, replica(r));
        }
        m_bucket_group = std::make_unique<comm::LocalGroup>(m_world);

        // Buckets in reverse parameter order, each closed once it reaches bucket_mb MiB (a
        // parameter larger than that is a bucket of its own), as torch's Reducer does.
        const auto& ps = params(0);
        const int64_t cap = std::max<int64_t>(1, static_cast<int64_t>(e.strategy.bucket_mb * 1024 * 1024));
        m_bucket_of.assign(ps.size(), 0);
        Bucket cur;
        cur.last = ps.size();
        for (size_t i = ps.size(); i-- > 0;) {
            cur.first = i;
            cur.numel += ps[i]->value.numel();
            if (cur.numel * 4 >= cap || i == 0) {
                m_buckets.push_back(cur);
                cur = Bucket{};
                cur.last = i;
            }
        }
        for (size_t b = 0; b < m_buckets.size(); ++b)
            for (size_t p = m_buckets[b].first; p < m_buckets[b].last; ++p) m_bucket_of[p] = b;
    }

private:
    struct RankState {
        Rank* rank = nullptr;
        std::vector<Tensor> flat;  // one communication buffer per bucket
        std::thread thread;
        std::mutex mutex;
        std::condition_variable cv;
        std::deque<size_t> queue;     // guarded by mutex: buckets ready to reduce
        size_t done = 0;              // guarded by mutex: buckets reduced this step
        std::exception_ptr error;     // guarded by mutex
        bool stop = false;            // guarded by mutex
    };

    RankState& state(const Rank& rank) { return *m_state[static_cast<size_t>(rank.index())]; }

    // Packs the bucket's gradients, sums them over the ranks, unpacks.
    comm::CommRecord reduce_bucket(RankState& s, size_t b) {
        const Bucket& bk = m_buckets[b];
        const auto& ps = params(s.rank->index());
        std::vector<nn::Param*> part(ps.begin() + static_cast<long>(bk.first), ps.begin() + static_cast<long>(bk.last));
        float* f = s.flat[b].data<float>();
        pack_grads(part, f);
        comm::CommRecord rec = m_bucket_group->rank(s.rank->index()).all_reduce(f, bk.numel, DType::f32, comm::ReduceOp::sum);
        unpack_grads(f, part);
        rec.op = "all_reduce_bucket";
        return rec;
    }

    void comm_loop(RankState& s) {
        for (;;) {
            size_t b = 0;
            {
                std::unique_lock lock(s.mutex);
                s.cv.wait(lock, [&] { return s.stop || !s.queue.empty(); });
                if (s.stop) return;
                b = s.queue.front();
                s.queue.pop_front();
            }
            try {
                s.rank->record_async_comm(reduce_bucket(s, b));
            } catch (...) {
                std::lock_guard lock(s.mutex);
                s.error = std::current_exception();
                s.cv.notify_all();
                return;
            }
            std::lock_guard lock(s.mutex);
            ++s.done;
            s.cv.notify_all();
        }
    }

    bool m_overlap = true;
    std::vector<Bucket> m_buckets;  // in the order they are reduced
    std::vector<size_t> m_bucket_of;
    std::vector<std::unique_ptr<RankState>> m_state;
    std::unique_ptr<comm::LocalGroup> m_bucket_group;
};

}  // namespace

std::unique_ptr<Strategy> make_ddp() { return std::make_unique<Ddp>(); }

}  // namespace paralab::strategy
