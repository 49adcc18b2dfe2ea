// The data-parallel strategies (docs/strategies.md): data_parallel, ddp (with and without overlap,
// one bucket or many) and zero (stages 1 and 2) on N = 2, 3, 4 devices end with the single
// device's parameters and batchnorm statistics on the same global batch — an MLP with dropout,
// a CNN with batchnorm (SyncBatchNorm), an LSTM, batches that N does not divide. And the
// memory stories: data_parallel's device 0 carries more than the others, ZeRO's optimizer state
// per device is about 1/N of DDP's. And runs of several ranks stop and fail cleanly.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "engine/run/experiment_file.h"
#include "engine/run/trainer.h"
#include "strategy_testing.h"

using namespace paralab;
using nlohmann::json;
using namespace strategy_testing;

namespace {

// Dropout, so that masks must follow the global row index; 26 rows: 3 and 4 do not divide it.
json mlp() {
    return json::parse(R"({
      "paralab": 1, "name": "dp-mlp", "seed": 3,
      "data": {"dataset": "spirals", "samples": 300, "classes": 3, "batch_size": 26},
      "model": {"layers": [
          {"type": "linear", "out": 32}, {"type": "relu"}, {"type": "dropout", "p": 0.2},
          {"type": "linear", "out": 32}, {"type": "tanh"}, {"type": "linear", "out": 3}],
        "loss": "cross_entropy"},
      "optimizer": {"type": "sgd", "lr": 0.1, "momentum": 0.9, "weight_decay": 0.001},
      "train": {"epochs": 1, "max_steps": 4}
    })");
}

const char* kFashion = "/usr/share/datasets/fashion-mnist";

json cnn_bn() {
    json j = json::parse(R"({
      "paralab": 1, "name": "dp-cnn", "seed": 4,
      "data": {"dataset": "fashion-mnist", "train_limit": 120, "test_limit": 40, "batch_size": 26},
      "model": {"layers": [
          {"type": "conv2d", "out_channels": 4, "kernel": 3, "padding": 1, "bias": false},
          {"type": "batchnorm"}, {"type": "relu"}, {"type": "maxpool2d", "kernel": 2, "stride": 2},
          {"type": "flatten"}, {"type": "linear", "out": 10}],
        "loss": "cross_entropy"},
      "optimizer": {"type": "adam", "lr": 0.01},
      "train": {"epochs": 1, "max_steps": 3}
    })");
    j["data"]["path"] = kFashion;
    return j;
}

json lstm() {
    return json::parse(R"({
      "paralab": 1, "name": "dp-lstm", "seed": 9,
      "data": {"dataset": "seqclass", "samples": 200, "seq_len": 6, "features": 3, "classes": 3,
               "batch_size": 22},
      "model": {"layers": [{"type": "lstm", "hidden": 8, "return": "last"}, {"type": "linear", "out": 3}],
        "loss": "cross_entropy"},
      "optimizer": {"type": "adamw", "lr": 0.01},
      "train": {"epochs": 1, "max_steps": 3}
    })");
}

json model_named(const std::string& name) {
    if (name == "mlp") return mlp();
    if (name == "cnn_bn") return cnn_bn();
    return lstm();
}

// The single-device run of each model, computed once.
const Result& single_of(const std::string& model, const json& j) {
    static std::map<std::string, Result> cache;
    const std::string key = model + j.dump();
    if (!cache.count(key)) {
        json s = j;
        s["devices"] = devices(1);
        s["strategy"] = {{"type", "single"}};
        cache[key] = run_it(s);
    }
    return cache.at(key);
}

struct Case {
    const char* model;
    const char* strategy;  // a JSON strategy object
    int devices;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.model << " " << c.strategy << " N=" << c.devices; }

class MatchesSingle : public ::testing::TestWithParam<Case> {};

TEST_P(MatchesSingle, Parameters) {
    const Case& c = GetParam();
    if (std::string(c.model) == "cnn_bn" && !std::filesystem::exists(std::string(kFashion) + "/train-images-idx3-ubyte.gz"))
        GTEST_SKIP() << "Fashion-MNIST is not installed at " << kFashion << " (make deps installs it)";
    json j = model_named(c.model);
    const Result& want = single_of(c.model, j);
    j["devices"] = devices(c.devices);
    j["strategy"] = json::parse(c.strategy);
    const auto got = run_it(j);
    ASSERT_EQ(want.summary.status, "finished") << want.summary.error;
    ASSERT_EQ(got.summary.status, "finished") << got.summary.error;
    ASSERT_FALSE(want.artifacts.parameters.empty());
    EXPECT_LE(max_rel_diff(want.artifacts.parameters, got.artifacts.parameters), 1e-5);
    EXPECT_LE(max_rel_diff(want.artifacts.buffers, got.artifacts.buffers), 1e-5);
    EXPECT_NEAR(want.summary.final_loss, got.summary.final_loss, 1e-5 * (1 + want.summary.final_loss));
    EXPECT_EQ(want.summary.steps, got.summary.steps);
    ASSERT_TRUE(want.summary.test_accuracy && got.summary.test_accuracy);
    EXPECT_NEAR(*want.summary.test_accuracy, *got.summary.test_accuracy, 1e-9);
}

std::vector<Case> cases() {
    std::vector<Case> out;
    const char* strategies[] = {
        R"({"type":"data_parallel"})",
        R"({"type":"ddp"})",
        R"({"type":"ddp","overlap":false})",
        R"({"type":"ddp","bucket_mb":0.001})",  // a bucket per parameter or two
        R"({"type":"ddp","bucket_mb":0.001,"overlap":false})",
        R"({"type":"ddp","balance":"speed"})",  // uneven rows, agreed by all-gathered speeds
        R"({"type":"zero","stage":1})",
        R"({"type":"zero","stage":2})",
    };
    for (const char* model : {"mlp", "cnn_bn", "lstm"})
        for (const char* s : strategies)
            for (int n : {2, 3, 4}) out.push_back({model, s, n});
    return out;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
    std::string s = std::string(info.param.model) + "_" + json::parse(info.param.strategy).dump() + "_N" +
                    std::to_string(info.param.devices);
    std::string out;
    for (char ch : s) out += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
    return out;
}

INSTANTIATE_TEST_SUITE_P(DataParallel, MatchesSingle, ::testing::ValuesIn(cases()), case_name);

// grad_accum and clip_norm (the norm over every device's gradients) keep the equivalence.
TEST(DataParallelOptions, AccumulationAndClippingMatchSingle) {
    for (const char* s : {R"({"type":"ddp"})", R"({"type":"zero","stage":1})", R"({"type":"zero","stage":2})",
                          R"({"type":"data_parallel"})"}) {
        json j = mlp();
        j["train"]["grad_accum"] = 2;
        j["train"]["clip_norm"] = 0.05;
        const Result& want = single_of("mlp-accum", j);
        j["devices"] = devices(3);
        j["strategy"] = json::parse(s);
        const auto got = run_it(j);
        ASSERT_EQ(got.summary.status, "finished") << s << ": " << got.summary.error;
        EXPECT_LE(max_rel_diff(want.artifacts.parameters, got.artifacts.parameters), 1e-5) << s;
    }
}

// Without SyncBatchNorm each device normalises with its own rows: the result differs from the
// single device's (which is why it is on by default).
TEST(DataParallelOptions, LocalBatchNormDiffersFromSingle) {
    if (!std::filesystem::exists(std::string(kFashion) + "/train-images-idx3-ubyte.gz"))
        GTEST_SKIP() << "Fashion-MNIST is not installed at " << kFashion;
    json j = cnn_bn();
    const Result& want = single_of("cnn_bn", j);
    j["devices"] = devices(2);
    j["strategy"] = {{"type", "ddp"}, {"sync_batchnorm", false}};
    const auto got = run_it(j);
    ASSERT_EQ(got.summary.status, "finished") << got.summary.error;
    EXPECT_GT(max_rel_diff(want.artifacts.buffers, got.artifacts.buffers), 1e-4);
}

// ---- memory pictures -----------------------------------------------------------------------

int64_t peak(const Result& r, const std::string& device, MemCategory c) {
    return r.artifacts.memory.at(device).peak[static_cast<size_t>(c)];
}

TEST(DataParallelMemory, DeviceZeroCarriesMoreUnderDataParallel) {
    json j = mlp();
    j["devices"] = devices(3);
    j["strategy"] = {{"type", "data_parallel"}};
    const auto r = run_it(j);
    ASSERT_EQ(r.summary.status, "finished") << r.summary.error;
    for (const char* other : {"cpu:1", "cpu:2"}) {
        EXPECT_GT(r.summary.peak_memory_bytes.at("cpu:0"), r.summary.peak_memory_bytes.at(other));
        EXPECT_GT(peak(r, "cpu:0", MemCategory::optimizer_state), 0);
        EXPECT_EQ(peak(r, other, MemCategory::optimizer_state), 0) << "only device 0 steps";
    }
}

TEST(DataParallelMemory, ZeroShardsTheOptimizerState) {
    // Adam keeps two moments per parameter; a wide model so that rounding does not matter.
    json j = mlp();
    j["model"]["layers"][0]["out"] = 256;
    j["model"]["layers"][3]["out"] = 256;
    j["optimizer"] = {{"type", "adam"}, {"lr", 0.001}};
    j["train"]["max_steps"] = 2;
    for (int n : {2, 4}) {
        j["devices"] = devices(n);
        j["strategy"] = {{"type", "ddp"}};
        const auto ddp = run_it(j);
        j["strategy"] = {{"type", "zero"}, {"stage", 1}};
        const auto zero = run_it(j);
        ASSERT_EQ(zero.summary.status, "finished") << zero.summary.error;
        for (int r = 0; r < n; ++r) {
            const std::string d = "cpu:" + std::to_string(r);
            const double ratio = static_cast<double>(peak(zero, d, MemCategory::optimizer_state)) /
                                 static_cast<double>(peak(ddp, d, MemCategory::optimizer_state));
            EXPECT_NEAR(ratio, 1.0 / n, 0.02) << d << " on " << n << " devices";
        }
    }
}

// `j` for 2 steps on 4 devices by ZeRO stage 1, then stage 2.
std::pair<Result, Result> zero_stages_on_four(json j) {
    j["train"]["max_steps"] = 2;
    j["devices"] = devices(4);
    j["strategy"] = {{"type", "zero"}, {"stage", 1}};
    Result one = run_it(j);
    j["strategy"] = {{"type", "zero"}, {"stage", 2}};
    return {std::move(one), run_it(j)};
}

TEST(DataParallelMemory, ZeroStageTwoKeepsOnlyTheGradientShard) {
    json j = mlp();
    j["model"]["layers"][0]["out"] = 256;
    j["model"]["layers"][3]["out"] = 256;
    const auto [one, two] = zero_stages_on_four(j);
    ASSERT_EQ(two.summary.status, "finished") << two.summary.error;
    const auto grads = static_cast<size_t>(MemCategory::gradients);
    for (int r = 0; r < 4; ++r) {
        const std::string d = "cpu:" + std::to_string(r);
        // Between steps stage 2 holds a quarter of the gradients (its shard), stage 1 all of
        // them (its shard is a view of them).
        const double ratio = static_cast<double>(two.artifacts.memory.at(d).current[grads]) /
                             static_cast<double>(one.artifacts.memory.at(d).current[grads]);
        EXPECT_NEAR(ratio, 0.25, 0.02) << d;
    }
}

// Stage 2's gradient peak: its shard and one layer's gradients, not the whole gradient (which
// stage 1 holds). Three equal 128 x 128 layers, a small first and last one, four devices.
TEST(DataParallelMemory, ZeroStageTwoNeverHoldsTheWholeGradient) {
    json j = mlp();
    j["model"]["layers"] = json::parse(R"([{"type": "linear", "out": 128}, {"type": "relu"},
        {"type": "linear", "out": 128}, {"type": "relu"}, {"type": "linear", "out": 128},
        {"type": "relu"}, {"type": "linear", "out": 128}, {"type": "relu"}, {"type": "linear", "out": 3}])");
    const auto [one, two] = zero_stages_on_four(j);
    ASSERT_EQ(two.summary.status, "finished") << two.summary.error;
    const auto grads = static_cast<size_t>(MemCategory::gradients);
    for (int r = 0; r < 4; ++r) {
        const std::string d = "cpu:" + std::to_string(r);
        const double ratio = static_cast<double>(two.artifacts.memory.at(d).peak[grads]) /
                             static_cast<double>(one.artifacts.memory.at(d).peak[grads]);
        // the shard (1/4) and the largest layer's gradients (~1/3 of them): ~0.58 of the whole
        EXPECT_LT(ratio, 0.65) << d;
    }
}

TEST(DataParallelMemory, SyncBatchNormNeedsRowsOnEveryDevice) {
    if (!std::filesystem::exists(std::string(kFashion) + "/train-images-idx3-ubyte.gz"))
        GTEST_SKIP() << "Fashion-MNIST is not installed at " << kFashion;
    json j = cnn_bn();
    j["data"]["batch_size"] = 3;
    j["devices"] = devices(4);
    j["strategy"] = {{"type", "ddp"}};
    try {
        run::run_experiment(run::parse_experiment(j), nullptr, nullptr);
        FAIL();
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("data.batch_size"), std::string::npos) << e.what();
    }
}

// ---- runs of several ranks -------------------------------------------------------------------

struct Records : run::RunObserver {
    std::map<std::string, int> steps_by_device;
    std::map<std::string, int> bucket_spans;
    int step_ends = 0;
    std::atomic<bool>* stop_flag = nullptr;
    int stop_at = 0;
    void on_span(const config::Span& s) override {
        if (s.phase == "all_reduce_bucket") ++bucket_spans[s.device];
    }
    void on_step(const config::StepRecord& r) override { ++steps_by_device[r.device]; }
    void on_step_end(const config::StepRecord& r) override {
        ++step_ends;
        EXPECT_EQ(r.step, step_ends);  // in order, once
        if (stop_flag && r.step == stop_at) stop_flag->store(true);
    }
};

TEST(DataParallelRuns, EveryDeviceReportsEveryStepAndEveryBucket) {
    json j = mlp();
    j["devices"] = devices(3);
    j["strategy"] = {{"type", "ddp"}, {"bucket_mb", 0.001}};
    Records rec;
    const auto r = run_it(j, &rec);
    ASSERT_EQ(r.summary.status, "finished");
    EXPECT_EQ(rec.step_ends, 4);
    for (int d = 0; d < 3; ++d) {
        const std::string dev = "cpu:" + std::to_string(d);
        EXPECT_EQ(rec.steps_by_device[dev], 4);
        // 0.001 MB (1048 bytes): the 32x32 weight closes the first bucket, the first layer's
        // weight and bias make the second: 2 buckets, every step, on every device.
        EXPECT_EQ(rec.bucket_spans[dev], 4 * 2) << dev;
    }
}

TEST(DataParallelRuns, StopEndsEveryDeviceAtTheSameStep) {
    json j = mlp();
    j["devices"] = devices(4);
    j["strategy"] = {{"type", "ddp"}};
    j["train"]["max_steps"] = 1000;
    j["train"]["epochs"] = 100;
    run::RunControl control;
    Records rec;
    rec.stop_flag = &control.stop;
    rec.stop_at = 3;
    const auto r = run_it(j, &rec, &control);
    EXPECT_EQ(r.summary.status, "stopped");
    EXPECT_GE(r.summary.steps, 3);
    EXPECT_LT(r.summary.steps, 1000);
    for (int d = 0; d < 4; ++d) EXPECT_EQ(rec.steps_by_device["cpu:" + std::to_string(d)], r.summary.steps);
}

// A straggler gets fewer rows once the speeds are measured; without balancing, rows are even.
TEST(DataParallelRuns, SpeedBalancingGivesTheStragglerFewerRows) {
    struct Samples : run::RunObserver {
        std::map<std::string, std::vector<int64_t>> rows;
        void on_step(const config::StepRecord& r) override { rows[r.device].push_back(r.samples); }
    };
    json j = mlp();
    j["data"]["batch_size"] = 60;
    j["train"]["max_steps"] = 8;
    j["train"]["epochs"] = 3;  // 4 batches of 60 per epoch
    j["devices"] = devices(3);
    // 100 ms: far above what a descheduled rank thread loses on a loaded 2-core machine (3 rank
    // threads and other programs share it), so the timings that steer the split are the
    // straggler's, not noise.
    j["strategy"] = {{"type", "ddp"}, {"balance", "speed"}, {"straggler", {{"device", "cpu:1"}, {"delay_ms", 100}}}};
    Samples balanced;
    ASSERT_EQ(run_it(j, &balanced).summary.status, "finished");
    EXPECT_EQ(balanced.rows["cpu:1"].front(), 20);  // even until the first measurement
    EXPECT_LT(balanced.rows["cpu:1"].back(), 10);
    EXPECT_GT(balanced.rows["cpu:0"].back(), 20);
    ASSERT_EQ(balanced.rows["cpu:0"].size(), 8u);
    for (size_t k = 0; k < 8; ++k)
        EXPECT_EQ(balanced.rows["cpu:0"][k] + balanced.rows["cpu:1"][k] + balanced.rows["cpu:2"][k], 60);
    j["strategy"].erase("balance");
    Samples even;
    ASSERT_EQ(run_it(j, &even).summary.status, "finished");
    EXPECT_EQ(even.rows["cpu:1"].back(), 20);
}

// Pause holds every device at a step boundary (no step ends while paused); resume goes on;
// stop ends a paused run.
TEST(DataParallelRuns, PauseHoldsEveryDeviceAndResumeGoesOn) {
    struct Steps : run::RunObserver {
        std::atomic<int> ends{0};
        void on_step_end(const config::StepRecord&) override { ++ends; }
    } rec;
    json j = mlp();
    j["devices"] = devices(3);
    j["strategy"] = {{"type", "ddp"}};
    j["train"]["max_steps"] = 1000000;
    j["train"]["epochs"] = 100000;
    run::RunControl control;
    control.pause = true;
    config::RunSummary summary;
    std::thread t([&] { summary = run::run_experiment(run::parse_experiment(j), &rec, &control); });
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    EXPECT_EQ(rec.ends.load(), 0);  // paused from the start
    control.pause = false;
    // Bounded: a run that failed would never reach 5 steps, and must fail here, not hang.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (rec.ends.load() < 5 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    if (rec.ends.load() < 5) {
        control.stop = true;
        t.join();
        FAIL() << "no 5 steps within 60 s of resuming; the run ended " << summary.status << ": "
               << summary.error;
    }
    control.pause = true;
    int held = 0;
    do {  // until the steps in flight have ended
        held = rec.ends.load();
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    } while (rec.ends.load() != held);
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    EXPECT_EQ(rec.ends.load(), held);
    control.stop = true;
    t.join();
    EXPECT_EQ(summary.status, "stopped");
    EXPECT_EQ(summary.steps, held);
}

// A run's wall time and throughput exclude the time it was held paused. The run is paused
// before it starts; from on_start (just before training's clock starts) the test holds it for
// a while, so every step runs after the hold and the hold is all but the ranks' setup.
TEST(DataParallelRuns, WallTimeExcludesPauses) {
    using Clock = std::chrono::steady_clock;
    struct Started : run::RunObserver {
        std::mutex mutex;
        std::condition_variable cv;
        bool started = false;
        std::atomic<int> ends{0};
        config::StepRecord last;  // guarded by mutex
        void on_start(const config::Experiment&, int64_t) override {
            std::lock_guard lock(mutex);
            started = true;
            cv.notify_all();
        }
        void on_step_end(const config::StepRecord& r) override {
            std::lock_guard lock(mutex);
            last = r;
            ++ends;
        }
    } rec;
    json j = mlp();
    j["devices"] = devices(2);
    j["strategy"] = {{"type", "ddp"}};
    j["train"]["max_steps"] = 4;
    run::RunControl control;
    control.pause = true;
    config::RunSummary summary;
    const auto t_begin = Clock::now();
    std::thread t([&] { summary = run::run_experiment(run::parse_experiment(j), &rec, &control); });
    Clock::time_point held_from;
    {
        std::unique_lock lock(rec.mutex);
        const bool started = rec.cv.wait_for(lock, std::chrono::seconds(60), [&] { return rec.started; });
        held_from = Clock::now();
        if (!started) control.stop = true;  // ends the run, if it ever starts
    }
    // Held for at least 1.5 s after the run started (the clock, not a sleep, says how long).
    while (Clock::now() - held_from < std::chrono::milliseconds(1500))
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(rec.ends.load(), 0);  // paused from the start
    control.pause = false;
    const double held_s = std::chrono::duration<double>(Clock::now() - held_from).count();
    t.join();
    const double around_s = std::chrono::duration<double>(Clock::now() - t_begin).count();
    ASSERT_EQ(summary.status, "finished") << summary.error;
    ASSERT_EQ(summary.steps, 4);
    // Unpaused, the run's wall time is at most what passed around it less the hold, plus the
    // ranks' setup inside the hold (generous: a loaded machine may deschedule them).
    const double margin_s = 0.5;
    EXPECT_GT(summary.wall_s, 0);
    EXPECT_LT(summary.wall_s, around_s - held_s + margin_s) << "held " << held_s << " s of " << around_s << " s";
    EXPECT_NEAR(summary.samples_per_s, 4 * j["data"]["batch_size"].get<double>() / summary.wall_s,
                1e-6 * summary.samples_per_s);
    std::lock_guard lock(rec.mutex);
    EXPECT_GT(rec.last.wall_s, 0);
    EXPECT_LE(rec.last.wall_s, summary.wall_s + 1e-9);
}

// Waiting inside a compute phase (SyncBatchNorm's all-reduce inside forward, for a straggler)
// is communication on the timeline and in the records, not compute as well.
TEST(DataParallelRuns, CommunicationInsideComputeIsNotCountedTwice) {
    struct Times : run::RunObserver {
        double compute = 0, comm = 0;
        int n = 0;
        void on_step(const config::StepRecord& r) override {
            if (r.device != "cpu:0" || r.step == 1) return;
            compute += r.compute_ms, comm += r.comm_ms, ++n;
        }
    } rec;
    json j = mlp();
    j["model"]["layers"][1] = {{"type", "batchnorm"}};
    j["devices"] = devices(2);
    j["strategy"] = {{"type", "ddp"}, {"straggler", {{"device", "cpu:1"}, {"delay_ms", 30}}}};
    ASSERT_EQ(run_it(j, &rec).summary.status, "finished");
    ASSERT_GT(rec.n, 0);
    EXPECT_LT(rec.compute / rec.n, 15.0);  // cpu:0's own work is well under a millisecond
    EXPECT_GT(rec.comm / rec.n, 15.0);     // it waits ~30 ms for cpu:1 in the statistics' all-reduce
}

TEST(DataParallelRuns, DivergenceOnSeveralDevicesFailsWithoutHanging) {
    for (const char* s : {"ddp", "zero", "data_parallel"}) {
        json j = mlp();
        j["devices"] = devices(3);
        j["strategy"] = {{"type", s}};
        j["optimizer"] = {{"type", "sgd"}, {"lr", 1e30}};
        j["train"]["max_steps"] = 50;
        const auto r = run_it(j);
        EXPECT_EQ(r.summary.status, "failed") << s;
        EXPECT_TRUE(r.summary.error.find("NaN") != std::string::npos ||
                    r.summary.error.find("infinite") != std::string::npos)
            << s << ": " << r.summary.error;
    }
}

TEST(DataParallelRuns, BadDeviceListsAreRefused) {
    json j = mlp();
    j["devices"] = {"cpu:0", "cpu:1", "cpu:1"};
    j["strategy"] = {{"type", "ddp"}};
    try {
        run::run_experiment(run::parse_experiment(j), nullptr, nullptr);
        FAIL();
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("devices[2]: cpu:1 is listed twice"), std::string::npos) << e.what();
    }
    j["devices"] = devices(2);
    j["strategy"] = {{"type", "ddp"}, {"straggler", {{"device", "cpu:5"}, {"delay_ms", 1}}}};
    try {
        run::run_experiment(run::parse_experiment(j), nullptr, nullptr);
        FAIL();
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("strategy.straggler.device"), std::string::npos) << e.what();
    }
}

}  // namespace
