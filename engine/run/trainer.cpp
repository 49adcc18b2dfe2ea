#include "engine/run/trainer.h"

#include <chrono>
#include <cmath>
#include <exception>
#include <thread>

#include "engine/data/loader.h"
#include "engine/device/device.h"
#include "engine/nn/model.h"
#include "engine/run/metrics_bus.h"
#include "engine/strategy/strategy.h"

namespace paralab::run {

RunObserver::~RunObserver() = default;

namespace {

using Clock = std::chrono::steady_clock;
using strategy::Rank;
using strategy::RunContext;

double ms_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

// Refuses, before any step runs, a model whose output cannot meet the data and the loss.
void check_model_fits_data(const nn::Model& model, const data::Dataset& ds, const std::string& loss) {
    const Shape& out = model.output_shape();
    if (loss == "cross_entropy") {
        if (ds.num_classes == 0)
            throw ConfigError("model.loss: cross_entropy needs class labels, but the " + ds.name +
                              " data set is a regression set (use \"mse\")");
        if (out.rank() != 1)
            throw ConfigError("model: the last layer gives " + out.to_string() +
                              " per example; cross_entropy needs class scores [" +
                              std::to_string(ds.num_classes) + "] (add a flatten and a linear layer)");
        if (out[0] < ds.num_classes)
            throw ConfigError("model: the last layer gives " + std::to_string(out[0]) +
                              " class scores, but the " + ds.name + " data set has " +
                              std::to_string(ds.num_classes) + " classes");
    } else {
        const Shape target = ds.target_shape.empty() ? Shape{1} : Shape(ds.target_shape);
        if (ds.num_classes > 0 && ds.target_shape.empty())
            throw ConfigError("model.loss: mse needs regression targets, but the " + ds.name +
                              " data set has class labels (use \"cross_entropy\")");
        if (out != target)
            throw ConfigError("model: the last layer gives " + out.to_string() +
                              " per example, but the " + ds.name + " data set's targets are " +
                              target.to_string());
    }
}

// The devices of the run, one per rank; refuses what this build cannot run.
std::vector<std::unique_ptr<Device>> make_devices(const Experiment& e, int compute_threads) {
    std::vector<std::unique_ptr<Device>> devices;
    for (size_t i = 0; i < e.devices.size(); ++i) {
        const std::string path = "devices[" + std::to_string(i) + "]";
        const DeviceId id = parse_device_id(e.devices[i]);
        if (id.kind != DeviceKind::cpu)
            throw ConfigError(path + ": " + e.devices[i] +
                              " is a GPU, and this build has no CUDA training backend; use cpu:" +
                              std::to_string(i));
        for (size_t j = 0; j < i; ++j)
            if (e.devices[j] == e.devices[i])
                throw ConfigError(path + ": " + e.devices[i] + " is listed twice (devices[" +
                                  std::to_string(j) + "]); virtual CPU devices are cpu:0, cpu:1, ...");
        devices.push_back(make_cpu_device(id.index, compute_threads));
    }
    if (!e.strategy.straggler_device.empty() &&
        std::find(e.devices.begin(), e.devices.end(), e.strategy.straggler_device) == e.devices.end())
        throw ConfigError("strategy.straggler.device: " + e.strategy.straggler_device +
                          " is not one of the run's devices");
    return devices;
}

// Decides, once per step for all ranks, whether the step runs: a stop request ends the run at
// a step boundary that every rank agrees on, so that no rank waits in a collective for a rank
// that has stopped, and every step that any rank started is finished by all.
class StepGate {
public:
    explicit StepGate(RunControl* control) : m_control(control) {}
    bool begin(int64_t step) {
        std::unique_lock lock(m_mutex);
        for (;;) {
            if (m_stop_from == kNever && m_control && m_control->stop.load())
                m_stop_from = std::max(m_max_started + 1, step);
            if (step >= m_stop_from) return false;
            // Paused: like stop, at a boundary every rank agrees on (steps already started by
            // any rank are finished by all), then wait until resumed or stopped.
            if (!m_control || !m_control->pause.load()) {
                m_pause_from = kNever;
                break;
            }
            if (m_pause_from == kNever) m_pause_from = std::max(m_max_started + 1, step);
            if (step < m_pause_from) break;
            lock.unlock();
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
            lock.lock();
        }
        m_max_started = std::max(m_max_started, step);
        return true;
    }
    bool stopped() const {
        std::lock_guard lock(m_mutex);
        return m_stop_from != kNever;
    }

private:
    static constexpr int64_t kNever = INT64_MAX;
    RunControl* m_control;
    mutable std::mutex m_mutex;
    int64_t m_stop_from = kNever;  // guarded by m_mutex: the first step no rank may start
    int64_t m_pause_from = kNever; // guarded by m_mutex: while paused, the first step that waits
    int64_t m_max_started = 0;     // guarded by m_mutex
};

// One pass over the test split on the calling thread, through the strategy's trained model.
EvalResult evaluate(strategy::Strategy& s, nn::Loss& loss, const data::Dataset& test,
                    int64_t batch_size, const RunContext& ctx) {
    EvalResult r;
    if (test.size() == 0) return r;
    data::DataLoader::Options opt;
    opt.batch_size = batch_size;
    opt.shuffle = false;
    data::DataLoader loader(test, opt);
    loader.start_epoch(0);
    data::Batch b;
    double loss_sum = 0;
    int64_t correct = 0;
    while (loader.next(b)) {
        auto db = strategy::to_device(b, 0, b.size, ctx.input, ctx.target, *ctx.devices[0]);
        Tensor out = s.predict(db.x);
        loss_sum += loss.forward(out, db.y, 1);  // a sum over the batch
        if (test.num_classes > 0) correct += nn::count_correct(out, db.y);
        r.samples += b.size;
    }
    r.loss = loss_sum / static_cast<double>(r.samples);
    if (test.num_classes > 0) r.accuracy = static_cast<double>(correct) / static_cast<double>(r.samples);
    return r;
}

// What the rank threads share besides the strategy's context.
struct Shared {
    Shared(const Experiment& e_, const data::DataSplits& splits_, strategy::Strategy& strategy_,
           RunContext& ctx_, MetricsBus& bus_, RunControl* control, nn::Loss& eval_loss_,
           const optim::Schedule& schedule_, int64_t steps_per_epoch_)
        : e(e_), splits(splits_), strategy(strategy_), ctx(ctx_), bus(bus_), gate(control),
          eval_loss(eval_loss_), schedule(schedule_), steps_per_epoch(steps_per_epoch_) {}

    const Experiment& e;
    const data::DataSplits& splits;
    strategy::Strategy& strategy;
    RunContext& ctx;
    MetricsBus& bus;
    StepGate gate;
    nn::Loss& eval_loss;
    const optim::Schedule& schedule;
    const int64_t steps_per_epoch;
    std::mutex mutex;
    std::exception_ptr error;          // guarded by mutex: the first failure of any rank...
    std::exception_ptr aborted;        // guarded by mutex: ...or, if none, the first abort seen
    double eval_s = 0;                 // guarded by mutex: evaluation time inside training
    int64_t epochs_started = 0;        // guarded by mutex
};

// A rank failed: remember why (a rank woken by the abort is not the cause) and wake the others.
void fail_run(Shared& sh, std::exception_ptr err, const std::string& reason) {
    bool is_abort = false;
    try {
        std::rethrow_exception(err);
    } catch (const comm::CommAborted&) {
        is_abort = true;
    } catch (...) {
    }
    {
        std::lock_guard lock(sh.mutex);
        std::exception_ptr& slot = is_abort ? sh.aborted : sh.error;
        if (!slot) slot = err;
    }
    if (is_abort) return;
    sh.ctx.group->abort(reason);
    sh.strategy.abort(reason);
}

void rank_main(Shared& sh, int index) {
    Rank rank(index, sh.ctx);
    const Experiment& e = sh.e;
    bool started = false;
    try {
        rank.device().make_current();
        sh.strategy.start_rank(rank);
        started = true;
        const strategy::DataRole role = sh.strategy.data_role(index);
        data::DataLoader::Options lopt;
        lopt.batch_size = e.data.batch_size;
        lopt.shuffle = e.data.shuffle;
        lopt.seed = e.seed;
        lopt.workers = role.needs_data ? e.data.workers : 0;
        lopt.shard = role.shard;
        lopt.num_shards = role.num_shards;
        std::unique_ptr<data::DataLoader> loader;
        if (role.needs_data) loader = std::make_unique<data::DataLoader>(sh.splits.train, lopt);
        const int64_t train_size = sh.splits.train.size();

        int64_t step = 0;
        data::Batch batch;
        for (int64_t epoch = 0; epoch < e.train.epochs && step < sh.ctx.total_steps; ++epoch) {
            if (loader) loader->start_epoch(epoch);
            {
                std::lock_guard lock(sh.mutex);
                sh.epochs_started = std::max(sh.epochs_started, epoch + 1);
            }
            for (int64_t i = 0; i < sh.steps_per_epoch && step < sh.ctx.total_steps; ++i) {
                if (!sh.gate.begin(step + 1)) return sh.strategy.finish_rank(rank);
                const auto t_wait = Clock::now();
                if (loader) {
                    PARALAB_CHECK(loader->next(batch), "the loader ended an epoch early");
                } else {
                    batch.size = 0;
                    batch.global_size = std::min(e.data.batch_size, train_size - i * e.data.batch_size);
                    batch.index_in_epoch = i;
                    batch.epoch = epoch;
                }
                const auto t_start = Clock::now();
                rank.begin_step(step + 1);
                const int64_t offset =
                    role.needs_data ? data::shard_of_batch(batch.global_size, role.shard, role.num_shards).offset : 0;
                const strategy::StepResult res =
                    sh.strategy.step(rank, batch, offset, sh.schedule.lr_at(step));
                ++step;
                const auto t_end = Clock::now();
                if (res.loss_samples > 0 && !std::isfinite(res.loss_sum))
                    throw Error("the training loss became " +
                                std::string(std::isnan(res.loss_sum) ? "NaN" : "infinite") + " at step " +
                                std::to_string(step) + " (epoch " + std::to_string(epoch + 1) + ") on " +
                                rank.device().name() +
                                "; the model diverged: lower optimizer.lr or set train.clip_norm");
                const auto times = rank.end_step();
                StepRecord rec;
                rec.step = step;
                rec.epoch = epoch;
                rec.steps_per_epoch = sh.steps_per_epoch;
                rec.total_steps = sh.ctx.total_steps;
                rec.device = rank.device().name();
                rec.loss = res.loss_samples > 0 ? res.loss_sum / static_cast<double>(res.loss_samples)
                                                : std::numeric_limits<double>::quiet_NaN();
                rec.samples = res.samples;
                rec.lr = sh.schedule.lr_at(step - 1);
                {
                    std::lock_guard lock(sh.mutex);
                    rec.wall_s = rank.seconds_since_t0(t_end) - sh.eval_s;
                }
                rec.compute_ms = times.compute_ms;
                rec.comm_ms = times.comm_ms;
                rec.data_wait_ms = ms_between(t_wait, t_start);
                // Waiting recorded as such, plus whatever the step spent outside compute and
                // its own communication calls (a collective waiting for a slower peer).
                rec.idle_ms = std::max(times.idle_ms, ms_between(t_start, t_end) - times.compute_ms - times.comm_ms);
                rec.grad_norm = res.grad_norm;
                rec.memory = rank.device().allocator().stats();
                std::vector<Span> spans = rank.take_spans();
                Span wait;
                wait.step = step;
                wait.device = rec.device;
                wait.phase = "data_wait";
                wait.t_begin = rank.seconds_since_t0(t_wait);
                wait.t_end = rank.seconds_since_t0(t_start);
                spans.insert(spans.begin(), wait);
                sh.bus.publish(std::move(spans), rec, res.loss_sum, res.loss_samples);

                if (e.train.eval_every > 0 && step % e.train.eval_every == 0 && step < sh.ctx.total_steps &&
                    sh.splits.test.size() > 0) {
                    // Every rank stops here; rank 0 evaluates the model as it is.
                    rank.comm().barrier();
                    if (index == 0) {
                        const auto te = Clock::now();
                        EvalResult ev = evaluate(sh.strategy, sh.eval_loss, sh.splits.test,
                                                 std::max<int64_t>(256, e.data.batch_size), sh.ctx);
                        ev.step = step;
                        std::lock_guard lock(sh.mutex);
                        sh.eval_s += std::chrono::duration<double>(Clock::now() - te).count();
                        sh.bus.publish_eval(ev);
                    }
                    rank.comm().barrier();
                }
            }
        }
        sh.strategy.finish_rank(rank);
    } catch (const std::bad_alloc&) {
        fail_run(sh, std::make_exception_ptr(OutOfMemoryError(rank.device().name() + ": out of host memory")),
                 rank.device().name() + " ran out of host memory");
        if (started) sh.strategy.finish_rank(rank);
    } catch (const std::exception& err) {
        fail_run(sh, std::current_exception(), rank.device().name() + " failed: " + err.what());
        if (started) sh.strategy.finish_rank(rank);
    }
}

}  // namespace

RunSummary run_experiment(const Experiment& e, RunObserver* observer, RunControl* control,
                          int compute_threads, RunArtifacts* artifacts) {
    RunSummary summary;
    summary.name = e.name;
    summary.strategy = e.strategy.type;
    summary.devices = e.devices;

    // ---- what this build can run --------------------------------------------------------
    if (e.train.precision != "fp32")
        throw ConfigError("train.precision: " + e.train.precision +
                          " mixed precision needs CUDA devices; CPU devices train in fp32");
    auto devices = make_devices(e, compute_threads);
    auto strat = strategy::make_strategy(e);

    // ---- data, model, strategy ----------------------------------------------------------
    data::DataSplits splits = data::load_data(e.data, e.seed);
    const data::Dataset& train = splits.train;
    if (train.size() == 0) throw ConfigError("data: the training split is empty");
    const Shape data_shape(train.sample_shape);
    const Shape input = e.input.value_or(data_shape);
    if (input != data_shape)
        throw ConfigError("model.input: " + input.to_string() + " does not match the " + train.name +
                          " examples, which are " + data_shape.to_string());

    RunContext ctx;
    ctx.experiment = &e;
    ctx.input = input;
    ctx.target = Shape(train.target_shape);
    ctx.train_size = train.size();
    for (auto& d : devices) ctx.devices.push_back(d.get());
    comm::LocalGroup group(static_cast<int>(devices.size()));
    ctx.group = &group;
    const int64_t steps_per_epoch = (train.size() + e.data.batch_size - 1) / e.data.batch_size;
    {
        // The reference model: built and initialised from the seed on a scratch host device,
        // so that every strategy starts from the single device's parameters.
        auto scratch = make_cpu_device(0, compute_threads);
        nn::Model reference(e.layers, input, e.loss, DType::f32, *scratch);
        check_model_fits_data(reference, train, e.loss);
        Rng init_rng(e.seed);
        reference.reset_parameters(init_rng);
        summary.parameters = reference.parameter_count();
        ctx.total_steps = steps_per_epoch * e.train.epochs;
        if (e.train.max_steps) ctx.total_steps = std::min(ctx.total_steps, *e.train.max_steps);
        strat->setup(ctx, reference);
    }
    auto schedule = optim::make_schedule(e.schedule, e.optimizer.lr, ctx.total_steps);
    auto eval_loss = nn::make_loss(e.loss);
    MetricsBus bus(observer, static_cast<int>(devices.size()));
    Shared sh(e, splits, *strat, ctx, bus, control, *eval_loss, *schedule, steps_per_epoch);
    if (observer) observer->on_start(e, ctx.total_steps);

    // ---- the rank threads -------------------------------------------------------------------
    ctx.t0 = Clock::now();
    std::vector<std::thread> ranks;
    for (int r = 0; r < static_cast<int>(devices.size()); ++r) ranks.emplace_back(rank_main, std::ref(sh), r);
    for (auto& t : ranks) t.join();
    const auto t_end = Clock::now();

    summary.epochs = sh.epochs_started;
    if (!sh.error) sh.error = sh.aborted;
    if (sh.error) {
        summary.status = "failed";
        try {
            std::rethrow_exception(sh.error);
        } catch (const std::exception& err) {
            summary.error = err.what();
        }
    } else if (sh.gate.stopped()) {
        summary.status = "stopped";
    }
    summary.final_loss = bus.last_step_loss();
    const int64_t steps = bus.steps_ended();
    summary.steps = steps;
    summary.wall_s = std::chrono::duration<double>(t_end - ctx.t0).count() - sh.eval_s;
    summary.samples_per_s = summary.wall_s > 0 ? static_cast<double>(bus.samples_ended()) / summary.wall_s : 0;

    // Memory as training left it: the evaluation below runs on device 0 and would add its own
    // activations to that device's peak only.
    for (auto& d : devices) summary.peak_memory_bytes[d->name()] = d->allocator().stats().peak_total;
    if (artifacts)
        for (auto& d : devices) artifacts->memory[d->name()] = d->allocator().stats();

    if (summary.status == "finished" && splits.test.size() > 0) {
        try {
            ctx.devices[0]->make_current();  // device 0's compute threads on this thread
            EvalResult ev = evaluate(*strat, *eval_loss, splits.test, std::max<int64_t>(256, e.data.batch_size), ctx);
            ev.step = steps;
            summary.test_loss = ev.loss;
            summary.test_accuracy = ev.accuracy;
            if (observer) observer->on_eval(ev);
        } catch (const Error& err) {
            summary.status = "failed";
            summary.error = std::string("evaluation failed: ") + err.what();
        }
    }
    if (artifacts) {
        artifacts->parameters = strat->parameters();
        artifacts->buffers = strat->buffers();
    }
    if (observer) observer->on_finish(summary);
    return summary;
}

}  // namespace paralab::run
