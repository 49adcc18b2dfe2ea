// model_parallel and pipeline (docs/strategies.md): N stages give the single device's parameters on
// the same global batch (GPipe, 1F1B and interleaved 1F1B, any number of micro-batches, batches
// that divide evenly into neither), GPipe's activation memory grows with the micro-batches in
// flight while 1F1B's stays bounded, the interleaved schedule runs Megatron-LM's order with a
// smaller bubble than 1F1B's, zb_h1 runs the zero-bubble paper's ZB-H1 order (B and W split)
// with a smaller bubble than 1F1B's, and bad splits and schedule options are refused naming the
// key.
#include <gtest/gtest.h>
#include <limits>
#include <chrono>
#include <random>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <tuple>

#include "engine/run/checkpoint.h"
#include "engine/run/experiment_file.h"
#include "engine/run/trainer.h"
#include "strategy_testing.h"
#include "engine/strategy/registry.h"
#include "engine/strategy/stages.h"

using namespace paralab;
using nlohmann::json;
using namespace strategy_testing;
namespace st = paralab::strategy::stages;

namespace {

// 6 top-level layers; dropout so that masks must follow the global row index; 26 rows per
// batch divide evenly by none of 3, 4 (nor by 3 or 4 micro-batches).
json spirals_mlp() {
    return json::parse(R"({
      "paralab": 1, "name": "pipeline-mlp", "seed": 5,
      "data": {"dataset": "spirals", "samples": 300, "classes": 3, "batch_size": 26},
      "model": {"input": [2], "layers": [
          {"type": "linear", "out": 16}, {"type": "relu"}, {"type": "dropout", "p": 0.2},
          {"type": "linear", "out": 16}, {"type": "tanh"},
          {"type": "linear", "out": 3}], "loss": "cross_entropy"},
      "optimizer": {"type": "sgd", "lr": 0.1, "momentum": 0.9},
      "train": {"epochs": 1, "max_steps": 4}
    })");
}

json seqclass_lstm() {
    return json::parse(R"({
      "paralab": 1, "name": "pipeline-lstm", "seed": 9,
      "data": {"dataset": "seqclass", "samples": 200, "seq_len": 6, "features": 3,
               "classes": 3, "batch_size": 22},
      "model": {"layers": [
          {"type": "lstm", "hidden": 8, "return": "sequence"},
          {"type": "lstm", "hidden": 8, "return": "last"},
          {"type": "relu"}, {"type": "linear", "out": 3}], "loss": "cross_entropy"},
      "optimizer": {"type": "adam", "lr": 0.01},
      "train": {"epochs": 1, "max_steps": 3}
    })");
}

void expect_matches_single(const json& parallel, double tol = 1e-5) {
    json single = parallel;
    single["devices"] = devices(1);
    single["strategy"] = {{"type", "single"}};
    const Result& want = run_it(single);
    const Result& got = run_it(parallel);
    ASSERT_EQ(want.summary.status, "finished") << want.summary.error;
    ASSERT_EQ(got.summary.status, "finished") << got.summary.error;
    ASSERT_FALSE(want.artifacts.parameters.empty());
    EXPECT_LE(max_rel_diff(want.artifacts.parameters, got.artifacts.parameters), tol);
    EXPECT_LE(max_rel_diff(want.artifacts.buffers, got.artifacts.buffers), tol);
    EXPECT_NEAR(want.summary.final_loss, got.summary.final_loss,
                tol * (1 + want.summary.final_loss));
    EXPECT_EQ(want.summary.steps, got.summary.steps);
}

// ---- equivalence with the single device ------------------------------------------------------

struct Case {
    const char* model;  // "mlp" | "lstm"
    const char* type;   // "model_parallel" | "pipeline"
    const char* schedule;
    int micro_batches;
    int devices;
};

void PrintTo(const Case& c, std::ostream* os) {
    *os << c.model << "/" << c.type << "/" << c.schedule << "/m" << c.micro_batches << "/N"
        << c.devices;
}

class MatchesSingle : public ::testing::TestWithParam<Case> {};

TEST_P(MatchesSingle, Parameters) {
    const Case c = GetParam();
    json strategy = {{"type", c.type}};
    if (std::string(c.type) == "pipeline") {
        strategy["micro_batches"] = c.micro_batches;
        strategy["schedule"] = c.schedule;
    }
    const json base = std::string(c.model) == "lstm" ? seqclass_lstm() : spirals_mlp();
    expect_matches_single(with_strategy(base, c.devices, strategy));
}

std::vector<Case> cases() {
    std::vector<Case> out;
    for (int n : {2, 3, 4}) out.push_back({"mlp", "model_parallel", "", 1, n});
    for (const char* schedule : {"gpipe", "1f1b", "zb_h1"})
        for (int m : {1, 3, 4})
            for (int n : {2, 3, 4}) out.push_back({"mlp", "pipeline", schedule, m, n});
    out.push_back({"lstm", "model_parallel", "", 1, 3});
    out.push_back({"lstm", "pipeline", "gpipe", 4, 2});
    out.push_back({"lstm", "pipeline", "1f1b", 3, 3});
    out.push_back({"lstm", "pipeline", "1f1b", 4, 4});
    out.push_back({"lstm", "pipeline", "zb_h1", 4, 2});
    out.push_back({"lstm", "pipeline", "zb_h1", 8, 4});
    return out;
}

INSTANTIATE_TEST_SUITE_P(Stages, MatchesSingle, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                             const Case& c = info.param;
                             std::string name = std::string(c.model) + "_" + c.type;
                             if (std::string(c.type) == "pipeline")
                                 name += std::string("_") + c.schedule + "_m" + std::to_string(c.micro_batches);
                             return name + "_N" + std::to_string(c.devices);
                         });

TEST(Stages, ExplicitSplitMatchesSingle) {
    expect_matches_single(
        with_strategy(spirals_mlp(), 3, {{"type", "model_parallel"}, {"split", {1, 3}}}));
    expect_matches_single(with_strategy(
        spirals_mlp(), 2,
        {{"type", "pipeline"}, {"split", {5}}, {"micro_batches", 3}, {"schedule", "1f1b"}}));
}

TEST(Stages, GradAccumAndClippingMatchSingle) {
    json j = with_strategy(spirals_mlp(), 3,
                           {{"type", "pipeline"}, {"micro_batches", 2}, {"schedule", "1f1b"}});
    j["train"]["grad_accum"] = 2;
    j["train"]["clip_norm"] = 0.3;  // small enough to clip every step
    expect_matches_single(j);
}

TEST(Stages, BatchNormBuffersMatchSingleWithOneMicroBatch) {
    json j = spirals_mlp();
    j["model"]["layers"].insert(j["model"]["layers"].begin() + 1, json{{"type", "batchnorm"}});
    expect_matches_single(with_strategy(j, 3, {{"type", "model_parallel"}}));
}

// ---- memory: GPipe's activations grow with the micro-batches, 1F1B's do not -------------------

json staged_mlp(const std::string& schedule, int micro_batches) {
    // Micro-batches of 16 rows each, so that a micro-batch's activations stay the same size.
    json j = spirals_mlp();
    j["data"]["batch_size"] = 16 * micro_batches;
    j["data"]["test_fraction"] = 0.0;  // no evaluation pass in the peaks
    j["train"]["max_steps"] = 2;
    j["model"]["layers"][0]["out"] = 128;
    j["model"]["layers"][3]["out"] = 128;
    return with_strategy(j, 3, {{"type", "pipeline"}, {"micro_batches", micro_batches}, {"schedule", schedule}});
}

MemoryStats stage_memory(const std::string& schedule, int micro_batches, const std::string& device) {
    const Result& r = run_it(staged_mlp(schedule, micro_batches));
    EXPECT_EQ(r.summary.status, "finished") << r.summary.error;
    return r.artifacts.memory.at(device);
}

// Each step's record carries the step's peak and the categories at that moment: its
// activations, which the step's end no longer holds. GPipe's step holds all 9 micro-batches' on
// the first stage, 1F1B's at most 3; the run's peak is the largest step's.
TEST(Stages, StepRecordsCarryTheStepsPeakWithItsActivations) {
    constexpr auto act = static_cast<size_t>(MemCategory::activations);
    struct Last : run::RunObserver {
        std::map<std::string, config::StepRecord> by_device;
        void on_step(const config::StepRecord& r) override { by_device[r.device] = r; }
    };
    std::map<std::string, config::StepRecord> last;
    std::map<std::string, MemoryStats> run_peak;
    for (const std::string schedule : {"gpipe", "1f1b"}) {
        Last observer;
        const Result r = run_it(staged_mlp(schedule, 9), &observer);
        ASSERT_EQ(r.summary.status, "finished") << r.summary.error;
        last[schedule] = observer.by_device.at("cpu:0");
        run_peak[schedule] = r.artifacts.memory.at("cpu:0");
    }
    for (const auto& [schedule, record] : last) {
        SCOPED_TRACE(schedule);
        const MemoryStats& m = record.memory;
        EXPECT_GT(m.step_peak_total, m.current_total);
        EXPECT_GT(m.at_step_peak[act], m.current[act]);
        int64_t sum = 0;
        for (const int64_t bytes : m.at_step_peak) sum += bytes;
        EXPECT_EQ(sum, m.step_peak_total);
        EXPECT_LE(m.step_peak_total, run_peak[schedule].peak_total);
    }
    EXPECT_GT(last["gpipe"].memory.at_step_peak[act], 2 * last["1f1b"].memory.at_step_peak[act]);
}

TEST(Stages, GpipeActivationsGrowWithMicroBatchesOneF1BStayBounded) {
    constexpr auto act = static_cast<size_t>(MemCategory::activations);
    constexpr auto par = static_cast<size_t>(MemCategory::parameters);
    constexpr auto grad = static_cast<size_t>(MemCategory::gradients);
    // 3 stages: 1F1B holds at most 3 micro-batches on stage 0, 2 on stage 1, whatever m is.
    for (const std::string device : {"cpu:0", "cpu:1"}) {
        const MemoryStats g3 = stage_memory("gpipe", 3, device),
                          g9 = stage_memory("gpipe", 9, device);
        const MemoryStats f3 = stage_memory("1f1b", 3, device),
                          f9 = stage_memory("1f1b", 9, device);
        SCOPED_TRACE(device + ": gpipe " + std::to_string(g3.peak[act]) + " -> " +
                     std::to_string(g9.peak[act]) + ", 1f1b " + std::to_string(f3.peak[act]) +
                     " -> " + std::to_string(f9.peak[act]));
        EXPECT_GT(g9.peak[act], 2 * g3.peak[act]);  // 9 micro-batches in flight against 3
        EXPECT_LE(f9.peak[act], f3.peak[act] + f3.peak[act] / 10);  // the same few either way
        EXPECT_LT(2 * f9.peak[act], g9.peak[act]);
        // The contexts share the stage's parameters and gradients: counted once, however many.
        EXPECT_GT(g9.peak[par], 0);
        EXPECT_EQ(g9.peak[par], f3.peak[par]);
        EXPECT_EQ(g9.peak[grad], f3.peak[grad]);
        EXPECT_EQ(g9.current[par], g3.current[par]);
    }
}

// The timeline shows the activations and gradients crossing devices, and the waits as idle.
TEST(Stages, SpansNameTheMessagesBetweenStages) {
    struct Phases : run::RunObserver {
        std::map<std::string, std::set<std::string>> by_device;
        std::map<std::string, double> idle_ms;
        void on_span(const config::Span& s) override { by_device[s.device].insert(s.phase); }
        void on_step(const config::StepRecord& r) override { idle_ms[r.device] += r.idle_ms; }
    } phases;
    json j = with_strategy(spirals_mlp(), 3,
                           {{"type", "pipeline"}, {"micro_batches", 4}, {"schedule", "1f1b"}});
    j["strategy"]["straggler"] = {{"device", "cpu:1"}, {"delay_ms", 2}};
    const Result& r = run_it(j, &phases);
    ASSERT_EQ(r.summary.status, "finished") << r.summary.error;
    auto& p = phases.by_device;
    for (const char* phase : {"forward", "backward", "optimizer", "send_activation", "recv_grad"})
        EXPECT_TRUE(p["cpu:0"].count(phase)) << phase;
    for (const char* phase : {"recv_activation", "send_activation", "recv_grad", "send_grad"})
        EXPECT_TRUE(p["cpu:1"].count(phase)) << phase;
    for (const char* phase : {"recv_activation", "send_grad"})
        EXPECT_TRUE(p["cpu:2"].count(phase)) << phase;
    EXPECT_FALSE(p["cpu:0"].count("recv_activation"));
    EXPECT_FALSE(p["cpu:2"].count("send_activation"));
    // The straggler sleeps 2 ms in each of 4 forwards per step: the last stage waits for it.
    EXPECT_GT(phases.idle_ms["cpu:2"], 4 * 8 * 0.5);
}

// ---- configuration errors -----------------------------------------------------------------------

void expect_config_error(const json& j, const std::string& key) {
    try {
        run_it(j);
        ADD_FAILURE() << "no ConfigError; expected one naming " << key;
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
}

TEST(Stages, BadSplitsAreRefusedNamingTheKey) {
    for (const json& split :
         {json{2}, json{1, 2, 3}, json{3, 3}, json{4, 2}, json{0, 3}, json{2, 6}}) {
        SCOPED_TRACE(split.dump());
        expect_config_error(
            with_strategy(spirals_mlp(), 3, {{"type", "model_parallel"}, {"split", split}}),
            "strategy.split");
        expect_config_error(
            with_strategy(spirals_mlp(), 3, {{"type", "pipeline"}, {"split", split}}),
            "strategy.split");
    }
}

TEST(Stages, MoreDevicesThanLayersAreRefused) {
    expect_config_error(with_strategy(spirals_mlp(), 7, {{"type", "model_parallel"}}), "devices");
    expect_config_error(with_strategy(seqclass_lstm(), 5, {{"type", "pipeline"}}), "devices");
}

// ---- the pieces ---------------------------------------------------------------------------------

TEST(Stages, BalancedSplitMinimisesTheLargestStageAndKeepsActivationsWithTheirLayer) {
    // linear 48, relu, dropout, linear 272, tanh, linear 51 (the MLP above)
    const std::vector<int64_t> mlp{48, 0, 0, 272, 0, 51};
    EXPECT_EQ(st::balanced_split(mlp, 1), std::vector<int64_t>{});
    EXPECT_EQ(st::balanced_split(mlp, 2), (std::vector<int64_t>{5}));     // {48, 272} | {51}
    EXPECT_EQ(st::balanced_split(mlp, 3), (std::vector<int64_t>{3, 5}));  // 48 | 272 | 51
    EXPECT_EQ(st::balanced_split(mlp, 6), (std::vector<int64_t>{1, 2, 3, 4, 5}));
    EXPECT_EQ(st::balanced_split({10, 10, 10, 10}, 2), (std::vector<int64_t>{2}));
    EXPECT_EQ(st::balanced_split({0, 30, 0, 10, 0, 10, 0, 10, 0}, 2),
              (std::vector<int64_t>{3}));  // 30 | 30
    EXPECT_EQ(st::balanced_split({5, 5, 100, 5}, 3), (std::vector<int64_t>{2, 3}));
}

namespace {

// The split by its definition: dynamic programming over every (first layer, stages) pair,
// O(stages · L²) time and two (L + 1)² tables. The reference balanced_split is checked against.
std::vector<int64_t> reference_split(const std::vector<int64_t>& cost, int stages, const std::vector<int64_t>& params) {
    const std::vector<int64_t>& free_of = params.size() == cost.size() ? params : cost;
    const int n = static_cast<int>(cost.size());
    std::vector<int64_t> prefix(size_t(n) + 1, 0);
    for (int i = 0; i < n; ++i) prefix[size_t(i) + 1] = prefix[size_t(i)] + cost[size_t(i)];
    auto sum = [&](int a, int b) { return prefix[size_t(b)] - prefix[size_t(a)]; };
    constexpr int64_t kInf = std::numeric_limits<int64_t>::max();
    const auto at = [n](int i, int k) { return size_t(i) * size_t(n + 1) + size_t(k); };
    std::vector<int64_t> best(size_t(n + 1) * size_t(n + 1), kInf);
    best[at(n, 0)] = 0;
    for (int k = 1; k <= stages; ++k)
        for (int i = n - k; i >= 0; --i)
            for (int j = i + 1; j <= n - k + 1; ++j)
                if (best[at(j, k - 1)] != kInf) best[at(i, k)] = std::min(best[at(i, k)], std::max(sum(i, j), best[at(j, k - 1)]));
    const int64_t limit = best[at(0, stages)];
    std::vector<int64_t> starts(size_t(n + 1) * size_t(n + 1), kInf);
    starts[at(n, 0)] = 0;
    for (int k = 1; k <= stages; ++k)
        for (int i = n - k; i >= 0; --i)
            for (int j = i + 1; j <= n - k + 1 && sum(i, j) <= limit; ++j)
                if (starts[at(j, k - 1)] != kInf)
                    starts[at(i, k)] = std::min(starts[at(i, k)], starts[at(j, k - 1)] + ((j < n && free_of[size_t(j)] == 0) ? 1 : 0));
    std::vector<int64_t> split;
    int i = 0;
    for (int k = stages; k > 1; --k) {
        for (int j = n - k + 1; j > i; --j) {
            if (sum(i, j) > limit || starts[at(j, k - 1)] == kInf) continue;
            if (starts[at(j, k - 1)] + (free_of[size_t(j)] == 0 ? 1 : 0) == starts[at(i, k)]) {
                split.push_back(j);
                i = j;
                break;
            }
        }
    }
    return split;
}

}  // namespace

// The split against its definition on random models: costs from a few values (ties, zero-cost
// layers, one heavy layer), parameter-free layers among them, every stage count.
TEST(Stages, BalancedSplitMatchesTheDynamicProgramme) {
    std::mt19937 rng(41);
    for (int round = 0; round < 3000; ++round) {
        const int n = 1 + static_cast<int>(rng() % 24);
        std::vector<int64_t> cost(static_cast<size_t>(n)), params(static_cast<size_t>(n));
        const int64_t heavy = rng() % 4 == 0 ? 1000 : 9;
        for (int i = 0; i < n; ++i) {
            const uint32_t kind = rng() % 5;
            cost[size_t(i)] = kind == 0 ? 0 : kind == 4 ? static_cast<int64_t>(rng() % uint32_t(heavy)) : static_cast<int64_t>(rng() % 12);
            params[size_t(i)] = rng() % 3 == 0 ? 0 : cost[size_t(i)] + 1;
        }
        for (int stages = 1; stages <= n; ++stages) {
            SCOPED_TRACE("round " + std::to_string(round) + ", " + std::to_string(stages) + " stages");
            ASSERT_EQ(st::balanced_split(cost, stages, params), reference_split(cost, stages, params));
            ASSERT_EQ(st::balanced_split(cost, stages), reference_split(cost, stages, {}));
        }
    }
}

// 20,001 layers: the automatic split is found in well under a second, in memory linear in the
// layers for a few stages (the dynamic programme took a minute and 6 GB).
TEST(Stages, BalancedSplitOfAVeryDeepModelIsFast) {
    std::vector<int64_t> cost, params;
    for (int i = 0; i < 20001; ++i) {
        cost.push_back(i % 2 == 0 ? 1000 + i % 7 : 10);  // a linear layer, then its activation
        params.push_back(i % 2 == 0 ? 1 : 0);
    }
    for (const int stages : {2, 4, 64, 1024}) {
        const auto start = std::chrono::steady_clock::now();
        const auto split = st::balanced_split(cost, stages, params);
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1)) << stages << " stages";
        ASSERT_EQ(split.size(), size_t(stages - 1));
        EXPECT_TRUE(std::is_sorted(split.begin(), split.end()));
    }
    // The first 2,001 layers, where the dynamic programme still runs: the same split.
    cost.resize(2001);
    params.resize(2001);
    for (const int stages : {2, 3, 4})
        EXPECT_EQ(st::balanced_split(cost, stages, params), reference_split(cost, stages, params)) << stages;
}

TEST(Stages, SchedulesRunEveryMicroBatchOnceWithinTheirContexts) {
    for (auto schedule : {st::Schedule::gpipe, st::Schedule::one_f_one_b})
        for (int p : {1, 2, 3, 4})
            for (int m : {1, 2, 3, 5, 8})
                for (int s = 0; s < p; ++s) {
                    SCOPED_TRACE("p " + std::to_string(p) + " m " + std::to_string(m) + " s " +
                                 std::to_string(s));
                    const auto ops = st::stage_schedule(schedule, s, p, m);
                    const int k = st::contexts_needed(schedule, s, p, m);
                    ASSERT_EQ(ops.size(), size_t(2 * m));
                    std::set<int> in_flight, done;
                    int next_forward = 0;
                    size_t peak = 0;
                    for (const auto& op : ops) {
                        if (op.forward()) {
                            EXPECT_EQ(op.micro, next_forward++);  // forwards in order
                            for (int f : in_flight) EXPECT_NE(f % k, op.micro % k);  // context free
                            in_flight.insert(op.micro);
                        } else {
                            EXPECT_EQ(in_flight.erase(op.micro), 1u);
                            done.insert(op.micro);
                        }
                        peak = std::max(peak, in_flight.size());
                    }
                    EXPECT_EQ(done.size(), size_t(m));
                    if (schedule == st::Schedule::one_f_one_b) {
                        EXPECT_LE(peak, size_t(std::min(m, p - s)));
                    }
                }
    const auto F = [](int micro) { return st::Op{st::Pass::forward, micro}; };
    const auto B = [](int micro) { return st::Op{st::Pass::backward, micro}; };
    EXPECT_EQ(st::stage_schedule(st::Schedule::one_f_one_b, 0, 3, 4),
              (std::vector<st::Op>{F(0), F(1), F(2), B(0), F(3), B(1), B(2), B(3)}));
    EXPECT_EQ(st::stage_schedule(st::Schedule::gpipe, 1, 3, 2), (std::vector<st::Op>{F(0), F(1), B(1), B(0)}));
}

// ---- interleaved 1F1B ---------------------------------------------------------------------------

json interleaved(int micro_batches, int chunks) {
    return {{"type", "pipeline"}, {"schedule", "interleaved_1f1b"}, {"interleave", chunks},
            {"micro_batches", micro_batches}};
}

// p · v chunks of the 6-layer MLP (at most 6) and of the 4-layer LSTM, micro-batches a
// multiple of p, with rows that divide evenly into none of them.
TEST(Stages, InterleavedMatchesSingle) {
    for (const auto& [p, v, m] : {std::tuple{2, 2, 4}, std::tuple{2, 3, 4}, std::tuple{2, 2, 2},
                                  std::tuple{3, 2, 3}, std::tuple{3, 2, 6}, std::tuple{2, 2, 8}}) {
        SCOPED_TRACE("p " + std::to_string(p) + " v " + std::to_string(v) + " m " + std::to_string(m));
        expect_matches_single(with_strategy(spirals_mlp(), p, interleaved(m, v)));
    }
    expect_matches_single(with_strategy(seqclass_lstm(), 2, interleaved(4, 2)));
}

// An explicit split names p·v − 1 chunk boundaries; grad_accum gives flushes of 3 or 4 rows,
// so that a flush of 3 micro-batches on 2 stages runs as 2 in the schedule, then 1; clipping
// sums the norm over the stages' chunks.
TEST(Stages, InterleavedSplitShortFlushesAndClippingMatchSingle) {
    json split = interleaved(4, 2);
    split["split"] = {1, 3, 5};
    expect_matches_single(with_strategy(spirals_mlp(), 2, split));
    json j = with_strategy(spirals_mlp(), 2, interleaved(4, 2));
    j["train"]["grad_accum"] = 8;
    j["train"]["clip_norm"] = 0.3;
    expect_matches_single(j);
}

// The textbook order (Narayanan et al. 2021, 2.2.2; Megatron-LM) for p 2, v 2, m 4: device d
// runs 2·(p − d − 1) + (v − 1)·p warm-up forwards, in groups of p micro-batches chunk after
// chunk, then one forward and one backward in turn (backwards with the chunks reversed).
TEST(Stages, InterleavedScheduleIsTheTextbookOrder) {
    using O = st::Op;
    const auto F = [](int micro, int chunk) { return O{st::Pass::forward, micro, chunk}; };
    const auto B = [](int micro, int chunk) { return O{st::Pass::backward, micro, chunk}; };
    const std::vector<O> device0{F(0, 0), F(1, 0), F(0, 1), F(1, 1),  // warm-up: 2 + 2
                                 F(2, 0), B(0, 1), F(3, 0), B(1, 1), F(2, 1), B(0, 0), F(3, 1), B(1, 0),
                                 B(2, 1), B(3, 1), B(2, 0), B(3, 0)};
    const std::vector<O> device1{F(0, 0), F(1, 0),  // warm-up: 0 + 2
                                 F(0, 1), B(0, 1), F(1, 1), B(1, 1), F(2, 0), B(0, 0), F(3, 0), B(1, 0),
                                 F(2, 1), B(2, 1), F(3, 1), B(3, 1),
                                 B(2, 0), B(3, 0)};
    EXPECT_EQ(st::stage_schedule(st::Schedule::interleaved_1f1b, 0, 2, 4, 2), device0);
    EXPECT_EQ(st::stage_schedule(st::Schedule::interleaved_1f1b, 1, 2, 4, 2), device1);
}

// Every device's order run against the others, one slot per chunk forward and two per chunk
// backward (a stage's 1F1B work is v chunks' worth; with W actions, a zero-bubble order, one for
// B and one for W): an operation runs once the operation it needs has ended (the previous global
// chunk's forward, the next one's backward; a W its own B). Returns the makespan in slots; fails
// on a deadlock. `orders[d]` holds device d's (pass, micro, chunk).
int slot_makespan(const std::vector<std::vector<st::Op>>& orders, int chunks, int slots_per_chunk) {
    const int p = static_cast<int>(orders.size()), g_count = p * chunks;
    bool split = false;
    for (const auto& order : orders)
        for (const st::Op& op : order) split = split || op.pass == st::Pass::weight;
    std::map<std::tuple<st::Pass, int, int>, int> done;  // (pass, global chunk, micro) -> end slot
    std::vector<size_t> next(orders.size(), 0);
    std::vector<int> free_at(orders.size(), 0);
    int makespan = 0;
    for (bool progress = true; progress;) {
        progress = false;
        for (int d = 0; d < p; ++d)
            while (next[size_t(d)] < orders[size_t(d)].size()) {
                const st::Op& op = orders[size_t(d)][next[size_t(d)]];
                const int g = op.chunk * p + d;
                std::tuple<st::Pass, int, int> need;
                if (op.pass == st::Pass::weight) need = {st::Pass::backward, g, op.micro};
                else if (op.forward()) need = {st::Pass::forward, g - 1, op.micro};
                else if (g + 1 < g_count) need = {st::Pass::backward, g + 1, op.micro};
                else need = {st::Pass::forward, g, op.micro};
                int ready = 0;
                if (!(op.forward() && g == 0)) {
                    const auto it = done.find(need);
                    if (it == done.end()) break;
                    ready = it->second;
                }
                const int slots = op.forward() || split ? 1 : 2;
                const int end = std::max(ready, free_at[size_t(d)]) + slots * slots_per_chunk;
                free_at[size_t(d)] = end;
                EXPECT_TRUE(done.emplace(std::tuple{op.pass, g, op.micro}, end).second) << "a pass run twice";
                makespan = std::max(makespan, end);
                ++next[size_t(d)];
                progress = true;
            }
    }
    for (int d = 0; d < p; ++d) EXPECT_EQ(next[size_t(d)], orders[size_t(d)].size()) << "deadlock on device " << d;
    return makespan;
}

// Every micro-batch runs forward and backward once through every chunk, within the contexts
// the device builds (micro-batch i in context i mod K of its chunk, K the chunk's most in
// flight), without deadlock, for any flush a run gives it (fewer micro-batches than set: a
// short batch, grad_accum).
TEST(Stages, InterleavedFlushesRunEveryMicroBatchOnceWithinTheirContexts) {
    const auto kind = st::Schedule::interleaved_1f1b;
    for (int p : {2, 3, 4})
        for (int v : {2, 3})
            for (int m : {p, 2 * p, 3 * p})
                for (int flush = 1; flush <= m; ++flush) {
                    SCOPED_TRACE("p " + std::to_string(p) + " v " + std::to_string(v) + " m " +
                                 std::to_string(m) + " flush " + std::to_string(flush));
                    int covered = 0;
                    for (int part : st::flush_parts(kind, p, flush)) {
                        if (part > p) {
                            EXPECT_EQ(part % p, 0);
                        }
                        std::vector<std::vector<st::Op>> orders;
                        for (int d = 0; d < p; ++d) {
                            const auto ops = st::stage_schedule(kind, d, p, part, v);
                            const auto built = st::chunk_contexts(kind, d, p, m, v);
                            const auto peak = st::chunk_in_flight(ops, v);
                            ASSERT_EQ(ops.size(), size_t(2 * part * v));
                            std::map<std::pair<int, int>, int> runs;  // (micro, chunk) -> forwards − backwards
                            std::vector<std::set<int>> in_flight(static_cast<size_t>(v));
                            for (const auto& op : ops) {
                                const int k = peak[size_t(op.chunk)];
                                ASSERT_LE(k, built[size_t(op.chunk)]);
                                auto& live = in_flight[size_t(op.chunk)];
                                if (op.forward()) {
                                    for (int f : live) EXPECT_NE(f % k, op.micro % k);  // context free
                                    live.insert(op.micro);
                                    EXPECT_EQ((runs[{op.micro, op.chunk}]++), 0);
                                } else {
                                    EXPECT_EQ(live.erase(op.micro), 1u);
                                    EXPECT_EQ((runs[{op.micro, op.chunk}]--), 1);
                                }
                            }
                            EXPECT_EQ(runs.size(), size_t(part * v));
                            orders.push_back(ops);
                        }
                        slot_makespan(orders, v, 1);
                        covered += part;
                    }
                    EXPECT_EQ(covered, flush);
                }
}

// The run follows the schedule: the forward and backward spans of each device, in the order
// recorded, name the chunk and are the textbook order's (kind, chunk); the messages between
// chunks name theirs. Their bubble, counted in slots from the recorded orders (one per chunk
// forward, two per backward, a 1F1B stage being v chunks), is below 1F1B's on the same model:
// (p − 1)/(v·m + p − 1) of the step against (p − 1)/(m + p − 1). Wall time, which a loaded
// machine makes flaky, is not compared.
TEST(Stages, InterleavedSpansFollowTheScheduleWithASmallerBubbleThanOneF1B) {
    struct Order : run::RunObserver {
        std::map<std::string, std::vector<std::string>> compute;  // device -> forward/backward phases of step 1
        std::map<std::string, std::set<std::string>> phases;
        void on_span(const config::Span& s) override {
            phases[s.device].insert(s.phase);
            if (s.step == 1 && (s.phase.rfind("forward", 0) == 0 || s.phase.rfind("backward", 0) == 0))
                compute[s.device].push_back(s.phase);
        }
    };
    const int p = 2, v = 2, m = 4;
    // The recorded compute spans of one step as each device's (kind, micro, chunk): the n-th
    // forward (backward) of a chunk is micro-batch n, as both schedules run them in order.
    const auto orders_of = [&](const Order& o, int chunks) {
        std::vector<std::vector<st::Op>> orders;
        for (int d = 0; d < p; ++d) {
            std::map<std::pair<bool, int>, int> seen;
            std::vector<st::Op> ops;
            for (const std::string& phase : o.compute.at("cpu:" + std::to_string(d))) {
                const bool forward = phase.rfind("forward", 0) == 0;
                const std::string base = forward ? "forward" : "backward";
                int chunk = 0;
                if (chunks > 1) {
                    const std::string prefix = base + " chunk ";
                    EXPECT_EQ(phase.rfind(prefix, 0), 0u) << phase;
                    chunk = std::stoi(phase.substr(prefix.size()));
                } else {
                    EXPECT_EQ(phase, base);
                }
                ops.push_back({forward ? st::Pass::forward : st::Pass::backward, seen[{forward, chunk}]++, chunk});
            }
            orders.push_back(ops);
        }
        return orders;
    };

    Order inter, plain;
    const Result& ri = run_it(with_strategy(spirals_mlp(), p, interleaved(m, v)), &inter);
    ASSERT_EQ(ri.summary.status, "finished") << ri.summary.error;
    const auto inter_orders = orders_of(inter, v);
    for (int d = 0; d < p; ++d)
        EXPECT_EQ(inter_orders[size_t(d)], st::stage_schedule(st::Schedule::interleaved_1f1b, d, p, m, v)) << d;

    json one_f_one_b = {{"type", "pipeline"}, {"schedule", "1f1b"}, {"micro_batches", m}};
    const Result& rp = run_it(with_strategy(spirals_mlp(), p, one_f_one_b), &plain);
    ASSERT_EQ(rp.summary.status, "finished") << rp.summary.error;
    const auto plain_orders = orders_of(plain, 1);
    for (int d = 0; d < p; ++d)
        EXPECT_EQ(plain_orders[size_t(d)], st::stage_schedule(st::Schedule::one_f_one_b, d, p, m)) << d;

    // Busy slots per device: m micro-batches · 3 slots · v chunks in both; the rest is bubble.
    const double busy = 3.0 * m * v;
    const int inter_span = slot_makespan(inter_orders, v, 1);
    const int plain_span = slot_makespan(plain_orders, 1, v);
    const double inter_idle = 1 - busy / inter_span, plain_idle = 1 - busy / plain_span;
    RecordProperty("interleaved_idle_fraction", std::to_string(inter_idle));
    RecordProperty("one_f_one_b_idle_fraction", std::to_string(plain_idle));
    EXPECT_LT(inter_idle, plain_idle) << inter_span << " slots against " << plain_span;
    EXPECT_NEAR(plain_idle, double(p - 1) / (m + p - 1), 1e-9);
    EXPECT_NEAR(inter_idle, double(p - 1) / (v * m + p - 1), 1e-9);

    // Chunk 0 of device 0 reads the inputs; device 1's chunk 0 sends around to device 0's
    // chunk 1; device 1's chunk 1 is the last and computes the loss.
    auto& ph = inter.phases;
    for (const char* phase : {"forward chunk 0", "forward chunk 1", "backward chunk 0", "backward chunk 1",
                              "send_activation chunk 0", "send_activation chunk 1", "recv_activation chunk 1",
                              "recv_grad chunk 0", "recv_grad chunk 1", "send_grad chunk 1"})
        EXPECT_TRUE(ph["cpu:0"].count(phase)) << phase;
    for (const char* phase : {"recv_activation chunk 0", "send_activation chunk 0", "recv_activation chunk 1",
                              "recv_grad chunk 0", "send_grad chunk 0", "send_grad chunk 1"})
        EXPECT_TRUE(ph["cpu:1"].count(phase)) << phase;
    EXPECT_FALSE(ph["cpu:0"].count("recv_activation chunk 0"));
    EXPECT_FALSE(ph["cpu:0"].count("send_grad chunk 0"));
    EXPECT_FALSE(ph["cpu:1"].count("send_activation chunk 1"));
    EXPECT_FALSE(ph["cpu:1"].count("recv_grad chunk 1"));
    EXPECT_FALSE(ph["cpu:0"].count("forward"));  // every compute span names its chunk
}

// The activation tests' model: the spirals MLP 128 wide, rows of 16 per micro-batch, two steps.
json wide_mlp(int micro_batches) {
    json j = spirals_mlp();
    j["data"]["batch_size"] = 16 * micro_batches;
    j["data"]["test_fraction"] = 0.0;
    j["train"]["max_steps"] = 2;
    j["model"]["layers"][0]["out"] = 128;
    j["model"]["layers"][3]["out"] = 128;
    return j;
}

// The interleaved schedule's activations stay bounded as micro-batches are added, as 1F1B's.
TEST(Stages, InterleavedActivationsStayBounded) {
    constexpr auto act = static_cast<size_t>(MemCategory::activations);
    const auto peak = [](int micro_batches) {
        const json j = wide_mlp(micro_batches);
        const Result& r = run_it(with_strategy(j, 2, interleaved(micro_batches, 2)));
        EXPECT_EQ(r.summary.status, "finished") << r.summary.error;
        return r.artifacts.memory.at("cpu:0").peak[act];
    };
    const int64_t four = peak(4), twelve = peak(12);
    SCOPED_TRACE(std::to_string(four) + " -> " + std::to_string(twelve));
    EXPECT_GT(four, 0);
    EXPECT_LE(twelve, four + four / 10);
}

// The memory model (each chunk's parameters, and its activations times the micro-batches it
// holds at most) against the measured peaks: parameters, gradients and optimizer state within
// 10%, activations within 25% (a small MLP, whose one backward's gradients, counted once, are
// a large part of a device's activations).
TEST(Stages, InterleavedMemoryAsPredicted) {
    json j = spirals_mlp();
    j["data"]["batch_size"] = 64;
    j["data"]["test_fraction"] = 0.0;
    j["train"]["max_steps"] = 2;
    j["model"]["layers"][0]["out"] = 128;
    j["model"]["layers"][3]["out"] = 128;
    j = with_strategy(j, 2, interleaved(4, 2));
    const Result& r = run_it(j);
    ASSERT_EQ(r.summary.status, "finished") << r.summary.error;
    const auto predicted = expect_memory_as_predicted(j, r, Shape{2}, 1.10, 1.25);
    ASSERT_EQ(predicted.size(), 2u);
    // Device 0 holds chunks 0 and 2 of the 6 layers.
    EXPECT_NE(predicted[0].role.find(", "), std::string::npos) << predicted[0].role;
}

// A checkpoint holds the chunks' parameters and Adam states in the model's order (device 0
// holds chunks 0 and 2): stopped at step 31 and resumed, the run ends bit for bit as the run
// never stopped.
TEST(Stages, InterleavedResumesFromItsCheckpointExactly) {
    struct StopAt : run::RunObserver {
        run::RunControl& control;
        explicit StopAt(run::RunControl& c) : control(c) {}
        void on_step_end(const config::StepRecord& r) override {
            if (r.step >= 31) control.stop = true;
        }
    };
    json j = strategy_testing::spirals_mlp("interleaved-ckpt", {{"type", "adam"}, {"lr", 0.01}}, 2);
    j["data"]["samples"] = 1000;  // 25 steps an epoch
    j["train"]["checkpoint_every"] = 20;
    j = with_strategy(j, 2, interleaved(4, 2));
    const Result whole = run_it(j);
    ASSERT_EQ(whole.summary.status, "finished") << whole.summary.error;

    const auto folder = std::filesystem::temp_directory_path() /
                        ("paralab-interleaved-ckpt-" + std::to_string(::getpid()));
    std::filesystem::remove_all(folder);
    {
        run::RunControl control;
        run::Checkpointing cp;
        cp.folder = folder.string();
        control.checkpoints = &cp;
        StopAt stop(control);
        EXPECT_EQ(run_it(j, &stop, &control).summary.status, "stopped");
    }
    run::RunControl control;
    run::Checkpointing cp;
    cp.folder = folder.string();
    cp.resume = true;
    control.checkpoints = &cp;
    const Result resumed = run_it(j, nullptr, &control);
    std::filesystem::remove_all(folder);
    ASSERT_EQ(resumed.summary.status, "finished") << resumed.summary.error;
    EXPECT_GE(cp.resumed_from_step, 31);
    EXPECT_LT(cp.resumed_from_step, whole.summary.steps);
    ASSERT_EQ(resumed.artifacts.parameters.size(), whole.artifacts.parameters.size());
    for (size_t i = 0; i < whole.artifacts.parameters.size(); ++i) {
        const Tensor& a = whole.artifacts.parameters[i];
        const Tensor& b = resumed.artifacts.parameters[i];
        ASSERT_EQ(a.shape(), b.shape()) << i;
        EXPECT_EQ(0, std::memcmp(a.raw(), b.raw(), a.nbytes())) << "tensor " << i << " differs";
    }
}

// The run's variant names the chunks only with the interleaved schedule (the form hides the
// option otherwise).
TEST(Stages, InterleavedVariantNamesTheChunks) {
    const auto label = [](const json& strategy) {
        return strategy::variant_label(run::parse_experiment(with_strategy(spirals_mlp(), 2, strategy)).strategy);
    };
    EXPECT_EQ(label(interleaved(4, 2)), "interleaved_1f1b · 2 chunks · 4 micro-batches");
    EXPECT_EQ(label({{"type", "pipeline"}, {"schedule", "1f1b"}, {"micro_batches", 4}}), "1f1b · 4 micro-batches");
}

TEST(Stages, InterleavedOptionsAreRefusedNamingTheKey) {
    // micro_batches not a multiple of the stages: both numbers named.
    try {
        run_it(with_strategy(spirals_mlp(), 2, interleaved(3, 2)));
        ADD_FAILURE() << "no ConfigError";
    } catch (const ConfigError& e) {
        EXPECT_EQ(e.path(), "strategy.micro_batches");
        EXPECT_NE(std::string(e.what()).find("3 micro-batches is not a multiple of 2"), std::string::npos) << e.what();
    }
    expect_config_error(with_strategy(spirals_mlp(), 3, interleaved(4, 2)), "strategy.micro_batches");
    // Chunks without the interleaved schedule, and the interleaved schedule without chunks.
    for (const char* schedule : {"gpipe", "1f1b"})
        expect_config_error(with_strategy(spirals_mlp(), 2, {{"type", "pipeline"}, {"schedule", schedule},
                                                            {"interleave", 2}, {"micro_batches", 4}}),
                            "strategy.interleave");
    expect_config_error(with_strategy(spirals_mlp(), 2, interleaved(4, 1)), "strategy.interleave");
    // More chunks (2 · 4) than the 6 top-level layers.
    try {
        run_it(with_strategy(spirals_mlp(), 2, interleaved(4, 4)));
        ADD_FAILURE() << "no ConfigError";
    } catch (const ConfigError& e) {
        EXPECT_EQ(e.path(), "strategy.interleave");
        EXPECT_NE(std::string(e.what()).find("8 model chunks for a model of 6"), std::string::npos) << e.what();
    }
    // A split of p − 1 indices where p·v − 1 are needed.
    json split = interleaved(4, 2);
    split["split"] = {3};
    expect_config_error(with_strategy(spirals_mlp(), 2, split), "strategy.split");
    // validate names the same keys without running.
    const auto issues = run::validate(run::parse_experiment(with_strategy(spirals_mlp(), 2, interleaved(3, 2))));
    ASSERT_EQ(issues.size(), 1u);
    EXPECT_EQ(issues[0].path, "strategy.micro_batches");
}

// ---- zero bubble (zb_h1) ------------------------------------------------------------------------

// ZB-H1 as drawn in Qi et al. 2023 (Zero Bubble Pipeline Parallelism, Figure 3, p 4, m 8) and the
// authors' implementation: stage s runs 1F1B's p − s − 1 warm-up forwards, then s forward-B pairs
// whose W wait, then F, B, W in turn, then B, W, then its s waiting W.
TEST(Stages, ZeroBubbleH1IsThePapersOrder) {
    const auto F = [](int micro) { return st::Op{st::Pass::forward, micro}; };
    const auto B = [](int micro) { return st::Op{st::Pass::backward, micro}; };
    const auto W = [](int micro) { return st::Op{st::Pass::weight, micro}; };
    using Ops = std::vector<st::Op>;
    const auto zb = [](int s, int p, int m) { return st::stage_schedule(st::Schedule::zb_h1, s, p, m); };
    EXPECT_EQ(zb(0, 2, 4), (Ops{F(0), F(1), B(0), W(0), F(2), B(1), W(1), F(3), B(2), W(2), B(3), W(3)}));
    EXPECT_EQ(zb(1, 2, 4), (Ops{F(0), B(0), F(1), B(1), W(0), F(2), B(2), W(1), F(3), B(3), W(2), W(3)}));
    EXPECT_EQ(zb(0, 4, 8), (Ops{F(0), F(1), F(2), F(3), B(0), W(0), F(4), B(1), W(1), F(5), B(2), W(2),
                                F(6), B(3), W(3), F(7), B(4), W(4), B(5), W(5), B(6), W(6), B(7), W(7)}));
    EXPECT_EQ(zb(1, 4, 8), (Ops{F(0), F(1), F(2), B(0), F(3), B(1), W(0), F(4), B(2), W(1), F(5), B(3),
                                W(2), F(6), B(4), W(3), F(7), B(5), W(4), B(6), W(5), B(7), W(6), W(7)}));
    EXPECT_EQ(zb(2, 4, 8), (Ops{F(0), F(1), B(0), F(2), B(1), F(3), B(2), W(0), F(4), B(3), W(1), F(5),
                                B(4), W(2), F(6), B(5), W(3), F(7), B(6), W(4), B(7), W(5), W(6), W(7)}));
    EXPECT_EQ(zb(3, 4, 8), (Ops{F(0), B(0), F(1), B(1), F(2), B(2), F(3), B(3), W(0), F(4), B(4), W(1),
                                F(5), B(5), W(2), F(6), B(6), W(3), F(7), B(7), W(4), W(5), W(6), W(7)}));
}

// Every micro-batch gets F, B and W once on every stage, forwards and Ws in micro-batch order, W
// after its own B, within 1F1B's contexts (p − s in flight from F to B); the stages' orders run
// against each other without deadlock (a B after the next stage's B). In slots (F, B, W one each;
// 1F1B's backward two) the bubble is below 1F1B's 3 (p − 1) slots: p − 1 with m >= p (a third),
// p − 1 + (p − m) with fewer micro-batches.
TEST(Stages, ZeroBubbleH1RunsEveryPassOnceInALegalOrder) {
    const auto kind = st::Schedule::zb_h1;
    for (int p : {1, 2, 3, 4})
        for (int m : {1, 2, 3, 5, 8}) {
            SCOPED_TRACE("p " + std::to_string(p) + " m " + std::to_string(m));
            std::vector<std::vector<st::Op>> orders, plain;
            for (int s = 0; s < p; ++s) {
                SCOPED_TRACE("s " + std::to_string(s));
                const auto ops = st::stage_schedule(kind, s, p, m);
                ASSERT_EQ(ops.size(), size_t(3 * m));
                const int k = st::contexts_needed(kind, s, p, m);
                EXPECT_EQ(k, st::contexts_needed(st::Schedule::one_f_one_b, s, p, m));
                EXPECT_EQ(st::chunk_in_flight(ops, 1), std::vector<int>{k});
                std::set<int> in_flight, pending_w;
                int next_forward = 0, next_weight = 0;
                for (const auto& op : ops) {
                    EXPECT_EQ(op.chunk, 0);
                    switch (op.pass) {
                        case st::Pass::forward:
                            EXPECT_EQ(op.micro, next_forward++);
                            for (int f : in_flight) EXPECT_NE(f % k, op.micro % k);  // context free
                            in_flight.insert(op.micro);
                            break;
                        case st::Pass::backward:
                            EXPECT_EQ(in_flight.erase(op.micro), 1u);
                            EXPECT_TRUE(pending_w.insert(op.micro).second);
                            break;
                        case st::Pass::weight:
                            EXPECT_EQ(op.micro, next_weight++);
                            EXPECT_EQ(pending_w.erase(op.micro), 1u) << "W before its B";
                            break;
                    }
                }
                EXPECT_EQ(next_forward, m);
                EXPECT_EQ(next_weight, m);
                EXPECT_TRUE(in_flight.empty() && pending_w.empty());
                orders.push_back(ops);
                plain.push_back(st::stage_schedule(st::Schedule::one_f_one_b, s, p, m));
            }
            const int zb_span = slot_makespan(orders, 1, 1), plain_span = slot_makespan(plain, 1, 1);
            EXPECT_EQ(plain_span, 3 * m + 3 * (p - 1));
            EXPECT_EQ(zb_span, 3 * m + (p - 1) + std::max(0, p - m));
            if (p > 1) {
                EXPECT_LT(zb_span, plain_span);
            }
        }
}

// The compute spans of step 1, per device, in the order recorded.
struct ComputeOrder : run::RunObserver {
    std::map<std::string, std::vector<std::string>> compute;
    void on_span(const config::Span& s) override {
        if (s.step == 1 && (s.phase.rfind("forward", 0) == 0 || s.phase.rfind("backward", 0) == 0))
            compute[s.device].push_back(s.phase);
    }
    // Device d's spans as (pass, micro): the n-th forward (B, W) is micro-batch n.
    std::vector<st::Op> order(int d) const {
        std::map<st::Pass, int> seen;
        std::vector<st::Op> ops;
        for (const std::string& phase : compute.at("cpu:" + std::to_string(d))) {
            const st::Pass pass = phase == "forward"           ? st::Pass::forward
                                  : phase == "backward_weight" ? st::Pass::weight
                                                               : st::Pass::backward;
            EXPECT_TRUE(phase == "forward" || phase == "backward" || phase == "backward_input" ||
                        phase == "backward_weight")
                << phase;
            ops.push_back({pass, seen[pass]++});
        }
        return ops;
    }
};

// The run follows the schedule: on 4 stages with 8 micro-batches, each device's forward, B
// ("backward_input") and W ("backward_weight") spans come in the stage's zb_h1 order, and no
// plain "backward" is recorded; under 1f1b the same model records "backward" only. The bubble
// counted in slots from the recorded orders (F, B, W one each; a whole backward two) is below
// 1F1B's: (p − 1)/(3m + p − 1) of the step against 3(p − 1)/(3m + 3(p − 1)). Wall time, which
// a loaded machine makes flaky, is not compared.
TEST(Stages, ZeroBubbleSpansFollowTheScheduleWithASmallerBubbleThanOneF1B) {
    const int p = 4, m = 8;
    const auto run_schedule = [&](const char* schedule, ComputeOrder& o) {
        const json strategy = {{"type", "pipeline"}, {"schedule", schedule}, {"micro_batches", m}};
        const Result& r = run_it(with_strategy(spirals_mlp(), p, strategy), &o);
        ASSERT_EQ(r.summary.status, "finished") << r.summary.error;
    };
    ComputeOrder zb, plain;
    run_schedule("zb_h1", zb);
    run_schedule("1f1b", plain);
    std::vector<std::vector<st::Op>> zb_orders, plain_orders;
    for (int d = 0; d < p; ++d) {
        zb_orders.push_back(zb.order(d));
        plain_orders.push_back(plain.order(d));
        EXPECT_EQ(zb_orders.back(), st::stage_schedule(st::Schedule::zb_h1, d, p, m)) << d;
        EXPECT_EQ(plain_orders.back(), st::stage_schedule(st::Schedule::one_f_one_b, d, p, m)) << d;
        const auto& zb_phases = zb.compute.at("cpu:" + std::to_string(d));
        const auto& plain_phases = plain.compute.at("cpu:" + std::to_string(d));
        EXPECT_EQ(std::count(zb_phases.begin(), zb_phases.end(), "backward"), 0);
        EXPECT_EQ(std::count(zb_phases.begin(), zb_phases.end(), "backward_input"), m);
        EXPECT_EQ(std::count(zb_phases.begin(), zb_phases.end(), "backward_weight"), m);
        EXPECT_EQ(std::count(plain_phases.begin(), plain_phases.end(), "backward"), m);
    }
    const double busy = 3.0 * m;
    const int zb_span = slot_makespan(zb_orders, 1, 1), plain_span = slot_makespan(plain_orders, 1, 1);
    const double zb_idle = 1 - busy / zb_span, plain_idle = 1 - busy / plain_span;
    RecordProperty("zb_h1_idle_fraction", std::to_string(zb_idle));
    RecordProperty("one_f_one_b_idle_fraction", std::to_string(plain_idle));
    EXPECT_LT(zb_idle, plain_idle) << zb_span << " slots against " << plain_span;
    EXPECT_NEAR(zb_idle, double(p - 1) / (3 * m + p - 1), 1e-9);
    EXPECT_NEAR(plain_idle, double(p - 1) / (m + p - 1), 1e-9);
}

// The activations zb_h1 holds: 1F1B's micro-batches in flight, plus on stage s the linear layers'
// inputs and output gradients of the s micro-batches whose W waits. The busiest device's peak
// stays 1F1B's (the first stage runs each W right after its B), and it stays bounded as
// micro-batches are added.
TEST(Stages, ZeroBubbleActivationsStayOneF1BsAndBounded) {
    constexpr auto act = static_cast<size_t>(MemCategory::activations);
    const int p = 4;
    const auto peaks = [&](const char* schedule, int micro_batches) {
        const json j = wide_mlp(micro_batches);
        const Result& r = run_it(with_strategy(j, p, {{"type", "pipeline"}, {"schedule", schedule},
                                                      {"micro_batches", micro_batches}}));
        EXPECT_EQ(r.summary.status, "finished") << r.summary.error;
        std::vector<int64_t> out;
        for (int d = 0; d < p; ++d) out.push_back(r.artifacts.memory.at("cpu:" + std::to_string(d)).peak[act]);
        return out;
    };
    const auto most = [](const std::vector<int64_t>& v) { return *std::max_element(v.begin(), v.end()); };
    const std::vector<int64_t> zb8 = peaks("zb_h1", 8), plain8 = peaks("1f1b", 8), zb16 = peaks("zb_h1", 16);
    std::string all;
    for (int d = 0; d < p; ++d)
        all += std::to_string(zb8[size_t(d)]) + "/" + std::to_string(plain8[size_t(d)]) + "/" +
               std::to_string(zb16[size_t(d)]) + " ";
    SCOPED_TRACE("per device zb_h1 m 8 / 1f1b m 8 / zb_h1 m 16: " + all);
    RecordProperty("zb_h1_peak_activations", std::to_string(most(zb8)));
    RecordProperty("per_device_zb8_1f1b8_zb16", all);
    RecordProperty("one_f_one_b_peak_activations", std::to_string(most(plain8)));
    EXPECT_GT(most(plain8), 0);
    EXPECT_LE(most(zb8), most(plain8) + most(plain8) / 10);
    EXPECT_LE(most(zb16), most(zb8) + most(zb8) / 10);
}

// The registry's memory model knows what zb_h1 holds: each layer with parameters hands its
// input and its output gradient to its W at B, where they wait. Each device's activations
// within 20 % of the measured peak (measured 82,496 / 57,344 / 32,768 / 41,920 bytes, predicted
// 82,432 / 65,536 / 32,768 / 34,112: the last stage is short by what it is short under 1f1b,
// 8,768 against 16,768; 1f1b's in-flight count alone predicted 4,384 there).
TEST(Stages, ZeroBubbleActivationsAsPredicted) {
    constexpr auto act = static_cast<size_t>(MemCategory::activations);
    const int p = 4;
    const json j = wide_mlp(8);
    const json file = with_strategy(j, p, {{"type", "pipeline"}, {"schedule", "zb_h1"}, {"micro_batches", 8}});
    const Result& r = run_it(file);
    ASSERT_EQ(r.summary.status, "finished") << r.summary.error;
    const config::Experiment e = run::parse_experiment(file);
    const auto predicted = strategy::estimate_memory(e, strategy::model_cost(e, run::model_input_shape(e)));
    ASSERT_EQ(predicted.size(), size_t{p});
    for (int d = 0; d < p; ++d) {
        const double measured = static_cast<double>(r.artifacts.memory.at("cpu:" + std::to_string(d)).peak[act]);
        const double want = static_cast<double>(predicted[size_t(d)].bytes[act]);
        EXPECT_NEAR(want, measured, 0.2 * measured) << "cpu:" << d;
    }
}

TEST(Stages, ZeroBubbleOptionsAreRefusedNamingTheKey) {
    // One chunk per device only.
    try {
        run_it(with_strategy(spirals_mlp(), 2, {{"type", "pipeline"}, {"schedule", "zb_h1"}, {"interleave", 2},
                                                {"micro_batches", 4}}));
        ADD_FAILURE() << "no ConfigError";
    } catch (const ConfigError& e) {
        EXPECT_EQ(e.path(), "strategy.schedule");
        EXPECT_NE(std::string(e.what()).find("interleave is 2"), std::string::npos) << e.what();
    }
    // hybrid's ZeRO reducing each layer's gradients as its backward ends cannot wait for W.
    const auto refusal = [](const std::string& schedule, int64_t zero, int64_t dp, int64_t micro) {
        try {
            st::check_zero_bubble(schedule, zero, dp, micro);
        } catch (const ConfigError& e) {
            return e.path();
        }
        return std::string("accepted");
    };
    EXPECT_EQ(refusal("zb_h1", 3, 2, 4), "strategy.schedule");
    EXPECT_EQ(refusal("zb_h1", 2, 2, 1), "strategy.schedule");
    EXPECT_EQ(refusal("zb_h1", 2, 2, 4), "accepted");  // flat gradients, reduced after the flush
    EXPECT_EQ(refusal("zb_h1", 1, 2, 1), "accepted");
    EXPECT_EQ(refusal("zb_h1", 3, 1, 4), "accepted");  // nothing sharded
    EXPECT_EQ(refusal("1f1b", 3, 2, 4), "accepted");
    // hybrid's own check refuses it before anything runs, naming the same key.
    json zero3 = spirals_mlp();
    zero3["data"]["test_fraction"] = 0.0;
    try {
        run_it(with_strategy(zero3, 4, {{"type", "hybrid"}, {"dp", 2}, {"pp", 2}, {"zero", 3}, {"schedule", "zb_h1"},
                                        {"micro_batches", 2}}));
        ADD_FAILURE() << "no ConfigError";
    } catch (const ConfigError& e) {
        EXPECT_EQ(e.path(), "strategy.schedule");
        EXPECT_EQ(std::string(e.what()).rfind("strategy.schedule: zb_h1 defers", 0), 0u) << e.what();
    }
}

}  // namespace
