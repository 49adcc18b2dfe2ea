// A run across the processes of an MPI job (trainer.h, JobOptions): every process runs its own
// devices, the world is every process's devices in process order ("r1/cpu:0"), rank 0's process
// owns the run: it hears every rank's records, watches for silent ranks, evaluates the model
// put together from every process's part, and its summary is the run's.
#include <cstdio>
#include <exception>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/data/dataset.h"
#include "engine/run/training.h"
#include "engine/strategy/registry.h"

namespace paralab::run::detail {

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

// `setup` run on every process, agreed: when it fails on any process, it fails on all, so that no
// process waits in training for one that will not come. Rank 0 throws its own error (a
// ConfigError as itself) or, when only others failed, the first of theirs naming its rank; the
// others throw JobRefused.
template <class F>
void setup_alike(comm::MpiGroup& mpi, F&& setup) {
    std::exception_ptr failure;
    std::string why;
    try {
        setup();
    } catch (const std::exception& err) {
        failure = std::current_exception();
        why = err.what();
        if (why.empty()) why = "setup failed";
    }
    const std::vector<std::string> all = mpi.all_gather_strings(why);
    for (size_t r = 0; r < all.size(); ++r) {
        if (all[r].empty()) continue;
        if (mpi.rank() != 0) throw JobRefused(why.empty() ? all[r] : why);
        if (failure) std::rethrow_exception(failure);
        throw Error("rank " + std::to_string(r) + ": " + all[r]);
    }
}

// The world of a job: every process's devices, named "r<process>/<device>", in process order
// (`per_process` gets how many each runs). Refuses, on every process alike, a job whose
// processes disagree or cannot run (`local_error`: this process's problem before training, ""
// when none). `stopped`: in, whether this process was stopped while its data loaded; out,
// whether any was (then the job ends before training, on every process alike).
std::vector<std::string> agree_on_job(comm::MpiGroup& mpi, const config::Experiment& e, const std::vector<std::string>& devices,
                                      const std::string& local_error, std::vector<int>& per_process, bool& stopped) {
    config::Experiment common = e;
    common.devices.clear();
    const std::string mine = nlohmann::json{{"devices", devices},
                                            {"error", local_error},
                                            {"stopped", stopped},
                                            {"experiment", to_json(common).dump()}}
                                 .dump();
    stopped = false;
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
        stopped = stopped || j.at("stopped").get<bool>();
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

config::RunSummary run_job(const config::Experiment& e, RunObserver* observer, RunControl* control,
                           int compute_threads, RunArtifacts* artifacts, const JobOptions& job) {
    comm::MpiGroup& mpi = comm::MpiGroup::world();
    const bool root = mpi.rank() == 0;
    config::RunSummary summary;
    summary.name = e.name;
    summary.strategy = e.strategy.type;

    // Every process checks its own part first, and all agree before any collective. A stop
    // (mpirun passes the window's SIGINT on to every process) ends the data loading at its next
    // piece, as in one process.
    Prepared p;
    std::string local_error;
    bool stopped = false;
    try {
        p = prepare(e, compute_threads, true, control ? &control->stop : nullptr,
                    control ? control->init_weights : std::string());
    } catch (const data::LoadStopped&) {
        stopped = true;
    } catch (const std::exception& err) {
        local_error = err.what();
    }
    std::vector<std::string> local_names;
    for (auto& d : p.devices) local_names.push_back(d->name());
    if (p.devices.empty()) local_names = e.devices;  // stopped or refused before they were made
    std::vector<int> per_process;  // devices per process
    const std::vector<std::string> names = agree_on_job(mpi, e, local_names, local_error, per_process, stopped);
    if (stopped) {  // stopped while some process loaded its data: a run of no steps, as in one process
        summary.status = "stopped";
        summary.devices = names;
        if (observer && root) {
            config::Experiment as_run = e;
            as_run.devices = names;
            observer->on_start(as_run, 0);
            observer->on_finish(summary);
        }
        return summary;
    }
    refused_alike(root, [&] { check_straggler(e, names); });
    summary.devices = names;
    std::vector<Device*> world(names.size(), nullptr);
    int first = 0;
    for (int r = 0; r < mpi.rank(); ++r) first += per_process[size_t(r)];
    for (size_t l = 0; l < p.devices.size(); ++l) {
        p.devices[l]->set_name(names[size_t(first) + l]);
        world[size_t(first) + l] = p.devices[l].get();
    }

    RunContext ctx = make_context(e, p, world);
    if (control) ctx.stop_requested = &control->stop;
    std::unique_ptr<comm::Group> group;
    if (std::all_of(per_process.begin(), per_process.end(), [](int n) { return n == 1; }))
        group = std::make_unique<comm::MpiRankGroup>();  // MPI's own collectives
    else
        group = std::make_unique<comm::MpiDeviceGroup>(per_process);
    ctx.group = group.get();
    ctx.processes = &mpi.communicator();
    auto strat = strategy::make_strategy(e);
    summary.parameters = p.reference->parameter_count();
    setup_alike(mpi, [&] { strat->setup(ctx, *p.reference); });
    // Rank 0 keeps the reference: the model is put together there for evaluation.

    auto schedule = optim::make_schedule(e.schedule, e.optimizer.lr, ctx.total_steps);
    auto eval_loss = nn::make_loss(e.loss);
    MetricsBus bus(root ? observer : nullptr, static_cast<int>(world.size()), summary.devices.front());
    Shared sh(e, p.splits, *strat, ctx, bus, control, *eval_loss, *schedule,
              steps_per_epoch(e, ctx.train_size));
    sh.base = summary;
    sh.job = &job;
    sh.mpi = &mpi;
    sh.reference = p.reference.get();
    sh.reference_device = p.scratch.get();
    while (!ctx.is_local(sh.first_local)) ++sh.first_local;
    std::unique_ptr<job::Sender> sender;
    std::unique_ptr<job::Receiver> receiver;
    std::unique_ptr<job::RootHeartbeat> heartbeat;
    if (root) {
        receiver = std::make_unique<job::Receiver>(mpi, bus, [&sh](int rank, const std::string& reason) {
            sh.fail_job(rank, reason);
        });
        heartbeat = std::make_unique<job::RootHeartbeat>(mpi);
    } else {
        // Every process watches rank 0 as rank 0 watches them: a hung rank 0 cannot end the job
        // itself, and the others would wait for it in their next collective for ever.
        const std::string root_name = names.front();
        sender = std::make_unique<job::Sender>(mpi, job.rank_timeout_s, [&mpi, &job, root_name](double silent) {
            char text[240];
            std::snprintf(text, sizeof text,
                          "rank 0 (%s) not heard from for %.1f s (the limit is %g s, paralab run "
                          "--rank-timeout): its process hung or died; the job ends, and the run rank 0 "
                          "recorded reads as interrupted once that process is gone",
                          root_name.c_str(), silent, job.rank_timeout_s);
            mpi.abort_job(text);
        });
    }
    sh.sender = sender.get();
    sh.receiver = receiver.get();
    if (observer && root) {
        config::Experiment as_run = e;
        as_run.devices = summary.devices;
        observer->on_start(as_run, ctx.total_steps);
    }

    mpi.communicator().barrier();  // every process ready: one t0 for all
    ctx.t0 = Clock::now();
    std::atomic<bool> done{false};
    std::thread watchdog;
    if (receiver) watchdog = std::thread(watch_job, std::ref(sh), control, std::cref(done));
    run_local_ranks(sh, static_cast<int>(world.size()));
    const auto t_end = Clock::now();
    if (sender) {
        std::map<std::string, MemoryStats> memory;
        for (Device* d : world)
            if (d) memory[d->name()] = d->allocator().stats();
        sender->end(memory);
    }
    if (receiver) receiver->wait_ended(1e9);  // a rank that never ends is the watchdog's
    done.store(true);
    if (watchdog.joinable()) watchdog.join();
    if (receiver) receiver->stop();

    close_summary(summary, sh, t_end);
    record_memory(summary, artifacts, world);
    if (receiver)
        for (const auto& [device, m] : receiver->end_memory()) {
            summary.peak_memory_bytes[device] = m.peak_total;
            if (artifacts) artifacts->memory[device] = m;
        }

    // The trained model is put together on rank 0 (collective: every process, even after a
    // stop, so that the parameters handed back are the run's).
    mpi.communicator().barrier();
    job::gather_model(mpi.communicator(), strat->parameters(), strat->buffers(), root ? p.reference.get() : nullptr);
    if (root) {
        evaluate_at_end(summary, observer, sh, summary.steps, *p.scratch,
                        [&](const Tensor& x) { return p.reference->forward(x, nn::Mode::eval); });
        if (artifacts) {
            artifacts->parameters = strategy::host_copies(p.reference->parameters());
            artifacts->buffers = strategy::host_copies(p.reference->buffers());
        }
        if (observer) observer->on_finish(summary);
    }
    return summary;
}

}  // namespace paralab::run::detail
