// The planner at scale (docs/planner.md, "Goodput"): goodput against Young/Daly's formulas and
// Llama 3's published run.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "engine/plan/goodput.h"
#include "engine/plan/planner.h"
#include "engine/plan/stack.h"
#include "engine/tensor/allocator.h"
#include "engine/util/error.h"

using namespace paralab;

namespace {

const std::string kExamples = std::string(PARALAB_SOURCE_DIR) + "/resources/examples/plan/";

// Llama 3 405B on 16,384 H100s (Dubey et al. 2024, "The Llama 3 Herd of Models", §3.3), planned
// from the example file.
plan::Prediction llama3_405b() {
    const plan::PlanFile file = plan::read_plan_file(kExamples + "llama3-405b.plan.paralab.json");
    plan::Cluster c = plan::preset("h100-80g");
    c.nodes = 2048;
    const plan::Mesh mesh = plan::mesh_of(file, c.devices());
    return plan::predict(file.experiment, plan::plan_model(file.experiment), c, mesh);
}

// The run's inputs: 419 unexpected interruptions in a 54-day snapshot on 16,384 GPUs (§3.3.4);
// Tectonic's sustained 2 TB/s (§3.3.1). The paper gives no restart time: 10 minutes is assumed.
plan::GoodputInputs llama3_inputs() {
    plan::GoodputInputs in;
    in.failure_rate_per_gpu_hour = 419.0 / (16384.0 * 54 * 24);
    in.storage_bytes_per_s = 2e12;
    in.restart_s = 600;
    in.tokens = 15.6e12;
    return in;
}

}  // namespace

// Daly's optimum is the maximum of Daly's own wall-time model, and Young's √(2δM) in the limit of
// a checkpoint much shorter than the time between failures.
TEST(Goodput, DalyIntervalMaximisesTheExpectedGoodput) {
    for (const auto& [delta, mtbf] : {std::pair{3.0, 11000.0}, {60.0, 3600.0}, {600.0, 2000.0}}) {
        SCOPED_TRACE(std::to_string(delta) + " s checkpoints, " + std::to_string(mtbf) + " s MTBF");
        const double tau = plan::daly_interval(delta, mtbf);
        const double best = plan::goodput_at(tau, delta, 30, mtbf);
        // A fine scan's maximum is where Daly's estimate puts it.
        double scanned = 0, argmax = 0;
        for (double t = tau / 4; t < tau * 4; t *= 1.0001) {
            const double g = plan::goodput_at(t, delta, 30, mtbf);
            if (g > scanned) scanned = g, argmax = t;
        }
        EXPECT_NEAR(tau / argmax, 1, 0.02);
        EXPECT_GT(best, scanned * (1 - 1e-3));
        EXPECT_GT(best, plan::goodput_at(tau * 2, delta, 30, mtbf));
        EXPECT_GT(best, plan::goodput_at(tau / 2, delta, 30, mtbf));
    }
    EXPECT_NEAR(plan::daly_interval(1, 1e8), std::sqrt(2 * 1 * 1e8), 1e-3 * std::sqrt(2e8));
    EXPECT_DOUBLE_EQ(plan::daly_interval(100, 40), 40);  // δ ≥ 2M: checkpoint every M
    // Without failures, only the checkpoints' own time is lost; a restart costs e^(R/M).
    EXPECT_NEAR(plan::goodput_at(100, 1, 0, 1e15), 100.0 / 101, 1e-9);
    EXPECT_NEAR(plan::goodput_at(100, 1, 1000, 1e15) / plan::goodput_at(100, 1, 0, 1e15), 1, 1e-9);
    EXPECT_LT(plan::goodput_at(100, 1, 1000, 1e4), plan::goodput_at(100, 1, 0, 1e4) * std::exp(-0.09));
}

// The published anchor: Llama 3's "higher than 90% effective training time" over 54 days on 16K
// GPUs. The checkpoint is the memory model's whole state (16-bit parameters, fp32 master, Adam's
// two moments: 14 bytes a parameter), written at 2 TB/s in about 3 s.
TEST(Goodput, Llama3HerdOfModelsAnchor) {
    const plan::Prediction p = llama3_405b();
    ASSERT_TRUE(p.skipped.empty()) << p.skipped;
    EXPECT_EQ(p.devices, 16384);
    const plan::GoodputInputs in = llama3_inputs();
    const plan::Goodput g = plan::goodput_of(p, in);
    EXPECT_NEAR(g.checkpoint_bytes / 14, 405.8e9, 1e9);
    EXPECT_NEAR(g.mtbf_s / 3600, 54.0 * 24 / 419, 1e-6);  // one failure every 3.1 hours
    EXPECT_NEAR(g.checkpoint_write_s, g.checkpoint_bytes / 2e12, 1e-9);
    // The paper's > 90 %; above 97 % would leave no room for the 419 restarts it reports.
    EXPECT_GT(g.goodput, 0.90);
    EXPECT_LT(g.goodput, 0.97);
    EXPECT_NEAR(g.time_to_train_s, in.tokens / p.tokens_per_s / g.goodput, 1e-6 * g.time_to_train_s);
    EXPECT_FALSE(g.cost.has_value());  // no price given
    // The range fails a model that ignores the interval: an hourly or a daily checkpoint on the
    // same inputs loses a tenth of the run or more.
    for (double tau : {3600.0, 86400.0})
        EXPECT_LT(plan::goodput_at(tau, g.checkpoint_write_s, in.restart_s, g.mtbf_s), 0.90) << tau;
    // ... and so does one that forgets the restarts (above 97 %).
    EXPECT_GT(plan::goodput_at(g.checkpoint_interval_s, g.checkpoint_write_s, 0, g.mtbf_s), 0.97);
}

TEST(Goodput, CostIsTheDevicesTimeAtTheirPrice) {
    const plan::Prediction p = llama3_405b();
    plan::GoodputInputs in = llama3_inputs();
    in.price_per_gpu_hour = 2.0;
    const plan::Goodput g = plan::goodput_of(p, in);
    ASSERT_TRUE(g.cost.has_value());
    EXPECT_NEAR(*g.cost, g.time_to_train_s / 3600 * 16384 * 2.0, 1e-6 * *g.cost);
    // The h100-80g preset's price, with its source.
    ASSERT_TRUE(plan::preset("h100-80g").price_per_gpu_hour.has_value());
    EXPECT_GT(*plan::preset("h100-80g").price_per_gpu_hour, 0);
}

TEST(Goodput, BadInputSaysWhich) {
    const plan::Prediction p = llama3_405b();
    const auto refused = [&](plan::GoodputInputs in, const std::string& option) {
        try {
            plan::goodput_of(p, in);
            ADD_FAILURE() << "accepted; expected a refusal naming " << option;
        } catch (const ConfigError& e) {
            EXPECT_NE(std::string(e.what()).find(option), std::string::npos) << e.what();
        }
    };
    plan::GoodputInputs in = llama3_inputs();
    in.failure_rate_per_gpu_hour = 0;
    refused(in, "--failure-rate");
    in.failure_rate_per_gpu_hour = -1e-5;
    refused(in, "--failure-rate");
    in = llama3_inputs();
    in.storage_bytes_per_s = 0;
    refused(in, "--storage-gbps");
    in = llama3_inputs();
    in.restart_s = -1;
    refused(in, "--restart-s");
}

// ---- validation against published runs ------------------------------------------------------

namespace {

// Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
// Megatron-LM" (arXiv 2104.04473), Table 1: achieved teraFLOP/s per A100. Each row's micro-batch
// size, layers per virtual stage and DDP implementation from Megatron-LM's
// examples/sc21/run_table_1.sh (torch DDP overlaps the gradient all-reduce with backward; the
// "local" one reduces after it); full recomputation, fp16, Adam, sequence 2,048, vocabulary 51,200.
struct TableRow {
    const char* name;
    int heads, hidden, layers, tp, pp, gpus, batch;
    double published;  // teraFLOP/s per GPU
    int micro_batch, interleave;
    bool torch_ddp;
};
constexpr TableRow kTable1[] = {
    {"1.7B", 24, 2304, 24, 1, 1, 32, 512, 137, 16, 1, true},
    {"3.6B", 32, 3072, 30, 2, 1, 64, 512, 138, 16, 1, true},
    {"7.5B", 32, 4096, 36, 4, 1, 128, 512, 142, 16, 1, true},
    {"18.4B", 48, 6144, 40, 8, 1, 256, 1024, 135, 8, 1, true},
    {"39.1B", 64, 8192, 48, 8, 2, 512, 1536, 138, 4, 1, false},
    {"76.1B", 80, 10240, 60, 8, 4, 1024, 1792, 140, 2, 3, false},
    {"145.6B", 96, 12288, 80, 8, 8, 1536, 2304, 148, 2, 2, false},
    {"310.1B", 128, 16384, 96, 8, 16, 1920, 2160, 155, 1, 2, false},
    {"529.6B", 128, 20480, 105, 8, 35, 2520, 2520, 163, 1, 3, false},
    {"1008.0B", 160, 25600, 128, 8, 64, 3072, 3072, 163, 1, 1, false},
};
constexpr int kSeq = 2048, kVocab = 51200;

nlohmann::json megatron_gpt(const TableRow& r, const std::string& recompute, bool sequence_parallel) {
    const int dp = r.gpus / (r.tp * r.pp);
    nlohmann::json strategy = {{"type", "hybrid"}, {"dp", dp}, {"tp", r.tp}, {"pp", r.pp},
                               {"micro_batches", r.batch / (dp * r.micro_batch)},
                               {"schedule", r.interleave > 1 ? "interleaved_1f1b" : "1f1b"},
                               {"sequence_parallel", sequence_parallel}};
    if (r.interleave > 1) strategy["interleave"] = r.interleave;
    return {{"paralab", 1},
            {"name", std::string("megatron-") + r.name},
            {"data", {{"dataset", "text"}, {"seq_len", kSeq}, {"batch_size", r.batch}}},
            {"model",
             {{"input", {kSeq}},
              {"loss", "cross_entropy"},
              {"layers",
               {{{"type", "embedding"}, {"vocab", kVocab}, {"dim", r.hidden}},
                {{"type", "position_embedding"}},
                {{"type", "transformer_block"}, {"heads", r.heads}, {"ffn", 4 * r.hidden}, {"repeat", r.layers}},
                {{"type", "layernorm"}},
                {{"type", "linear"}, {"out", kVocab}}}}}},
            {"strategy", strategy},
            {"optimizer", {{"type", "adam"}, {"lr", 1e-4}}},
            {"train", {{"precision", "fp16"}, {"recompute", recompute}}}};
}

plan::Prediction plan_row(const TableRow& r, const plan::Stack& stack, const std::string& recompute = "full",
                          bool sequence_parallel = false) {
    const plan::PlanFile file = plan::plan_file_from_json(megatron_gpt(r, recompute, sequence_parallel), r.name);
    plan::Cluster c = plan::preset("a100-80g");
    c.nodes = r.gpus / c.gpus_per_node;
    c.stack = stack;
    plan::Mesh mesh = plan::mesh_of(file, c.devices());
    mesh.overlap_grad_reduce = r.torch_ddp;
    return plan::predict(file.experiment, plan::plan_model(file.experiment), c, mesh);
}

// The paper's equation (3): F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)), recomputation included.
double table1_tflops(const TableRow& r, const plan::Prediction& p) {
    const double h = r.hidden;
    const double flops = 96.0 * r.batch * kSeq * r.layers * h * h *
                         (1 + kSeq / (6 * h) + kVocab / (16.0 * r.layers * h));
    return flops / (p.step_time_s * r.gpus) / 1e12;
}

struct TableErrors {
    std::string markdown;
    double mean = 0, max = 0;
    int optimistic = 0;
};

TableErrors table1(const plan::Stack& stack) {
    TableErrors out;
    char line[512];
    out.markdown =
        "| model | tp | pp | dp | GPUs | batch | micro-batch | interleave | DDP | published TFLOP/s/GPU | "
        "predicted | error | fits |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    for (const TableRow& r : kTable1) {
        const plan::Prediction p = plan_row(r, stack);
        EXPECT_TRUE(p.skipped.empty()) << r.name << ": " << p.skipped;
        const double predicted = table1_tflops(r, p), error = (predicted - r.published) / r.published;
        out.mean += std::abs(error) / std::size(kTable1);
        out.max = std::max(out.max, std::abs(error));
        out.optimistic += error > 0;
        std::snprintf(line, sizeof line, "| %s | %d | %d | %d | %d | %d | %d | %d | %s | %.0f | %.0f | %+.1f%% | %s |\n",
                      r.name, r.tp, r.pp, r.gpus / (r.tp * r.pp), r.gpus, r.batch, r.micro_batch, r.interleave,
                      r.torch_ddp ? "torch" : "local", r.published, predicted, 100 * error, p.fits ? "yes" : "no");
        out.markdown += line;
    }
    std::snprintf(line, sizeof line,
                  "\nMean |error| %.1f %%, max %.1f %%; %d of %zu rows optimistic (`--stack %s`).\n", 100 * out.mean,
                  100 * out.max, out.optimistic, std::size(kTable1), stack.name.c_str());
    out.markdown += line;
    return out;
}

// Replaces the text between `begin` and `end` in docs/planner.md with `text` under
// PARALAB_UPDATE_DOCS=1; expects them equal otherwise.
void expect_docs_table(const std::string& begin, const std::string& end, const std::string& text) {
    const std::string path = std::string(PARALAB_SOURCE_DIR) + "/docs/planner.md";
    std::ifstream in(path);
    ASSERT_TRUE(in) << path;
    std::stringstream buffer;
    buffer << in.rdbuf();
    std::string page = buffer.str();
    const size_t a = page.find(begin);
    size_t b = page.find(end);
    ASSERT_NE(a, std::string::npos) << "marker missing in " << path << ": " << begin;
    ASSERT_NE(b, std::string::npos) << "marker missing in " << path << ": " << end;
    if (std::getenv("PARALAB_UPDATE_DOCS")) {
        page.replace(a + begin.size(), b - a - begin.size(), text);
        std::ofstream(path) << page;
        b = page.find(end);
    }
    EXPECT_EQ(page.substr(a + begin.size(), b - a - begin.size()), text)
        << "docs/planner.md's table disagrees with the planner; run PARALAB_UPDATE_DOCS=1 engine_plan_scale_test";
}

}  // namespace

// Narayanan et al. 2021 Table 1 with the stack calibrated on it: the planner's goals (mean ≤ 5 %,
// max ≤ 10 %, neither sign dominant), and docs/planner.md's table is this one. The ideal stack's
// table is there too, beside it.
TEST(Validation, NarayananTable1) {
    const TableErrors megatron = table1(plan::stack_preset("megatron-lm-2021"));
    std::printf("%s\n", megatron.markdown.c_str());
    EXPECT_LE(megatron.mean, 0.05);
    EXPECT_LE(megatron.max, 0.10);
    EXPECT_GE(megatron.optimistic, 3);
    EXPECT_LE(megatron.optimistic, 7);
    expect_docs_table("<!-- table 1, megatron-lm-2021: generated by engine_plan_scale_test -->\n",
                      "<!-- end of table 1, megatron-lm-2021 -->", megatron.markdown);
    const TableErrors ideal = table1(plan::stack_preset("ideal"));
    std::printf("%s\n", ideal.markdown.c_str());
    expect_docs_table("<!-- table 1, ideal: generated by engine_plan_scale_test -->\n",
                      "<!-- end of table 1, ideal -->", ideal.markdown);
}

// How megatron-lm-2021's compute_efficiency was calibrated: one value for the whole table, the
// one minimising its mean |error| (a scan in steps of 0.005, then of 0.001 around the best); the
// file keeps it to 0.002.
TEST(Validation, MegatronStackIsCalibratedOnTable1AsAWhole) {
    plan::Stack stack = plan::stack_preset("megatron-lm-2021");
    const double in_file = stack.compute_efficiency;
    double best = 0, best_mean = 1e9;
    const auto try_value = [&](int thousandths) {
        stack.compute_efficiency = thousandths / 1000.0;
        double mean = 0;
        for (const TableRow& r : kTable1)
            mean += std::abs(table1_tflops(r, plan_row(r, stack)) - r.published) / r.published;
        if (mean < best_mean) best_mean = mean, best = stack.compute_efficiency;
    };
    for (int i = 700; i <= 1000; i += 5) try_value(i);
    const int coarse = static_cast<int>(std::lround(best * 1000));
    for (int i = coarse - 4; i <= coarse + 4; ++i) try_value(i);
    std::printf("compute_efficiency minimising Table 1's mean |error|: %.3f (mean %.2f %%)\n", best,
                100 * best_mean / std::size(kTable1));
    EXPECT_NEAR(in_file, best, 0.002);
}

// ---- cost terms ------------------------------------------------------------------------------

// Sequence parallelism moves more in backward than full tensor parallelism (the inputs gathered
// again for the weight gradients), the same in forward.
TEST(CostTerms, SequenceParallelBackwardGathersAgain) {
    const TableRow& r = kTable1[3];  // 18.4B: tp 8, no pipeline
    const plan::Stack stack = plan::stack_preset("megatron-lm-2021");
    const plan::Prediction full = plan_row(r, stack, "selective", false);
    const plan::Prediction sp = plan_row(r, stack, "selective", true);
    ASSERT_TRUE(full.skipped.empty() && sp.skipped.empty());
    // Per block and micro-batch: 2 all-reduces forward, 2 backward; with sp 2 more all-gathers
    // of the same b·s·h bytes in backward, each half an all-reduce.
    EXPECT_NEAR(sp.breakdown.tp_comm / full.breakdown.tp_comm, (4 + 1.0) / 4, 1e-9);
}

// A fused kernel prices attention's products at its own rate, halves a causal mask's, and moves
// no scores; the materialized one is the GEMM curve and the scores' bytes.
TEST(CostTerms, FusedAttentionIsCheaperAndHalvesCausal) {
    const TableRow& r = kTable1[0];
    plan::Stack fused = plan::stack_preset("ideal"), materialized = fused;
    materialized.fused_attention = false;
    const plan::Prediction a = plan_row(r, fused), b = plan_row(r, materialized);
    EXPECT_LT(a.breakdown.compute, b.breakdown.compute);
    EXPECT_LT(a.memory[static_cast<size_t>(MemCategory::activations)],
              b.memory[static_cast<size_t>(MemCategory::activations)] + 1);
    // Causal against not: the products' time halves, nothing else changes.
    nlohmann::json j = megatron_gpt(r, "full", false);
    plan::Cluster c = plan::preset("a100-80g");
    c.nodes = 4;
    c.stack = fused;
    const auto plan_json = [&](const nlohmann::json& e) {
        const plan::PlanFile f = plan::plan_file_from_json(e, "causal");
        return plan::predict(f.experiment, plan::plan_model(f.experiment), c, plan::mesh_of(f, 32));
    };
    const plan::Prediction causal = plan_json(j);
    j["model"]["layers"][2]["causal"] = false;
    const plan::Prediction both = plan_json(j);
    // 4·T²·D per sample and block at peak · efficiency, halved: forward, backward (2×) and the
    // full recomputation's forward.
    const double T = kSeq, D = r.hidden, rows = r.batch / 32.0;
    const double products = 4 * T * T * D * r.layers * rows;
    const double rate = c.peak_flops_16bit * c.fused_attention_efficiency * c.stack.compute_efficiency;
    EXPECT_NEAR((both.breakdown.compute + both.breakdown.recompute) -
                    (causal.breakdown.compute + causal.breakdown.recompute),
                4 * products / 2 / rate, 1e-6 * both.breakdown.compute);
}

// The gradient all-reduce in fp32 moves twice the 16-bit bytes; --stack's precision is an option.
TEST(CostTerms, GradientReducePrecision) {
    const TableRow& r = kTable1[4];  // 39.1B: local DDP, the whole all-reduce exposed
    plan::Stack stack = plan::stack_preset("megatron-lm-2021");
    const plan::Prediction half = plan_row(r, stack);
    stack.grad_reduce_fp32 = true;
    const plan::Prediction fp32 = plan_row(r, stack);
    EXPECT_GT(fp32.breakdown.dp_comm, 1.9 * half.breakdown.dp_comm);
    EXPECT_LT(fp32.breakdown.dp_comm, 2.0 * half.breakdown.dp_comm);  // the latency α is not doubled
}

// Pipeline sends sit on the critical path: the step with them is longer than without by at
// least the busiest device's own sends of one micro-batch.
TEST(CostTerms, PipelineSendsAreOnTheCriticalPath) {
    const plan::Prediction p = plan_row(kTable1[5], plan::stack_preset("megatron-lm-2021"));  // 76.1B, pp 4 × 3
    ASSERT_TRUE(p.skipped.empty());
    EXPECT_GT(p.breakdown.pp_comm, 0);
    const auto& b = p.breakdown;
    EXPECT_NEAR(b.compute + b.recompute + b.tp_comm + b.pp_bubble + b.pp_comm + b.dp_comm + b.optimizer,
                p.step_time_s, 1e-9 * p.step_time_s);
}

TEST(Stacks, UnknownPresetListsThem) {
    try {
        plan::stack_preset("megatron");
        FAIL() << "accepted";
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("--stack: unknown stack \"megatron\"; the presets are ideal, megatron-lm-2021, paralab"),
                  std::string::npos) << e.what();
    }
    for (const auto& name : plan::stack_names()) EXPECT_EQ(plan::stack_preset(name).name, name);
}

// ---- sweeps ----------------------------------------------------------------------------------

// A tp × pp sweep without dp takes dp from the devices (skipping what does not divide them),
// the micro-batches following it; ranking by MFU orders by MFU.
TEST(Sweeps, MeshSweepDerivesDpAndRanksByChoice) {
    const TableRow& r = kTable1[6];  // 145.6B on 1,536 GPUs: tp 8, pp 8, dp 24
    const plan::PlanFile file = plan::plan_file_from_json(megatron_gpt(r, "full", false), r.name);
    plan::Cluster c = plan::preset("a100-80g");
    c.nodes = r.gpus / 8;
    const plan::Mesh base = plan::mesh_of(file, c.devices());
    const plan::PlanModel model = plan::plan_model(file.experiment);
    plan::SweepOptions by_mfu;
    by_mfu.rank = plan::Rank::mfu;
    const auto ps = plan::sweep(file.experiment, model, c, base, {{"tp", {"4", "8"}}, {"pp", {"5", "8", "16"}}}, by_mfu);
    ASSERT_EQ(ps.size(), 6u);
    int skipped = 0;
    double last_mfu = 2;
    bool fits_before = true;
    for (const auto& p : ps) {
        if (!p.skipped.empty()) {
            ++skipped;
            EXPECT_NE(p.skipped.find("does not divide the 1536 devices"), std::string::npos) << p.skipped;
            continue;
        }
        EXPECT_EQ(int64_t{p.mesh.dp} * p.mesh.tp * p.mesh.pp, 1536);
        // Each replica keeps the base's 2 rows per micro-batch.
        EXPECT_EQ(int64_t{p.mesh.micro_batches} * p.mesh.dp * 2, r.batch) << plan::mesh_line(p.mesh, 0);
        if (p.fits && fits_before) {
            EXPECT_LE(p.mfu, last_mfu);
            last_mfu = p.mfu;
        }
        fits_before = fits_before && p.fits;
    }
    EXPECT_EQ(skipped, 2);  // pp 5 with tp 4 and 8
    // Sweeping dp itself leaves it as swept.
    const auto fixed = plan::sweep(file.experiment, model, c, base, {{"tp", {"4"}}, {"dp", {"24"}}});
    ASSERT_EQ(fixed.size(), 1u);
    EXPECT_EQ(fixed[0].mesh.dp, 24);
    EXPECT_NE(fixed[0].skipped.find("devices, but the cluster has 1536"), std::string::npos);
    EXPECT_THROW(plan::rank_from_name("speed"), ConfigError);
}

// Held-out published runs, judged with the stacks as calibrated (nothing fitted to them): the
// table in docs/planner.md is this one.
TEST(Validation, HeldOutRuns) {
    std::string table =
        "| run | stack | published | predicted | error |\n|---|---|---|---|---|\n";
    char line[512];
    const auto row = [&](const char* run, const char* stack, const char* what, double published, double predicted,
                         const char* unit) {
        std::snprintf(line, sizeof line, "| %s | `%s` | %s %.3g%s | %.3g%s | %+.1f%% |\n", run, stack, what, published,
                      unit, predicted, unit, 100 * (predicted - published) / published);
        table += line;
    };
    // Korthikanti et al. 2022 (arXiv 2205.05198): 530B on 2,240 A100s, MFU 54.2 % with sequence
    // parallelism and selective recomputation, 42.1 % with full recomputation. tp 8 · pp 35 ·
    // dp 8; micro-batch 1 and a global batch of 2,240 are assumed (one sequence per GPU, as
    // Table 1's 530B row). MFU by the paper's model FLOPs, 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)).
    const TableRow k530{"530B (Korthikanti 2022)", 128, 20480, 105, 8, 35, 2240, 2240, 0, 1, 1, false};
    const plan::Stack megatron = plan::stack_preset("megatron-lm-2021");
    for (const auto& [recompute, sp, published] :
         {std::tuple{"selective", true, 0.542}, std::tuple{"full", false, 0.421}}) {
        const plan::Prediction p = plan_row(k530, megatron, recompute, sp);
        ASSERT_TRUE(p.skipped.empty()) << p.skipped;
        const double h = k530.hidden;
        const double model_flops = 72.0 * k530.batch * kSeq * k530.layers * h * h *
                                   (1 + kSeq / (6 * h) + kVocab / (12.0 * k530.layers * h));
        const double mfu = model_flops / (p.step_time_s * k530.gpus * 312e12);
        const std::string run = std::string("Korthikanti et al. 2022, 530B on 2,240 A100s, ") +
                                (sp ? "sequence parallel + selective" : "full recomputation");
        row(run.c_str(), "megatron-lm-2021", "MFU", 100 * published, 100 * mfu, " %");
    }
    // Llama 3 405B on 16,384 H100s at 8K (Dubey et al. 2024, Table 4: 400 TFLOP/s per GPU with
    // tp 8, pp 16, dp 128), with its example file; FLOPs by the engine's count (3 × forward).
    {
        const plan::PlanFile file = plan::read_plan_file(kExamples + "llama3-405b.plan.paralab.json");
        plan::Cluster c = plan::preset("h100-80g");
        c.nodes = 2048;
        const plan::Prediction p =
            plan::predict(file.experiment, plan::plan_model(file.experiment), c, plan::mesh_of(file, c.devices()));
        ASSERT_TRUE(p.skipped.empty()) << p.skipped;
        row("Dubey et al. 2024, Llama 3 405B on 16,384 H100s, 8K", "ideal", "TFLOP/s/GPU", 400,
            p.model_flops_per_step / (p.step_time_s * p.devices) / 1e12, "");
    }
    std::printf("%s\n", table.c_str());
    expect_docs_table("<!-- held-out runs: generated by engine_plan_scale_test -->\n",
                      "<!-- end of held-out runs -->", table);
}
