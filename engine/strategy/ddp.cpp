// ddp: torch.nn.parallel.DistributedDataParallel. One replica per device, rank 0's parameters
// broadcast at the start; each rank runs its shard of the global batch; gradients are summed
// over the ranks in buckets of strategy.bucket_mb, filled in reverse layer order. With overlap
// (the default) a bucket's all-reduce starts on the rank's communication thread as soon as the
// layers that fill it are done, while backward goes on through the earlier layers; without it,
// every bucket is reduced after backward, on the rank thread.
//
// The loss of each rank is divided by the GLOBAL batch, so the summed gradients are the
// single-device gradient of the global batch, and every replica takes the same step.
//
// balance: "speed" splits each global batch unevenly, in proportion to each device's measured
// speed (rows per millisecond of forward and backward, averaged over recent steps and agreed
// with an all-gather every step), so that a slow device (a straggler) gets fewer rows and the
// others stop waiting for it. The split changes only which rows each device runs: the summed
// gradient is still the global batch's.
#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <exception>
#include <thread>

#include "engine/strategy/replicas.h"
#include "engine/strategy/registry.h"
#include "engine/strategy/step_graph.h"

namespace paralab::strategy {

namespace {

// The ddp options (the descriptor below declares them).
struct DdpOptions {
    double bucket_mb;
    bool overlap;
    bool balance_by_speed;
    bool sync_batchnorm;
    explicit DdpOptions(const config::StrategyConfig& s)
        : bucket_mb(option<double>(s, "bucket_mb")),
          overlap(option<bool>(s, "overlap")),
          balance_by_speed(option<std::string>(s, "balance") == "speed"),
          sync_batchnorm(option<bool>(s, "sync_batchnorm")) {}
};

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

    // Every replica and optimizer holds the same values: rank 0's are the run's. Balanced by
    // speed, the split of the batch follows measured speeds, which a resumed run would measure anew.
    const char* why_no_checkpoint_impl() const override {
        if (m_balance) return "with balance_by_speed the split of each batch follows measured speeds, which a resume cannot repeat";
        return nullptr;
    }
    TrainingState save_state() override {
        if (why_no_checkpoint()) return Strategy::save_state();
        return replica_state(0, *m_optimizers[0], m_state[0]->scaler.get());
    }
    void load_state(const TrainingState& st) override {
        if (why_no_checkpoint()) return Strategy::load_state(st);
        load_replicas(st);
        for (int r = 0; r < m_world; ++r) {
            m_optimizers[static_cast<size_t>(r)]->load_state(params(r), st.optimizer_state, st.optimizer_steps);
            if (m_state[static_cast<size_t>(r)]->scaler && st.has_scaler)
                m_state[static_cast<size_t>(r)]->scaler->load_state(st.scaler);
        }
    }

    // Balanced by speed, every rank reads the whole global batch and runs its agreed rows.
    DataRole data_role(int rank) const override {
        if (m_balance) return {true, 0, 1};
        return {true, rank, m_world};
    }

    void start_rank(Rank& rank) override {
        RankState& s = state(rank);
        s.weights.assign(static_cast<size_t>(rank.world()), 1.0 / rank.world());
        s.rank = &rank;
        // Gradients as views of their bucket's buffer: the all-reduce runs in place on them,
        // with no copy into a communication buffer and back.
        for (const Bucket& b : m_buckets)
            s.flat.push_back(grads_as_views(params(rank.index()), b.first, b.last, rank.device()));
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

    StepResult step(Rank& rank, const data::Batch& full, int64_t offset, double lr) override {
        const config::Experiment& e = rank.experiment();
        const int r = rank.index();
        RankState& s = state(rank);
        data::Batch own;
        const data::Batch* batch_ptr = &full;
        if (m_balance) {
            const auto rows = split_by_weights(full.global_size, s.weights);
            offset = rows[static_cast<size_t>(r)].offset;
            own = rows_of(full, offset, rows[static_cast<size_t>(r)].count);
            batch_ptr = &own;
        }
        const data::Batch& batch = *batch_ptr;
        const auto t_pass = Clock::now();
        std::vector<int> pending(m_buckets.size());
        for (size_t b = 0; b < m_buckets.size(); ++b)
            pending[b] = static_cast<int>(m_buckets[b].last - m_buckets[b].first);
        {
            std::lock_guard lock(s.mutex);
            s.done = 0;
        }
        // The last bucket is ready only when backward ends, so nothing is left to overlap it
        // with: the rank thread reduces it itself once the communication thread has done the
        // others (collectives on the bucket group keep their order), which saves handing it to
        // that thread and waking it.
        const size_t last = m_buckets.size() - 1;
        auto layer_done = [&](size_t layer) {
            for (size_t p : params_of_layer()[layer]) {
                const size_t b = m_bucket_of[p];
                if (--pending[b] == 0 && m_overlap && b != last) {
                    std::lock_guard lock(s.mutex);
                    s.queue.push_back(b);
                    s.cv.notify_all();
                }
            }
        };
        // On a GPU without overlap: forward and backward replayed as one graph (step_graph.h).
        const double scale = s.scaler ? s.scaler->scale() : 1.0;
        LocalPass pass = m_overlap ? forward_backward(rank, replica(r), batch, offset, layer_done, {}, scale)
                                   : s.graph.run(rank, replica(r), batch, offset, scale);
        const double pass_ms = std::chrono::duration<double, std::milli>(Clock::now() - t_pass).count();

        if (m_overlap) {
            const auto t0 = Clock::now();
            std::unique_lock lock(s.mutex);
            s.cv.wait(lock, [&] { return s.done == last || s.error || s.stop; });
            if (s.error) std::rethrow_exception(s.error);
            if (s.stop) throw comm::CommAborted("the run was aborted");
            lock.unlock();
            if (last > 0) rank.record_idle("wait_all_reduce", t0, Clock::now());
            rank.record_comm(reduce_bucket(s, last));
        } else {
            for (size_t b = 0; b < m_buckets.size(); ++b) rank.record_comm(reduce_bucket(s, b));
        }

        StepResult res{pass.loss_sum, pass.samples, pass.samples, 0};
        // fp16: every rank unscales the same all-reduced gradients, so all skip or step together.
        const bool step_ok = !s.scaler || unscale_gradients(rank, params(r), *s.scaler);
        if (step_ok && e.train.clip_norm) res.grad_norm = clip_gradients(rank, params(r), *e.train.clip_norm, false);
        if (step_ok) rank.compute("optimizer", [&] { m_optimizers[static_cast<size_t>(r)]->step(params(r), lr); });
        if (m_balance) update_weights(rank, s, batch.size, pass_ms);
        return res;
    }

protected:
    void setup_impl(RunContext& ctx, nn::Model& reference) override {
        const config::Experiment& e = *ctx.experiment;
        const DdpOptions o(e.strategy);
        m_overlap = o.overlap;
        m_balance = o.balance_by_speed;
        build_replicas(ctx, reference, true);
        for (int r = 0; r < m_world; ++r) {
            m_optimizers.push_back(optim::make_optimizer(e.optimizer));
            m_state.push_back(std::make_unique<RankState>());
            m_state.back()->scaler = loss_scaler_for(e);
            if (o.sync_batchnorm && m_world > 1 && ctx.is_local(r)) {
                install_sync_batchnorm(m_state.back()->rank, replica(r));
                if (has_batchnorm(replica(r).net()))
                    m_state.back()->graph.refuse("SyncBatchNorm all-reduces its statistics in forward");
            }
            if (m_balance) m_state.back()->graph.refuse("balance_by_speed moves rows between the ranks each step");
        }
        m_bucket_group = ctx.group->split();

        // Buckets in reverse parameter order, each closed once it reaches bucket_mb MiB (a
        // parameter larger than that is a bucket of its own), as torch's Reducer does.
        const auto& ps = layout();
        const int64_t cap = std::max<int64_t>(1, static_cast<int64_t>(o.bucket_mb * 1024 * 1024));
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
    struct RankState;

    // Rows [offset, offset + count) of each rank for weights w (summing to 1): largest
    // remainders, and at least one row each while the batch has enough rows.
    static std::vector<data::ShardRange> split_by_weights(int64_t B, const std::vector<double>& w) {
        const size_t n = w.size();
        std::vector<int64_t> count(n, 0);
        const int64_t floor_rows = B >= static_cast<int64_t>(n) ? 1 : 0;
        const int64_t spare = B - floor_rows * static_cast<int64_t>(n);
        std::vector<std::pair<double, size_t>> remainders;
        int64_t given = 0;
        for (size_t i = 0; i < n; ++i) {
            const double exact = static_cast<double>(spare) * w[i];
            count[i] = floor_rows + static_cast<int64_t>(std::floor(exact));
            given += count[i];
            remainders.push_back({exact - std::floor(exact), i});
        }
        std::stable_sort(remainders.begin(), remainders.end(), [](auto& a, auto& b) { return a.first > b.first; });
        for (size_t k = 0; given < B; ++k, ++given) ++count[remainders[k % n].second];
        std::vector<data::ShardRange> out(n);
        int64_t at = 0;
        for (size_t i = 0; i < n; ++i) {
            out[i] = {at, count[i]};
            at += count[i];
        }
        return out;
    }

    static data::Batch rows_of(const data::Batch& b, int64_t offset, int64_t count) {
        data::Batch out;
        out.size = count;
        out.global_size = b.global_size;
        out.index_in_epoch = b.index_in_epoch;
        out.epoch = b.epoch;
        const size_t in = b.size > 0 ? b.inputs.size() / static_cast<size_t>(b.size) : 0;
        const size_t tg = b.size > 0 ? b.targets.size() / static_cast<size_t>(b.size) : 0;
        const auto o = static_cast<size_t>(offset), c = static_cast<size_t>(count);
        out.inputs.assign(b.inputs.begin() + static_cast<long>(o * in), b.inputs.begin() + static_cast<long>((o + c) * in));
        out.targets.assign(b.targets.begin() + static_cast<long>(o * tg), b.targets.begin() + static_cast<long>((o + c) * tg));
        if (!b.sample_ids.empty())
            out.sample_ids.assign(b.sample_ids.begin() + static_cast<long>(o), b.sample_ids.begin() + static_cast<long>(o + c));
        return out;
    }

    // Every rank's milliseconds per row (a moving average), all-gathered: the same weights on
    // every rank, proportional to speed.
    void update_weights(Rank& rank, RankState& s, int64_t rows, double ms) {
        if (rows > 0) {
            const double per_row = ms / static_cast<double>(rows);
            s.ms_per_row = s.ms_per_row > 0 ? 0.7 * s.ms_per_row + 0.3 * per_row : per_row;
        }
        std::vector<double> all(static_cast<size_t>(rank.world()), 0.0);
        all[static_cast<size_t>(rank.index())] = s.ms_per_row;
        comm::CommRecord rec = all_gather_doubles(rank, all.data(), 1);
        rec.op = "all_gather_speeds";
        rank.record_comm(rec);
        double total = 0;
        for (double v : all) total += v > 0 ? 1.0 / v : 0;
        if (total <= 0) return;
        for (size_t i = 0; i < all.size(); ++i) s.weights[i] = all[i] > 0 ? (1.0 / all[i]) / total : 0;
    }

    struct RankState {
        std::vector<double> weights;  // share of the global batch per rank (balance: speed)
        double ms_per_row = 0;
        Rank* rank = nullptr;
        std::vector<Tensor> flat;  // one buffer per bucket; the gradients are views of it
        std::thread thread;
        std::mutex mutex;
        std::condition_variable cv;
        std::deque<size_t> queue;     // guarded by mutex: buckets ready to reduce
        size_t done = 0;              // guarded by mutex: buckets reduced this step
        std::exception_ptr error;     // guarded by mutex
        bool stop = false;            // guarded by mutex
        std::unique_ptr<optim::LossScaler> scaler;  // fp16 mixed precision
        StepGraph graph;  // overlap off, on a GPU: forward and backward replayed as one graph
    };

    RankState& state(const Rank& rank) { return *m_state[static_cast<size_t>(rank.index())]; }

    // Sums the bucket's gradients over the ranks, in place (they are views of its buffer).
    comm::CommRecord reduce_bucket(RankState& s, size_t b) {
        const Bucket& bk = m_buckets[b];
        float* f = s.flat[b].data<float>();
        comm::CommRecord rec = m_bucket_group->rank(s.rank->index()).all_reduce(f, bk.numel, DType::f32, comm::ReduceOp::sum);
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
    bool m_balance = false;
    std::vector<Bucket> m_buckets;  // in the order they are reduced
    std::vector<size_t> m_bucket_of;
    std::vector<std::unique_ptr<RankState>> m_state;
    std::unique_ptr<comm::Group> m_bucket_group;
};


// A whole replica on every device for its rows; the gradients are views of the buckets
// (counted as gradients); the flat buffer the parameters are broadcast through at the start.
std::vector<DeviceMemoryEstimate> ddp_memory(const config::Experiment& e, const ModelCost& m) {
    auto out = blank_estimates(e);
    const int n = static_cast<int>(out.size());
    for (int r = 0; r < n; ++r) {
        whole_replica(out[r], e, m, rows_of(e.data.batch_size, r, n));
        out[r].set(MemCategory::communication, m.parameters());
    }
    return out;
}

StepPicture ddp_picture(const config::Experiment& e) {
    const DdpOptions o(e.strategy);
    StepPicture p;
    p.layout = StepPicture::Layout::ring;
    p.subtitles.assign(e.devices.size(), "full replica");
    p.centre = "ring all-reduce of the gradients\nin " + format_number(o.bucket_mb) + " MiB buckets" +
               (o.overlap ? ", during backward" : "");
    p.caption = "Every device ends the step with the same summed gradients and takes the same step.";
    return p;
}

}  // namespace

StrategyDescriptor ddp_descriptor() {
    using config::OptionKind;
    return {
        .name = "ddp",
        .options =
            {{.key = "bucket_mb", .kind = OptionKind::number, .fallback = 25.0, .min = 0, .min_inclusive = false,
              .label = "Bucket size", .unit = "MiB",
              .help = "Gradients are all-reduced in buckets of this size, filled from the last layer back."},
             {.key = "overlap", .kind = OptionKind::boolean, .fallback = true,
              .label = "Overlap all-reduce with backward",
              .help = "A bucket's all-reduce starts as soon as the layers that fill it are done, while "
                      "backward goes on; false: every bucket after backward."},
             {.key = "balance", .kind = OptionKind::choice, .fallback = std::string("even"),
              .choices = {"even", "speed"}, .label = "Rows per device",
              .help = "even: batch / N rows each; speed: rows in proportion to each device's measured "
                      "speed (a straggler gets fewer)."},
             sync_batchnorm_option()},
        .explanation =
            "Distributed data parallel: every device keeps a full replica (broadcast from device 0 "
            "once, at the start) and runs forward and backward on its share of the batch. Gradients "
            "are summed across devices by all-reduce in buckets of `bucket_mb` MiB, last layers "
            "first; with `overlap` a bucket is sent as soon as the layers that fill it are done, "
            "while backward goes on. Every device then takes the same optimizer step.",
        .color = "#2ca02c",
        .make = [] { return std::unique_ptr<Strategy>(std::make_unique<Ddp>()); },
        .memory = ddp_memory,
        .picture = ddp_picture,
        .variant = {{.key = "bucket_mb", .text = "{} MiB buckets"}, {.key = "overlap", .text_if_false = "no overlap"}},
    };
}

}  // namespace paralab::strategy
