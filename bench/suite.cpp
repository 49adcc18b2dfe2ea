#include "bench/suite.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include <kernels/cpu/gemm.h>

#include "bench/attention_bench.h"
#include "bench/comm_bench.h"
#include "bench/model_bench.h"
#include "bench/strategy_bench.h"
#include "engine/device/device.h"

namespace paralab::bench {

namespace {

using nlohmann::json;

// An aligned text table: `align` has one letter per column, 'l' or 'r'.
class TextTable {
public:
    TextTable(std::vector<std::string> headers, std::string align)
        : m_headers(std::move(headers)), m_align(std::move(align)) {}
    void add(std::vector<std::string> row) { m_rows.push_back(std::move(row)); }
    void print() const {
        std::vector<size_t> width(m_headers.size(), 0);
        for (size_t c = 0; c < m_headers.size(); ++c) width[c] = m_headers[c].size();
        for (const auto& row : m_rows)
            for (size_t c = 0; c < row.size() && c < width.size(); ++c) width[c] = std::max(width[c], row[c].size());
        auto line = [&](const std::vector<std::string>& row) {
            std::string out;
            for (size_t c = 0; c < width.size(); ++c) {
                const std::string cell = c < row.size() ? row[c] : "";
                const std::string pad(width[c] - cell.size(), ' ');
                if (c > 0) out += "  ";
                out += m_align[c] == 'r' ? pad + cell : cell + (c + 1 < width.size() ? pad : "");
            }
            std::printf("%s\n", out.c_str());
        };
        line(m_headers);
        size_t total = 0;
        for (size_t w : width) total += w + 2;
        std::printf("%s\n", std::string(total - 2, '-').c_str());
        for (const auto& row : m_rows) line(row);
    }

private:
    std::vector<std::string> m_headers;
    std::string m_align;
    std::vector<std::vector<std::string>> m_rows;
};

std::string fmt(const char* f, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, f, v);
    return buf;
}

std::string cpu_model() {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind("model name", 0) == 0) {
            const auto colon = line.find(':');
            if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
        }
    return "unknown CPU";
}

// CPU time of the whole machine and of this process, to tell how much of the machine other
// processes took while the suite ran (Linux /proc; zeros elsewhere).
struct CpuClock {
    double machine_busy_s = 0, self_s = 0;
    std::chrono::steady_clock::time_point wall = std::chrono::steady_clock::now();
};

CpuClock read_cpu_clock() {
    CpuClock c;
    const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
    std::ifstream stat("/proc/stat");
    std::string cpu;
    double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
    if (stat >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal && cpu == "cpu")
        c.machine_busy_s = (user + nice + system + irq + softirq + steal) / tick;
    std::ifstream self("/proc/self/stat");
    std::string line;
    if (std::getline(self, line)) {
        // Fields after the ")" that closes the command name: state is field 3, utime 14, stime 15.
        std::istringstream rest(line.substr(line.rfind(')') + 2));
        std::string field;
        double utime = 0, stime = 0;
        for (int i = 3; i <= 15 && rest >> field; ++i) {
            if (i == 14) utime = std::atof(field.c_str());
            if (i == 15) stime = std::atof(field.c_str());
        }
        c.self_s = (utime + stime) / tick;
    }
    return c;
}

// Share of all hardware threads' time that other processes used between a and b (0..1).
double other_processes_load(const CpuClock& a, const CpuClock& b, unsigned hw) {
    const double wall = std::chrono::duration<double>(b.wall - a.wall).count();
    if (wall <= 0 || hw == 0 || b.machine_busy_s <= 0) return 0;
    const double other = (b.machine_busy_s - a.machine_busy_s) - (b.self_s - a.self_s);
    return std::clamp(other / (wall * hw), 0.0, 1.0);
}

struct Plan {
    std::string mode;
    std::vector<int64_t> all_reduce_mib;
    std::vector<int> worlds;
    int64_t bytes_per_timing;  // per rank, over the timed calls of one all-reduce size
    bench::StrategySuiteOptions suite;
    std::vector<int64_t> attention_lengths{256, 1024, 2048};  // the attention table's sequences
    std::vector<int> attention_threads{1, 2};
    int attention_reps = 3;
};

Plan make_plan(const BenchArgs& a) {
    Plan p;
    p.suite.data_path = a.data_path;
    if (a.smoke) {
        p.mode = "smoke";
        p.all_reduce_mib = {1};
        p.worlds = {2};
        p.bytes_per_timing = int64_t(64) << 20;
        p.suite.rounds = 1;
        p.suite.steps = 6;
        p.suite.warmup_steps = 2;
        p.suite.pipeline_steps = 4;
        p.suite.pipeline_warmup_steps = 1;
        p.suite.device_counts = {2};
        p.suite.micro_batches = {2};
        p.suite.pipeline_schedules = {"gpipe"};
        p.suite.uniform_pipeline = false;
        p.suite.transformer_steps = 4;
        p.suite.transformer_warmup_steps = 1;
        p.suite.transformer_all = false;
        p.attention_lengths = {128};
        p.attention_threads = {1};
        p.attention_reps = 1;
    } else if (a.quick) {
        p.mode = "quick";
        p.all_reduce_mib = {1, 16, 64};
        p.worlds = {2, 4};
        p.bytes_per_timing = int64_t(512) << 20;
        p.suite.rounds = 1;
        p.suite.steps = 40;
        p.suite.warmup_steps = 5;
        p.suite.pipeline_steps = 12;
        p.suite.pipeline_warmup_steps = 2;
        p.suite.micro_batches = {1, 4};
        p.suite.pipeline_schedules = {"gpipe"};
        p.suite.transformer_steps = 12;
        p.suite.transformer_warmup_steps = 2;
        p.attention_lengths = {256, 1024};
        p.attention_reps = 2;
    } else {
        p.mode = "full";
        p.all_reduce_mib = {1, 4, 16, 64, 256};
        p.worlds = {2, 4};
        p.bytes_per_timing = int64_t(2) << 30;
    }
    return p;
}

struct AllReduceRow {
    bench::AllReduceBench ar;
    double memcpy_gbps = 0;
    double percent = 0;  // busbw / memcpy
};

bench::ModelBenchOptions model_options(const BenchArgs& a) {
    bench::ModelBenchOptions o;
    o.data_path = a.data_path;
    o.device = a.device;
    if (o.device != "cpu") {
        // Refused up front, once, rather than as a failed row per model.
        DeviceId id;
        try {
            id = parse_device_id(o.device);
        } catch (const ConfigError& err) {
            throw ConfigError(std::string("--device: ") + err.what());
        }
        if (id.kind != DeviceKind::cuda) throw ConfigError("--device: expected cpu or cuda:N, got " + o.device);
        if (!cuda_backend_built())
            throw ConfigError("--device " + o.device + ": this build has no CUDA backend");
        // A GPU: compute threads do not apply, and a step takes about a millisecond, so more
        // steps for the same wall time.
        o.threads = {1};
        o.step_scale = 5.0;
    }
    if (a.smoke) {
        o.rounds = 1;
        o.step_scale = 0.15;
        o.threads = {1};
    } else if (a.quick) {
        o.rounds = 1;
        o.step_scale *= 0.5;
    }
    return o;
}

// The models table: on one CPU device at 1 and 2 threads (with the sgemm rate for
// scale), or on one GPU (no thread count, no sgemm column).
void print_models(const std::vector<bench::ModelTiming>& rows, int rounds, const std::string& device) {
    const bool cpu = device == "cpu";
    std::printf("\nModels: one %s device, SGD momentum (the text models: AdamW), optimizer step included, warm-up "
                "steps left out, fastest of %d round%s;\nGFLOP/s = 3 x forward FLOPs x samples/s; "
                "tokens/s (the text models) = samples/s x 64",
                cpu ? "CPU" : device.c_str(), rounds, rounds == 1 ? "" : "s");
    if (cpu)
        std::printf("; sgemm = a 1024^3 GEMM at the same thread count (%s; OpenBLAS kernel %s)",
                    kernels::cpu::gemm_library().c_str(), bench::blas_kernel().c_str());
    std::printf("\n\n");
    std::vector<std::string> header{"model", "threads", "batch", "steps", "ms/step", "samples/s", "GFLOP/s"};
    if (cpu) header.insert(header.end(), {"sgemm GFLOP/s", "of sgemm"});
    else header.erase(header.begin() + 1);  // threads
    header.push_back("note");
    TextTable t(header, cpu ? "lrrrrrrrrl" : "lrrrrrl");
    for (const auto& r : rows) {
        const bool ok = r.status == "finished";
        std::vector<std::string> row{r.model, std::to_string(r.threads), std::to_string(r.batch),
                                     std::to_string(r.steps - r.warmup_steps) + "+" + std::to_string(r.warmup_steps),
                                     ok ? fmt("%.2f", r.ms_per_step) : "-", ok ? fmt("%.0f", r.samples_per_s) : "-",
                                     ok ? fmt("%.1f", r.gflops) : "-"};
        if (cpu) {
            row.push_back(fmt("%.1f", r.sgemm_gflops));
            row.push_back(ok && r.sgemm_gflops > 0 ? fmt("%.0f%%", 100 * r.gflops / r.sgemm_gflops) : "-");
        } else {
            row.erase(row.begin() + 1);
        }
        row.push_back(ok ? r.description : r.status + ": " + r.error);
        t.add(row);
    }
    t.print();
}

}  // namespace

// The attention table (bench/attention_bench.h).
void print_attention(const std::vector<bench::AttentionTiming>& rows, int reps) {
    std::printf("\nAttention kernels: one causal attention layer (D 128, 4 heads, batch 4, f32), forward + "
                "backward, the fastest of %d steps;\nstep memory: the allocator's high-water mark over the step; "
                "saved: floats per sample kept for backward (q, k, v and probabilities or log-sum-exp)\n\n",
                reps);
    TextTable at({"T", "threads", "kernel", "ms/step", "step memory", "saved/sample"}, "rrlrrr");
    for (const auto& r : rows)
        at.add({std::to_string(r.seq_len), std::to_string(r.threads), r.kernel, fmt("%.2f", r.ms_per_step),
                fmt("%.1f MB", static_cast<double>(r.step_bytes) / 1e6), std::to_string(r.saved_floats)});
    at.print();
}

int run_suite(const BenchArgs& a) {
    if (a.attention_only) {
        const Plan plan = make_plan(a);
        const auto rows = bench::bench_attention(plan.attention_lengths, plan.attention_threads, plan.attention_reps,
                                                 [](const std::string& what) {
                                                     std::fprintf(stderr, "bench: %s\n", what.c_str());
                                                 });
        if (a.json) {
            json out;
            out["machine"] = {{"cpu", cpu_model()}, {"hardware_threads", std::thread::hardware_concurrency()},
                              {"gemm_library", kernels::cpu::gemm_library()}};
            json aj = json::array();
            for (const auto& r : rows) aj.push_back(bench::to_json(r));
            out["attention"] = aj;
            std::cout << out.dump() << std::endl;
            return 0;
        }
        std::printf("paralab bench (attention): %s, %u hardware threads\n", cpu_model().c_str(),
                    std::thread::hardware_concurrency());
        print_attention(rows, plan.attention_reps);
        return 0;
    }
    if (a.models_only) {
        const bool tty_models = isatty(fileno(stderr));
        const bench::ModelBenchOptions mo = model_options(a);
        const auto rows = bench::bench_models(mo, [tty_models](const std::string& what) {
            std::fprintf(stderr, tty_models ? "\r\033[Kbench: %s" : "bench: %s\n", what.c_str());
            std::fflush(stderr);
        });
        if (tty_models) std::fprintf(stderr, "\r\033[K");
        if (a.json) {
            json out;
            out["machine"] = {{"cpu", cpu_model()}, {"hardware_threads", std::thread::hardware_concurrency()},
                              {"openblas_kernel", bench::blas_kernel()},
                              {"gemm_library", kernels::cpu::gemm_library()}};
            json m = json::array();
            for (const auto& r : rows) m.push_back(bench::to_json(r));
            out["models"] = m;
            std::cout << out.dump() << std::endl;
            return 0;
        }
        std::printf("paralab bench (models): %s, %u hardware threads\n", cpu_model().c_str(),
                    std::thread::hardware_concurrency());
        print_models(rows, mo.rounds, mo.device);
        return 0;
    }
    const Plan plan = make_plan(a);
    const auto t_start = std::chrono::steady_clock::now();
    const bool tty = isatty(fileno(stderr));
    const bench::Progress progress = [tty](const std::string& what) {
        std::fprintf(stderr, tty ? "\r\033[Kbench: %s" : "bench: %s\n", what.c_str());
        std::fflush(stderr);
    };
    const unsigned hw = std::thread::hardware_concurrency();

    // ---- all-reduce against memcpy ----------------------------------------------------------
    // Rounds as in the strategy tables: every size and world once per round, the best kept
    // (the fastest all-reduce, and the fastest memcpy, so that a slowed copy cannot flatter
    // the ratio).
    const CpuClock cpu_start = read_cpu_clock();
    std::vector<AllReduceRow> all_reduce;
    const int rounds = std::max(1, plan.suite.rounds);
    for (int round = 0; round < rounds; ++round) {
        size_t row = 0;
        const std::string of_round =
            rounds > 1 ? " (round " + std::to_string(round + 1) + "/" + std::to_string(rounds) + ")" : "";
        for (int64_t mib : plan.all_reduce_mib) {
            const int64_t bytes = mib << 20;
            const int iters = static_cast<int>(std::clamp<int64_t>(plan.bytes_per_timing / bytes, 5, 400));
            progress("memcpy " + std::to_string(mib) + " MiB" + of_round);
            const double memcpy_gbps = bench::measure_memcpy_gbps(bytes, std::max(3, iters / 2));
            for (int world : plan.worlds) {
                progress("all-reduce " + std::to_string(mib) + " MiB on " + std::to_string(world) + " ranks" + of_round);
                const bench::AllReduceBench ar = bench::bench_all_reduce(world, bytes, iters);
                if (round == 0) all_reduce.push_back({});
                AllReduceRow& r = all_reduce[row++];
                if (round == 0 || ar.busbw_gbps > r.ar.busbw_gbps) r.ar = ar;
                r.memcpy_gbps = std::max(r.memcpy_gbps, memcpy_gbps);
            }
        }
    }
    for (auto& r : all_reduce) r.percent = r.memcpy_gbps > 0 ? 100.0 * r.ar.busbw_gbps / r.memcpy_gbps : 0;

    // ---- strategies -------------------------------------------------------------------------
    progress("looking for " + plan.suite.data_path);
    const bench::BenchData data = bench::fashion_mnist_or_blobs(plan.suite.data_path, plan.suite.steps * 128);
    if (data.fallback) std::fprintf(stderr, "%sbench: %s\n", tty ? "\r\033[K" : "", data.description.c_str());
    const bench::StrategySuite suite = bench::bench_strategy_suite(data, plan.suite, progress);
    const auto& strategies = suite.strategies;
    const auto& ddp = suite.ddp;
    const auto& pipeline = suite.pipeline;
    const bench::ModelBenchOptions model_opts = model_options(a);
    const std::vector<bench::ModelTiming> models = bench::bench_models(model_opts, progress);
    const std::vector<bench::AttentionTiming> attention =
        bench::bench_attention(plan.attention_lengths, plan.attention_threads, plan.attention_reps, progress);
    const double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    const double other_load = other_processes_load(cpu_start, read_cpu_clock(), hw);
    if (tty) std::fprintf(stderr, "\r\033[K");
    std::fprintf(stderr, "bench: done in %.1f s\n", total_s);

    const bool any_oversubscribed =
        std::any_of(strategies.begin(), strategies.end(), [](const auto& t) { return t.oversubscribed; });
    const std::string oversubscribed_note =
        "rows whose devices (ranks) outnumber the " + std::to_string(hw) +
        " hardware threads: rank threads share cores, so those rows measure contention, not scaling";

    if (a.json) {
        json out;
        out["mode"] = plan.mode;
        out["machine"] = {{"cpu", cpu_model()}, {"hardware_threads", hw},
                          {"other_processes_cpu_percent", 100 * other_load}};
        out["rounds"] = rounds;
        out["data"] = {{"description", data.description}, {"fallback", data.fallback}};
        out["seconds"] = total_s;
        json ar = json::array();
        for (const auto& r : all_reduce)
            ar.push_back({{"world", r.ar.world}, {"bytes", r.ar.bytes}, {"iterations", r.ar.iterations},
                          {"ms_per_call", r.ar.seconds_per_call * 1e3}, {"algbw_gbps", r.ar.algbw_gbps},
                          {"busbw_gbps", r.ar.busbw_gbps}, {"memcpy_gbps", r.memcpy_gbps},
                          {"busbw_percent_of_memcpy", r.percent}, {"goal_percent", 70},
                          {"oversubscribed", hw > 0 && static_cast<unsigned>(r.ar.world) > hw}});
        out["all_reduce"] = ar;
        json s = json::array(), d = json::array(), pi = json::array();
        for (const auto& t : strategies) s.push_back(bench::to_json(t));
        for (const auto& t : ddp) d.push_back(bench::to_json(t));
        for (const auto& r : pipeline) pi.push_back(bench::to_json(r));
        out["strategies"] = s;
        out["ddp"] = d;
        out["pipeline_idle"] = pi;
        json tr = json::array();
        for (const auto& t : suite.transformer) tr.push_back(bench::to_json(t));
        out["transformer"] = tr;
        json mj = json::array();
        for (const auto& r : models) mj.push_back(bench::to_json(r));
        out["models"] = mj;
        json aj = json::array();
        for (const auto& r : attention) aj.push_back(bench::to_json(r));
        out["attention"] = aj;
        out["openblas_kernel"] = bench::blas_kernel();
        out["gemm_library"] = kernels::cpu::gemm_library();
        std::cout << out.dump() << std::endl;
        return 0;
    }

    std::printf("paralab bench (%s): %s, %u hardware threads\n", plan.mode.c_str(), cpu_model().c_str(), hw);
    std::printf("data: %s\n", data.description.c_str());
    std::printf("other processes used %.0f%% of the machine's CPU time meanwhile%s\n", 100 * other_load,
                other_load > 0.1 ? " (expect noise)" : "");
    if (any_oversubscribed) std::printf("note: * marks %s\n", oversubscribed_note.c_str());

    std::printf("\nLocal all-reduce (ring, one thread per rank), nccl-tests bandwidths: algbw = S/t, "
                "busbw = algbw * 2(N-1)/N;\nmemcpy = one thread copying S bytes (goal: busbw >= 70%% of it)\n\n");
    TextTable art({"size", "ranks", "calls", "ms/call", "algbw GB/s", "busbw GB/s", "memcpy GB/s",
                   "busbw/memcpy", "goal"},
                  "rrrrrrrrl");
    for (const auto& r : all_reduce) {
        const bool over = hw > 0 && static_cast<unsigned>(r.ar.world) > hw;
        art.add({std::to_string(r.ar.bytes >> 20) + " MiB", std::to_string(r.ar.world) + (over ? "*" : ""),
                 std::to_string(r.ar.iterations), fmt("%.3f", r.ar.seconds_per_call * 1e3),
                 fmt("%.2f", r.ar.algbw_gbps), fmt("%.2f", r.ar.busbw_gbps), fmt("%.2f", r.memcpy_gbps),
                 fmt("%.0f%%", r.percent), r.percent >= 70 ? "met" : "missed"});
    }
    art.print();

    const double single_rate = strategies.empty() ? 0 : strategies.front().samples_per_s;
    auto strategy_table = [&](const std::vector<bench::StrategyTiming>& rows) {
        TextTable t({"strategy", "devices", "ms/step", "compute ms", "comm ms", "idle ms", "data ms",
                     "samples/s", "vs single", "note"},
                    "lrrrrrrrrl");
        for (const auto& r : rows) {
            const bool ok = r.status == "finished";
            t.add({r.label, std::to_string(r.devices) + (r.oversubscribed ? "*" : ""),
                   ok ? fmt("%.2f", r.ms_per_step) : "-", ok ? fmt("%.2f", r.compute_ms) : "-",
                   ok ? fmt("%.2f", r.comm_ms) : "-", ok ? fmt("%.2f", r.idle_ms) : "-",
                   ok ? fmt("%.2f", r.data_wait_ms) : "-", ok ? fmt("%.0f", r.samples_per_s) : "-",
                   ok && single_rate > 0 ? fmt("%.2fx", r.samples_per_s / single_rate) : "-",
                   ok ? "" : r.status + ": " + r.error});
        }
        t.print();
    };
    const int64_t timed = plan.suite.steps - plan.suite.warmup_steps;
    std::printf("\nStrategies: Fashion-MNIST MLP 784-256-128-10, global batch 128, %lld steps "
                "(%lld timed after %lld warm-up), fastest of %d round%s;\nms/step is the median step "
                "wall time; compute/comm/idle/data are ms per step, mean over devices (comm includes\n"
                "overlapped all-reduces); vs single = samples/s over single's\n\n",
                static_cast<long long>(plan.suite.steps), static_cast<long long>(timed),
                static_cast<long long>(plan.suite.warmup_steps), rounds, rounds == 1 ? "" : "s");
    strategy_table(strategies);

    std::printf("\nddp: all-reduce overlapped with backward (a communication thread per rank) or after it; "
                "bucket sizes\n(the MLP has 0.94 MB of gradients: 1 and 25 MB buckets are one bucket, "
                "0.1 MB makes two)\n\n");
    strategy_table(ddp);

    std::printf("\nPipeline idle fraction: per stage, idle ms / step wall ms over the timed steps, "
                "mean over stages;\ntheory (p-1)/(m+p-1) is the bubble of p equal stages (goal: "
                "within 5 points). uniform-mlp = 8 x linear 512 on blobs (equal stages)\n\n");
    TextTable pt({"model", "schedule", "p", "m", "ms/step", "idle", "theory", "diff", "goal", "per stage"},
                 "llrrrrrrll");
    for (const auto& r : pipeline) {
        const bool ok = r.status == "finished";
        std::string per_stage;
        for (double f : r.per_stage) per_stage += (per_stage.empty() ? "" : " ") + fmt("%.0f%%", 100 * f);
        const double diff = 100 * (r.measured - r.theory);
        pt.add({r.model, r.schedule, std::to_string(r.stages) + (r.oversubscribed ? "*" : ""),
                std::to_string(r.micro_batches), ok ? fmt("%.2f", r.ms_per_step) : "-",
                ok ? fmt("%.1f%%", 100 * r.measured) : "-", fmt("%.1f%%", 100 * r.theory),
                ok ? fmt("%+.1f", diff) : "-", ok ? (std::fabs(diff) <= 5 ? "met" : "missed") : r.status,
                ok ? per_stage : r.error});
    }
    pt.print();
    if (!suite.transformer.empty()) {
        const int64_t gpt_timed = plan.suite.transformer_steps - plan.suite.transformer_warmup_steps;
        std::printf("\nTransformer strategies: the char-GPT example (4 blocks D 128, T 64, batch 12, AdamW) on "
                    "random bytes, %lld steps (%lld timed);\ncompute/comm/idle: ms per step, mean over "
                    "devices; moved: bytes the communication phases moved per device and step;\npeak: the "
                    "busiest device's peak memory; vs single = samples/s over single's\n\n",
                    static_cast<long long>(plan.suite.transformer_steps), static_cast<long long>(gpt_timed));
        const double gpt_single = suite.transformer.front().samples_per_s;
        TextTable tt({"strategy", "devices", "ms/step", "compute ms", "comm ms", "idle ms", "moved/step",
                      "peak memory", "vs single", "note"},
                     "lrrrrrrrrl");
        for (const auto& r : suite.transformer) {
            const bool ok = r.status == "finished";
            tt.add({r.label, std::to_string(r.devices) + (r.oversubscribed ? "*" : ""),
                    ok ? fmt("%.2f", r.ms_per_step) : "-", ok ? fmt("%.2f", r.compute_ms) : "-",
                    ok ? fmt("%.2f", r.comm_ms) : "-", ok ? fmt("%.2f", r.idle_ms) : "-",
                    ok ? fmt("%.2f MB", r.comm_bytes_per_step / 1e6) : "-",
                    ok ? fmt("%.1f MB", static_cast<double>(r.peak_memory_bytes) / 1e6) : "-",
                    ok && gpt_single > 0 ? fmt("%.2fx", r.samples_per_s / gpt_single) : "-",
                    ok ? "" : r.status + ": " + r.error});
        }
        tt.print();
    }
    print_models(models, model_opts.rounds, model_opts.device);
    print_attention(attention, plan.attention_reps);
    std::printf("\n%.0f s in all\n", total_s);
    return 0;
}

}  // namespace paralab::bench
