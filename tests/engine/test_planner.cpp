// The planner (engine/plan, docs/planner.md): its counts against hand-computed figures, the α–β
// formulas, the simulated pipeline bubble against the closed forms, ZeRO's shards, the errors
// a user meets, and a sweep's size and order.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <tuple>

#include <nlohmann/json.hpp>

#include "engine/plan/calibrate.h"
#include "engine/plan/compare.h"
#include "engine/plan/pipeline_sim.h"
#include "engine/plan/planner.h"
#include "engine/run/experiment_file.h"
#include "engine/strategy/registry.h"
#include "engine/util/error.h"

using namespace paralab;
using nlohmann::json;

namespace {

// A small GPT: T = 32 tokens, D = 64, 4 heads, ffn 256, vocabulary 256.
json gpt_json(const json& strategy, const std::string& precision = "fp32",
              const std::string& recompute = "none") {
    return {{"paralab", 1},
            {"name", "tiny-gpt"},
            {"data", {{"dataset", "text"}, {"seq_len", 32}, {"batch_size", 8}}},
            {"model",
             {{"input", {32}},
              {"layers",
               {{{"type", "embedding"}, {"vocab", 256}, {"dim", 64}},
                {{"type", "position_embedding"}},
                {{"type", "transformer_block"}, {"heads", 4}, {"ffn", 256}, {"repeat", 2}},
                {{"type", "layernorm"}},
                {{"type", "linear"}, {"out", 256}}}},
              {"loss", "cross_entropy"}}},
            {"strategy", strategy},
            {"optimizer", {{"type", "adamw"}, {"lr", 0.001}}},
            {"train", {{"precision", precision}, {"recompute", recompute}}}};
}

// Two blocks on a [32, 64] input, nothing else: activations are Korthikanti's formula exactly.
json blocks_json(const json& strategy, const std::string& precision) {
    return {
        {"paralab", 1},
        {"name", "blocks"},
        {"data", {{"dataset", "text"}, {"seq_len", 32}, {"batch_size", 8}}},
        {"model",
         {{"input", {32, 64}},
          {"layers", {{{"type", "transformer_block"}, {"heads", 4}, {"ffn", 256}, {"repeat", 2}}}},
          {"loss", "mse"}}},
        {"strategy", strategy},
        {"optimizer", {{"type", "adamw"}, {"lr", 0.001}}},
        {"train", {{"precision", precision}}}};
}

plan::PlanFile plan_file(const json& j) {
    // One file per process: CTest runs the cases of this program side by side.
    const std::string path = testing::TempDir() + "planner_test-" + std::to_string(::getpid()) + ".paralab.json";
    {
        std::ofstream out(path);
        out << j.dump();
    }
    plan::PlanFile file = plan::read_plan_file(path);
    std::remove(path.c_str());
    return file;
}

// One node of `devices` devices with round numbers and nothing reserved.
plan::Cluster test_cluster(int devices) {
    plan::Cluster c;
    c.name = "test";
    c.nodes = 1;
    c.gpus_per_node = devices;
    c.peak_flops_16bit = c.peak_flops_fp32 = 1e12;
    c.memory_bytes = 1e9;
    c.memory_bandwidth = 1e11;
    c.intra_bandwidth = c.inter_bandwidth = 1e10;
    c.intra_latency = c.inter_latency = 1e-6;
    return c;
}

double mem(const plan::Prediction& p, MemCategory m) {
    return p.memory[static_cast<size_t>(m)];
}

}  // namespace

TEST(Planner, ParametersOfAKnownModel) {
    const plan::PlanFile f = plan_file(gpt_json({{"type", "single"}}));
    const plan::PlanModel m = plan::plan_model(f.experiment);
    // embedding 256·64, positions 32·64, per block 4D + (4D² + 4D) + (2·D·ffn + ffn + D),
    // layernorm 2D, linear 64·256 + 256.
    const int64_t D = 64, F = 256;
    const int64_t block = 4 * D + (4 * D * D + 4 * D) + (2 * D * F + F + D);
    EXPECT_EQ(block, 49984);
    EXPECT_EQ(m.parameters, 256 * 64 + 32 * 64 + 2 * block + 2 * D + 64 * 256 + 256);
    EXPECT_EQ(m.parameters, 135168);
    EXPECT_EQ(m.blocks, 2);
    EXPECT_EQ(m.seq_len, 32);
    EXPECT_EQ(m.layers.size(), 6u);
}

// The Plan tab and the Strategy tab ask one memory model: a plan with ParaLab's own stack gives
// its most loaded device the bytes strategy::estimate_memory gives it for the same mesh, every
// category (the published 16-bit figures of the other stacks differ: the test would see them).
TEST(Planner, TheEngineStackAsksTheStrategyTabsMemoryModel) {
    for (const json& options : {json{{"dp", 2}, {"tp", 2}, {"pp", 2}, {"zero", 1}, {"micro_batches", 2}},
                                json{{"dp", 4}, {"tp", 1}, {"pp", 2}, {"zero", 3}, {"micro_batches", 1}},
                                json{{"dp", 2}, {"tp", 2}, {"pp", 2}, {"schedule", "interleaved_1f1b"},
                                     {"interleave", 2}, {"micro_batches", 4}, {"sequence_parallel", true}}}) {
        SCOPED_TRACE(options.dump());
        json strategy = options;
        strategy["type"] = "hybrid";
        json j = gpt_json(strategy, "fp32", "selective");
        j["model"]["layers"][2]["repeat"] = 4;
        j["devices"] = json::array();
        for (int k = 0; k < 8; ++k) j["devices"].push_back("cpu:" + std::to_string(k));
        const config::Experiment run = run::parse_experiment(j);
        const strategy::ModelCost cost = strategy::model_cost(run, run::model_input_shape(run));
        const auto tab = strategy::estimate_memory(run, cost);
        ASSERT_EQ(tab.size(), 8u);
        size_t most = 0;
        for (size_t k = 1; k < tab.size(); ++k)
            if (tab[k].total() > tab[most].total()) most = k;

        const plan::PlanFile f = plan_file(j);
        plan::Cluster c = test_cluster(8);
        c.stack = plan::stack_preset("paralab");
        c.reserved_bytes = 1e6;
        const plan::Prediction p = plan::predict(f.experiment, plan::plan_model(f.experiment), c, plan::mesh_of(f, 8));
        ASSERT_EQ(p.skipped, "");
        for (size_t m = 0; m < kMemCategoryCount; ++m) {
            SCOPED_TRACE(mem_category_name(static_cast<MemCategory>(m)));
            const double reserved = static_cast<MemCategory>(m) == MemCategory::workspace ? c.reserved_bytes : 0;
            EXPECT_EQ(p.memory[m], static_cast<double>(tab[most].bytes[m]) + reserved);
        }
        EXPECT_EQ(p.memory_total, static_cast<double>(tab[most].total()) + c.reserved_bytes);
        // The same numbers differ from a framework stack's published figures.
        c.stack = plan::stack_preset("ideal");
        const plan::Prediction framework =
            plan::predict(f.experiment, plan::plan_model(f.experiment), c, plan::mesh_of(f, 8));
        EXPECT_NE(framework.memory_total, p.memory_total);
    }
}

TEST(Planner, MemoryOfAKnownModelByHand) {
    const int64_t P = 2 * 49984, s = 32, b = 8, h = 64, a = 4;
    for (const std::string precision : {"fp32", "bf16"}) {
        SCOPED_TRACE(precision);
        const plan::PlanFile f = plan_file(blocks_json({{"type", "single"}}, precision));
        const plan::PlanModel model = plan::plan_model(f.experiment);
        ASSERT_EQ(model.parameters, P);
        // Materialized attention: the scores are held (the paper's a·s/h term).
        plan::Cluster c = test_cluster(1);
        c.stack.fused_attention = false;
        const plan::Prediction p = plan::predict(f.experiment, model, c, plan::mesh_of(f, 1));
        ASSERT_TRUE(p.skipped.empty()) << p.skipped;
        const double bytes = precision == "fp32" ? 4 : 2;
        EXPECT_DOUBLE_EQ(mem(p, MemCategory::parameters), P * bytes);
        EXPECT_DOUBLE_EQ(mem(p, MemCategory::gradients), P * bytes);
        // AdamW: m and v in fp32, plus the fp32 master copy in mixed precision.
        EXPECT_DOUBLE_EQ(mem(p, MemCategory::optimizer_state),
                         P * (precision == "fp32" ? 8.0 : 12.0));
        // Korthikanti et al.: s·b·h·(34 + 5·a·s/h) bytes per block in 16-bit (twice in fp32),
        // and the loss's fp32 copy of the output.
        const double per_block = double(s * b * h) * (34 + 5.0 * a * s / h) * bytes / 2;
        EXPECT_DOUBLE_EQ(mem(p, MemCategory::activations), 2 * per_block + double(s * h * b) * 4);
        EXPECT_TRUE(p.fits);
        // A fused kernel keeps no scores: s·b·h·34 per block.
        c.stack.fused_attention = true;
        const plan::Prediction fused = plan::predict(f.experiment, model, c, plan::mesh_of(f, 1));
        EXPECT_DOUBLE_EQ(mem(fused, MemCategory::activations),
                         2 * double(s * b * h) * 34 * bytes / 2 + double(s * h * b) * 4);
        // A layer's own `kernel` overrides the stack's.
        plan::PlanModel materialized = model;
        for (auto& l : materialized.layers)
            if (l.transformer()) l.attention_kernel = 0;
        EXPECT_DOUBLE_EQ(mem(plan::predict(f.experiment, materialized, c, plan::mesh_of(f, 1)), MemCategory::activations),
                         mem(p, MemCategory::activations));
    }
}

// A mixture-of-experts block (8 SwiGLU experts of width 96, top 2, one shared): every expert's
// parameters, and per block Korthikanti's attention and norms (15 of the 34) plus the MLP's
// input (3), per route (top 2 and the shared one) the gathered row, the output row and the three
// 96-wide tensors (4 + 6·96/64 each) and the router's 8 probabilities per token (2·8/64).
TEST(Planner, MixtureOfExpertsBlocksByHand) {
    json j = blocks_json({{"type", "single"}}, "bf16");
    j["model"]["layers"] = {{{"type", "transformer_block"}, {"heads", 4}, {"mlp", "moe"}, {"experts", 8},
                             {"top_k", 2}, {"expert_ffn", 96}, {"shared_experts", 1}, {"repeat", 2}}};
    const plan::PlanFile f = plan_file(j);
    const plan::PlanModel model = plan::plan_model(f.experiment);
    const int64_t D = 64, F = 96, E = 8;
    const int64_t block = 4 * D + (4 * D * D + 4 * D) + D * E + (E + 1) * 3 * D * F;
    ASSERT_EQ(model.parameters, 2 * block);
    EXPECT_EQ(model.blocks, 2);
    ASSERT_EQ(model.layers.size(), 2u);
    EXPECT_EQ(model.layers[0].experts, E);
    EXPECT_EQ(model.layers[0].ffn, F);
    plan::Cluster c = test_cluster(1);
    c.stack.fused_attention = false;  // the scores held, as in Korthikanti's count
    const plan::Prediction p = plan::predict(f.experiment, model, c, plan::mesh_of(f, 1));
    ASSERT_TRUE(p.skipped.empty()) << p.skipped;
    const double s = 32, b = 8, h = 64, a = 4;
    const double mlp = 3 + 3 * (4 + 6.0 * F / D) + 2.0 * E / D;
    const double per_block = s * b * h * (15 + mlp + 5 * a * s / h);  // 16-bit: 2 bytes per 2 units
    EXPECT_DOUBLE_EQ(mem(p, MemCategory::activations), 2 * per_block + s * h * b * 4);
}

TEST(Planner, AlphaBetaCollectives) {
    const plan::Link l{1e-5, 1e9};
    EXPECT_DOUBLE_EQ(plan::all_reduce_s(8e6, 4, l), 2 * 3 * (1e-5 + 2e6 / 1e9));
    EXPECT_DOUBLE_EQ(plan::all_gather_s(8e6, 4, l), 3 * (1e-5 + 2e6 / 1e9));
    EXPECT_DOUBLE_EQ(plan::reduce_scatter_s(8e6, 4, l), 3 * (1e-5 + 2e6 / 1e9));
    EXPECT_DOUBLE_EQ(plan::send_s(1e6, l), 1e-5 + 1e-3);
    EXPECT_EQ(plan::all_reduce_s(8e6, 1, l), 0);
    // The link a group spans: NVLink inside a node of 8, InfiniBand across.
    const plan::Cluster a100 = plan::preset("a100-80g");
    EXPECT_EQ(plan::link_of(a100, 8, 1).bandwidth, a100.intra_bandwidth);
    EXPECT_EQ(plan::link_of(a100, 2, 4).bandwidth, a100.intra_bandwidth);
    EXPECT_EQ(plan::link_of(a100, 2, 8).bandwidth, a100.inter_bandwidth);
    EXPECT_EQ(plan::link_of(a100, 16, 1).bandwidth, a100.inter_bandwidth);
    EXPECT_DOUBLE_EQ(a100.intra_bandwidth, 300e9);  // 600 GB/s both directions
    EXPECT_DOUBLE_EQ(a100.inter_bandwidth, 25e9);   // HDR 200 Gb/s
}

// Every GPU preset is its file of resources/clusters/: named as the file, every key of a cluster
// file given, each with its source.
TEST(Planner, PresetsAreCompleteFilesWithSources) {
    ASSERT_FALSE(plan::preset_files().empty());
    for (const plan::PresetFile& f : plan::preset_files()) {
        SCOPED_TRACE(f.name);
        const json j = json::parse(f.text);
        EXPECT_EQ(plan::preset(f.name).name, f.name);
        for (const auto& key : plan::cluster_keys()) {
            // A price is given where a published one was found (h100-80g); with its source.
            if (key == "price_per_gpu_hour" && !j.contains(key)) continue;
            EXPECT_TRUE(j.contains(key)) << key;
            if (key != "name") {
                EXPECT_TRUE(j["sources"].contains(key)) << "no source for " << key;
            }
        }
    }
    EXPECT_EQ(plan::preset_names().back(), "local");
    EXPECT_EQ(plan::preset_names().size(), plan::preset_files().size() + 1);
}

// The mesh's schedule, recompute and precision are the engine's enums; their names read back, and
// another name is refused naming the key.
TEST(Planner, MeshEnumsHaveOneNameEach) {
    namespace st = strategy::stages;
    for (auto s : {st::Schedule::gpipe, st::Schedule::one_f_one_b, st::Schedule::interleaved_1f1b, st::Schedule::zb_h1})
        EXPECT_EQ(st::schedule_from_name(st::schedule_name(s)), s);
    for (auto r : {nn::Recompute::none, nn::Recompute::selective, nn::Recompute::full})
        EXPECT_EQ(nn::recompute_from_name(nn::recompute_name(r)), r);
    for (auto p : {MatmulPrecision::fp32, MatmulPrecision::bf16, MatmulPrecision::fp16})
        EXPECT_EQ(precision_from_name(precision_name(p)), p);
    const auto path_of = [](const std::function<void()>& f) {
        try {
            f();
        } catch (const ConfigError& e) {
            return e.path();
        }
        return std::string("no error");
    };
    EXPECT_EQ(path_of([] { st::schedule_from_name("zb"); }), "strategy.schedule");
    EXPECT_EQ(path_of([] { nn::recompute_from_name("half"); }), "train.recompute");
    EXPECT_EQ(path_of([] { precision_from_name("fp8"); }), "train.precision");
    plan::Mesh m;
    EXPECT_EQ(path_of([&] { plan::set_mesh_key(m, "schedule", "zb"); }), "--sweep");
    plan::set_mesh_key(m, "schedule", "gpipe");
    plan::set_mesh_key(m, "recompute", "selective");
    EXPECT_EQ(m.schedule, st::Schedule::gpipe);
    EXPECT_EQ(m.recompute, nn::Recompute::selective);
}

// The bubble of the simulated schedules against the closed forms: (p − 1)/(m + p − 1) for GPipe
// and 1F1B, ((p − 1)/v)/(m + (p − 1)/v) for the interleaved schedule.
class PipelineBubble : public testing::TestWithParam<std::tuple<std::string, int, int, int>> {};

TEST_P(PipelineBubble, MatchesTheClosedForm) {
    const auto [schedule, p, m, v] = GetParam();
    const double tf = 1.0, tb = 2.0;  // one stage's whole forward and backward per micro-batch
    plan::PipeTimes t;
    for (int g = 0; g < p * v; ++g) {
        t.forward.push_back(tf / v);
        t.backward.push_back(tb / v);
    }
    t.transfer.assign(static_cast<size_t>(p * v - 1), 0.0);
    const plan::PipeResult r =
        plan::simulate_pipeline(strategy::stages::schedule_from_name(schedule), p, v, m, t);
    const double busy = m * (tf + tb);
    for (double b : r.busy) EXPECT_DOUBLE_EQ(b, busy);
    const double bubble = (r.makespan - busy) / r.makespan;
    const double expected = (p - 1.0) / v / (m + (p - 1.0) / v);
    EXPECT_NEAR(bubble, expected, 1e-12) << "makespan " << r.makespan;
    // Micro-batches in flight on the first stage: GPipe all of them, 1F1B at most p.
    if (schedule == "gpipe") {
        EXPECT_EQ(r.peak_in_flight[0], m);
    }
    if (schedule == "1f1b") {
        EXPECT_EQ(r.peak_in_flight[0], std::min(m, p));
    }
}

INSTANTIATE_TEST_SUITE_P(Schedules, PipelineBubble,
                         testing::Values(std::make_tuple("gpipe", 4, 8, 1),
                                         std::make_tuple("1f1b", 4, 8, 1),
                                         std::make_tuple("1f1b", 8, 3, 1),
                                         std::make_tuple("1f1b", 1, 5, 1),
                                         std::make_tuple("interleaved_1f1b", 4, 8, 2),
                                         std::make_tuple("interleaved_1f1b", 4, 4, 3),
                                         std::make_tuple("interleaved_1f1b", 8, 16, 4)));

// zb_h1 runs each backward as B and W, W costing the weight gradients' half of it (PipeTimes::weight
// unset): at p 4, m 8 with a forward of 1 and a backward of 2, the W fill all but (p − 1) of
// 1F1B's 3 (p − 1) idle units (Qi et al. 2023: (p − 1)(T_F + T_B − T_W)), for the same busy time
// and the same micro-batches in flight. A W given its own cost takes it.
TEST(Planner, ZeroBubbleH1CutsTheBubbleToAThird) {
    namespace st = strategy::stages;
    const int p = 4, m = 8;
    plan::PipeTimes t;
    t.forward.assign(p, 1.0);
    t.backward.assign(p, 2.0);
    t.transfer.assign(p - 1, 0.0);
    const plan::PipeResult zb = plan::simulate_pipeline(st::Schedule::zb_h1, p, 1, m, t, true);
    const plan::PipeResult plain = plan::simulate_pipeline(st::Schedule::one_f_one_b, p, 1, m, t);
    const double busy = 3.0 * m;
    for (int d = 0; d < p; ++d) {
        EXPECT_DOUBLE_EQ(zb.busy[size_t(d)], busy);
        EXPECT_EQ(zb.peak_in_flight[size_t(d)], plain.peak_in_flight[size_t(d)]);
    }
    const double zb_bubble = (zb.makespan - busy) / zb.makespan;
    const double plain_bubble = (plain.makespan - busy) / plain.makespan;
    EXPECT_DOUBLE_EQ(plain.makespan, busy + 3.0 * (p - 1));
    EXPECT_DOUBLE_EQ(zb.makespan, busy + (p - 1));
    EXPECT_LT(zb_bubble, plain_bubble);
    RecordProperty("zb_h1_bubble", std::to_string(zb_bubble));
    RecordProperty("one_f_one_b_bubble", std::to_string(plain_bubble));
    // The spans: m of each pass per device, B and W one unit each, a W after its own B.
    std::map<std::tuple<int, int, st::Pass>, double> end_of;
    for (const plan::PipeSpan& s : zb.spans) {
        EXPECT_DOUBLE_EQ(s.end - s.start, 1.0);
        end_of[{s.device, s.op.micro, s.op.pass}] = s.end;
        if (s.op.pass == st::Pass::weight) {
            EXPECT_GE(s.start, end_of.at({s.device, s.op.micro, st::Pass::backward}));
        }
    }
    EXPECT_EQ(zb.spans.size(), size_t(3 * m * p));
    // W's own cost: a W of 0.5 (B 1.5) keeps the busy time and costs the cooldown more.
    t.weight.assign(p, 0.5);
    const plan::PipeResult light = plan::simulate_pipeline(st::Schedule::zb_h1, p, 1, m, t);
    for (double b : light.busy) EXPECT_DOUBLE_EQ(b, busy);
    EXPECT_GT(light.makespan, zb.makespan);
    EXPECT_LT(light.makespan, plain.makespan);
}

// The planner's prediction for a 4-stage pipeline of 8 micro-batches: zb_h1's bubble is below
// 1f1b's, and so is its step. zb_h1 with ZeRO 3 over dp 2 is skipped with the engine's reason.
TEST(Planner, ZeroBubbleH1PredictsASmallerBubble) {
    json j = gpt_json({{"type", "pipeline"}, {"micro_batches", 8}, {"schedule", "1f1b"}});
    j["model"]["layers"][2]["repeat"] = 4;  // a block per stage
    const plan::PlanFile f = plan_file(j);
    const plan::PlanModel model = plan::plan_model(f.experiment);
    plan::Mesh mesh = plan::mesh_of(f, 4);
    ASSERT_EQ(mesh.pp, 4);
    const plan::Prediction plain = plan::predict(f.experiment, model, test_cluster(4), mesh);
    mesh.schedule = strategy::stages::Schedule::zb_h1;
    const plan::Prediction zb = plan::predict(f.experiment, model, test_cluster(4), mesh);
    ASSERT_TRUE(plain.skipped.empty()) << plain.skipped;
    ASSERT_TRUE(zb.skipped.empty()) << zb.skipped;
    EXPECT_GT(plain.breakdown.pp_bubble, 0);
    EXPECT_LT(zb.breakdown.pp_bubble, plain.breakdown.pp_bubble);
    EXPECT_LT(zb.step_time_s, plain.step_time_s);
    mesh.pp = 2;
    mesh.dp = 2;
    mesh.zero = 3;
    const plan::Prediction zero3 = plan::predict(f.experiment, model, test_cluster(4), mesh);
    EXPECT_NE(zero3.skipped.find("zb_h1 defers"), std::string::npos) << zero3.skipped;
}

TEST(Planner, TransfersBetweenStagesDelayThePipeline) {
    plan::PipeTimes t{{1, 1}, {2, 2}, {0.5}, false, {}};
    // One micro-batch: forward, transfer, forward, backward, transfer, backward.
    EXPECT_DOUBLE_EQ(
        plan::simulate_pipeline(strategy::stages::Schedule::one_f_one_b, 2, 1, 1, t).makespan,
        1 + 0.5 + 1 + 2 + 0.5 + 2);
}

TEST(Planner, ZeroThreeShardsEverythingOverDp) {
    const plan::PlanFile f = plan_file(gpt_json({{"type", "hybrid"}, {"dp", 4}}, "bf16"));
    const plan::PlanModel model = plan::plan_model(f.experiment);
    plan::Mesh mesh = plan::mesh_of(f, 4);
    ASSERT_EQ(mesh.dp, 4);
    const plan::Prediction z0 = plan::predict(f.experiment, model, test_cluster(4), mesh);
    mesh.zero = 3;
    const plan::Prediction z3 = plan::predict(f.experiment, model, test_cluster(4), mesh);
    ASSERT_TRUE(z0.skipped.empty() && z3.skipped.empty());
    for (auto m : {MemCategory::parameters, MemCategory::gradients, MemCategory::optimizer_state})
        EXPECT_DOUBLE_EQ(mem(z3, m), mem(z0, m) / 4);
    EXPECT_DOUBLE_EQ(mem(z3, MemCategory::activations), mem(z0, MemCategory::activations));
    mesh.zero = 1;
    const plan::Prediction z1 = plan::predict(f.experiment, model, test_cluster(4), mesh);
    EXPECT_DOUBLE_EQ(mem(z1, MemCategory::parameters), mem(z0, MemCategory::parameters));
    EXPECT_DOUBLE_EQ(mem(z1, MemCategory::optimizer_state),
                     mem(z0, MemCategory::optimizer_state) / 4);
}

TEST(Planner, SingleAxisStrategiesMapOntoTheMesh) {
    EXPECT_EQ(plan::mesh_of(plan_file(gpt_json({{"type", "ddp"}})), 8).dp, 8);
    EXPECT_EQ(plan::mesh_of(plan_file(gpt_json({{"type", "tensor_parallel"}})), 4).tp, 4);
    const plan::Mesh pipe = plan::mesh_of(
        plan_file(gpt_json({{"type", "pipeline"}, {"micro_batches", 4}, {"schedule", "1f1b"}})), 2);
    EXPECT_EQ(pipe.pp, 2);
    EXPECT_EQ(pipe.micro_batches, 4);
    EXPECT_EQ(pipe.schedule, strategy::stages::Schedule::one_f_one_b);
    const plan::Mesh zero = plan::mesh_of(plan_file(gpt_json({{"type", "zero"}, {"stage", 2}})), 4);
    EXPECT_EQ(zero.dp, 4);
    EXPECT_EQ(zero.zero, 2);
    EXPECT_EQ(plan::mesh_of(plan_file(gpt_json({{"type", "single"}})), 1).devices(), 1);
}

// A stored run's experiment (plan --compare) reads as its file would, errors naming the run.
TEST(Planner, StoredExperimentReadsLikeAFile) {
    const json stored = gpt_json({{"type", "zero"}, {"stage", 1}});
    const plan::PlanFile file = plan::plan_file_from_json(stored, "runs.db: run 3");
    EXPECT_EQ(file.strategy_type, "zero");
    const plan::Mesh mesh = plan::mesh_of(file, 2);
    EXPECT_EQ(mesh.dp, 2);
    EXPECT_EQ(mesh.zero, 1);
    EXPECT_EQ(plan::plan_model(file.experiment).parameters,
              plan::plan_model(plan_file(stored).experiment).parameters);
    json bad = stored;
    bad["data"]["batch_size"] = 0;
    try {
        plan::plan_file_from_json(bad, "runs.db: run 3");
        FAIL() << "a batch of 0 was accepted";
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("runs.db: run 3: data.batch_size"), std::string::npos)
            << e.what();
    }
}

TEST(Planner, BadInputSaysWhy) {
    const auto message = [](const std::function<void()>& f) {
        try {
            f();
        } catch (const ConfigError& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    EXPECT_NE(message([] { plan::preset("b200"); }).find("unknown cluster preset \"b200\""),
              std::string::npos);
    EXPECT_NE(message([] { plan::preset("b200"); }).find("a100-80g, h100-80g, h200, local"),
              std::string::npos);
    EXPECT_EQ(message([] {
                  plan::cluster_from_json(json{{"gpus_per_node", 8}});
              }),
              "peak_tflops_16bit: missing; expected a number from 0.001 to 1e+06");
    // Rates outside what a device or link can have, and clusters whose device count would not
    // fit, are refused with the accepted range (docs/planner.md, "Bounds").
    const json base = {{"peak_tflops_16bit", 100}, {"memory_gb", 80}, {"memory_bandwidth_gbps", 2000},
                       {"intra_node_bandwidth_gbps", 300}};
    const auto with = [&](const std::string& key, const json& value) {
        json j = base;
        j[key] = value;
        return message([&] { plan::cluster_from_json(j); });
    };
    EXPECT_EQ(with("peak_tflops_16bit", 1e-300), "peak_tflops_16bit: expected a number in [0.001, 1e+06], got 1e-300");
    EXPECT_EQ(with("intra_node_bandwidth_gbps", 1e300),
              "intra_node_bandwidth_gbps: expected a number in [0.001, 1e+06], got 1e+300");
    EXPECT_EQ(with("inter_node_latency_us", 1e20), "inter_node_latency_us: expected a number in [0, 1e+06], got 1e+20");
    json huge = base;
    huge["nodes"] = 1000000;
    huge["gpus_per_node"] = 4096;
    EXPECT_EQ(message([&] { plan::cluster_from_json(huge); }),
              "gpus_per_node: nodes × gpus_per_node = 1000000 × 4096 = 4096000000 devices; a cluster has at most 1048576");
    // A cluster file's duplicate key is refused with its path.
    const std::string dup = ::testing::TempDir() + "dup-cluster.json";
    std::ofstream(dup) << R"({"peak_tflops_16bit": 100, "memory_gb": 80, "memory_gb": 40})";
    EXPECT_EQ(message([&] { plan::load_cluster(dup); }), dup + ": memory_gb: duplicate key; a key appears once in an object");
    EXPECT_NE(message([] {
                  plan::cluster_from_json(json{{"peak_tflops_16bit", 100},
                                               {"memory_gb", 80},
                                               {"memory_bandwidth_gbps", 2000},
                                               {"intra_node_bandwidth_gbps", "fast"}});
              }).find("intra_node_bandwidth_gbps: "),
              std::string::npos);
    EXPECT_NE(message([] {
                  plan::cluster_from_json(json{{"peak_tflops_16bit", 100},
                                               {"memory_gb", 80},
                                               {"memory_bandwidth_gbps", 2000},
                                               {"intra_node_bandwidth_gbps", 300},
                                               {"gpu_per_node", 8}});
              }).find("gpu_per_node"),
              std::string::npos);
    json with_sources = {{"peak_tflops_16bit", 100},
                         {"memory_gb", 80},
                         {"memory_bandwidth_gbps", 2000},
                         {"intra_node_bandwidth_gbps", 300}};
    with_sources["sources"] = {{"memory_gb", "a datasheet"}};
    EXPECT_EQ(plan::cluster_from_json(with_sources).memory_bytes, 80e9);
    with_sources["sources"]["memory_gbs"] = "a typo";
    EXPECT_NE(message([&] { plan::cluster_from_json(with_sources); }).find("sources.memory_gbs"),
              std::string::npos);
    with_sources["sources"] = {{"memory_gb", 80}};
    EXPECT_NE(message([&] {
                  plan::cluster_from_json(with_sources);
              }).find("sources.memory_gb: expected a string"),
              std::string::npos);
    plan::Mesh m;
    EXPECT_NE(
        message([&] { plan::set_mesh_key(m, "tensor", "2"); }).find("unknown sweep key \"tensor\""),
        std::string::npos);
    EXPECT_NE(message([&] { plan::set_mesh_key(m, "tp", "two"); }).find("tp=two"),
              std::string::npos);
    EXPECT_NE(message([&] {
                  plan::set_mesh_key(m, "recompute", "half");
              }).find("recompute=half: expected one of none, selective, full"),
              std::string::npos);
    EXPECT_NE(message([] { plan::parse_sweep("tp"); }).find("KEY=V1,V2"), std::string::npos);
    // hybrid's options are read by the registry's rules as the file is read, as every strategy's
    EXPECT_NE(message([] {
                  plan_file(gpt_json({{"type", "hybrid"}, {"tp", 0}}));
              }).find("strategy.tp: expected an integer from 1 to 1048576, got 0"),
              std::string::npos);
    EXPECT_NE(message([] {
                  plan::mesh_of(plan_file(gpt_json({{"type", "hybrid"}, {"tp", 0}})), 1);
              }).find("strategy.tp"),
              std::string::npos);
    EXPECT_NE(message([] {
                  plan::mesh_of(plan_file(gpt_json({{"type", "hybrid"}, {"schedule", "zb"}})), 1);
              }).find("strategy.schedule"),
              std::string::npos);
    EXPECT_NE(message([] {
                  plan_file(gpt_json({{"type", "hyrbid"}}));
              }).find("strategy.type"),
              std::string::npos);

    const plan::PlanFile f = plan_file(gpt_json({{"type", "hybrid"}}));
    const plan::PlanModel model = plan::plan_model(f.experiment);
    plan::Mesh mesh;
    mesh.dp = 2;
    EXPECT_NE(plan::check_mesh(mesh, model, 8, 4).find("but the cluster has 4"), std::string::npos);
    mesh = {};
    mesh.tp = 8;
    EXPECT_EQ(plan::check_mesh(mesh, model, 8, 8), "heads (4) not divisible by tp (8)");
    mesh = {};
    mesh.pp = 4;
    EXPECT_EQ(plan::check_mesh(mesh, model, 8, 4),
              "more pipeline stages (4) than transformer blocks (2)");
    mesh = {};
    mesh.dp = 4;
    mesh.micro_batches = 4;
    EXPECT_NE(plan::check_mesh(mesh, model, 8, 4).find("smaller than dp × micro_batches (16)"),
              std::string::npos);
    // The schedule's rules are the engine's (stages::check_schedule), said in its words.
    mesh = {};
    mesh.pp = 2;
    mesh.schedule = strategy::stages::Schedule::interleaved_1f1b;
    mesh.interleave = 2;
    mesh.micro_batches = 3;
    EXPECT_NE(plan::check_mesh(mesh, model, 8, 2).find("3 micro-batches is not a multiple of 2"), std::string::npos);
    mesh.micro_batches = 2;
    mesh.schedule = strategy::stages::Schedule::one_f_one_b;
    EXPECT_NE(plan::check_mesh(mesh, model, 8, 2).find("needs schedule interleaved_1f1b"), std::string::npos);
}

TEST(Planner, SweepSizeAndOrder) {
    const plan::PlanFile f = plan_file(gpt_json({{"type", "hybrid"}, {"dp", 4}}, "bf16"));
    const plan::PlanModel model = plan::plan_model(f.experiment);
    const plan::Mesh base = plan::mesh_of(f, 4);
    const auto ps = plan::sweep(f.experiment, model, test_cluster(4), base,
                                {{"dp", {"1", "2", "4"}}, {"tp", {"1", "2", "4"}}});
    ASSERT_EQ(ps.size(), 9u);
    int valid = 0;
    for (size_t i = 0; i < ps.size(); ++i) {
        if (!ps[i].skipped.empty()) continue;
        ++valid;
        EXPECT_EQ(ps[i].mesh.dp * ps[i].mesh.tp, 4);
        if (i > 0) {
            EXPECT_GE(ps[i - 1].tokens_per_s, ps[i].tokens_per_s);
        }
    }
    EXPECT_EQ(valid, 3);
    for (size_t i = 3; i < ps.size(); ++i) EXPECT_FALSE(ps[i].skipped.empty());  // skipped last
    // The JSON of a swept configuration carries the swept values.
    const json j = plan::to_json(ps[0], {"dp", "tp"});
    EXPECT_EQ(j["config"]["dp"].get<int>() * j["config"]["tp"].get<int>(), 4);
    for (const char* key : {"devices", "step_time_s", "tokens_per_s", "samples_per_s", "mfu",
                            "fits", "memory_bytes", "breakdown_s"})
        EXPECT_TRUE(j.contains(key)) << key;
    // A configuration that does not fit ranks after every one that does.
    plan::Cluster small = test_cluster(4);
    small.memory_bytes = 2e6;
    const auto tight = plan::sweep(f.experiment, model, small, base, {{"zero", {"0", "3"}}});
    ASSERT_EQ(tight.size(), 2u);
    EXPECT_TRUE(tight[0].fits);
    EXPECT_EQ(tight[0].mesh.zero, 3);
    EXPECT_FALSE(tight[1].fits);
}

TEST(Planner, BreakdownAddsUpToTheStep) {
    const plan::PlanFile f = plan_file(
        gpt_json({{"type", "hybrid"}, {"dp", 2}, {"tp", 2}, {"pp", 2}, {"micro_batches", 2}},
                 "bf16", "full"));
    const plan::PlanModel model = plan::plan_model(f.experiment);
    plan::Cluster c = test_cluster(4);
    c.nodes = 2;
    const plan::Prediction p = plan::predict(f.experiment, model, c, plan::mesh_of(f, 8));
    ASSERT_TRUE(p.skipped.empty()) << p.skipped;
    const plan::Breakdown& b = p.breakdown;
    EXPECT_NEAR(
        b.compute + b.recompute + b.tp_comm + b.pp_bubble + b.pp_comm + b.dp_comm + b.optimizer,
        p.step_time_s, 1e-12);
    EXPECT_GT(b.recompute, 0);
    EXPECT_GT(b.tp_comm, 0);
    EXPECT_GT(b.pp_bubble, 0);
    EXPECT_GT(b.pp_comm, 0);
    EXPECT_GT(b.dp_comm, 0);
    EXPECT_NEAR(p.tokens_per_s, p.samples_per_s * 32, 1e-9 * p.tokens_per_s);
    // The JSON names the mesh's enums as the experiment file does.
    const json mesh = plan::to_json(p)["mesh"];
    EXPECT_EQ(mesh["schedule"], "1f1b");
    EXPECT_EQ(mesh["recompute"], "full");
    EXPECT_EQ(mesh["precision"], "bf16");
    EXPECT_GT(p.mfu, 0);
    EXPECT_LT(p.mfu, 1);
}

// A run of an MPI job stores its devices as "rK/cpu:0": compared, it is planned on that many
// of this machine's virtual devices.
TEST(Planner, ARunAcrossProcessesIsComparedOnItsDeviceCount) {
    const nlohmann::json config = nlohmann::json::parse(R"({
      "paralab": 1, "name": "mpi", "seed": 1,
      "data": {"dataset": "spirals", "samples": 600, "classes": 3, "batch_size": 32},
      "model": {"input": [2], "layers": [{"type": "linear", "out": 16}, {"type": "relu"},
                                         {"type": "linear", "out": 3}], "loss": "cross_entropy"},
      "devices": ["r0/cpu:0", "r1/cpu:0"], "strategy": {"type": "ddp"},
      "optimizer": {"type": "sgd", "lr": 0.1}, "train": {"epochs": 1}
    })");
    const nlohmann::json summary = {{"steps", 10}, {"wall_s", 0.01}, {"samples_per_s", 32000.0},
                                    {"peak_memory_bytes", {{"r0/cpu:0", 4096}, {"r1/cpu:0", 5000}}}};
    const plan::RunComparison c = plan::compare_run(config, summary, {0.001, 0.002, 0.003}, "run 1");
    EXPECT_EQ(c.devices, 2);
    EXPECT_EQ(c.strategy, "ddp");
    EXPECT_EQ(c.predicted.mesh.dp, 2);
    EXPECT_DOUBLE_EQ(c.peak_bytes, 5000);
    EXPECT_DOUBLE_EQ(c.step_s, 0.001);
}

// A run on a GPU is planned on the cluster that GPU is: the local cluster (this machine's CPU)
// refuses it with the device's name, a named preset plans it on one of its GPUs, and the
// predicted step is that GPU's, far below what this machine's CPU would take.
TEST(Planner, AGpuRunIsComparedOnTheClusterOfItsGpu) {
    const nlohmann::json config = nlohmann::json::parse(R"({
      "paralab": 1, "name": "gpu", "seed": 1,
      "data": {"dataset": "spirals", "samples": 600, "classes": 3, "batch_size": 256},
      "model": {"input": [2], "layers": [{"type": "linear", "out": 1024}, {"type": "relu"},
                                         {"type": "linear", "out": 3}], "loss": "cross_entropy"},
      "devices": ["cuda:0"], "strategy": {"type": "single"},
      "optimizer": {"type": "sgd", "lr": 0.1}, "train": {"epochs": 1}
    })");
    const nlohmann::json summary = {{"steps", 10}, {"wall_s", 0.01}, {"samples_per_s", 256000.0},
                                    {"peak_memory_bytes", {{"cuda:0", 1 << 20}}}};
    try {
        plan::compare_run(config, summary, {}, "run 7");
        ADD_FAILURE() << "a GPU run was planned on the local cluster";
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("run 7 ran on cuda:0"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("h100-80g"), std::string::npos) << e.what();
    }
    const plan::Cluster h100 = plan::preset("h100-80g");
    const plan::RunComparison on_gpu = plan::compare_run(config, summary, {}, "run 7", &h100);
    EXPECT_EQ(on_gpu.cluster, "h100-80g");
    EXPECT_EQ(on_gpu.devices, 1);
    EXPECT_DOUBLE_EQ(on_gpu.step_s, 0.001);  // wall_s / steps
    // The memory compared is the tensors': the preset's reserved runtime bytes are left out.
    EXPECT_DOUBLE_EQ(on_gpu.predicted.memory_total - on_gpu.predicted_peak_bytes, h100.reserved_bytes);
    EXPECT_GT(h100.reserved_bytes, 0);
    EXPECT_NEAR(on_gpu.memory_error, on_gpu.predicted_peak_bytes / (1 << 20) - 1, 1e-12);
    nlohmann::json on_cpu_config = config;
    on_cpu_config["devices"] = {"cpu:0"};
    const plan::RunComparison on_cpu = plan::compare_run(on_cpu_config, summary, {}, "run 7");
    EXPECT_LT(on_gpu.predicted.step_time_s, on_cpu.predicted.step_time_s / 10);
}

// The GEMM curve through points of r(n) = peak · n / (n + w½) gives back peak and w½; points
// that no such curve passes give the largest size's rate, flat.
TEST(Planner, GemmCurveFitRecoversPeakAndHalfWidth) {
    std::vector<std::pair<double, double>> points;
    for (const double n : {64.0, 128.0, 256.0, 512.0}) points.emplace_back(n, 80e9 * n / (n + 48));
    const auto [peak, half] = plan::fit_gemm_curve(points);
    EXPECT_NEAR(peak, 80e9, 1e3);
    EXPECT_NEAR(half, 48, 1e-6);
    const auto [flat, none] = plan::fit_gemm_curve({{64, 10e9}, {512, 5e9}});  // slower when larger
    EXPECT_DOUBLE_EQ(flat, 5e9);
    EXPECT_EQ(none, 0);
}

// `paralab bench --calibrate`'s file: written, read back, and what the local preset uses; a
// malformed one is refused with its path.
TEST(Planner, CalibrationRoundTripsAndFeedsTheLocalPreset) {
    const std::string folder = testing::TempDir() + "planner_xdg";
    std::filesystem::remove_all(folder);
    const char* old = std::getenv("XDG_DATA_HOME");
    const std::string saved = old ? old : "";
    setenv("XDG_DATA_HOME", folder.c_str(), 1);
    EXPECT_EQ(plan::calibration_path(), folder + "/ParaLab/calibration.json");
    EXPECT_FALSE(plan::load_calibration(plan::calibration_path()).has_value());
    EXPECT_EQ(plan::local_cluster().peak_flops_fp32, 50e9);  // the documented default

    const plan::Calibration measured = plan::measure_local(0.01);
    EXPECT_GT(measured.gemm_flops, 0);
    EXPECT_GE(measured.gemm_half_width, 0);
    EXPECT_GT(measured.memory_bandwidth, 0);
    EXPECT_GT(measured.copy_bandwidth, 0);
    EXPECT_GT(measured.allreduce_bandwidth, 0);
    // A file of an older version (no curve, no all-reduce): the copy rate is the link.
    plan::Calibration c{12e9, 34e9, 17e9, "test"};
    plan::save_calibration(c, plan::calibration_path());
    auto back = plan::load_calibration(plan::calibration_path());
    ASSERT_TRUE(back.has_value());
    EXPECT_DOUBLE_EQ(back->gemm_flops, 12e9);
    EXPECT_DOUBLE_EQ(back->memory_bandwidth, 34e9);
    EXPECT_EQ(back->gemm_half_width, 0);
    plan::Cluster local = plan::local_cluster();
    EXPECT_DOUBLE_EQ(local.peak_flops_fp32, 12e9);
    EXPECT_DOUBLE_EQ(local.memory_bandwidth, 34e9);
    EXPECT_DOUBLE_EQ(local.intra_bandwidth, 17e9);
    EXPECT_DOUBLE_EQ(local.gemm_half_width, 16);
    // A full one: the fitted curve and the all-reduce's alpha and beta.
    c.gemm_half_width = 40;
    c.allreduce_latency = 3e-6;
    c.allreduce_bandwidth = 9e9;
    plan::save_calibration(c, plan::calibration_path());
    back = plan::load_calibration(plan::calibration_path());
    ASSERT_TRUE(back.has_value());
    EXPECT_DOUBLE_EQ(back->gemm_half_width, 40);
    EXPECT_NEAR(back->allreduce_latency, 3e-6, 1e-15);
    local = plan::local_cluster();
    EXPECT_DOUBLE_EQ(local.gemm_half_width, 40);
    EXPECT_DOUBLE_EQ(local.gemm_half_width_fp32, 40);
    EXPECT_NEAR(local.intra_latency, 3e-6, 1e-15);
    EXPECT_DOUBLE_EQ(local.intra_bandwidth, 9e9);

    {
        std::ofstream out(plan::calibration_path());
        out << R"({"gemm_gflops_fp32": -1, "memory_bandwidth_gbps": 1, "copy_bandwidth_gbps": 1})";
    }
    try {
        plan::local_cluster();
        ADD_FAILURE() << "a malformed calibration was read";
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find(plan::calibration_path() + ": gemm_gflops_fp32"),
                  std::string::npos)
            << e.what();
    }
    if (old)
        setenv("XDG_DATA_HOME", saved.c_str(), 1);
    else
        unsetenv("XDG_DATA_HOME");
    std::filesystem::remove_all(folder);
}

// The pipeline simulation is bounded: pp 64, interleave 16 and 1,048,576 micro-batches (each in
// its own range) is refused by its product, in well under a second, instead of growing to
// std::bad_alloc; a cluster whose nodes × devices would overflow is refused too.
TEST(Planner, APlansPipelineSimulationIsBounded) {
    const plan::PlanFile f = plan_file(gpt_json({{"type", "hybrid"}, {"dp", 4}}, "bf16"));
    const plan::PlanModel model = plan::plan_model(f.experiment);
    plan::Mesh mesh = plan::mesh_of(f, 4);
    mesh.dp = 1;
    mesh.pp = 64;
    mesh.schedule = strategy::stages::Schedule::interleaved_1f1b;
    mesh.interleave = 16;
    mesh.micro_batches = 1 << 20;
    const auto start = std::chrono::steady_clock::now();
    const plan::Prediction p = plan::predict(f.experiment, model, test_cluster(64), mesh);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
    EXPECT_EQ(p.skipped, "pp × interleave × micro_batches = 64 × 16 × 1048576 = 1073741824 pipeline steps to "
                         "simulate; a plan takes at most 2097152");
    plan::Cluster huge = test_cluster(4);
    huge.nodes = 1000000;
    huge.gpus_per_node = 4096;
    EXPECT_EQ(plan::predict(f.experiment, model, huge, mesh).skipped, "nodes × gpus_per_node above 1048576 devices");
}
