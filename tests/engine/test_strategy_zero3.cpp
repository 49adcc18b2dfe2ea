// zero stage 3 (docs/strategies.md, engine/strategy/zero3.cpp): parameters, gradients and
// optimizer state sharded, each layer gathered only while it computes. It ends with the single
// device's parameters on 2 and 4 devices (an MLP with dropout and a miniature char-GPT; with and
// without prefetch and resharding; with full recomputation; with uneven rows, a device without
// rows, gradient accumulation and clipping), moves exactly the all-gathers and reduce-scatters
// its schedule says, holds the memory its model predicts, and refuses a stage outside 1–3 at
// its key.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include <unistd.h>

#include "engine/data/loader.h"
#include "engine/strategy/registry.h"
#include "strategy_testing.h"

using namespace paralab;
using namespace strategy_testing;

namespace {

// Dropout, so that masks must follow the global row index; 26 rows: 4 does not divide them.
json mlp() {
    return json::parse(R"({
      "paralab": 1, "name": "zero3-mlp", "seed": 3,
      "data": {"dataset": "spirals", "samples": 300, "classes": 3, "batch_size": 26},
      "model": {"layers": [
          {"type": "linear", "out": 32}, {"type": "relu"}, {"type": "dropout", "p": 0.2},
          {"type": "linear", "out": 32}, {"type": "tanh"}, {"type": "linear", "out": 3}],
        "loss": "cross_entropy"},
      "optimizer": {"type": "adam", "lr": 0.01},
      "train": {"epochs": 1, "max_steps": 4}
    })");
}

// Text-like bytes in a temp file, made once.
const std::string& corpus() {
    static const std::string path = text_corpus("zero3", "Gather the layer, compute, scatter the gradients back to their owners.", 120);
    return path;
}

// A char-GPT in miniature (D 16, two blocks). AdamW's eps is 1e-6: the k part of qkv's bias has
// a gradient of zero up to rounding, which eps 1e-8 turns into steps of ±lr whose sign is the
// rounding's (docs/strategies.md, tensor_parallel). Every unit's size divides by 2 and by 4.
json tiny_gpt() { return strategy_testing::tiny_gpt("zero3-gpt", corpus()); }

json zero3(bool prefetch = true, bool reshard = true) {
    return {{"type", "zero"}, {"stage", 3}, {"prefetch", prefetch}, {"reshard_after_forward", reshard}};
}

const Result& single_of(const json& j) {
    static std::map<std::string, Result> cache;
    const std::string key = j.dump();
    if (!cache.count(key)) cache[key] = run_it(with_strategy(j, 1, {{"type", "single"}}));
    return cache.at(key);
}

void expect_matches_single(const json& j, int devices, const json& strategy) {
    SCOPED_TRACE(strategy.dump() + " on " + std::to_string(devices) + " devices");
    const Result& want = single_of(j);
    const Result got = run_it(with_strategy(j, devices, strategy));
    ASSERT_EQ(want.summary.status, "finished") << want.summary.error;
    ASSERT_EQ(got.summary.status, "finished") << got.summary.error;
    ASSERT_FALSE(want.artifacts.parameters.empty());
    EXPECT_LE(max_rel_diff(want.artifacts.parameters, got.artifacts.parameters), 1e-5);
    EXPECT_EQ(want.summary.steps, got.summary.steps);
    EXPECT_NEAR(want.summary.final_loss, got.summary.final_loss, 1e-5 * (1 + want.summary.final_loss));
    ASSERT_TRUE(want.summary.test_loss && got.summary.test_loss);
    EXPECT_NEAR(*want.summary.test_loss, *got.summary.test_loss, 1e-5 * (1 + *want.summary.test_loss));
}

TEST(ZeroStage3, MlpMatchesSingle) {
    for (int n : {2, 4})
        for (bool prefetch : {true, false})
            for (bool reshard : {true, false}) expect_matches_single(mlp(), n, zero3(prefetch, reshard));
}

TEST(ZeroStage3, TransformerMatchesSingle) {
    for (int n : {2, 4})
        for (bool prefetch : {true, false})
            for (bool reshard : {true, false}) expect_matches_single(tiny_gpt(), n, zero3(prefetch, reshard));
}

// A CNN with batchnorm (SyncBatchNorm; its running statistics compared too) and an LSTM.
TEST(ZeroStage3, ConvolutionBatchNormAndLstmMatchSingle) {
    const char* fashion = "/usr/share/datasets/fashion-mnist";
    if (!std::filesystem::exists(std::string(fashion) + "/train-images-idx3-ubyte.gz"))
        GTEST_SKIP() << "Fashion-MNIST is not installed at " << fashion << " (make deps installs it)";
    json cnn = json::parse(R"({
      "paralab": 1, "name": "zero3-cnn", "seed": 4,
      "data": {"dataset": "fashion-mnist", "train_limit": 120, "test_limit": 40, "batch_size": 26},
      "model": {"layers": [
          {"type": "conv2d", "out_channels": 4, "kernel": 3, "padding": 1, "bias": false},
          {"type": "batchnorm"}, {"type": "relu"}, {"type": "maxpool2d", "kernel": 2, "stride": 2},
          {"type": "flatten"}, {"type": "linear", "out": 10}],
        "loss": "cross_entropy"},
      "optimizer": {"type": "adam", "lr": 0.01},
      "train": {"epochs": 1, "max_steps": 3}
    })");
    cnn["data"]["path"] = fashion;
    const json lstm = json::parse(R"({
      "paralab": 1, "name": "zero3-lstm", "seed": 9,
      "data": {"dataset": "seqclass", "samples": 200, "seq_len": 6, "features": 3, "classes": 3,
               "batch_size": 22},
      "model": {"layers": [{"type": "lstm", "hidden": 8, "return": "last"}, {"type": "linear", "out": 3}],
        "loss": "cross_entropy"},
      "optimizer": {"type": "adamw", "lr": 0.01},
      "train": {"epochs": 1, "max_steps": 3}
    })");
    for (const json& j : {cnn, lstm})
        for (int n : {2, 4}) {
            expect_matches_single(j, n, zero3());
            const Result got = run_it(with_strategy(j, n, zero3()));
            EXPECT_LE(max_rel_diff(single_of(j).artifacts.buffers, got.artifacts.buffers), 1e-5);
        }
}

// A recomputed forward runs while the layer is gathered for its backward.
TEST(ZeroStage3, FullRecomputationMatchesSingle) {
    for (const json& base : {mlp(), tiny_gpt()}) {
        json j = base;
        j["train"]["recompute"] = "full";
        for (int n : {2, 4}) expect_matches_single(j, n, zero3());
        expect_matches_single(j, 2, zero3(false, false));
    }
}

// 10 rows on 4 devices are 3, 3, 2, 2, cut into at most 3 micro-batches: devices 2 and 3 run one
// micro-batch less; the last batch of 303 samples has 3 rows, so device 3 has none. Each still
// makes every collective. The clipping norm sums the shards' squares.
TEST(ZeroStage3, UnevenRowsAccumulationAndClippingMatchSingle) {
    json j = mlp();
    j["data"]["samples"] = 303;
    j["data"]["batch_size"] = 10;
    j["train"] = {{"epochs", 1}, {"grad_accum", 3}, {"clip_norm", 0.05}};
    expect_matches_single(j, 4, zero3());
    expect_matches_single(j, 4, zero3(false, false));
}

// ---- what moves --------------------------------------------------------------------------

struct Counted {
    int64_t calls = 0, bytes = 0;
};

class CommCounter : public run::RunObserver {
public:
    void on_span(const config::Span& s) override {
        if (s.phase == "all_gather_params" || s.phase == "reduce_scatter_grads") {
            Counted& c = counts[{s.phase, s.device, s.step}];
            ++c.calls;
            c.bytes += s.bytes;
        }
        if (s.phase == "all_reduce_bucket" || s.phase == "reduce_grads_to_owner") other = true;
    }
    std::map<std::tuple<std::string, std::string, int64_t>, Counted> counts;
    bool other = false;
};

// Per step and device, per unit (a top-level layer with parameters) of n numbers: two
// all-gathers of n·(N−1)/N floats (one without resharding) and one reduce-scatter of as many.
TEST(ZeroStage3, GathersAndScattersEachLayerAsTheScheduleSays) {
    const json j = tiny_gpt();
    const config::Experiment e = run::parse_experiment(with_strategy(j, 2, zero3()));
    std::vector<int64_t> units;
    for (int64_t p : strategy::model_cost(e, Shape{8}).layer_parameters)
        if (p > 0) units.push_back(p);
    ASSERT_EQ(units.size(), 6u);  // embedding, positions, 2 blocks, layernorm, head
    for (int n : {2, 4})
        for (bool reshard : {true, false}) {
            SCOPED_TRACE("N=" + std::to_string(n) + (reshard ? " reshard" : " no reshard"));
            CommCounter counter;
            const Result r = run_it(with_strategy(j, n, zero3(true, reshard)), &counter);
            ASSERT_EQ(r.summary.status, "finished") << r.summary.error;
            int64_t moved = 0;
            for (int64_t u : units) {
                ASSERT_EQ(u % n, 0) << "a unit the device count does not divide";
                moved += u * (n - 1) / n * 4;
            }
            const int64_t gathers = reshard ? 2 : 1;
            EXPECT_EQ(counter.counts.size(), static_cast<size_t>(2 * n * r.summary.steps));
            for (const auto& [key, c] : counter.counts) {
                const auto& [phase, device, step] = key;
                SCOPED_TRACE(phase + " " + device + " step " + std::to_string(step));
                if (phase == "all_gather_params") {
                    EXPECT_EQ(c.calls, gathers * static_cast<int64_t>(units.size()));
                    EXPECT_EQ(c.bytes, gathers * moved);
                } else {
                    EXPECT_EQ(c.calls, static_cast<int64_t>(units.size()));
                    EXPECT_EQ(c.bytes, moved);
                }
            }
            EXPECT_FALSE(counter.other);
        }
}

// With units the device count does not divide (the MLP's 3·32+32, 32·32+32, 32·3+3 on 4), each
// collective moves what the ring's uneven chunks make it: an all-gather n − chunk(r), a
// reduce-scatter n − chunk(r − 1).
TEST(ZeroStage3, UnevenUnitsMoveTheirChunks) {
    CommCounter counter;
    const int n = 4;
    const Result r = run_it(with_strategy(mlp(), n, zero3()), &counter);
    ASSERT_EQ(r.summary.status, "finished") << r.summary.error;
    const int64_t units[] = {2 * 32 + 32, 32 * 32 + 32, 32 * 3 + 3};
    for (int d = 0; d < n; ++d) {
        int64_t gather = 0, scatter = 0;
        for (int64_t u : units) {
            gather += 4 * (u - data::shard_of_dataset(u, d, n).count);
            scatter += 4 * (u - data::shard_of_dataset(u, (d + n - 1) % n, n).count);
        }
        for (int64_t step = 1; step <= r.summary.steps; ++step) {
            const std::string device = "cpu:" + std::to_string(d);
            const Counted gathered = counter.counts[{"all_gather_params", device, step}];
            const Counted scattered = counter.counts[{"reduce_scatter_grads", device, step}];
            EXPECT_EQ(gathered.bytes, 2 * gather) << device;
            EXPECT_EQ(scattered.bytes, scatter) << device;
        }
    }
}

// ---- memory ------------------------------------------------------------------------------

// Measured peaks against the memory model: parameters, gradients and optimizer state within
// 10%, no communication buffer, activations within `activations_factor` (the estimate every
// strategy shares for a replica's rows: within 10% on the char-GPT, 14% over on the small MLP).
void expect_memory_as_predicted(const json& j, double activations_factor) {
    const Result r = run_it(j);
    ASSERT_EQ(r.summary.status, "finished") << r.summary.error;
    const auto predicted = strategy_testing::expect_memory_as_predicted(
        j, r, run::model_input_shape(run::parse_experiment(j)), 1.10, activations_factor);
    for (const auto& d : predicted)
        EXPECT_EQ(r.artifacts.memory.at(d.device).peak[static_cast<size_t>(MemCategory::communication)], 0) << d.device;
}

TEST(ZeroStage3, MlpMemoryAsPredicted) {
    const json j = mlp();
    for (const json& s : {zero3(), zero3(false, true), zero3(true, false)}) {
        SCOPED_TRACE(s.dump());
        expect_memory_as_predicted(with_strategy(j, 4, s), 1.25);
    }
}

// The char-GPT example (4 blocks of width 128) for two steps.
TEST(ZeroStage3, CharGptMemoryAsPredicted) {
    std::ifstream in(std::string(PARALAB_EXAMPLES_DIR) + "/gpt-char.paralab.json");
    ASSERT_TRUE(in) << "resources/examples/gpt-char.paralab.json";
    json j = json::parse(in);
    j["data"]["path"] = corpus();
    j["data"]["test_limit"] = 4;
    j["train"] = {{"epochs", 1}, {"max_steps", 2}};
    for (const json& s : {zero3(), zero3(false, true), zero3(true, false)}) {
        SCOPED_TRACE(s.dump());
        expect_memory_as_predicted(with_strategy(j, 4, s), 1.10);
    }
}

// Against stages 1 and 2 on the same run: fewer parameters than both (whose parameters are
// whole), no more gradients than stage 2 (its shard and one layer's too), fewer than stage 1,
// and the same sharded optimizer state. (How much less depends on the largest layers: here the
// embedding and the head are most of the model, and two of them may be whole at once.)
TEST(ZeroStage3, HoldsLessThanStagesOneAndTwo) {
    const json j = tiny_gpt();
    const auto stage1 = run_it(with_strategy(j, 4, {{"type", "zero"}, {"stage", 1}}));
    const auto stage2 = run_it(with_strategy(j, 4, {{"type", "zero"}, {"stage", 2}}));
    const auto stage3 = run_it(with_strategy(j, 4, zero3()));
    for (const Result* r : {&stage1, &stage2, &stage3}) ASSERT_EQ(r->summary.status, "finished") << r->summary.error;
    const auto at = [](const Result& r, MemCategory c) {
        return r.artifacts.memory.at("cpu:1").peak[static_cast<size_t>(c)];
    };
    EXPECT_LT(at(stage3, MemCategory::parameters), at(stage2, MemCategory::parameters) * 3 / 4);
    EXPECT_EQ(at(stage2, MemCategory::parameters), at(stage1, MemCategory::parameters));
    EXPECT_LE(at(stage3, MemCategory::gradients), at(stage2, MemCategory::gradients) * 21 / 20);
    EXPECT_LT(at(stage3, MemCategory::gradients), at(stage1, MemCategory::gradients) * 3 / 4);
    EXPECT_LE(at(stage3, MemCategory::optimizer_state), at(stage1, MemCategory::optimizer_state) * 21 / 20);
    EXPECT_EQ(at(stage3, MemCategory::communication), 0);
}

// ---- runs that end early -----------------------------------------------------------------

// A NaN on every device fails the run; the gather threads (prefetch) leave their collectives.
TEST(ZeroStage3, DivergenceFailsWithoutHanging) {
    for (bool prefetch : {true, false}) {
        json j = with_strategy(mlp(), 3, zero3(prefetch));
        j["optimizer"] = {{"type", "sgd"}, {"lr", 1e30}};
        j["train"]["max_steps"] = 50;
        const auto r = run_it(j);
        EXPECT_EQ(r.summary.status, "failed") << prefetch;
        EXPECT_TRUE(r.summary.error.find("NaN") != std::string::npos ||
                    r.summary.error.find("infinite") != std::string::npos)
            << r.summary.error;
    }
}

class StopAfter : public run::RunObserver {
public:
    StopAfter(std::atomic<bool>& stop, int64_t step) : m_stop(stop), m_step(step) {}
    void on_step(const config::StepRecord& r) override {
        if (r.step >= m_step) m_stop = true;
        std::lock_guard lock(m_mutex);
        steps[r.device] = std::max(steps[r.device], r.step);
    }
    std::map<std::string, int64_t> steps;  // guarded by m_mutex while the run lives

private:
    std::atomic<bool>& m_stop;
    int64_t m_step;
    std::mutex m_mutex;
};

TEST(ZeroStage3, StopEndsEveryDeviceAtTheSameStep) {
    json j = with_strategy(mlp(), 4, zero3());
    j["train"] = {{"epochs", 100}, {"max_steps", 1000}};
    run::RunControl control;
    StopAfter observer(control.stop, 3);
    const auto r = run_it(j, &observer, &control);
    EXPECT_EQ(r.summary.status, "stopped");
    EXPECT_GE(r.summary.steps, 3);
    EXPECT_LT(r.summary.steps, 1000);
    for (int d = 0; d < 4; ++d) EXPECT_EQ(observer.steps["cpu:" + std::to_string(d)], r.summary.steps);
}

// ---- bad input ---------------------------------------------------------------------------

TEST(ZeroStage3, StageOutsideOneToThreeIsRefusedAtItsKey) {
    for (int stage : {0, 4}) {
        try {
            run::parse_experiment(with_strategy(mlp(), 2, {{"type", "zero"}, {"stage", stage}}));
            ADD_FAILURE() << "stage " << stage << " was accepted";
        } catch (const ConfigError& err) {
            EXPECT_EQ(err.path(), "strategy.stage") << err.what();
            EXPECT_NE(std::string(err.what()).find(std::to_string(stage)), std::string::npos) << err.what();
        }
    }
}

}  // namespace
