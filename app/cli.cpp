#include "cli.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <csignal>
#include <unistd.h>
#include <cstdio>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/data/dataset.h"
#include "engine/device/device.h"
#include "engine/nn/model.h"
#include "engine/run/experiment.h"
#include "engine/run/trainer.h"

namespace paralab::app {

namespace {

using nlohmann::json;

std::string human_bytes(double bytes) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) bytes /= 1024, ++u;
    char buf[32];
    std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
    return buf;
}

std::string human_count(double n) {
    char buf[32];
    if (n >= 1e9) std::snprintf(buf, sizeof buf, "%.2fG", n / 1e9);
    else if (n >= 1e6) std::snprintf(buf, sizeof buf, "%.2fM", n / 1e6);
    else if (n >= 1e4) std::snprintf(buf, sizeof buf, "%.1fk", n / 1e3);
    else std::snprintf(buf, sizeof buf, "%.0f", n);
    return buf;
}

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
            if (d.kind == DeviceKind::cuda)
                j["compute_capability"] = std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor);
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
            std::printf("%-8s %s, %d SMs, %s, compute capability %d.%d\n", d.name.c_str(),
                        d.description.c_str(), d.cores, human_bytes(d.memory_bytes).c_str(),
                        d.cc_major, d.cc_minor);
    }
    if (devices.size() == 1)
        std::printf("no GPU found%s\n", cuda_backend_built() ? "" : " (this build has no CUDA backend)");
    return 0;
}

int cmd_validate(const std::string& file) {
    const run::Experiment e = run::load_experiment(file);
    data::check_data_files(e.data);
    Shape input;
    if (e.input) {
        input = *e.input;
    } else {  // the examples' shape: load one of each split
        data::DataConfig probe = e.data;
        probe.train_limit = probe.test_limit = 1;
        input = Shape(data::load_data(probe, e.seed).train.sample_shape);
    }
    auto device = make_cpu_device(0);
    nn::Model model(e.layers, input, e.loss, DType::f32, *device);
    const auto rows = model.summary();

    std::printf("%s: %s, %zu layers, input %s, loss %s\n", file.c_str(), e.name.c_str(),
                e.layers.size(), input.to_string().c_str(), e.loss.c_str());
    std::printf("%-28s %-15s %-16s %12s %12s\n", "layer", "type", "output", "parameters", "FLOPs");
    int64_t activations = input.numel();
    for (const auto& r : rows) {
        const std::string indent(2 * r.depth, ' ');
        std::printf("%-28s %-15s %-16s %12s %12s\n", (indent + r.path.substr(6)).c_str(),
                    r.type.c_str(), r.output.to_string().c_str(),
                    human_count(static_cast<double>(r.parameters)).c_str(),
                    human_count(static_cast<double>(r.flops)).c_str());
        if (r.depth == 0) activations += r.output.numel();
    }
    const int64_t params = model.parameter_count();
    const int64_t batch = e.data.batch_size;
    std::printf("total: %s parameters (%s), %s FLOPs per example forward, "
                "activations %s for a batch of %lld\n",
                human_count(static_cast<double>(params)).c_str(),
                human_bytes(static_cast<double>(params) * 4).c_str(),
                human_count(static_cast<double>(model.flops_per_sample())).c_str(),
                human_bytes(static_cast<double>(activations) * batch * 4).c_str(),
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
    void on_start(const run::Experiment& e, int64_t total) override {
        m_total = total;
        std::fprintf(stderr, "%s: %lld steps on %s (%s)\n", e.name.c_str(),
                     static_cast<long long>(total), e.devices[0].c_str(), e.strategy.type.c_str());
    }
    void on_step(const run::StepRecord& r) override {
        m_samples += r.samples;
        if (r.wall_s - m_last_print < (m_tty ? 0.1 : 2.0) && r.step != m_total) return;
        m_last_print = r.wall_s;
        const double rate = r.wall_s > 0 ? m_samples / r.wall_s : 0;
        const double eta = r.step > 0 ? r.wall_s / r.step * (m_total - r.step) : 0;
        std::fprintf(stderr, "%sepoch %lld  step %lld/%lld  loss %.4f  %.0f samples/s  ETA %.0fs%s",
                     m_tty ? "\r\033[K" : "", static_cast<long long>(r.epoch + 1),
                     static_cast<long long>(r.step), static_cast<long long>(m_total), r.loss, rate,
                     eta, m_tty ? "" : "\n");
    }
    void on_eval(const run::EvalResult& r) override {
        if (m_tty) std::fprintf(stderr, "\n");
        std::fprintf(stderr, "eval at step %lld: loss %.4f", static_cast<long long>(r.step), r.loss);
        if (r.accuracy) std::fprintf(stderr, "  accuracy %.4f", *r.accuracy);
        std::fprintf(stderr, "\n");
    }
    void on_finish(const run::RunSummary& s) override {
        if (m_tty) std::fprintf(stderr, "\n");
        std::fprintf(stderr, "%s after %lld steps in %.1fs", s.status.c_str(),
                     static_cast<long long>(s.steps), s.wall_s);
        if (!s.error.empty()) std::fprintf(stderr, ": %s", s.error.c_str());
        std::fprintf(stderr, "\n");
    }

private:
    bool m_tty;
    int64_t m_total = 0, m_samples = 0;
    double m_last_print = -1e9;
};

run::RunControl* g_control = nullptr;

extern "C" void on_interrupt(int) {
    if (g_control) g_control->stop.store(true);
}

json summary_json(const run::RunSummary& s) {
    json j{{"run_id", nullptr},
           {"status", s.status},
           {"name", s.name},
           {"strategy", s.strategy},
           {"devices", s.devices},
           {"steps", s.steps},
           {"epochs", s.epochs},
           {"final_loss", s.final_loss},
           {"test_loss", s.test_loss ? json(*s.test_loss) : json(nullptr)},
           {"test_accuracy", s.test_accuracy ? json(*s.test_accuracy) : json(nullptr)},
           {"samples_per_s", s.samples_per_s},
           {"wall_s", s.wall_s},
           {"peak_memory_bytes", s.peak_memory_bytes},
           {"parameters", s.parameters}};
    if (!s.error.empty()) j["error"] = s.error;
    return j;
}

struct RunArgs {
    std::string file;
    std::string devices, strategy;
    int64_t epochs = 0, steps = 0;
    int threads = 1;
    bool json = false;
};

int cmd_run(const RunArgs& a) {
    run::Experiment e = run::load_experiment(a.file);
    if (!a.devices.empty()) {
        e.devices.clear();
        std::stringstream ss(a.devices);
        std::string item;
        while (std::getline(ss, item, ',')) e.devices.push_back(parse_device_id(item).to_string());
    }
    if (!a.strategy.empty()) {
        const auto& types = run::strategy_types();
        if (std::find(types.begin(), types.end(), a.strategy) == types.end())
            throw ConfigError("--strategy: unknown strategy '" + a.strategy + "'");
        e.strategy = run::StrategyConfig{};
        e.strategy.type = a.strategy;
    }
    if (a.epochs > 0) e.train.epochs = a.epochs;
    if (a.steps > 0) e.train.max_steps = a.steps;
    data::check_data_files(e.data);

    run::RunControl control;
    g_control = &control;
    std::signal(SIGINT, on_interrupt);
    std::signal(SIGTERM, on_interrupt);
    ProgressLine progress(isatty(fileno(stderr)));
    const run::RunSummary s = run::run_experiment(e, &progress, &control, a.threads);
    g_control = nullptr;
    if (a.json) std::cout << summary_json(s).dump() << std::endl;
    return s.status == "failed" ? 1 : 0;
}

}  // namespace

int run_cli(int argc, char** argv, int (*open_gui)(int argc, char** argv)) {
    CLI::App app{"ParaLab: a laboratory for parallel neural-network training"};
    app.require_subcommand(0, 1);

    RunArgs run_args;
    auto* run = app.add_subcommand("run", "run an experiment file headless");
    run->add_option("file", run_args.file, "experiment file (*.paralab.json)")->required();
    run->add_option("--devices", run_args.devices, "comma list of devices, e.g. cpu:0,cpu:1");
    run->add_option("--strategy", run_args.strategy, "parallel strategy");
    run->add_option("--epochs", run_args.epochs, "epochs")->check(CLI::PositiveNumber);
    run->add_option("--steps", run_args.steps, "cap on optimizer steps")->check(CLI::PositiveNumber);
    run->add_option("--threads", run_args.threads, "compute threads per device")
        ->check(CLI::Range(1, 256));
    run->add_flag("--json", run_args.json, "print a JSON summary on stdout at the end");

    std::string validate_file;
    auto* validate = app.add_subcommand("validate", "check an experiment file; print the model summary");
    validate->add_option("file", validate_file, "experiment file")->required();

    bool devices_json = false;
    auto* devices = app.add_subcommand("devices", "list the devices found (GPUs, CPU)");
    devices->add_flag("--json", devices_json, "print JSON");

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        const int code = app.exit(e);
        return code == 0 ? 0 : 2;
    }

    try {
        if (devices->parsed()) return cmd_devices(devices_json);
        if (validate->parsed()) return cmd_validate(validate_file);
        if (run->parsed()) return cmd_run(run_args);
        if (open_gui) return open_gui(argc, argv);
        std::cout << app.help();
        return 0;
    } catch (const std::exception& e) {
        std::cerr << "paralab: " << e.what() << "\n";
        return 2;
    }
}

}  // namespace paralab::app
