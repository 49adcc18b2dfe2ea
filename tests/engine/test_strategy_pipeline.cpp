// model_parallel and pipeline (docs/strategies.md): N stages give the single device's parameters on
// the same global batch (GPipe and 1F1B, any number of micro-batches, batches that divide
// evenly into neither), GPipe's activation memory grows with the micro-batches in flight while
// 1F1B's stays bounded, and bad splits are refused naming the key.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "engine/run/experiment.h"
#include "engine/run/trainer.h"
#include "strategy_testing.h"
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
    for (const char* schedule : {"gpipe", "1f1b"})
        for (int m : {1, 3, 4})
            for (int n : {2, 3, 4}) out.push_back({"mlp", "pipeline", schedule, m, n});
    out.push_back({"lstm", "model_parallel", "", 1, 3});
    out.push_back({"lstm", "pipeline", "gpipe", 4, 2});
    out.push_back({"lstm", "pipeline", "1f1b", 3, 3});
    out.push_back({"lstm", "pipeline", "1f1b", 4, 4});
    return out;
}

INSTANTIATE_TEST_SUITE_P(Stages, MatchesSingle, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                             const Case& c = info.param;
                             std::string name = std::string(c.model) + "_" + c.type;
                             if (std::string(c.type) == "pipeline")
                                 name += std::string("_") +
                                         (std::string(c.schedule) == "1f1b" ? "1f1b" : "gpipe") +
                                         "_m" + std::to_string(c.micro_batches);
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

MemoryStats stage_memory(const std::string& schedule, int micro_batches,
                         const std::string& device) {
    // Micro-batches of 16 rows each, so that a micro-batch's activations stay the same size.
    json j = spirals_mlp();
    j["data"]["batch_size"] = 16 * micro_batches;
    j["data"]["test_fraction"] = 0.0;  // no evaluation pass in the peaks
    j["train"]["max_steps"] = 2;
    j["model"]["layers"][0]["out"] = 128;
    j["model"]["layers"][3]["out"] = 128;
    j = with_strategy(
        j, 3, {{"type", "pipeline"}, {"micro_batches", micro_batches}, {"schedule", schedule}});
    const Result& r = run_it(j);
    EXPECT_EQ(r.summary.status, "finished") << r.summary.error;
    return r.artifacts.memory.at(device);
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
                        if (op.forward) {
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
    EXPECT_EQ(st::stage_schedule(st::Schedule::one_f_one_b, 0, 3, 4),
              (std::vector<st::Op>{{true, 0},
                                   {true, 1},
                                   {true, 2},
                                   {false, 0},
                                   {true, 3},
                                   {false, 1},
                                   {false, 2},
                                   {false, 3}}));
    EXPECT_EQ(st::stage_schedule(st::Schedule::gpipe, 1, 3, 2),
              (std::vector<st::Op>{{true, 0}, {true, 1}, {false, 1}, {false, 0}}));
}

}  // namespace
