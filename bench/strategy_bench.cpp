#include "bench/strategy_bench.h"

#include "bench/model_bench.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <thread>

#include "engine/data/dataset.h"
#include "engine/run/trainer.h"
#include "engine/util/error.h"

namespace paralab::bench {
namespace {

using nlohmann::json;

constexpr int64_t kBatch = 128;       // the example's global batch
constexpr int64_t kTestExamples = 256;

bool oversubscribed(int devices) {
    const unsigned hw = std::thread::hardware_concurrency();
    return hw > 0 && static_cast<unsigned>(devices) > hw;
}

json device_list(int devices) {
    json list = json::array();
    for (int d = 0; d < devices; ++d) list.push_back("cpu:" + std::to_string(d));
    return list;
}

// A blobs section with exactly `train` training and kTestExamples test examples.
json blobs_data(int64_t train, int64_t features) {
    const int64_t samples = train + kTestExamples;
    return {{"dataset", "blobs"}, {"samples", samples}, {"classes", 10}, {"features", features},
            {"test_fraction", static_cast<double>(kTestExamples) / static_cast<double>(samples)},
            {"train_limit", train}, {"test_limit", kTestExamples}, {"batch_size", kBatch},
            {"workers", 1}, {"shuffle", true}};
}

// Collects the records of one run. The bus calls an observer one call at a time (under its
// lock), so the maps need no lock of their own.
class TimingObserver final : public run::RunObserver {
public:
    void on_step(const config::StepRecord& r) override { m_records[r.device].push_back(r); }
    void on_span(const config::Span& s) override {
        if (s.bytes > 0) m_span_bytes[{s.device, s.step}] += s.bytes;
    }
    // Bytes the communication phases of `device` moved in `step`.
    int64_t span_bytes(const std::string& device, int64_t step) const {
        const auto it = m_span_bytes.find({device, step});
        return it == m_span_bytes.end() ? 0 : it->second;
    }
    void on_step_end(const config::StepRecord& r) override {
        m_end_s.push_back(r.wall_s);
        m_samples.push_back(r.samples);
        m_loss = r.loss;
    }

    // Steps are 1-based; end_s(0) is the start of training.
    double end_s(int64_t step) const { return step == 0 ? 0.0 : m_end_s[static_cast<size_t>(step - 1)]; }
    int64_t steps() const { return static_cast<int64_t>(m_end_s.size()); }
    int64_t samples(int64_t step) const { return m_samples[static_cast<size_t>(step - 1)]; }
    double loss() const { return m_loss; }
    const std::map<std::string, std::vector<config::StepRecord>>& records() const { return m_records; }

private:
    std::map<std::string, std::vector<config::StepRecord>> m_records;  // per device, in step order
    std::map<std::pair<std::string, int64_t>, int64_t> m_span_bytes;  // (device, step) -> bytes
    std::vector<double> m_end_s;
    std::vector<int64_t> m_samples;
    double m_loss = 0;
};

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    const size_t mid = v.size() / 2;
    std::nth_element(v.begin(), v.begin() + static_cast<long>(mid), v.end());
    if (v.size() % 2 == 1) return v[mid];
    const double upper = v[mid];
    return (*std::max_element(v.begin(), v.begin() + static_cast<long>(mid)) + upper) / 2;
}

void report(const Progress& progress, const std::string& what) {
    if (progress) progress(what);
}

struct BenchCase {
    json experiment;
    std::string label, model;
    int64_t warmup = 0;
};

StrategyTiming run_case(const BenchCase& c, int round, int rounds, const Progress& progress) {
    const config::Experiment e = run::parse_experiment(c.experiment);
    std::string what = c.model + ": " + c.label + " on " + std::to_string(e.devices.size()) + " device" +
                       (e.devices.size() == 1 ? "" : "s");
    if (rounds > 1) what += " (round " + std::to_string(round + 1) + "/" + std::to_string(rounds) + ")";
    report(progress, what);
    StrategyTiming t = time_experiment(e, c.warmup);
    t.label = c.label;
    t.model = c.model;
    return t;
}

// Every case `rounds` times, round-robin; per case the finished round with the lowest
// ms_per_step (a failed round is kept only when no round finished).
std::vector<StrategyTiming> run_rounds(const std::vector<BenchCase>& cases, int rounds, const Progress& progress) {
    rounds = std::max(1, rounds);
    std::vector<StrategyTiming> best(cases.size());
    std::vector<std::vector<double>> medians(cases.size());
    for (int round = 0; round < rounds; ++round)
        for (size_t i = 0; i < cases.size(); ++i) {
            StrategyTiming t = run_case(cases[i], round, rounds, progress);
            const bool ok = t.status == "finished";
            if (ok) medians[i].push_back(t.ms_per_step);
            const bool best_ok = best[i].status == "finished";
            if (round == 0 || (ok && (!best_ok || t.ms_per_step < best[i].ms_per_step))) best[i] = std::move(t);
        }
    for (size_t i = 0; i < cases.size(); ++i) best[i].ms_per_step_rounds = medians[i];
    return best;
}

std::string ddp_label(bool overlap, double bucket_mb) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "ddp %s, %g MB buckets", overlap ? "overlap" : "no overlap", bucket_mb);
    return buf;
}

}  // namespace

BenchData fashion_mnist_or_blobs(const std::string& path, int64_t train_examples) {
    BenchData d;
    json fashion{{"dataset", "fashion-mnist"}, {"path", path},
                 {"train_limit", train_examples}, {"test_limit", kTestExamples},
                 {"batch_size", kBatch}, {"workers", 1}, {"shuffle", true}};
    try {
        data::check_data_files(run::parse_experiment(fashion_mlp_experiment({fashion, false, ""}, 1,
                                                                            {{"type", "single"}}, 1))
                                   .data);
        d.data = fashion;
        d.description = "Fashion-MNIST from " + path + " (first " + std::to_string(train_examples) +
                        " training images)";
    } catch (const Error& err) {  // missing, unreadable or damaged files
        d.data = blobs_data(train_examples, 784);
        d.fallback = true;
        d.description = std::string("Fashion-MNIST not found (") + err.what() +
                        "); using the blobs synthetic set with 784 features instead";
    }
    return d;
}

json fashion_mlp_experiment(const BenchData& data, int devices, const json& strategy, int64_t steps) {
    // resources/examples/fashion-mlp.paralab.json, capped at `steps` and without model.input
    // (the data set gives it: [1, 28, 28] for Fashion-MNIST, [784] for the blobs fallback).
    return {{"paralab", 1},
            {"name", "bench-fashion-mlp"},
            {"seed", 42},
            {"data", data.data},
            {"model",
             {{"layers", json::array({{{"type", "flatten"}},
                                      {{"type", "linear"}, {"out", 256}},
                                      {{"type", "relu"}},
                                      {{"type", "linear"}, {"out", 128}},
                                      {{"type", "relu"}},
                                      {{"type", "linear"}, {"out", 10}}})},
              {"loss", "cross_entropy"}}},
            {"devices", device_list(devices)},
            {"strategy", strategy},
            {"optimizer", {{"type", "sgd"}, {"lr", 0.05}, {"momentum", 0.9}, {"weight_decay", 0.0001}}},
            {"schedule", {{"type", "cosine"}, {"warmup_steps", 100}}},
            {"train", {{"epochs", 1}, {"max_steps", steps}}}};
}

json uniform_mlp_experiment(int devices, const json& strategy, int64_t steps) {
    json layers = json::array();
    for (int i = 0; i < 8; ++i) {
        layers.push_back({{"type", "linear"}, {"out", 512}});
        layers.push_back({{"type", "relu"}});
    }
    layers.push_back({{"type", "linear"}, {"out", 10}});
    return {{"paralab", 1},
            {"name", "bench-uniform-mlp"},
            {"seed", 42},
            {"data", blobs_data(steps * kBatch, 512)},
            {"model", {{"layers", layers}, {"loss", "cross_entropy"}}},
            {"devices", device_list(devices)},
            {"strategy", strategy},
            {"optimizer", {{"type", "sgd"}, {"lr", 0.01}, {"momentum", 0.9}}},
            {"schedule", {{"type", "constant"}}},
            {"train", {{"epochs", 1}, {"max_steps", steps}}}};
}

StrategyTiming time_experiment(const config::Experiment& e, int64_t warmup_steps, int compute_threads) {
    StrategyTiming t;
    t.strategy = run::to_json(e)["strategy"];
    t.devices = static_cast<int>(e.devices.size());
    t.oversubscribed = oversubscribed(t.devices);
    t.warmup_steps = warmup_steps;

    TimingObserver obs;
    run::RunControl control;
    const config::RunSummary s = run::run_experiment(e, &obs, &control, compute_threads);
    t.status = s.status;
    t.error = s.error;
    t.final_loss = obs.loss();
    for (const auto& [device, bytes] : s.peak_memory_bytes) t.peak_memory_bytes = std::max(t.peak_memory_bytes, bytes);
    const int64_t n = obs.steps();
    t.steps = n;
    // A run shorter than the warm-up (a failure) keeps its one last step, not none.
    const int64_t first = std::min(warmup_steps, std::max<int64_t>(n - 1, 0)) + 1;
    if (n == 0) return t;

    std::vector<double> wall_ms;
    int64_t samples = 0;
    for (int64_t k = first; k <= n; ++k) {
        wall_ms.push_back((obs.end_s(k) - obs.end_s(k - 1)) * 1e3);
        samples += obs.samples(k);
    }
    t.ms_per_step = median(wall_ms);
    const double timed_s = obs.end_s(n) - obs.end_s(first - 1);
    t.samples_per_s = timed_s > 0 ? static_cast<double>(samples) / timed_s : 0;

    double bytes = 0;  // over the devices' timed steps
    int64_t device_steps = 0;
    for (const auto& device : e.devices) {
        const auto it = obs.records().find(device);
        if (it == obs.records().end()) continue;
        DeviceTiming d;
        d.device = device;
        double wall_sum_ms = 0;
        int64_t count = 0;
        for (const config::StepRecord& r : it->second) {
            if (r.step < first || r.step > n) continue;
            bytes += obs.span_bytes(device, r.step);
            d.compute_ms += r.compute_ms;
            d.comm_ms += r.comm_ms;
            d.idle_ms += r.idle_ms;
            d.data_wait_ms += r.data_wait_ms;
            wall_sum_ms += (obs.end_s(r.step) - obs.end_s(r.step - 1)) * 1e3;
            ++count;
        }
        if (count == 0) continue;
        device_steps += count;
        d.idle_fraction = wall_sum_ms > 0 ? d.idle_ms / wall_sum_ms : 0;
        d.compute_ms /= static_cast<double>(count);
        d.comm_ms /= static_cast<double>(count);
        d.idle_ms /= static_cast<double>(count);
        d.data_wait_ms /= static_cast<double>(count);
        t.per_device.push_back(d);
    }
    t.comm_bytes_per_step = device_steps > 0 ? bytes / static_cast<double>(device_steps) : 0;
    if (!t.per_device.empty()) {
        const double m = static_cast<double>(t.per_device.size());
        for (const auto& d : t.per_device) {
            t.compute_ms += d.compute_ms / m;
            t.comm_ms += d.comm_ms / m;
            t.idle_ms += d.idle_ms / m;
            t.data_wait_ms += d.data_wait_ms / m;
        }
    }
    return t;
}

double pipeline_bubble_fraction(int stages, int64_t micro_batches) {
    return static_cast<double>(stages - 1) / static_cast<double>(micro_batches + stages - 1);
}

namespace {

std::vector<BenchCase> strategy_cases(const BenchData& data, const StrategySuiteOptions& o) {
    struct Case {
        std::string label;
        json strategy;
        int min_devices;
    };
    const std::vector<Case> cases{
        {"data_parallel", {{"type", "data_parallel"}}, 2},
        {"ddp", {{"type", "ddp"}}, 2},
        {"zero stage 1", {{"type", "zero"}, {"stage", 1}}, 2},
        {"zero stage 2", {{"type", "zero"}, {"stage", 2}}, 2},
        {"hogwild", {{"type", "hogwild"}}, 2},
        {"param_server sync", {{"type", "param_server"}, {"mode", "sync"}}, 2},
        {"model_parallel", {{"type", "model_parallel"}}, 2},
        {"pipeline gpipe m=4", {{"type", "pipeline"}, {"schedule", "gpipe"}, {"micro_batches", 4}}, 2},
        {"pipeline 1f1b m=4", {{"type", "pipeline"}, {"schedule", "1f1b"}, {"micro_batches", 4}}, 2},
    };
    std::vector<BenchCase> list;
    list.push_back({fashion_mlp_experiment(data, 1, {{"type", "single"}}, o.steps), "single", "fashion-mlp",
                    o.warmup_steps});
    for (int devices : o.device_counts)
        for (const Case& c : cases)
            if (devices >= c.min_devices)
                list.push_back({fashion_mlp_experiment(data, devices, c.strategy, o.steps), c.label,
                                "fashion-mlp", o.warmup_steps});
    return list;
}

std::vector<BenchCase> ddp_cases(const BenchData& data, const StrategySuiteOptions& o) {
    std::vector<BenchCase> list;
    for (int devices : o.device_counts)
        for (double bucket_mb : {25.0, 1.0, 0.1})
            for (bool overlap : {true, false}) {
                const json strategy{{"type", "ddp"}, {"bucket_mb", bucket_mb}, {"overlap", overlap}};
                list.push_back({fashion_mlp_experiment(data, devices, strategy, o.steps),
                                ddp_label(overlap, bucket_mb), "fashion-mlp", o.warmup_steps});
            }
    return list;
}

// The pipeline cases, and their rows without timings (filled in by fill_pipeline_rows).
std::vector<BenchCase> pipeline_cases(const BenchData& data, const StrategySuiteOptions& o,
                                      std::vector<PipelineIdleRow>& rows) {
    std::vector<std::string> models{"fashion-mlp"};
    if (o.uniform_pipeline) models.push_back("uniform-mlp");
    std::vector<BenchCase> list;
    for (const std::string& model : models)
        for (const std::string& schedule : o.pipeline_schedules)
            for (int p : o.device_counts)
                for (int64_t m : o.micro_batches) {
                    const json strategy{{"type", "pipeline"}, {"schedule", schedule}, {"micro_batches", m}};
                    const bool uniform = model == "uniform-mlp";
                    list.push_back({uniform ? uniform_mlp_experiment(p, strategy, o.pipeline_steps)
                                            : fashion_mlp_experiment(data, p, strategy, o.steps),
                                    "pipeline " + schedule + " m=" + std::to_string(m), model,
                                    uniform ? o.pipeline_warmup_steps : o.warmup_steps});
                    PipelineIdleRow r;
                    r.model = model;
                    r.schedule = schedule;
                    r.stages = p;
                    r.micro_batches = m;
                    r.theory = pipeline_bubble_fraction(p, m);
                    rows.push_back(r);
                }
    return list;
}

void fill_pipeline_rows(std::vector<PipelineIdleRow>& rows, const std::vector<StrategyTiming>& timings) {
    for (size_t i = 0; i < rows.size(); ++i) {
        PipelineIdleRow& r = rows[i];
        const StrategyTiming& t = timings[i];
        r.ms_per_step = t.ms_per_step;
        r.oversubscribed = t.oversubscribed;
        r.status = t.status;
        r.error = t.error;
        r.timing = t;
        r.measured = 0;
        r.per_stage.clear();
        for (const auto& d : t.per_device) {
            r.per_stage.push_back(d.idle_fraction);
            r.measured += d.idle_fraction / static_cast<double>(t.per_device.size());
        }
    }
}

}  // namespace

std::vector<StrategyTiming> bench_strategies(const BenchData& data, const StrategySuiteOptions& o,
                                             const Progress& progress) {
    std::vector<StrategyTiming> rows = run_rounds(strategy_cases(data, o), o.rounds, progress);
    // What was timed is checked: the same steps from the same seed end, for every deterministic
    // strategy, at the single device's loss (to float rounding); hogwild is not deterministic.
    const StrategyTiming& single = rows.front();
    if (single.status != "finished") return rows;
    for (StrategyTiming& t : rows) {
        if (t.status != "finished" || t.label == "hogwild") continue;
        const double gap = std::abs(t.final_loss - single.final_loss) / std::max(1e-6, std::abs(single.final_loss));
        if (!(gap <= 1e-3)) {
            t.status = "failed";
            t.error = "its last step's loss " + std::to_string(t.final_loss) + " is not the single device's " +
                      std::to_string(single.final_loss) + ": the strategy no longer matches one device";
        }
    }
    return rows;
}

std::vector<StrategyTiming> bench_ddp_variants(const BenchData& data, const StrategySuiteOptions& o,
                                               const Progress& progress) {
    return run_rounds(ddp_cases(data, o), o.rounds, progress);
}

std::vector<PipelineIdleRow> bench_pipeline_idle(const BenchData& data, const StrategySuiteOptions& o,
                                                 const Progress& progress) {
    std::vector<PipelineIdleRow> rows;
    const auto timings = run_rounds(pipeline_cases(data, o, rows), o.rounds, progress);
    fill_pipeline_rows(rows, timings);
    return rows;
}

namespace {

// The char-GPT example on `corpus`, capped at `steps`, on cpu:0..devices-1.
json gpt_char_experiment(const std::string& corpus, int devices, const json& strategy, int64_t steps,
                         const std::string& recompute) {
    json e = model_bench_experiment("gpt-char", corpus, steps, "cpu");
    e["name"] = "bench-gpt-char";
    e["devices"] = device_list(devices);
    e["strategy"] = strategy;
    e["train"]["recompute"] = recompute;
    return e;
}

std::vector<BenchCase> transformer_cases(const std::string& corpus, const StrategySuiteOptions& o) {
    struct Case {
        std::string label;
        int devices;
        json strategy;
        std::string recompute = "none";
    };
    std::vector<Case> cases{{"single", 1, {{"type", "single"}}},
                            {"tensor_parallel", 4, {{"type", "tensor_parallel"}}}};
    if (o.transformer_all) {
        cases = {{"single", 1, {{"type", "single"}}},
                 {"single, recompute full", 1, {{"type", "single"}}, "full"},
                 {"single, recompute selective", 1, {{"type", "single"}}, "selective"},
                 {"ddp", 4, {{"type", "ddp"}}},
                 {"zero stage 3", 4, {{"type", "zero"}, {"stage", 3}}},
                 {"tensor_parallel", 4, {{"type", "tensor_parallel"}}},
                 {"hybrid dp2 tp2", 4, {{"type", "hybrid"}, {"dp", 2}, {"tp", 2}}},
                 {"hybrid dp2 tp2 zero 1", 4, {{"type", "hybrid"}, {"dp", 2}, {"tp", 2}, {"zero", 1}}},
                 {"hybrid tp2 pp2 1f1b m=2", 4,
                  {{"type", "hybrid"}, {"tp", 2}, {"pp", 2}, {"micro_batches", 2}, {"schedule", "1f1b"}}},
                 {"hybrid dp2 pp2 zero 1 m=2", 4,
                  {{"type", "hybrid"}, {"dp", 2}, {"pp", 2}, {"zero", 1}, {"micro_batches", 2}}}};
    }
    std::vector<BenchCase> out;
    for (const Case& c : cases)
        out.push_back({gpt_char_experiment(corpus, c.devices, c.strategy, o.transformer_steps, c.recompute), c.label,
                       "gpt-char", o.transformer_warmup_steps});
    return out;
}

}  // namespace

StrategySuite bench_strategy_suite(const BenchData& data, const StrategySuiteOptions& o, const Progress& progress) {
    StrategySuite suite;
    const auto strategies = strategy_cases(data, o);
    const auto ddp = ddp_cases(data, o);
    const auto pipeline = pipeline_cases(data, o, suite.pipeline);
    // The char-GPT's corpus: random bytes, as the models table's (a file of this process).
    std::optional<RandomBytesFile> corpus;
    if (o.transformer) corpus.emplace(int64_t{1} << 20);
    const auto transformer = corpus ? transformer_cases(corpus->path(), o) : std::vector<BenchCase>{};
    std::vector<BenchCase> all = strategies;
    all.insert(all.end(), ddp.begin(), ddp.end());
    all.insert(all.end(), pipeline.begin(), pipeline.end());
    all.insert(all.end(), transformer.begin(), transformer.end());
    std::vector<StrategyTiming> timings = run_rounds(all, o.rounds, progress);
    const auto at = [&](size_t i) { return timings.begin() + static_cast<long>(i); };
    const size_t pipeline_end = strategies.size() + ddp.size() + pipeline.size();
    suite.strategies.assign(at(0), at(strategies.size()));
    suite.ddp.assign(at(strategies.size()), at(strategies.size() + ddp.size()));
    fill_pipeline_rows(suite.pipeline, std::vector<StrategyTiming>(at(strategies.size() + ddp.size()), at(pipeline_end)));
    suite.transformer.assign(at(pipeline_end), timings.end());
    return suite;
}

json to_json(const StrategyTiming& t) {
    json per_device = json::array();
    for (const auto& d : t.per_device)
        per_device.push_back({{"device", d.device}, {"compute_ms", d.compute_ms}, {"comm_ms", d.comm_ms},
                              {"idle_ms", d.idle_ms}, {"data_wait_ms", d.data_wait_ms},
                              {"idle_fraction", d.idle_fraction}});
    json j{{"label", t.label}, {"model", t.model}, {"strategy", t.strategy}, {"devices", t.devices},
           {"oversubscribed", t.oversubscribed}, {"steps", t.steps}, {"warmup_steps", t.warmup_steps},
           {"status", t.status}, {"ms_per_step", t.ms_per_step}, {"compute_ms", t.compute_ms},
           {"comm_ms", t.comm_ms}, {"idle_ms", t.idle_ms}, {"data_wait_ms", t.data_wait_ms},
           {"samples_per_s", t.samples_per_s}, {"final_loss", t.final_loss},
           {"peak_memory_bytes", t.peak_memory_bytes}, {"comm_bytes_per_step", t.comm_bytes_per_step},
           {"per_device", per_device},
           {"ms_per_step_rounds", t.ms_per_step_rounds}};
    if (!t.error.empty()) j["error"] = t.error;
    return j;
}

json to_json(const PipelineIdleRow& r) {
    json j{{"model", r.model}, {"schedule", r.schedule}, {"stages", r.stages},
           {"micro_batches", r.micro_batches}, {"idle_fraction", r.measured},
           {"bubble_theory", r.theory}, {"per_stage_idle_fraction", r.per_stage},
           {"ms_per_step", r.ms_per_step}, {"oversubscribed", r.oversubscribed}, {"status", r.status},
           {"per_stage", to_json(r.timing)["per_device"]},
           {"ms_per_step_rounds", r.timing.ms_per_step_rounds}};
    if (!r.error.empty()) j["error"] = r.error;
    return j;
}

}  // namespace paralab::bench
