#include "engine/run/trainer.h"

#include "engine/comm/gpu.h"
#include "engine/device/cuda_device.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <cmath>
#include <exception>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/comm/mpi.h"
#include "engine/data/loader.h"
#include "engine/device/device.h"
#include "engine/nn/model.h"
#include "engine/run/metrics_bus.h"
#include "engine/run/process_run.h"
#include "engine/strategy/registry.h"
#include "engine/strategy/strategy.h"
#include "engine/util/own_thread.h"

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
            throw ConfigError("model.loss", "cross_entropy needs class labels, but the " + ds.name +
                              " data set is a regression set (use \"mse\")");
        if (out.rank() != 1)
            throw ConfigError("model", "the last layer gives " + out.to_string() +
                              " per example; cross_entropy needs class scores [" +
                              std::to_string(ds.num_classes) + "] (add a flatten and a linear layer)");
        if (out[0] < ds.num_classes)
            throw ConfigError("model", "the last layer gives " + std::to_string(out[0]) +
                              " class scores, but the " + ds.name + " data set has " +
                              std::to_string(ds.num_classes) + " classes");
    } else {
        const Shape target = ds.target_shape.empty() ? Shape{1} : Shape(ds.target_shape);
        if (ds.num_classes > 0 && ds.target_shape.empty())
            throw ConfigError("model.loss", "mse needs regression targets, but the " + ds.name +
                              " data set has class labels (use \"cross_entropy\")");
        if (out != target)
            throw ConfigError("model", "the last layer gives " + out.to_string() +
                              " per example, but the " + ds.name + " data set's targets are " +
                              target.to_string());
    }
}

// The straggler, when the experiment names one, must be one of the run's devices.
void check_straggler(const config::Experiment& e, const std::vector<std::string>& names) {
    if (!e.strategy.straggler_device.empty() &&
        std::find(names.begin(), names.end(), e.strategy.straggler_device) == names.end())
        throw ConfigError("strategy.straggler.device", e.strategy.straggler_device +
                          " is not one of the run's devices" +
                          (names.empty() || names.front().find('/') == std::string::npos ? std::string()
                                                                                       : " (" + names.front() + ", ...)"));
}

// The devices of the run, one per rank (this process's, in an MPI job); refuses what this
// build cannot run.
std::vector<std::unique_ptr<Device>> make_devices(const config::Experiment& e, int compute_threads) {
    if (const auto rule = strategy::descriptor_of(e).check_devices) rule(e);
    std::vector<std::unique_ptr<Device>> devices;
    bool any_cpu = false, any_gpu = false;
    for (size_t i = 0; i < e.devices.size(); ++i) {
        const std::string path = "devices[" + std::to_string(i) + "]";
        const DeviceId id = parse_device_id(e.devices[i]);
        int earlier = 0;  // the same name listed before: virtual devices of one GPU
        for (size_t j = 0; j < i; ++j) {
            if (e.devices[j] != e.devices[i]) continue;
            if (id.kind == DeviceKind::cpu)
                throw ConfigError(path, e.devices[i] + " is listed twice (devices[" +
                                  std::to_string(j) + "]); virtual CPU devices are cpu:0, cpu:1, ...");
            ++earlier;
        }
        if (id.kind == DeviceKind::cpu) {
            any_cpu = true;
            devices.push_back(make_cpu_device(id.index, compute_threads));
            continue;
        }
        any_gpu = true;
        if (!cuda_backend_built())
            throw ConfigError(path, e.devices[i] +
                              " is a GPU, and this build has no CUDA backend; use cpu:" + std::to_string(i));
        // The k-th listing of cuda:N after the first is the virtual GPU "cuda:N#k".
        const std::string name = id.to_string() + (earlier ? "#" + std::to_string(earlier) : "");
        try {
            devices.push_back(make_cuda_device(id.index, name));
        } catch (const ConfigError& err) {
            throw ConfigError(path, err.what());
        }
    }
    if (any_cpu && any_gpu)
        throw ConfigError("devices", "CPU and CUDA devices cannot be mixed in one run; list only cpu:K "
                          "or only cuda:N");
    return devices;
}

// train.precision: bf16/fp16 mixed precision on GPUs (their float GEMMs take half-precision
// inputs; fp16 also scales the loss, which every strategy does).
void set_precision(const config::Experiment& e, const std::vector<std::unique_ptr<Device>>& devices) {
    if (e.train.precision == "fp32") return;
    for (const auto& d : devices)
        if (!d->is_gpu())
            throw ConfigError("train.precision", e.train.precision +
                              " mixed precision needs CUDA devices; CPU devices train in fp32");
    const MatmulPrecision p = e.train.precision == "bf16" ? MatmulPrecision::bf16 : MatmulPrecision::fp16;
    for (const auto& d : devices) d->set_matmul_precision(p);
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
    RunControl* control() const { return m_control; }

private:
    static constexpr int64_t kNever = INT64_MAX;
    RunControl* m_control;
    mutable std::mutex m_mutex;
    int64_t m_stop_from = kNever;  // guarded by m_mutex: the first step no rank may start
    int64_t m_pause_from = kNever; // guarded by m_mutex: while paused, the first step that waits
    int64_t m_max_started = 0;     // guarded by m_mutex
};

// One pass over the test split on the calling thread, through `predict` (the trained model's
// eval-mode output for a batch on `device`).
config::EvalResult evaluate(const std::function<Tensor(const Tensor&)>& predict, Device& device, nn::Loss& loss,
                    const data::Dataset& test, int64_t batch_size, const RunContext& ctx) {
    config::EvalResult r;
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
        auto db = strategy::to_device(b, 0, b.size, ctx.input, ctx.target, device);
        Tensor out = predict(db.x);
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
    Shared(const config::Experiment& e_, const data::DataSplits& splits_, strategy::Strategy& strategy_,
           RunContext& ctx_, MetricsBus& bus_, RunControl* control, nn::Loss& eval_loss_,
           const optim::Schedule& schedule_, int64_t steps_per_epoch_)
        : e(e_), splits(splits_), strategy(strategy_), ctx(ctx_), bus(bus_), gate(control),
          eval_loss(eval_loss_), schedule(schedule_), steps_per_epoch(steps_per_epoch_) {}

    const config::Experiment& e;
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

    // ---- a run across the processes of an MPI job (null/false otherwise) --------------------
    const JobOptions* job = nullptr;
    comm::MpiGroup* mpi = nullptr;
    job::Sender* sender = nullptr;      // processes other than rank 0
    job::Receiver* receiver = nullptr;  // rank 0
    nn::Model* reference = nullptr;     // rank 0: the model put together for evaluation
    Device* reference_device = nullptr;
    config::RunSummary base;                    // name, strategy, devices, parameters
    std::once_flag job_failed;
    bool stopped_in_job = false;        // guarded by mutex: the ranks agreed to stop
    int first_local = 0;                // this process's first rank

    bool is_root() const { return !mpi || mpi->rank() == 0; }

    // The model as trained so far, evaluated where the run's owner holds it: device 0's
    // replica or stages in one process; rank 0's put-together model in a job (collective
    // there: every rank thread calls it, between steps).
    config::EvalResult evaluate_now(Rank& rank, int64_t step);
    void publish(std::vector<config::Span> spans, const config::StepRecord& r, double loss_sum, int64_t loss_samples);
    // Rank 0 of a job: records the run as failed, naming `rank`, and ends the job.
    [[noreturn]] void fail_job(int rank, const std::string& reason);
};

void Shared::publish(std::vector<config::Span> spans, const config::StepRecord& r, double loss_sum, int64_t loss_samples) {
    if (sender)
        sender->publish({std::move(spans), r, loss_sum, loss_samples});
    else
        bus.publish(std::move(spans), r, loss_sum, loss_samples);
}

config::EvalResult Shared::evaluate_now(Rank& rank, int64_t step) {
    const int64_t batch = std::max<int64_t>(256, e.data.batch_size);
    config::EvalResult ev;
    if (!mpi) {
        ev = evaluate([this](const Tensor& x) { return strategy.predict(x); }, *ctx.devices[0], eval_loss,
                      splits.test, batch, ctx);
    } else {
        // One thread per process, over the processes' communicator.
        if (rank.index() != first_local) return ev;
        job::gather_model(*ctx.processes, strategy.parameters(), strategy.buffers(), is_root() ? reference : nullptr);
        if (!is_root()) return ev;
        ev = evaluate([this](const Tensor& x) { return reference->forward(x, nn::Mode::eval); }, *reference_device,
                      eval_loss, splits.test, batch, ctx);
    }
    ev.step = step;
    return ev;
}

void Shared::fail_job(int rank, const std::string& reason) {
    std::call_once(job_failed, [&] {
        config::RunSummary s = base;
        s.status = "failed";
        s.error = (rank < 0 ? std::string() : "rank " + std::to_string(rank) + " (" + base.devices[size_t(rank)] + "): ") + reason;
        s.steps = bus.steps_ended();
        s.final_loss = bus.last_step_loss();
        {
            std::lock_guard lock(mutex);
            s.epochs = epochs_started;
        }
        try {
            bus.publish_finish(s);
        } catch (const std::exception& err) {
            std::fprintf(stderr, "paralab: the failed run could not be recorded: %s\n", err.what());
        }
        if (job->on_abort) job->on_abort(s);
        mpi->abort_job(s.error);
    });
    std::_Exit(1);  // another thread is ending the job
}

// A rank failed: remember why (a rank woken by the abort is not the cause) and wake the others.
void fail_run(Shared& sh, std::exception_ptr err, const std::string& reason) {
    if (sh.mpi) {
        // MPI cannot wake the peers: rank 0 records the failure (named after the rank, so the
        // cause alone), then the job ends as a whole.
        std::string cause = reason;
        try {
            std::rethrow_exception(err);
        } catch (const std::exception& e) {
            cause = e.what();
        } catch (...) {
        }
        if (sh.is_root()) sh.fail_job(sh.mpi->rank(), cause);
        try {
            sh.sender->fail(cause);
        } catch (const std::exception&) {
        }
        std::this_thread::sleep_for(std::chrono::seconds(5));  // rank 0 ends the job meanwhile
        sh.mpi->abort_job(reason);
    }
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

// Whether step `step` runs. In a job, the ranks agree on stop and pause at every step boundary
// (one small all-reduce): each process has its own signals and controls.
bool begin_step(Shared& sh, Rank& rank, int64_t step) {
    if (!sh.mpi) return sh.gate.begin(step);
    RunControl* control = sh.gate.control();
    for (;;) {
        double flags[2] = {control && control->stop.load() ? 1.0 : 0.0, control && control->pause.load() ? 1.0 : 0.0};
        rank.comm().all_reduce(flags, 2, DType::f64, comm::ReduceOp::max);
        if (flags[0] > 0) {
            std::lock_guard lock(sh.mutex);
            sh.stopped_in_job = true;
            return false;
        }
        if (flags[1] == 0) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
}

void rank_main(Shared& sh, int index) {
    Rank rank(index, sh.ctx);
    const config::Experiment& e = sh.e;
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
                if (!begin_step(sh, rank, step + 1)) return sh.strategy.finish_rank(rank);
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
                config::StepRecord rec;
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
                std::vector<config::Span> spans = rank.take_spans();
                config::Span wait;
                wait.step = step;
                wait.device = rec.device;
                wait.phase = "data_wait";
                wait.t_begin = rank.seconds_since_t0(t_wait);
                wait.t_end = rank.seconds_since_t0(t_start);
                spans.insert(spans.begin(), wait);
                sh.publish(std::move(spans), rec, res.loss_sum, res.loss_samples);

                if (e.train.eval_every > 0 && step % e.train.eval_every == 0 && step < sh.ctx.total_steps &&
                    sh.splits.test.size() > 0) {
                    // Every rank stops here; rank 0 evaluates the model as it is.
                    rank.comm().barrier();
                    if (index == 0 || sh.mpi) {
                        const auto te = Clock::now();
                        config::EvalResult ev = sh.evaluate_now(rank, step);
                        std::lock_guard lock(sh.mutex);
                        // Once per process: its first rank's (every rank of a job takes part).
                        if (index == 0 || index == sh.first_local)
                            sh.eval_s += std::chrono::duration<double>(Clock::now() - te).count();
                        if (index == 0) sh.bus.publish_eval(ev);
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

namespace {

// A job's rank-0 watchdog: a rank silent for too long, or a stop the ranks cannot honour (they
// wait for a dead peer), fails the run naming the rank. Ends when `done` is set.
void watch_job(Shared& sh, RunControl* control, const std::atomic<bool>& done) {
    const JobOptions& opt = *sh.job;
    std::optional<Clock::time_point> stop_seen;
    while (!done.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        if (done.load()) return;
        double silent = 0;
        const int who = sh.receiver->least_recent(silent);
        if (who > 0 && silent > opt.rank_timeout_s) {
            char text[160];
            std::snprintf(text, sizeof text,
                          "not heard from for %.1f s (the limit is %g s, paralab run --rank-timeout): "
                          "the process hung or died", silent, opt.rank_timeout_s);
            sh.fail_job(who, text);
        }
        if (control && control->stop.load() && !stop_seen) stop_seen = Clock::now();
        if (stop_seen && std::chrono::duration<double>(Clock::now() - *stop_seen).count() > opt.stop_grace_s) {
            char text[320];
            std::snprintf(text, sizeof text,
                          "last heard from %.1f s before mpirun ended the job (a process died, or mpirun "
                          "was interrupted) while the other ranks waited in a step they could not finish "
                          "within %.1f s: most likely this process died (mpirun's message names it)",
                          silent, opt.stop_grace_s);
            sh.fail_job(who > 0 ? who : -1, who > 0 ? text : "the job was told to stop and rank 0 could "
                                                           "not finish its step in time");
        }
    }
}

// The world of a job: this process's device and every process's device name. Refuses, on every
// process alike, a job whose processes disagree or cannot run (`local_error`: this process's
// problem before training, "" when none).
// Runs a check that every process of a job makes alike (the same experiment, the same world):
// rank 0 throws its ConfigError, the others JobRefused (rank 0 says why). Outside a job, root.
template <class F>
void refused_alike(bool root, F&& check) {
    try {
        check();
    } catch (const ConfigError& err) {
        if (!root) throw JobRefused(err.what());
        throw;
    }
}

// The world of a job: every process's devices, named "r<process>/<device>", in process order
// (`per_process` gets how many each runs). Refuses, on every process alike, a job whose
// processes disagree or cannot run (`local_error`: this process's problem before training, ""
// when none).
std::vector<std::string> agree_on_job(comm::MpiGroup& mpi, const config::Experiment& e, const std::vector<std::string>& devices,
                                      const std::string& local_error, std::vector<int>& per_process) {
    config::Experiment common = e;
    common.devices.clear();
    const std::string mine = nlohmann::json{{"devices", devices},
                                            {"error", local_error},
                                            {"experiment", to_json(common).dump()}}
                                 .dump();
    std::vector<std::string> names;
    std::string first_error, experiment0;
    const std::vector<std::string> all = mpi.all_gather_strings(mine);
    per_process.clear();
    for (size_t r = 0; r < all.size(); ++r) {
        const auto j = nlohmann::json::parse(all[r]);
        const auto theirs = j.at("devices").get<std::vector<std::string>>();
        for (const std::string& d : theirs) {
            std::string name = "r";  // appended piece by piece: GCC 12 warns (-Wrestrict) on "r" + ...
            name += std::to_string(r);
            name += '/';
            name += d;
            names.push_back(std::move(name));
        }
        per_process.push_back(static_cast<int>(theirs.size()));
        const std::string err = j.at("error").get<std::string>();
        if (!err.empty() && first_error.empty()) first_error = "rank " + std::to_string(r) + ": " + err;
        if (r == 0) experiment0 = j.at("experiment").get<std::string>();
        else if (first_error.empty() && j.at("experiment").get<std::string>() != experiment0)
            first_error = "rank " + std::to_string(r) + " loaded a different experiment than rank 0 (every "
                          "process must run the same file; only --devices may differ)";
    }
    if (!first_error.empty()) {
        if (mpi.rank() != 0) throw JobRefused(first_error);
        throw ConfigError(first_error);
    }
    return names;
}

}  // namespace

config::RunSummary run_experiment(const config::Experiment& e, RunObserver* observer, RunControl* control,
                          int compute_threads, RunArtifacts* artifacts, const JobOptions* job) {
    config::RunSummary summary;
    summary.name = e.name;
    summary.strategy = e.strategy.type;
    summary.devices = e.devices;
    comm::MpiGroup* mpi = job ? &comm::MpiGroup::world() : nullptr;
    const bool root = !mpi || mpi->rank() == 0;

    // ---- what this build can run, the data and the reference model ----------------------
    // In a job, every process checks its own part first and all agree before any collective.
    std::vector<std::unique_ptr<Device>> devices;
    data::DataSplits splits;
    Shape input;
    std::unique_ptr<Device> scratch;
    std::unique_ptr<nn::Model> reference;
    const auto prepare = [&] {
        devices = make_devices(e, compute_threads);
        // MPI's collectives read host memory: GPUs across processes would need NCCL there.
        if (mpi && std::any_of(devices.begin(), devices.end(), [](const auto& d) { return d->is_gpu(); }))
            throw ConfigError("devices", "CUDA devices in a job across processes (mpirun) are not supported "
                              "in this version; run the GPUs of one machine in one process");
        set_precision(e, devices);
        splits = data::load_data(e.data, e.seed);
        if (splits.train.size() == 0) throw ConfigError("data", "the training split is empty");
        const Shape data_shape(splits.train.sample_shape);
        input = e.input.value_or(data_shape);
        if (input != data_shape)
            throw ConfigError("model.input", input.to_string() + " does not match the " + splits.train.name +
                              " examples, which are " + data_shape.to_string());
        // The reference model: built and initialised from the seed on a scratch host device, so
        // that every strategy starts from the single device's parameters.
        scratch = make_cpu_device(0, compute_threads);
        reference = std::make_unique<nn::Model>(e.layers, input, e.loss, DType::f32, *scratch);
        check_model_fits_data(*reference, splits.train, e.loss);
        Rng init_rng(e.seed);
        reference->reset_parameters(init_rng);
    };
    std::vector<Device*> world_devices;
    std::vector<int> per_process;  // a job's devices per process
    if (!mpi) {
        prepare();
        check_straggler(e, e.devices);
        for (auto& d : devices) world_devices.push_back(d.get());
    } else {
        std::string local_error;
        try {
            prepare();
        } catch (const std::exception& err) {
            local_error = err.what();
        }
        std::vector<std::string> local_names;
        for (auto& d : devices) local_names.push_back(d->name());
        const std::vector<std::string> names = agree_on_job(*mpi, e, local_names, local_error, per_process);
        refused_alike(root, [&] { check_straggler(e, names); });
        summary.devices = names;
        world_devices.assign(names.size(), nullptr);
        int first = 0;
        for (int p = 0; p < mpi->rank(); ++p) first += per_process[size_t(p)];
        for (size_t l = 0; l < devices.size(); ++l) {
            devices[l]->set_name(names[size_t(first) + l]);
            world_devices[size_t(first) + l] = devices[l].get();
        }
    }
    const data::Dataset& train = splits.train;
    auto strat = strategy::make_strategy(e);

    // ---- strategy ---------------------------------------------------------------------------
    RunContext ctx;
    ctx.experiment = &e;
    ctx.input = input;
    ctx.target = Shape(train.target_shape);
    ctx.train_size = train.size();
    ctx.devices = world_devices;
    const int world = static_cast<int>(world_devices.size());
    std::unique_ptr<comm::Group> group;
    if (mpi && std::all_of(per_process.begin(), per_process.end(), [](int n) { return n == 1; }))
        group = std::make_unique<comm::MpiRankGroup>();  // MPI's own collectives
    else if (mpi)
        group = std::make_unique<comm::MpiDeviceGroup>(per_process);
    else
        group = comm::make_device_group(world_devices);  // threads, or the GPUs' communicators
    ctx.group = group.get();
    if (mpi) ctx.processes = &mpi->communicator();
    const int64_t steps_per_epoch = (train.size() + e.data.batch_size - 1) / e.data.batch_size;
    summary.parameters = reference->parameter_count();
    ctx.total_steps = steps_per_epoch * e.train.epochs;
    if (e.train.max_steps) ctx.total_steps = std::min(ctx.total_steps, *e.train.max_steps);
    refused_alike(root, [&] { strat->setup(ctx, *reference); });
    if (!mpi) {
        reference.reset();  // the strategy holds the model from here
        scratch.reset();
    }
    auto schedule = optim::make_schedule(e.schedule, e.optimizer.lr, ctx.total_steps);
    auto eval_loss = nn::make_loss(e.loss);
    MetricsBus bus(root ? observer : nullptr, world, summary.devices.front());
    Shared sh(e, splits, *strat, ctx, bus, control, *eval_loss, *schedule, steps_per_epoch);
    sh.base = summary;
    sh.job = job;
    sh.mpi = mpi;
    sh.reference = reference.get();
    sh.reference_device = scratch.get();
    while (!ctx.is_local(sh.first_local)) ++sh.first_local;
    std::unique_ptr<job::Sender> sender;
    std::unique_ptr<job::Receiver> receiver;
    if (mpi && !root) sender = std::make_unique<job::Sender>(*mpi);
    if (mpi && root)
        receiver = std::make_unique<job::Receiver>(*mpi, bus, [&sh](int rank, const std::string& reason) {
            sh.fail_job(rank, reason);
        });
    sh.sender = sender.get();
    sh.receiver = receiver.get();
    if (observer && root) {
        config::Experiment as_run = e;
        as_run.devices = summary.devices;
        observer->on_start(as_run, ctx.total_steps);
    }

    // ---- the rank threads -------------------------------------------------------------------
    if (mpi) mpi->communicator().barrier();  // every process ready: one t0 for all
    ctx.t0 = Clock::now();
    std::atomic<bool> done{false};
    std::thread watchdog;
    if (receiver) watchdog = std::thread(watch_job, std::ref(sh), control, std::cref(done));
    std::vector<std::thread> ranks;
    for (int r = 0; r < world; ++r)
        if (ctx.is_local(r)) ranks.emplace_back(rank_main, std::ref(sh), r);
    for (auto& t : ranks) t.join();
    const auto t_end = Clock::now();
    if (sender) {
        std::map<std::string, MemoryStats> memory;
        for (Device* d : world_devices)
            if (d) memory[d->name()] = d->allocator().stats();
        sender->end(memory);
    }
    if (receiver) receiver->wait_ended(1e9);  // a rank that never ends is the watchdog's
    done.store(true);
    if (watchdog.joinable()) watchdog.join();
    if (receiver) receiver->stop();

    summary.epochs = sh.epochs_started;
    if (!sh.error) sh.error = sh.aborted;
    if (sh.error) {
        summary.status = "failed";
        try {
            std::rethrow_exception(sh.error);
        } catch (const std::exception& err) {
            summary.error = err.what();
        }
    } else if (sh.gate.stopped() || sh.stopped_in_job) {
        summary.status = "stopped";
    }
    summary.final_loss = bus.last_step_loss();
    const int64_t steps = bus.steps_ended();
    summary.steps = steps;
    summary.wall_s = std::chrono::duration<double>(t_end - ctx.t0).count() - sh.eval_s;
    summary.samples_per_s = summary.wall_s > 0 ? static_cast<double>(bus.samples_ended()) / summary.wall_s : 0;

    // Memory as training left it: the evaluation below runs on device 0 and would add its own
    // activations to that device's peak only.
    for (Device* d : world_devices)
        if (d) summary.peak_memory_bytes[d->name()] = d->allocator().stats().peak_total;
    if (receiver)
        for (const auto& [device, m] : receiver->end_memory()) summary.peak_memory_bytes[device] = m.peak_total;
    if (artifacts) {
        for (Device* d : world_devices)
            if (d) artifacts->memory[d->name()] = d->allocator().stats();
        if (receiver)
            for (const auto& [device, m] : receiver->end_memory()) artifacts->memory[device] = m;
    }

    // In a job the trained model is put together on rank 0 (collective: every process, even
    // after a stop, so that the parameters handed back are the run's).
    if (mpi) {
        mpi->communicator().barrier();
        job::gather_model(mpi->communicator(), strat->parameters(), strat->buffers(), root ? reference.get() : nullptr);
    }
    if (summary.status == "finished" && splits.test.size() > 0 && root) {
        try {
            const int64_t batch = std::max<int64_t>(256, e.data.batch_size);
            config::EvalResult ev;
            // On a thread of its own, with the device's compute threads: this thread may live on
            // (the GUI's run controller) and must not keep an OpenMP team (engine/util/own_thread.h).
            if (!mpi) {
                ev = on_own_thread([&] {
                    ctx.devices[0]->make_current();
                    return evaluate([&](const Tensor& x) { return strat->predict(x); }, *ctx.devices[0],
                                    *eval_loss, splits.test, batch, ctx);
                });
            } else {
                ev = on_own_thread([&] {
                    scratch->make_current();
                    return evaluate([&](const Tensor& x) { return reference->forward(x, nn::Mode::eval); },
                                    *scratch, *eval_loss, splits.test, batch, ctx);
                });
            }
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
        if (!mpi) {
            artifacts->parameters = strat->parameters();
            artifacts->buffers = strat->buffers();
        } else if (root) {
            artifacts->parameters = strategy::host_copies(reference->parameters());
            artifacts->buffers = strategy::host_copies(reference->buffers());
        }
    }
    if (observer && root) observer->on_finish(summary);
    return summary;
}

}  // namespace paralab::run
