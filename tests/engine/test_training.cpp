// End to end on the CPU engine: an experiment trains (the loss falls, the test accuracy is
// high), repeats exactly from its seed, splits a batch into accumulation steps without
// changing the result, and fails or stops cleanly.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include "engine/run/experiment_file.h"
#include "engine/run/live_metrics.h"
#include "engine/run/trainer.h"
#include "engine/strategy/strategy.h"
#include "engine/util/own_thread.h"
#include "strategy_testing.h"

using namespace paralab;
using nlohmann::json;

namespace {

json spirals_mlp() {
    return strategy_testing::spirals_mlp("spirals-test", {{"type", "adam"}, {"lr", 0.01}}, 15);
}

struct Recorder : run::RunObserver {
    std::vector<double> losses;
    run::RunControl* control = nullptr;
    int64_t stop_after = -1;
    void on_step(const config::StepRecord& r) override {
        losses.push_back(r.loss);
        if (control && r.step == stop_after) control->stop = true;
    }
};

TEST(Training, SpiralsLossFallsAndTestAccuracyIsHigh) {
    Recorder rec;
    const auto s = run::run_experiment(run::parse_experiment(spirals_mlp()), &rec, nullptr);
    ASSERT_EQ(s.status, "finished") << s.error;
    ASSERT_GT(rec.losses.size(), 100u);
    double first = 0, last = 0;
    for (size_t i = 0; i < 10; ++i) first += rec.losses[i] / 10;
    for (size_t i = rec.losses.size() - 10; i < rec.losses.size(); ++i) last += rec.losses[i] / 10;
    EXPECT_LT(last, 0.5 * first) << "first " << first << " last " << last;
    ASSERT_TRUE(s.test_accuracy.has_value());
    EXPECT_GE(*s.test_accuracy, 0.9);
    EXPECT_GT(s.samples_per_s, 0);
    EXPECT_EQ(s.peak_memory_bytes.count("cpu:0"), 1u);
    EXPECT_GT(s.peak_memory_bytes.at("cpu:0"), 0);
}

TEST(Training, RepeatsExactlyFromItsSeed) {
    json j = spirals_mlp();
    j["train"]["max_steps"] = 30;
    j["model"]["layers"].insert(j["model"]["layers"].begin() + 2, json{{"type", "dropout"}, {"p", 0.2}});
    Recorder a, b;
    run::run_experiment(run::parse_experiment(j), &a, nullptr);
    run::run_experiment(run::parse_experiment(j), &b, nullptr);
    EXPECT_EQ(a.losses, b.losses);
    j["seed"] = 12;
    Recorder c;
    run::run_experiment(run::parse_experiment(j), &c, nullptr);
    EXPECT_NE(a.losses, c.losses);
}

TEST(Training, GradientAccumulationMatchesTheWholeBatch) {
    json j = spirals_mlp();
    j["train"]["max_steps"] = 25;
    j["optimizer"] = {{"type", "sgd"}, {"lr", 0.1}, {"momentum", 0.9}};
    Recorder whole, split;
    run::run_experiment(run::parse_experiment(j), &whole, nullptr);
    j["train"]["grad_accum"] = 3;  // 32 rows as 11 + 11 + 10
    run::run_experiment(run::parse_experiment(j), &split, nullptr);
    ASSERT_EQ(whole.losses.size(), split.losses.size());
    for (size_t i = 0; i < whole.losses.size(); ++i)
        EXPECT_NEAR(whole.losses[i], split.losses[i], 1e-4 * (1 + whole.losses[i])) << "step " << i + 1;
}

TEST(Training, EveryStepHasOrderedSpansOnOneClock) {
    struct SpanRecorder : run::RunObserver {
        std::vector<config::Span> spans;
        std::vector<config::StepRecord> steps;
        void on_span(const config::Span& s) override { spans.push_back(s); }
        void on_step(const config::StepRecord& r) override { steps.push_back(r); }
    } rec;
    json j = spirals_mlp();
    j["train"]["max_steps"] = 6;
    run::run_experiment(run::parse_experiment(j), &rec, nullptr);
    ASSERT_EQ(rec.spans.size(), 4u * 6u);
    const char* phases[] = {"data_wait", "forward", "backward", "optimizer"};
    for (size_t i = 0; i < rec.spans.size(); ++i) {
        const auto& sp = rec.spans[i];
        EXPECT_EQ(sp.phase, phases[i % 4]);
        EXPECT_EQ(sp.step, static_cast<int64_t>(i / 4 + 1));
        EXPECT_LE(sp.t_begin, sp.t_end);
        if (i > 0) {
            EXPECT_GE(sp.t_begin, rec.spans[i - 1].t_end - 1e-9) << i;
        }
    }
    // The record's time is taken when the step ends, just after its last span.
    EXPECT_LE(rec.spans.back().t_end, rec.steps.back().wall_s + 1e-9);
    EXPECT_NEAR(rec.spans.back().t_end, rec.steps.back().wall_s, 1e-3);
}

// train.max_steps_per_s: 3 steps at 2 a second take at least a second of real time (a lower
// bound, true however loaded the machine), and the wait is left out of the records' time.
TEST(Training, AStepsPerSecondLimitSpacesTheStepsAndIsNotCountedAsTheirTime) {
    struct Steps : run::RunObserver {
        std::vector<config::StepRecord> steps;
        void on_step(const config::StepRecord& r) override { steps.push_back(r); }
    } rec;
    json j = spirals_mlp();
    j["train"]["max_steps"] = 3;
    j["train"]["max_steps_per_s"] = 2;
    const config::Experiment e = run::parse_experiment(j);
    EXPECT_EQ(run::to_json(e)["train"]["max_steps_per_s"], 2.0);
    const auto t0 = std::chrono::steady_clock::now();
    const auto s = run::run_experiment(e, &rec, nullptr);
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_EQ(s.status, "finished");
    ASSERT_EQ(rec.steps.size(), 3u);
    EXPECT_GE(elapsed, 1.0);
    // Steps of a small MLP take far less than the half second between their starts.
    EXPECT_LE(rec.steps.back().wall_s, elapsed - 0.5);
    json bad = spirals_mlp();
    bad["train"]["max_steps_per_s"] = -1;
    try {
        run::parse_experiment(bad);
        FAIL() << "a negative limit was accepted";
    } catch (const ConfigError& err) {
        EXPECT_EQ(err.path(), "train.max_steps_per_s");
    }
}

TEST(Training, MaxStepsCapsTheRun) {
    json j = spirals_mlp();
    j["train"]["max_steps"] = 7;
    const auto s = run::run_experiment(run::parse_experiment(j), nullptr, nullptr);
    EXPECT_EQ(s.status, "finished");
    EXPECT_EQ(s.steps, 7);
}

TEST(Training, DivergenceFailsWithAClearMessage) {
    json j = spirals_mlp();
    j["optimizer"] = {{"type", "sgd"}, {"lr", 1e6}};
    const auto s = run::run_experiment(run::parse_experiment(j), nullptr, nullptr);
    EXPECT_EQ(s.status, "failed");
    EXPECT_TRUE(s.error.find("NaN") != std::string::npos || s.error.find("infinite") != std::string::npos)
        << s.error;
    EXPECT_NE(s.error.find("optimizer.lr"), std::string::npos) << s.error;
}

TEST(Training, StopIsHonouredBetweenSteps) {
    run::RunControl control;
    Recorder rec;
    rec.control = &control;
    rec.stop_after = 5;
    const auto s = run::run_experiment(run::parse_experiment(spirals_mlp()), &rec, &control);
    EXPECT_EQ(s.status, "stopped");
    EXPECT_EQ(s.steps, 5);
    EXPECT_FALSE(s.test_accuracy.has_value());
}

// The straggler's sleep (up to a minute a step) ends when a stop is requested, so that a stop
// is prompt even then.
TEST(Training, AStopEndsTheStragglersSleep) {
    config::Experiment e;
    e.devices = {"cpu:0"};
    e.strategy.straggler_device = "cpu:0";
    e.strategy.straggler_delay_ms = 60000;
    auto device = make_cpu_device(0);
    std::atomic<bool> stop{true};
    strategy::RunContext ctx;
    ctx.experiment = &e;
    ctx.devices = {device.get()};
    ctx.stop_requested = &stop;
    strategy::Rank rank(0, ctx);
    EXPECT_FALSE(rank.straggle());  // cut short; it would sleep a minute
    e.strategy.straggler_delay_ms = 1;
    stop = false;
    strategy::Rank quick(0, ctx);
    EXPECT_TRUE(quick.straggle());  // no stop: the whole delay
}

// Evaluation between steps is not training's memory: what it allocates (the batch, the output,
// the loss's probabilities) is freed, every step after it peaks where the steps before it did,
// and the run's peak is the highest step's.
TEST(Training, EvaluationDoesNotMoveAStepsPeak) {
    struct Peaks : run::RunObserver {
        std::vector<int64_t> step_peak;
        void on_step(const config::StepRecord& r) override { step_peak.push_back(r.memory.step_peak_total); }
    } rec;
    json j = spirals_mlp();
    j["train"]["max_steps"] = 8;
    j["train"]["eval_every"] = 2;
    const auto s = run::run_experiment(run::parse_experiment(j), &rec, nullptr);
    ASSERT_EQ(s.status, "finished");
    ASSERT_EQ(rec.step_peak.size(), 8u);
    for (size_t k = 2; k < 8; ++k) EXPECT_EQ(rec.step_peak[k], rec.step_peak[1]) << "step " << k + 1;
    EXPECT_EQ(s.peak_memory_bytes.at("cpu:0"), *std::max_element(rec.step_peak.begin(), rec.step_peak.end()));
}

// A stop that comes after the last step, during the evaluation after training, is honoured:
// the pass ends, the run is stopped (not finished) and reports no test metrics.
TEST(Training, StopDuringTheFinalEvaluationStopsTheRun) {
    run::RunControl control;
    Recorder rec;
    rec.control = &control;
    rec.stop_after = 5;  // the last step
    json j = spirals_mlp();
    j["train"]["max_steps"] = 5;
    const auto s = run::run_experiment(run::parse_experiment(j), &rec, &control);
    EXPECT_EQ(s.status, "stopped");
    EXPECT_EQ(s.steps, 5);
    EXPECT_FALSE(s.test_accuracy.has_value());
}

TEST(Training, ModelThatDoesNotFitTheDataIsRefusedBeforeTheFirstStep) {
    json j = spirals_mlp();
    j["model"]["layers"].back()["out"] = 2;  // 3 classes
    try {
        run::run_experiment(run::parse_experiment(j), nullptr, nullptr);
        FAIL();
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("3 classes"), std::string::npos) << e.what();
    }
    j = spirals_mlp();
    j["model"]["input"] = {3};
    EXPECT_THROW(run::run_experiment(run::parse_experiment(j), nullptr, nullptr), ConfigError);
}

TEST(Training, UnavailableStrategyOrPrecisionIsRefused) {
    json j = spirals_mlp();
    j["devices"] = {"cpu:0", "cpu:1"};
    j["strategy"] = {{"type", "single"}};  // one device only
    EXPECT_THROW(run::run_experiment(run::parse_experiment(j), nullptr, nullptr), ConfigError);
    j["devices"] = {"cpu:0", "cpu:0"};
    j["strategy"] = {{"type", "ddp"}};
    EXPECT_THROW(run::run_experiment(run::parse_experiment(j), nullptr, nullptr), ConfigError);
    j["devices"] = {"cuda:99"};  // no such GPU, or no CUDA backend
    j["strategy"] = {{"type", "single"}};
    EXPECT_THROW(run::run_experiment(run::parse_experiment(j), nullptr, nullptr), ConfigError);
    j = spirals_mlp();
    j["train"]["precision"] = "bf16";
    try {
        run::run_experiment(run::parse_experiment(j), nullptr, nullptr);
        FAIL();
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("CPU devices train in fp32"), std::string::npos);
    }
}

TEST(Training, RegressionWithMse) {
    json j = json::parse(R"({
      "paralab": 1, "name": "sine", "seed": 5,
      "data": {"dataset": "sine", "samples": 600, "seq_len": 12, "batch_size": 32},
      "model": {"layers": [{"type": "flatten"}, {"type": "linear", "out": 32}, {"type": "tanh"},
                           {"type": "linear", "out": 1}], "loss": "mse"},
      "optimizer": {"type": "adam", "lr": 0.005},
      "train": {"epochs": 10}
    })");
    Recorder rec;
    const auto s = run::run_experiment(run::parse_experiment(j), &rec, nullptr);
    ASSERT_EQ(s.status, "finished") << s.error;
    EXPECT_FALSE(s.test_accuracy.has_value());
    ASSERT_TRUE(s.test_loss.has_value());
    EXPECT_LT(rec.losses.back(), rec.losses.front());
}

}  // namespace

// The live view's buffer: everything arrives in order; past its capacity the oldest entries
// are dropped and counted, and a drain empties it.
TEST(LiveMetrics, KeepsTheNewestAndCountsWhatItDropped) {
    run::LiveMetrics live(5);
    config::StepRecord r;
    for (int i = 1; i <= 8; ++i) {
        r.step = i;
        live.on_step(r);
    }
    live.on_step_end(r);
    auto f = live.drain();
    ASSERT_EQ(f.device_steps.size(), 5u);
    EXPECT_EQ(f.device_steps.front().step, 4);
    EXPECT_EQ(f.device_steps.back().step, 8);
    EXPECT_EQ(f.steps.size(), 1u);
    EXPECT_EQ(f.dropped, 3);
    EXPECT_TRUE(live.drain().empty());
}

TEST(LiveMetrics, SeesEveryDeviceOfARun) {
    json j = spirals_mlp();
    j["train"]["max_steps"] = 5;
    j["devices"] = {"cpu:0", "cpu:1"};
    j["strategy"] = {{"type", "ddp"}};
    run::LiveMetrics live;
    const auto s = run::run_experiment(run::parse_experiment(j), &live, nullptr);
    ASSERT_EQ(s.status, "finished") << s.error;
    const auto f = live.drain();
    EXPECT_EQ(f.total_steps, 5);
    EXPECT_EQ(f.device_steps.size(), 10u);
    ASSERT_EQ(f.steps.size(), 5u);
    EXPECT_EQ(f.steps.back().device, "all");
    EXPECT_DOUBLE_EQ(f.steps.back().loss, s.final_loss);
    EXPECT_EQ(f.evals.size(), 1u);
    EXPECT_FALSE(f.spans.empty());
}

namespace {

int os_threads() {
    int n = 0;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
        (void)entry;
        ++n;
    }
    return n;
}

}  // namespace

TEST(OwnThread, ReturnsTheResultAndRethrows) {
    const auto caller = std::this_thread::get_id();
    EXPECT_NE(paralab::on_own_thread([] { return std::this_thread::get_id(); }), caller);
    EXPECT_EQ(paralab::on_own_thread([] { return 42; }), 42);
    EXPECT_THROW(paralab::on_own_thread([]() -> int { throw std::runtime_error("inside"); }), std::runtime_error);
    bool ran = false;
    paralab::on_own_thread([&] { ran = true; });
    EXPECT_TRUE(ran);
}

// The thread that calls run_experiment (the GUI's run controller lives on) ends the run with no
// compute threads of its own: an OpenMP team left on it would slow every later run of the
// process (engine/util/own_thread.h). The evaluation's GEMMs here are large enough to split.
TEST(Training, TheCallingThreadKeepsNoComputeThreads) {
    json j = json::parse(R"({
      "paralab": 1, "name": "teams", "seed": 2,
      "data": {"dataset": "blobs", "samples": 1200, "features": 128, "classes": 4, "batch_size": 64},
      "model": {"layers": [{"type": "linear", "out": 256}, {"type": "relu"}, {"type": "linear", "out": 4}],
                "loss": "cross_entropy"},
      "optimizer": {"type": "sgd", "lr": 0.05}, "train": {"epochs": 1, "max_steps": 3}
    })");
    int before = 0, after = 0;
    std::string status;
    std::thread caller([&] {
        before = os_threads();
        status = run::run_experiment(run::parse_experiment(j), nullptr, nullptr, 2).status;
        // Threads that ended with the run (rank threads and their teams) leave asynchronously.
        for (int i = 0; i < 50 && os_threads() > before; ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        after = os_threads();
    });
    caller.join();
    EXPECT_EQ(status, "finished");
    EXPECT_LE(after, before) << "the calling thread kept " << after - before << " thread(s)";
}
