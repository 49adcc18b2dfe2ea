#include "cli.h"
#include "checkpoint_commands.h"
#include "cli_numbers.h"
#include "plan_command.h"
#include "bench/suite.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <atomic>
#include <csignal>
#include <fcntl.h>
#include <unistd.h>
#include <cstdio>
#include <cstring>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/comm/mpi.h"
#include "engine/data/dataset.h"
#include "engine/device/device.h"
#include "engine/nn/model.h"
#include "engine/nn/moe.h"
#include "engine/run/checkpoint.h"
#include "engine/run/event_stream.h"
#include "engine/run/experiment_file.h"
#include "engine/run/trainer.h"
#include "engine/store/run_store.h"
#include "engine/strategy/registry.h"
#include "engine/util/printable.h"

namespace paralab::app {

std::string human_bytes(double bytes) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) bytes /= 1024, ++u;
    char buf[32];
    std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
    return buf;
}

namespace {

using nlohmann::json;

int cmd_devices(bool as_json) {
    const auto devices = discover_devices();
    if (as_json) {
        json out = json::array();
        for (const auto& d : devices) {
            json j{{"name", d.name},
                   {"kind", d.kind == DeviceKind::cpu ? "cpu" : "cuda"},
                   {"description", d.description},
                   {"memory_bytes", d.memory_bytes},
                   {"cores", d.cores}};
            if (d.kind == DeviceKind::cuda) {
                j["compute_capability"] = std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor);
                j["driver"] = d.driver;
            }
            out.push_back(j);
        }
        std::cout << out.dump(2) << "\n";
        return 0;
    }
    for (const auto& d : devices) {
        if (d.kind == DeviceKind::cpu)
            std::printf("cpu      %s, %d cores, %s (virtual devices cpu:0, cpu:1, ...)\n",
                        d.description.c_str(), d.cores, human_bytes(d.memory_bytes).c_str());
        else
            std::printf("%-8s %s, %d SMs, %s, compute capability %d.%d%s\n", d.name.c_str(),
                        d.description.c_str(), d.cores, human_bytes(d.memory_bytes).c_str(),
                        d.cc_major, d.cc_minor, d.driver.empty() ? "" : (", driver " + d.driver).c_str());
    }
    if (devices.size() == 1)
        std::printf("no GPU found%s\n", cuda_backend_built() ? "" : " (this build has no CUDA backend)");
    return 0;
}

// 56810 -> "56,810": validate's figures are exact.
std::string grouped(int64_t n) {
    std::string digits = std::to_string(n < 0 ? -n : n), out;
    for (size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
        out += digits[i];
    }
    return n < 0 ? "-" + out : out;
}

int cmd_validate(const std::string& file, bool as_json) {
    const config::Experiment e = run::load_experiment(file);
    run::CheckedModel checked;
    try {
        checked = run::check_before_training(e);  // the data read once; the model allocates nothing
    } catch (const Error& err) {  // ConfigError, or a ShapeError naming its layer
        throw ConfigError(file + ": " + err.what());
    }
    const Shape& input = checked.input;
    const nn::ModelSummary& model = checked.model;
    const auto& rows = model.layers;
    const int64_t batch = e.data.batch_size;
    // Numbers per example held for backward: the input and what every top-level layer keeps
    // (its output; inside a transformer block the attention probabilities too), as
    // train.recompute leaves it.
    const int64_t activations = strategy::model_cost(e, input).activations_per_example();
    const int64_t params = model.parameters;
    const int64_t flops = model.flops_per_sample;

    if (as_json) {
        json layers = json::array();
        for (const auto& r : rows)
            layers.push_back({{"path", r.path},
                              {"type", r.type},
                              {"copies", r.copies},
                              {"depth", r.depth},
                              {"output", r.output.dims()},
                              {"parameters", r.parameters},
                              {"flops", r.flops},
                              {"activation_bytes", r.activations * batch * 4}});
        json out{{"file", file},
                 {"name", e.name},
                 {"input", input.dims()},
                 {"loss", e.loss},
                 {"layers", layers},
                 {"totals",
                  {{"parameters", params},
                   {"parameter_bytes", params * 4},
                   {"flops_per_example", flops},
                   {"activation_bytes", activations * batch * 4},
                   {"batch_size", batch}}},
                 {"devices", e.devices},
                 {"strategy", run::to_json(e)["strategy"]},
                 {"optimizer", run::to_json(e)["optimizer"]}};
        std::cout << out.dump(2) << "\n";
        return 0;
    }
    std::printf("%s: %s, %zu layers, input %s, loss %s\n", printable(file).c_str(), printable(e.name).c_str(),
                e.layers.size(), input.to_string().c_str(), e.loss.c_str());
    std::printf("%-28s %-15s %-16s %14s %16s\n", "layer", "type", "output", "parameters", "FLOPs");
    for (const auto& r : rows) {
        const std::string indent(2 * r.depth, ' ');
        const std::string type = r.copies > 1 ? r.type + " x" + std::to_string(r.copies) : r.type;
        std::printf("%-28s %-15s %-16s %14s %16s\n", (indent + r.path.substr(6)).c_str(),
                    type.c_str(), r.output.to_string().c_str(), grouped(r.parameters).c_str(),
                    grouped(r.flops).c_str());
    }
    // A mixture of experts is part of its block's row: its own counts, FLOPs of the active experts.
    for (size_t i = 0; i < e.layers.size(); ++i) {
        const nn::LayerSpec& spec = e.layers[i];
        if (spec.type != "transformer_block" || spec.mlp != "moe") continue;
        for (const auto& r : rows) {
            if (r.depth != 0 || r.path != "model.layers[" + std::to_string(i) + "]") continue;
            nn::MoE moe(nn::MoEOptions{spec.experts, spec.top_k, spec.expert_ffn, spec.shared_experts,
                                       spec.capacity_factor, spec.aux_loss, spec.router_z_loss});
            moe.build(r.output, DType::f32, meta_device());
            std::printf("  %s mlp: moe, %lld experts + %lld shared of width %lld, top %lld: %s parameters per "
                        "block, %s FLOPs per example (the %lld active experts of each token only)\n",
                        r.path.substr(6).c_str(), static_cast<long long>(spec.experts),
                        static_cast<long long>(spec.shared_experts), static_cast<long long>(spec.expert_ffn),
                        static_cast<long long>(spec.top_k), grouped(moe.parameter_count()).c_str(),
                        grouped(moe.flops_per_sample()).c_str(),
                        static_cast<long long>(spec.top_k + spec.shared_experts));
        }
    }
    std::printf("total: %s parameters (%s), %s FLOPs per example forward, "
                "activations %s for a batch of %lld\n",
                grouped(params).c_str(), human_bytes(static_cast<double>(params) * 4).c_str(),
                grouped(flops).c_str(), human_bytes(static_cast<double>(activations) * batch * 4).c_str(),
                static_cast<long long>(batch));
    std::printf("devices %s, strategy %s, optimizer %s (lr %g)\n",
                json(e.devices).dump().c_str(), e.strategy.type.c_str(), e.optimizer.type.c_str(),
                e.optimizer.lr);
    return 0;
}

// The progress line: rewritten in place on a terminal, a line every few seconds otherwise.
class ProgressLine : public run::RunObserver {
public:
    explicit ProgressLine(bool tty) : m_tty(tty) {}
    void on_start(const config::Experiment& e, int64_t total) override {
        m_total = total;
        std::string devices;
        for (const auto& d : e.devices) devices += (devices.empty() ? "" : ",") + d;
        std::fprintf(stderr, "%s: %lld steps on %s (%s)\n", printable(e.name).c_str(),
                     static_cast<long long>(total), devices.c_str(), e.strategy.type.c_str());
    }
    void on_step_end(const config::StepRecord& r) override {
        m_samples += r.samples;
        if (r.wall_s - m_last_print < (m_tty ? 0.1 : 2.0) && r.step != m_total) return;
        m_last_print = r.wall_s;
        const double rate = r.wall_s > 0 ? m_samples / r.wall_s : 0;
        const double eta = r.step > 0 ? r.wall_s / r.step * (m_total - r.step) : 0;
        // A mixture of experts: its auxiliary losses beside the loss (their own series).
        std::string aux;
        if (!r.moe.empty()) {
            double a = 0, z = 0;
            int64_t dropped = 0;
            for (const config::MoERecord& m : r.moe) a += m.aux_loss, z += m.router_z_loss, dropped += m.dropped_tokens;
            char buf[96];
            std::snprintf(buf, sizeof buf, "  aux %.4f%s", a + z,
                          dropped > 0 ? ("  dropped " + std::to_string(dropped)).c_str() : "");
            aux = buf;
        }
        std::fprintf(stderr, "%sepoch %lld  step %lld/%lld  loss %.4f%s  %.0f samples/s  ETA %.0fs%s",
                     m_tty ? "\r\033[K" : "", static_cast<long long>(r.epoch + 1),
                     static_cast<long long>(r.step), static_cast<long long>(m_total), r.loss, aux.c_str(), rate,
                     eta, m_tty ? "" : "\n");
    }
    void on_eval(const config::EvalResult& r) override {
        if (m_tty) std::fprintf(stderr, "\n");
        std::fprintf(stderr, "eval at step %lld: loss %.4f", static_cast<long long>(r.step), r.loss);
        if (r.accuracy) std::fprintf(stderr, "  accuracy %.4f", *r.accuracy);
        std::fprintf(stderr, "\n");
        if (!r.sample.empty()) {  // a text model's sample, each line behind a bar
            std::string text = "  | " + printable_message(r.prompt + "[" + r.sample + "]");
            for (size_t at = 0; (at = text.find('\n', at)) != std::string::npos; at += 5) text.replace(at, 1, "\n  | ");
            std::fprintf(stderr, "%s\n", text.c_str());
        }
    }
    void on_finish(const config::RunSummary& s) override {
        if (m_tty) std::fprintf(stderr, "\n");
        std::fprintf(stderr, "%s after %lld steps in %.1fs", s.status.c_str(),
                     static_cast<long long>(s.steps), s.wall_s);
        if (!s.error.empty()) std::fprintf(stderr, ": %s", printable_message(s.error).c_str());
        std::fprintf(stderr, "\n");
    }

private:
    bool m_tty;
    int64_t m_total = 0, m_samples = 0;
    double m_last_print = -1e9;
};

// The run being controlled by the signals below. A signal that arrives before the run exists
// (while the experiment and the data load) is kept as pending and applied when it is attached:
// a job started in the background of a script ignores SIGINT until the handler is installed, so
// the handlers go in first and an early Ctrl-C is not lost.
std::atomic<run::RunControl*> g_control{nullptr};
volatile std::sig_atomic_t g_stop_pending = 0;
volatile std::sig_atomic_t g_pause_pending = 0;

extern "C" void on_interrupt(int) {
    if (auto* c = g_control.load()) c->stop.store(true);
    else g_stop_pending = 1;
}

// SIGUSR1 pauses at the next step boundary and SIGUSR2 resumes; SIGALRM stops like SIGINT.
// mpirun forwards these three to every rank (and the ranks of a job agree on the boundary),
// where SIGINT to mpirun makes it kill the job a second later and stop relaying output: the
// window stops a job with SIGALRM, and the job's last lines (its summary) still arrive.
extern "C" void on_pause(int) {
    if (auto* c = g_control.load()) c->pause.store(true);
    else g_pause_pending = 1;
}
extern "C" void on_resume(int) {
    if (auto* c = g_control.load()) c->pause.store(false);
    else g_pause_pending = 0;
}

void install_run_signals() {
    std::signal(SIGINT, on_interrupt);
    std::signal(SIGTERM, on_interrupt);
    std::signal(SIGALRM, on_interrupt);
    std::signal(SIGUSR1, on_pause);
    std::signal(SIGUSR2, on_resume);
    // A progress line to a reader that went away (mpirun stops forwarding output when it is
    // interrupted) must not end the run before it is stored as stopped.
    std::signal(SIGPIPE, SIG_IGN);
}

// Hands the signals to `control` for as long as it lives, with what arrived before it.
class SignalScope {
public:
    explicit SignalScope(run::RunControl& control) {
        g_control.store(&control);
        if (g_stop_pending) control.stop.store(true);
        if (g_pause_pending) control.pause.store(true);
    }
    ~SignalScope() { g_control.store(nullptr); }
    SignalScope(const SignalScope&) = delete;
    SignalScope& operator=(const SignalScope&) = delete;
};

// Forwards each event to several observers (the progress line and the store).
class Observers : public run::RunObserver {
public:
    explicit Observers(std::vector<run::RunObserver*> all) : m_all(std::move(all)) {}
    void on_start(const config::Experiment& e, int64_t n) override { for (auto* o : m_all) o->on_start(e, n); }
    void on_span(const config::Span& s) override { for (auto* o : m_all) o->on_span(s); }
    void on_step(const config::StepRecord& r) override { for (auto* o : m_all) o->on_step(r); }
    void on_step_end(const config::StepRecord& r) override { for (auto* o : m_all) o->on_step_end(r); }
    void on_eval(const config::EvalResult& r) override { for (auto* o : m_all) o->on_eval(r); }
    void on_finish(const config::RunSummary& s) override {
        for (auto* o : m_all) o->on_finish(m_finish_as ? m_finish_as(s) : s);
    }
    // How each observer sees the run's end, asked anew for each (the store's recorder, first,
    // may fail the run while it writes its last steps: disk full).
    std::function<config::RunSummary(const config::RunSummary&)> m_finish_as;

private:
    std::vector<run::RunObserver*> m_all;
};

std::string store_path(const std::string& db) { return db.empty() ? store::RunStore::default_path() : db; }

struct RunArgs {
    std::string file, db;
    std::string devices, strategy;
    int64_t epochs = 0, steps = 0;
    int threads = 1;
    bool json = false;
    bool stream = false;
    double rank_timeout_s = 60;
    int64_t resume = 0;  // --resume RUN_ID: continue that run from its last checkpoint
    std::string init;    // --init FILE.safetensors: the parameters the run starts from
};

// A run taken for `paralab run --resume` (RunStore::claim_for_resume): from a stopped,
// interrupted or failed status to running in this process, so that a second resume is refused
// ("run N is running"). When this process ends, a run it still holds as running (its experiment
// or data did not read, or its end could not be recorded) gets its status back.
class ResumeClaim {
public:
    ResumeClaim(store::RunStore& db, int64_t id) : m_db(db), m_id(id) {
        try {
            m_previous = db.claim_for_resume(id);
        } catch (const store::StoreError& e) {
            if (e.disk_full())
                throw ConfigError("--resume", "run " + std::to_string(id) + " cannot be resumed: the disk of the run store " +
                                                  db.path() + " is full; free some space and resume it again");
            std::string why = e.what();
            if (why.rfind(db.path() + ": ", 0) == 0) why = why.substr(db.path().size() + 2);
            throw ConfigError("--resume", why);
        }
    }
    ~ResumeClaim() {
        try {
            m_db.release_claim(m_id, m_previous);
        } catch (const std::exception&) {  // the store went away: the run reads as interrupted
        }
    }
    ResumeClaim(const ResumeClaim&) = delete;
    ResumeClaim& operator=(const ResumeClaim&) = delete;

private:
    store::RunStore& m_db;
    int64_t m_id;
    std::string m_previous;
};

// The experiment of run `id`, which `paralab run --resume` continues: a run of `db` (opened for
// writing, so that a killed run reads as interrupted) that this process has claimed.
config::Experiment experiment_to_resume(store::RunStore& db, int64_t id) {
    std::optional<store::RunRow> row;
    try {
        row = db.get_run(id);
    } catch (const store::StoreError& e) {
        throw ConfigError("--resume", e.what());
    }
    if (!row) throw ConfigError("--resume", "run " + std::to_string(id) + " is not in the store " + db.path());
    try {
        return run::parse_experiment(row->config);
    } catch (const ConfigError& err) {
        throw ConfigError("--resume", "the stored experiment of run " + std::to_string(id) + " does not read: " + err.what());
    }
}

// Points the run's checkpoints at its folder once the store has given it an id; a resumed run
// says where it resumed.
class CheckpointFolder : public run::RunObserver {
public:
    CheckpointFolder(run::Checkpointing& cp, const store::RunRecorder& recorder, std::string store)
        : m_cp(cp), m_recorder(recorder), m_store(std::move(store)) {}
    void on_start(const config::Experiment&, int64_t) override {
        if (m_recorder.run_id() == 0) return;  // not recorded (a full disk): the run fails and says why
        if (m_cp.resume) {
            std::fprintf(stderr, "resumed run %lld from step %lld\n", static_cast<long long>(m_recorder.run_id()),
                         static_cast<long long>(m_cp.resumed_from_step));
            return;
        }
        run::point_checkpoints(m_cp, m_store, m_recorder.run_id());
    }

private:
    run::Checkpointing& m_cp;
    const store::RunRecorder& m_recorder;
    std::string m_store;
};

// True in a process that mpirun started as one of several (Open MPI's environment).
bool in_mpi_job() {
    const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
    return size && std::atoi(size) > 1;
}

// A process of an MPI job other than rank 0: it trains its device and forwards its records to
// rank 0, which owns the store and prints; it prints nothing itself but its failures.
int cmd_run_job_rank(const config::Experiment& e, const RunArgs& a, const run::JobOptions& job) {
    run::RunControl control;
    control.init_weights = a.init;
    SignalScope signals(control);
    const config::RunSummary s = run::run_experiment(e, nullptr, &control, a.threads, nullptr, &job);
    return s.status == "failed" ? 1 : 0;
}

int cmd_run(const RunArgs& a) {
    install_run_signals();
    if (a.resume && in_mpi_job())
        throw ConfigError("--resume", "a run across the processes of an mpirun job cannot resume; resume it without mpirun");
    std::optional<store::RunStore> resume_db;
    std::optional<ResumeClaim> claim;  // outlives the run's recorder: released after its end is stored
    if (a.resume) {
        resume_db.emplace(store_path(a.db));
        claim.emplace(*resume_db, a.resume);
    }
    config::Experiment e = a.resume ? experiment_to_resume(*resume_db, a.resume) : run::load_experiment(a.file);
    if (!a.devices.empty()) {
        e.devices.clear();
        std::stringstream ss(a.devices);
        std::string item;
        while (std::getline(ss, item, ',')) e.devices.push_back(parse_device_id(item).to_string());
    }
    if (!a.strategy.empty()) {
        if (!strategy::find_strategy(a.strategy)) {
            std::string names;
            for (const auto& n : strategy::strategy_names()) names += (names.empty() ? "" : ", ") + n;
            throw ConfigError("--strategy", "unknown strategy '" + a.strategy + "'; expected one of " + names);
        }
        e.strategy = strategy::default_config(a.strategy);
    }
    if (a.epochs > 0) e.train.epochs = a.epochs;
    if (a.steps > 0) e.train.max_steps = a.steps;
    data::check_data_files(e.data);

    // Under mpirun: one process per device, rank 0 owns the run (trainer.h, JobOptions).
    std::optional<run::JobOptions> job;
    if (in_mpi_job()) {
        if (!comm::MpiGroup::available())
            throw ConfigError("this paralab was built without MPI, so it cannot run as one process of an "
                              "mpirun job; rebuild with Open MPI installed (libopenmpi-dev)");
        job.emplace();
        job->rank_timeout_s = a.rank_timeout_s;
        // mpirun stops reading the ranks' output once it is interrupted: a progress line must
        // then be dropped, not block the rank (and, on rank 0, the recording of how it ended).
        const int flags = fcntl(STDERR_FILENO, F_GETFL);
        if (flags >= 0) fcntl(STDERR_FILENO, F_SETFL, flags | O_NONBLOCK);
        if (comm::MpiGroup::world().rank() != 0) return cmd_run_job_rank(e, a, *job);
    }

    store::RunStore db(store_path(a.db));
    run::RunControl control;
    control.init_weights = a.init;
    // Checkpoints beside the store (engine/run/checkpoint.h); a run of one process only.
    run::Checkpointing checkpoints;
    checkpoints.refused = [](const std::string& path, const std::string& reason) {
        std::cerr << "paralab: checkpoint " << path << " refused: " << reason << "\n";
    };
    // One line for the newest checkpoint once the run ends (one per epoch would bury the
    // progress); a checkpoint that could not be written is said at once.
    struct LastCheckpoint {
        std::mutex mutex;
        std::string path;
        int64_t step = 0;
        double seconds = 0;
    } last_checkpoint;
    checkpoints.written = [&last_checkpoint](const std::string& path, int64_t step, double seconds,
                                             const std::string& error) {
        if (!error.empty()) {
            if (step > 0) std::cerr << "\nparalab: warning: the checkpoint after step " << step << " was not written: " << error << "\n";
            else std::cerr << "paralab: warning: " << error << "\n";
            return;
        }
        std::lock_guard lock(last_checkpoint.mutex);
        last_checkpoint.path = path;
        last_checkpoint.step = step;
        last_checkpoint.seconds = seconds;
    };
    if (a.resume) {
        checkpoints.folder = run::checkpoint_folder(store_path(a.db), a.resume);
        checkpoints.resume = true;
    }
    if (!job) control.checkpoints = &checkpoints;
    std::optional<SignalScope> signals(std::in_place, control);
    ProgressLine progress(isatty(fileno(stderr)));
    config::RunSummary s;
    int64_t run_id = 0;
    std::string write_error;
    // --stream: the run's events as JSON lines on stdout (engine/run/event_stream.h).
    run::stream::Writer stream([](const std::string& line) {
        std::fwrite(line.data(), 1, line.size(), stdout);
        std::fputc('\n', stdout);
        std::fflush(stdout);
    });
    {
        store::RunRecorder recorder(db, run::to_json(e));
        if (a.resume) recorder.resume(a.resume, [&checkpoints] { return checkpoints.resumed_from_step; }, true);
        CheckpointFolder checkpoint_folder(checkpoints, recorder, store_path(a.db));
        std::vector<run::RunObserver*> all{&recorder, &checkpoint_folder, &progress};
        if (a.stream) all.push_back(&stream);
        Observers observers(all);
        // A store that fills up (or whose file is replaced) stops the run, which then ends
        // `failed` ("disk full: ...").
        recorder.on_store_failed([&control] { control.stop = true; });
        observers.m_finish_as = [&recorder](const config::RunSummary& r) { return recorder.as_recorded(r); };
        if (job)
            job->on_abort = [&](const config::RunSummary& failed) {
                const auto summary = store::summary_json(failed, recorder.run_id());
                if (a.stream) stream.finish(summary);
                if (a.json) std::cout << summary.dump() << std::endl;
            };
        s = recorder.as_recorded(
            run::run_experiment(e, &observers, &control, a.threads, nullptr, job ? &*job : nullptr));
        run_id = recorder.run_id();
        if (!recorder.store_failed()) write_error = recorder.write_error();
    }
    signals.reset();
    if (!last_checkpoint.path.empty())
        std::fprintf(stderr, "checkpoint after step %lld: %s (%.3f s)\n", static_cast<long long>(last_checkpoint.step),
                     last_checkpoint.path.c_str(), last_checkpoint.seconds);
    if (!write_error.empty())
        std::cerr << "paralab: warning: part of the run was not stored: " << write_error << "\n";
    if (a.stream) stream.finish(store::summary_json(s, run_id));
    if (a.json) std::cout << store::summary_json(s, run_id).dump() << std::endl;
    return s.status == "failed" ? 1 : 0;
}

int cmd_runs_list(const std::string& path, bool as_json) {
    // No store yet: no runs (and none is created to say so).
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
        std::fprintf(stderr, "paralab: no run store at %s yet: no runs\n", path.c_str());
        if (as_json) std::cout << "[]\n";
        return 0;
    }
    store::RunStore db(path, store::RunStore::Access::read_only);
    std::vector<store::SkippedRun> skipped;
    const auto rows = db.list_runs(&skipped);
    for (const auto& s : skipped)
        std::fprintf(stderr, "paralab: warning: run %lld left out: its row in %s does not read (%s)\n",
                     static_cast<long long>(s.run_id), path.c_str(), printable(s.reason).c_str());
    if (as_json) {
        json out = json::array();
        for (const auto& r : rows)
            out.push_back({{"run_id", r.run_id}, {"name", r.name}, {"status", r.status},
                           {"strategy", r.strategy}, {"devices", r.devices},
                           {"created_at", r.created_at},
                           {"finished_at", r.finished_at.empty() ? json(nullptr) : json(r.finished_at)}});
        std::cout << out.dump(2) << "\n";
        return 0;
    }
    std::printf("%5s  %-20s  %-24s  %-12s  %-14s  %s\n", "id", "created", "name", "status", "strategy",
                "devices");
    for (const auto& r : rows)
        std::printf("%5lld  %-20s  %-24s  %-12s  %-14s  %s\n", static_cast<long long>(r.run_id),
                    printable(r.created_at).c_str(), printable(r.name).c_str(), r.status.c_str(),
                    printable(r.strategy).c_str(), printable(json(r.devices).dump()).c_str());
    if (rows.empty()) std::printf("no runs in %s\n", path.c_str());
    return 0;
}

int cmd_runs_show(const std::string& path, int64_t id, bool as_json) {
    store::RunStore db(path, store::RunStore::Access::read_only);
    const auto row = db.get_run(id);
    if (!row) throw ConfigError("no run " + std::to_string(id) + " in " + path);
    json j = row->summary;
    j["status"] = row->status;
    j["created_at"] = row->created_at;
    j["config"] = row->config;
    // A mixture-of-experts run: per layer, its routing at the last step, the tokens dropped over
    // the run, and its auxiliary losses (added to the loss) at the first and the last step.
    const std::vector<store::MoEPoint> moe = db.moe_curve(id);
    if (!moe.empty()) {
        json layers = json::array();
        for (size_t l = 0; l < moe.back().layers.size(); ++l) {
            const config::MoERecord& last = moe.back().layers[l];
            int64_t dropped = 0;
            double first_aux = std::nan(""), first_z = std::nan("");
            for (const store::MoEPoint& p : moe)
                for (const config::MoERecord& m : p.layers)
                    if (m.layer == last.layer) {
                        dropped += m.dropped_tokens;
                        if (std::isnan(first_aux)) first_aux = m.aux_loss, first_z = m.router_z_loss;
                    }
            layers.push_back(json{{"layer", last.layer},
                                  {"tokens_per_expert_last_step", last.tokens_per_expert},
                                  {"dropped_tokens", dropped},
                                  {"aux_loss_first_last", json::array({first_aux, last.aux_loss})},
                                  {"router_z_loss_first_last", json::array({first_z, last.router_z_loss})}});
        }
        j["moe"] = layers;
    }
    if (as_json) {
        std::cout << j.dump(2) << "\n";
        return 0;
    }
    std::printf("run %lld: %s (%s)\n", static_cast<long long>(id), printable(row->name).c_str(), row->status.c_str());
    for (const auto& [k, v] : j.items())
        if (k != "config") std::printf("  %-18s %s\n", printable(k).c_str(), printable(v.dump()).c_str());
    return 0;
}

int cmd_runs_export(const std::string& path, int64_t id, const std::string& file) {
    store::RunStore db(path, store::RunStore::Access::read_only);
    if (!db.get_run(id)) throw ConfigError("no run " + std::to_string(id) + " in " + path);
    errno = 0;
    std::ofstream out(file);
    if (!out) throw ConfigError(file + ": cannot write the CSV file: " + std::strerror(errno ? errno : EIO));
    db.export_csv(id, out);
    errno = 0;
    out.close();
    if (!out) throw ConfigError(file + ": writing the CSV file failed: " + std::strerror(errno ? errno : EIO));
    return 0;
}

}  // namespace

namespace {
// The window needs a display (or a Qt platform chosen by hand, such as offscreen): without one
// Qt aborts, so say what to do instead.
int open_window(int argc, char** argv, int (*open_gui)(int, char**)) {
    const auto set = [](const char* name) {
        const char* value = std::getenv(name);
        return value != nullptr && *value != '\0';
    };
    if (!set("DISPLAY") && !set("WAYLAND_DISPLAY") && !set("QT_QPA_PLATFORM")) {
        std::cerr << "paralab: no display to open the window on; run an experiment headless with "
                     "`paralab run FILE`, or see `paralab --help`\n";
        return 2;
    }
    return open_gui(argc, argv);
}
}  // namespace

int run_cli(int argc, char** argv, int (*open_gui)(int argc, char** argv)) {
    // `paralab FILE.paralab.json` opens the file in the window (Qt's own options may follow).
    if (argc >= 2 && std::string_view(argv[1]).ends_with(".json")) {
        if (open_gui) return open_window(argc, argv, open_gui);
        std::cerr << "paralab: this build has no window; run the experiment with `paralab run "
                  << argv[1] << "`\n";
        return 2;
    }
    CLI::App app{"ParaLab: a laboratory for parallel neural-network training"};
    app.require_subcommand(0, 1);

    RunArgs run_args;
    auto* run = app.add_subcommand("run", "run an experiment file headless");
    auto* run_file = run->add_option("file", run_args.file, "experiment file (*.paralab.json)");
    add_integer_option(run, "--resume", run_args.resume, 1, INT64_MAX,
                       "continue a stopped, interrupted or failed run from its last checkpoint (RUN_ID)")
        ->excludes(run_file);
    run->add_option("--init", run_args.init,
                    "start from the parameters in a safetensors file (names as paralab export --weights writes)");
    run->add_option("--devices", run_args.devices, "comma list of devices, e.g. cpu:0,cpu:1");
    run->add_option("--strategy", run_args.strategy, "parallel strategy");
    add_integer_option(run, "--epochs", run_args.epochs, 1, INT64_MAX, "epochs");
    add_integer_option(run, "--steps", run_args.steps, 1, INT64_MAX, "cap on optimizer steps");
    add_integer_option(run, "--threads", run_args.threads, 1, 256, "compute threads per device");
    run->add_flag("--json", run_args.json, "print a JSON summary on stdout at the end");
    run->add_flag("--stream", run_args.stream,
                  "write the run's events (steps, spans, evals, the summary) as JSON lines on stdout, "
                  "for a viewer in another process");
    add_number_option(run, "--rank-timeout", run_args.rank_timeout_s, 1, 86400,
                      "under mpirun: seconds a process may go unheard before the run fails (default 60)");
    run->add_option("--db", run_args.db, "run store (SQLite); default " + store::RunStore::default_path());

    std::string runs_db;
    bool runs_json = false;
    int64_t run_id = 0;
    std::string csv_file;
    auto* runs = app.add_subcommand("runs", "the runs kept in the store");
    runs->require_subcommand(1);
    auto* runs_list = runs->add_subcommand("list", "every run, oldest first");
    auto* runs_show = runs->add_subcommand("show", "one run: config, status, summary");
    auto* runs_export = runs->add_subcommand("export", "per-step, per-device metrics as CSV");
    for (auto* sub : {runs_list, runs_show, runs_export})
        sub->add_option("--db", runs_db, "run store (SQLite)");
    runs_list->add_flag("--json", runs_json, "print JSON");
    runs_show->add_flag("--json", runs_json, "print JSON");
    add_integer_option(runs_show, "id", run_id, 1, INT64_MAX, "run id")->required();
    add_integer_option(runs_export, "id", run_id, 1, INT64_MAX, "run id")->required();
    runs_export->add_option("--csv", csv_file, "output file")->required();

    std::string validate_file;
    auto* validate = app.add_subcommand("validate", "check an experiment file; print the model summary");
    validate->add_option("file", validate_file, "experiment file")->required();
    bool validate_json = false;
    validate->add_flag("--json", validate_json, "print the model summary as JSON");

    // A run's latest checkpoint: its weights, or text sampled from it (checkpoint_commands.h).
    std::string ckpt_db, weights_file;
    int64_t export_id = 0;
    auto* export_cmd = app.add_subcommand("export", "a run's latest parameters as a safetensors weights file");
    add_integer_option(export_cmd, "id", export_id, 1, INT64_MAX, "run id")->required();
    export_cmd->add_option("--weights", weights_file, "output file (*.safetensors)")->required();
    export_cmd->add_option("--db", ckpt_db, "run store (SQLite)");
    GenerateArgs generate_args;
    auto* generate = app.add_subcommand("generate", "text sampled from a text model's latest parameters");
    add_integer_option(generate, "id", generate_args.run_id, 1, INT64_MAX, "run id")->required();
    generate->add_option("--prompt", generate_args.prompt, "the text to continue")->required();
    add_integer_option(generate, "--tokens", generate_args.tokens, 1, int64_t{1} << 20, "bytes to draw")->required();
    add_number_option(generate, "--temperature", generate_args.temperature, 0.0, 100.0,
                      "softmax temperature (0: greedy; default 0.8)");
    add_unsigned_option(generate, "--seed", generate_args.seed, UINT64_MAX, "the draws' random seed (default 0)");
    generate->add_option("--db", ckpt_db, "run store (SQLite)");

    bool devices_json = false;
    auto* devices = app.add_subcommand("devices", "list the devices found (GPUs, CPU)");
    devices->add_flag("--json", devices_json, "print JSON");

    PlanArgs plan_args;
    auto* plan = add_plan_command(app, plan_args);

    paralab::bench::BenchArgs bench_args;
    auto* bench = app.add_subcommand("bench", "the benchmark suite: all-reduce, strategies, pipeline bubble");
    bench->add_flag("--json", bench_args.json, "print one JSON object with every table");
    bench->add_flag("--quick", bench_args.quick, "a ~20 s version");
    bench->add_flag("--smoke", bench_args.smoke, "a few seconds, one case per table (for tests)");
    bench->add_flag("--models-only", bench_args.models_only, "only the models table (MLP, LeNet, LSTM; 1 and 2 threads)");
    bench->add_flag("--attention-only", bench_args.attention_only,
                    "only the attention table (fused against materialized kernel, T 256 to 2048; 1 and 2 threads)");
    bool bench_calibrate = false;
    bench->add_flag("--calibrate", bench_calibrate,
                    "measure this machine's GEMM rate and memory bandwidth for `paralab plan --cluster local`");
    bench->add_option("--data", bench_args.data_path, "Fashion-MNIST folder (blobs when missing)");
    bench->add_option("--device", bench_args.device,
                      "device of the models table: cpu, or cuda:N (ddp rows on two virtual GPUs)");

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        const int code = app.exit(e);
        return code == 0 ? 0 : 2;
    }

    try {
        if (devices->parsed()) return cmd_devices(devices_json);
        if (bench->parsed())
            return bench_calibrate ? run_calibrate_command(bench_args.json) : paralab::bench::run_suite(bench_args);
        if (plan->parsed()) return run_plan_command(plan_args);
        if (validate->parsed()) return cmd_validate(validate_file, validate_json);
        if (run->parsed()) {
            if (run_args.file.empty() && !run_args.resume)
                throw ConfigError("run: give an experiment file, or --resume RUN_ID");
            if (run_args.resume && (!run_args.devices.empty() || !run_args.strategy.empty() || run_args.epochs ||
                                    run_args.steps))
                throw ConfigError("--resume: the run continues its stored experiment; --devices, --strategy, "
                                  "--epochs and --steps do not go with it");
            if (run_args.resume && !run_args.init.empty())
                throw ConfigError("--init", "a resumed run continues from its checkpoint; --init does not go with --resume");
            return cmd_run(run_args);
        }
        if (runs_list->parsed()) return cmd_runs_list(store_path(runs_db), runs_json);
        if (runs_show->parsed()) return cmd_runs_show(store_path(runs_db), run_id, runs_json);
        if (runs_export->parsed()) return cmd_runs_export(store_path(runs_db), run_id, csv_file);
        if (export_cmd->parsed()) return cmd_export_weights(store_path(ckpt_db), export_id, weights_file);
        if (generate->parsed()) return cmd_generate(store_path(ckpt_db), generate_args);
        if (open_gui) return open_window(argc, argv, open_gui);
        std::cout << app.help();
        return 0;
    } catch (const run::JobRefused&) {
        return 2;  // rank 0 of the MPI job says why
    } catch (const std::exception& e) {
        // One write, so that the lines of a job's processes do not interleave.
        std::string line = "paralab: ";
        if (in_mpi_job()) line += std::string("rank ") + std::getenv("OMPI_COMM_WORLD_RANK") + ": ";
        line += printable_message(e.what());
        line += '\n';
        std::fputs(line.c_str(), stderr);
        return 2;
    }
}

}  // namespace paralab::app
