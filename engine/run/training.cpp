#include "engine/run/training.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <system_error>
#include <thread>

#include "engine/comm/gpu.h"
#include "engine/data/loader.h"
#include "engine/device/cuda_device.h"
#include "engine/io/weights.h"
#include "engine/nn/moe.h"
#include "engine/run/generate.h"
#include "engine/run/memory_check.h"
#include "engine/strategy/registry.h"
#include "engine/util/own_thread.h"

namespace paralab::run::detail {

namespace {

double ms_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

// Refuses, before any step runs, a model whose output cannot meet the data and the loss.
void check_model_fits_data(const Shape& out, const data::Dataset& ds, const std::string& loss) {
    if (loss == "cross_entropy") {
        if (ds.num_classes == 0)
            throw ConfigError("model.loss", "cross_entropy needs class labels, but the " + ds.name +
                              " data set is a regression set (use \"mse\")");
        if (ds.target_shape.size() == 1) {  // a class per position: [T] targets, [T, V] scores
            const int64_t T = ds.target_shape[0];
            if (out.rank() != 2 || out[0] != T)
                throw ConfigError("model", "the last layer gives " + out.to_string() +
                                  " per example; cross_entropy over the " + ds.name + " data set's " +
                                  std::to_string(T) + " positions needs scores [" + std::to_string(T) + ", " +
                                  std::to_string(ds.num_classes) + "] (end with a linear layer of out " +
                                  std::to_string(ds.num_classes) + ")");
            if (out[1] < ds.num_classes)
                throw ConfigError("model", "the last layer gives " + std::to_string(out[1]) +
                                  " scores per position, but the " + ds.name + " data set's vocabulary has " +
                                  std::to_string(ds.num_classes) + " tokens");
            return;
        }
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

}  // namespace

namespace {

// The devices of the run, one per rank (this process's, in an MPI job); refuses what this
// build cannot run.
std::vector<std::unique_ptr<Device>> make_devices(const config::Experiment& e, int compute_threads) {
    check_device_list(e);
    if (const auto rule = strategy::descriptor_of(e).check_devices) rule(e);
    std::vector<std::unique_ptr<Device>> devices;
    for (size_t i = 0; i < e.devices.size(); ++i) {
        const DeviceId id = parse_device_id(e.devices[i]);
        if (id.kind == DeviceKind::cpu) {
            devices.push_back(make_cpu_device(id.index, compute_threads));
            continue;
        }
        // The k-th listing of cuda:N after the first is the virtual GPU "cuda:N#k".
        const auto earlier = std::count(e.devices.begin(), e.devices.begin() + static_cast<std::ptrdiff_t>(i), e.devices[i]);
        std::string name = id.to_string();
        if (earlier) name += '#' + std::to_string(earlier);  // piecewise: GCC 12 warns (-Wrestrict) on "#" + ...
        try {
            devices.push_back(make_cuda_device(id.index, name));
        } catch (const ConfigError& err) {
            throw ConfigError("devices[" + std::to_string(i) + "]", err.what());
        }
    }
    return devices;
}

// train.precision: bf16/fp16 mixed precision on GPUs (their float GEMMs take half-precision
// inputs; fp16 also scales the loss, which every strategy does).
void set_precision(const config::Experiment& e, const std::vector<std::unique_ptr<Device>>& devices) {
    const MatmulPrecision p = precision_from_name(e.train.precision);
    if (p == MatmulPrecision::fp32) return;  // check_device_list refused half precision on CPUs
    for (const auto& d : devices) d->set_matmul_precision(p);
}

}  // namespace

// The length of the text an evaluation of a text model draws.
constexpr int64_t kSampleTokens = 160;

// One pass over the test split on the calling thread, through `predict` (the trained model's
// eval-mode output for a batch on `device`).
config::EvalResult evaluate(const std::function<Tensor(const Tensor&)>& predict, Device& device, nn::Loss& loss,
                    const data::Dataset& test, int64_t batch_size, const RunContext& ctx) {
    config::EvalResult r;
    if (test.size() == 0) return r;
    // What the evaluation allocates on `device` is not training's memory: it is freed (the
    // loss's kept probabilities too) and left out of the run's and the step's peaks.
    const MemoryStats before = device.allocator().stats();
    struct Restore {
        Device& device;
        nn::Loss& loss;
        const MemoryStats& before;
        ~Restore() {
            loss.release();
            device.allocator().restore_peak(before);
        }
    } restore{device, loss, before};
    data::DataLoader::Options opt;
    opt.batch_size = batch_size;
    opt.shuffle = false;
    data::DataLoader loader(test, opt);
    loader.start_epoch(0);
    data::Batch b;
    double loss_sum = 0;
    int64_t correct = 0;
    while (loader.next(b)) {
        if (ctx.stop_requested && ctx.stop_requested->load()) break;  // a stop is prompt here too
        auto db = strategy::to_device(b, 0, b.size, ctx.input, ctx.target, device);
        Tensor out = predict(db.x);
        loss_sum += loss.forward(out, db.y, 1);  // a sum over the batch
        if (test.num_classes > 0) correct += nn::count_correct(out, db.y);
        r.samples += b.size;
    }
    if (r.samples == 0) return r;
    r.loss = loss_sum / static_cast<double>(r.samples);
    // Per-position targets ([T]) count each position.
    const int64_t positions = test.target_shape.size() == 1 ? test.target_shape[0] : 1;
    if (test.num_classes > 0)
        r.accuracy = static_cast<double>(correct) / static_cast<double>(r.samples * positions);
    if (test.is_text() && !(ctx.stop_requested && ctx.stop_requested->load())) {
        // The prompt: the test split's first words (up to its last space within 24 bytes).
        const auto first = test.text->begin() + test.text_begin;
        std::string prompt(first, first + std::min<int64_t>(24, test.text_end - test.text_begin));
        if (const auto space = prompt.find_last_of(' '); space != std::string::npos && space > 0)
            prompt.resize(space + 1);
        GenerateOptions g;
        g.prompt = prompt;
        g.tokens = kSampleTokens;
        r.prompt = printable_text(prompt);
        r.sample = printable_text(generate_text(predict, device, test.window, g));
    }
    return r;
}

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
// Sleeps until `due` or a stop request, whichever is first; the seconds slept.
double wait_until(Clock::time_point due, const RunControl* control) {
    const auto start = Clock::now();
    for (auto now = start; now < due && !(control && control->stop.load()); now = Clock::now())
        std::this_thread::sleep_for(std::min<Clock::duration>(due - now, std::chrono::milliseconds(20)));
    return std::chrono::duration<double>(Clock::now() - start).count();
}

bool begin_step(Shared& sh, Rank& rank, int64_t step) {
    if (!sh.mpi) return sh.gate.begin(step);
    RunControl* control = sh.gate.control();
    for (;;) {
        double flags[2] = {control && control->stop.load() ? 1.0 : 0.0, control && control->pause.load() ? 1.0 : 0.0};
        rank.comm().all_reduce(flags, 2, DType::f64, comm::ReduceOp::max);
        if (flags[0] > 0) {
            sh.gate.hold_ended();
            std::lock_guard lock(sh.mutex);
            sh.stopped_in_job = true;
            return false;
        }
        if (flags[1] == 0) {
            sh.gate.hold_ended();
            return true;
        }
        sh.gate.hold_began();
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
}

void rank_main(Shared& sh, int index) {
    Rank rank(index, sh.ctx);
    struct ListenerReset {  // the listener refers to `rank`: gone with it
        ~ListenerReset() { nn::set_recompute_listener({}); }
    } listener_reset;
    const config::Experiment& e = sh.e;
    bool started = false;
    try {
        rank.device().make_current();
        // Recomputation inside backward is a phase of its own on the timeline.
        nn::set_recompute_listener([&rank](Clock::time_point b, Clock::time_point e) { rank.record_recompute(b, e); });
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

        // A resumed run starts after its checkpoint's step: in the epoch that step lies in, at
        // the batch after it (the loader's order is a function of seed and epoch).
        int64_t step = sh.first_step;
        const bool checkpointing = sh.checkpoints && !sh.mpi;
        // train.max_steps_per_s: the earliest start of the next step, and the time waited for it.
        std::optional<Clock::time_point> next_start;
        double throttled_s = 0;
        data::Batch batch;
        const int64_t first_epoch = sh.first_step / sh.steps_per_epoch;
        nn::take_moe_step_stats();  // this thread's steps' only
        for (int64_t epoch = first_epoch; epoch < e.train.epochs && step < sh.ctx.total_steps; ++epoch) {
            const int64_t first_batch = epoch == first_epoch ? sh.first_step % sh.steps_per_epoch : 0;
            if (loader) {
                loader->start_epoch(epoch);
                for (int64_t i = 0; i < first_batch; ++i)
                    PARALAB_CHECK(loader->next(batch), "the loader ended an epoch early");
            }
            {
                std::lock_guard lock(sh.mutex);
                sh.epochs_started = std::max(sh.epochs_started, epoch + 1);
            }
            for (int64_t i = first_batch; i < sh.steps_per_epoch && step < sh.ctx.total_steps; ++i) {
                if (e.train.max_steps_per_s > 0) {
                    if (next_start) throttled_s += wait_until(*next_start, sh.gate.control());
                    next_start = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                    std::chrono::duration<double>(1.0 / e.train.max_steps_per_s));
                }
                if (!begin_step(sh, rank, step + 1)) return sh.strategy.finish_rank(rank);
                rank.device().allocator().begin_step();  // the record's step peak: this step's
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
                    rec.wall_s = rank.seconds_since_t0(t_end) - sh.eval_s - sh.gate.paused_s() - throttled_s;
                }
                rec.compute_ms = times.compute_ms;
                rec.comm_ms = times.comm_ms;
                rec.data_wait_ms = ms_between(t_wait, t_start);
                // Waiting recorded as such, plus whatever the step spent outside compute and
                // its own communication calls (a collective waiting for a slower peer).
                rec.idle_ms = std::max(times.idle_ms, ms_between(t_start, t_end) - times.compute_ms - times.comm_ms);
                rec.grad_norm = res.grad_norm;
                rec.memory = rank.device().allocator().stats();
                rec.moe = nn::take_moe_step_stats();
                std::vector<config::Span> spans = rank.take_spans();
                config::Span wait;
                wait.step = step;
                wait.device = rec.device;
                wait.phase = "data_wait";
                wait.t_begin = rank.seconds_since_t0(t_wait);
                wait.t_end = rank.seconds_since_t0(t_start);
                spans.insert(spans.begin(), wait);
                sh.publish(std::move(spans), rec, res.loss_sum, res.loss_samples);

                // Checkpoints every train.checkpoint_every steps, at each epoch's end and at the
                // last step, at a boundary every rank reaches: all wait while rank 0 gathers and
                // writes.
                const int64_t every = e.train.checkpoint_every;
                if (checkpointing && ((every > 0 && step % every == 0) || i + 1 == sh.steps_per_epoch ||
                                      step == sh.ctx.total_steps)) {
                    rank.comm().barrier();
                    if (index == 0) sh.write_checkpoint(step);
                    rank.comm().barrier();
                }

                if (e.train.eval_every > 0 && step % e.train.eval_every == 0 && step < sh.ctx.total_steps &&
                    sh.splits.test.size() > 0) {
                    // Every rank stops here; rank 0 evaluates the model as it is.
                    rank.comm().barrier();
                    if (index == 0 || sh.mpi) {
                        const auto te = Clock::now();
                        config::EvalResult ev = sh.evaluate_now(rank, step);
                        if (index == 0 && ev.samples > 0 && !std::isfinite(ev.loss))
                            throw Error(not_finite_test_loss(ev.loss, step));
                        std::lock_guard lock(sh.mutex);
                        // Once per process: its first rank's (every rank of a job takes part).
                        if (index == 0 || index == sh.first_local)
                            sh.eval_s += std::chrono::duration<double>(Clock::now() - te).count();
                        const bool stopped = sh.ctx.stop_requested && sh.ctx.stop_requested->load();
                        if (index == 0 && !stopped) sh.bus.publish_eval(ev);  // a cut-short pass is no result
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

void Shared::write_checkpoint(int64_t step) {
    if (!checkpoints || checkpoints->folder.empty()) return;
    {
        std::lock_guard lock(mutex);
        if (last_checkpoint >= step) return;
        last_checkpoint = step;
    }
    const auto t0 = Clock::now();
    try {
        CheckpointPosition at;
        at.step = step;
        at.epoch = step / steps_per_epoch;
        at.batch_index = step % steps_per_epoch;
        const std::string path =
            run::write_checkpoint(checkpoints->folder, e, names, at, strategy.save_state());
        if (checkpoints->written)
            checkpoints->written(path, step, std::chrono::duration<double>(Clock::now() - t0).count(), "");
    } catch (const std::exception& err) {
        if (checkpoints->written) checkpoints->written("", step, 0, err.what());
    }
}

std::string not_finite_test_loss(double loss, int64_t step) {
    return std::string("the test loss became ") + (std::isnan(loss) ? "NaN" : "infinite") +
           " in the evaluation after step " + std::to_string(step) +
           ": the model's outputs are not finite (it diverged); lower optimizer.lr or set train.clip_norm";
}

void run_local_ranks(Shared& sh, int world) {
    std::vector<std::thread> ranks;
    for (int r = 0; r < world; ++r) {
        if (!sh.ctx.is_local(r)) continue;
        try {
            ranks.emplace_back(rank_main, std::ref(sh), r);
        } catch (const std::system_error& err) {
            // No thread for this rank (the process's thread or memory limit): the run fails
            // with the reason, and the ranks already started are woken from the collectives
            // that wait for it, then joined.
            const std::string reason = "cannot start the thread of rank " + std::to_string(r) + " (" +
                                       sh.ctx.devices[static_cast<size_t>(r)]->name() + "): " + err.what() +
                                       " (the process's limit on threads or memory)";
            fail_run(sh, std::make_exception_ptr(Error(reason)), reason);
            break;
        }
    }
    for (auto& t : ranks) t.join();
}

namespace {

// The model's input for these splits: model.input, which must match the examples' shape, or
// theirs. Refuses an empty training split.
Shape checked_input(const config::Experiment& e, const data::DataSplits& splits) {
    if (splits.train.size() == 0) throw ConfigError("data", "the training split is empty");
    const Shape data_shape(splits.train.sample_shape);
    const Shape input = e.input.value_or(data_shape);
    if (splits.train.is_text() && input != data_shape)
        throw ConfigError("model.input", input.to_string() + " must be [T] = [seq_len] = " +
                                             data_shape.to_string() + " for the text data set (token ids)");
    if (input != data_shape)
        throw ConfigError("model.input", input.to_string() + " does not match the " + splits.train.name +
                                             " examples, which are " + data_shape.to_string());
    return input;
}

}  // namespace

CheckedModel check_model(const config::Experiment& e, const data::DataSplits& splits) {
    CheckedModel checked{checked_input(e, splits), {}};
    checked.model = nn::summarize(e.layers, checked.input, e.loss);
    check_model_fits_data(checked.model.output, splits.train, e.loss);
    check_memory_fits(e, checked.input);
    return checked;
}

Prepared prepare(const config::Experiment& e, int compute_threads, bool across_processes,
                 const std::atomic<bool>* stop, const std::string& init_weights) {
    Prepared p;
    p.devices = make_devices(e, compute_threads);
    // MPI's collectives read host memory: GPUs across processes would need NCCL there.
    if (across_processes && std::any_of(p.devices.begin(), p.devices.end(), [](const auto& d) { return d->is_gpu(); }))
        throw ConfigError("devices", "CUDA devices in a job across processes (mpirun) are not supported "
                          "in this version; run the GPUs of one machine in one process");
    set_precision(e, p.devices);
    data::StopCheck stopped;
    if (stop) stopped = [stop] { return stop->load(); };
    p.splits = data::load_data(e.data, e.seed, stopped);
    p.input = check_model(e, p.splits).input;
    p.scratch = make_cpu_device(0, compute_threads);
    p.reference = std::make_unique<nn::Model>(e.layers, p.input, e.loss, DType::f32, *p.scratch);
    Rng init_rng(e.seed);
    p.reference->reset_parameters(init_rng);
    if (!init_weights.empty()) io::load_weights(*p.reference, init_weights);
    return p;
}

int64_t steps_per_epoch(const config::Experiment& e, int64_t train_size) {
    return (train_size + e.data.batch_size - 1) / e.data.batch_size;
}

RunContext make_context(const config::Experiment& e, const Prepared& p, std::vector<Device*> world) {
    RunContext ctx;
    ctx.experiment = &e;
    ctx.input = p.input;
    ctx.target = Shape(p.splits.train.target_shape);
    ctx.train_size = p.splits.train.size();
    ctx.devices = std::move(world);
    // Saturated, not wrapped: epochs up to 2^63 - 1 are a run that ends only at max_steps or a stop.
    if (__builtin_mul_overflow(steps_per_epoch(e, ctx.train_size), e.train.epochs, &ctx.total_steps))
        ctx.total_steps = INT64_MAX;
    if (e.train.max_steps) ctx.total_steps = std::min(ctx.total_steps, *e.train.max_steps);
    return ctx;
}

void close_summary(config::RunSummary& s, Shared& sh, Clock::time_point t_end) {
    s.epochs = sh.epochs_started;
    if (!sh.error) sh.error = sh.aborted;
    if (sh.error) {
        s.status = "failed";
        try {
            std::rethrow_exception(sh.error);
        } catch (const std::exception& err) {
            s.error = err.what();
        }
    } else if (sh.gate.stopped() || sh.stopped_in_job) {
        s.status = "stopped";
    }
    s.final_loss = sh.bus.last_step_loss();
    s.steps = sh.bus.steps_ended();
    // A run stopped while paused ended its hold at the stop.
    s.wall_s = std::chrono::duration<double>(t_end - sh.ctx.t0).count() - sh.eval_s - sh.gate.paused_s();
    s.samples_per_s = s.wall_s > 0 ? static_cast<double>(sh.bus.samples_ended()) / s.wall_s : 0;
}

void record_memory(config::RunSummary& s, RunArtifacts* artifacts, const std::vector<Device*>& world) {
    for (Device* d : world) {
        if (!d) continue;
        s.peak_memory_bytes[d->name()] = d->allocator().stats().peak_total;
        if (artifacts) artifacts->memory[d->name()] = d->allocator().stats();
    }
}

void evaluate_at_end(config::RunSummary& s, RunObserver* observer, const Shared& sh, int64_t steps,
                     Device& device, const std::function<Tensor(const Tensor&)>& predict) {
    if (s.status != "finished" || sh.splits.test.size() == 0) return;
    try {
        const int64_t batch = std::max<int64_t>(256, sh.e.data.batch_size);
        config::EvalResult ev = on_own_thread([&] {
            device.make_current();
            return evaluate(predict, device, sh.eval_loss, sh.splits.test, batch, sh.ctx);
        });
        ev.step = steps;
        if (sh.ctx.stop_requested && sh.ctx.stop_requested->load()) {
            s.status = "stopped";  // during the evaluation: it is not reported, and the run is not finished
            return;
        }
        if (ev.samples > 0 && !std::isfinite(ev.loss)) {
            s.status = "failed";
            s.error = not_finite_test_loss(ev.loss, steps);
            return;
        }
        s.test_loss = ev.loss;
        s.test_accuracy = ev.accuracy;
        if (observer) observer->on_eval(ev);
    } catch (const Error& err) {
        s.status = "failed";
        s.error = std::string("evaluation failed: ") + err.what();
    }
}

}  // namespace paralab::run::detail

namespace paralab::run {

CheckedModel check_before_training(const config::Experiment& e) {
    if (const auto issues = validate(e); !issues.empty())
        throw ConfigError(issues.front().path, issues.front().message);
    check_device_list(e);
    strategy::check_device_count(strategy::descriptor_of(e), static_cast<int>(e.devices.size()));
    data::check_data_files(e.data);
    const data::DataSplits splits = data::load_data(e.data, e.seed);
    return detail::check_model(e, splits);
}

}  // namespace paralab::run
