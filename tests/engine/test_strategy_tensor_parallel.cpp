// tensor_parallel (docs/strategies.md): Megatron's splitting of attention and transformer
// blocks ends with the single device's parameters on 2 and 4 devices (blocks and a bare
// attention; clipping and gradient accumulation too), moves exactly 4 all-reduces of B·T·D
// numbers per block per step, divides the blocks' parameters as its memory model says, and
// refuses what it cannot split, naming the key. With sequence_parallel it ends there too,
// moves exactly the all-gathers and reduce-scatters along the sequence that replace the
// all-reduces, and holds less activation memory per device.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include <unistd.h>

#include "engine/strategy/registry.h"
#include "strategy_testing.h"

using namespace paralab;
using namespace strategy_testing;

namespace {

// Text-like bytes in a temp file, made once.
const std::string& corpus() {
    static const std::string path = text_corpus("tp", "Split the heads, all-reduce the sums; the layernorms stay whole.", 120);
    return path;
}

constexpr int64_t kB = 4, kT = 8, kD = 16;

// A char-GPT in miniature: embedding, positions, two transformer blocks (4 heads, ffn 16), a
// layernorm and the head; no dropout (the attention masks of a shard are its own). AdamW's eps
// is 1e-6: the k part of qkv's bias has a gradient of zero up to rounding (a softmax ignores a
// shift of all its scores), which eps 1e-8 would turn into steps of ±lr whose sign is the
// rounding's — ddp against single differs there as much.
json tiny_gpt() { return strategy_testing::tiny_gpt("tp-gpt", corpus()); }

// The same with a bare attention (and an MLP of plain layers after it) in place of the blocks.
json tiny_attention() {
    json j = tiny_gpt();
    j["name"] = "tp-attention";
    j["model"]["layers"] = json::parse(R"([
          {"type": "embedding", "vocab": 256, "dim": 16}, {"type": "position_embedding"},
          {"type": "attention", "heads": 4}, {"type": "layernorm"}, {"type": "linear", "out": 32},
          {"type": "gelu"}, {"type": "linear", "out": 256}])");
    return j;
}

Result run_on(json j, int devices, const json& strategy) {
    return run_it(with_strategy(std::move(j), devices, strategy));
}

const Result& single_of(const json& j) {
    static std::map<std::string, Result> cache;
    const std::string key = j.dump();
    if (!cache.count(key)) cache[key] = run_on(j, 1, {{"type", "single"}});
    return cache.at(key);
}

const json kTensorParallel = {{"type", "tensor_parallel"}};
const json kSequenceParallel = {{"type", "tensor_parallel"}, {"sequence_parallel", true}};

void expect_matches_single(const json& j, int devices, const json& strategy = kTensorParallel) {
    const Result& want = single_of(j);
    const Result got = run_on(j, devices, strategy);
    ASSERT_EQ(want.summary.status, "finished") << want.summary.error;
    ASSERT_EQ(got.summary.status, "finished") << got.summary.error;
    ASSERT_FALSE(want.artifacts.parameters.empty());
    EXPECT_LE(max_rel_diff(want.artifacts.parameters, got.artifacts.parameters), 1e-5);
    EXPECT_EQ(want.summary.steps, got.summary.steps);
    EXPECT_NEAR(want.summary.final_loss, got.summary.final_loss,
                1e-5 * (1 + want.summary.final_loss));
    ASSERT_TRUE(want.summary.test_loss && got.summary.test_loss);
    EXPECT_NEAR(*want.summary.test_loss, *got.summary.test_loss,
                1e-5 * (1 + *want.summary.test_loss));
}

TEST(TensorParallel, BlocksMatchSingleOnTwoDevices) {
    expect_matches_single(tiny_gpt(), 2);
}
TEST(TensorParallel, BlocksMatchSingleOnFourDevices) {
    expect_matches_single(tiny_gpt(), 4);
}
TEST(TensorParallel, BareAttentionMatchesSingle) {
    for (int n : {2, 4}) expect_matches_single(tiny_attention(), n);
}

// The norm of train.clip_norm adds the shards' squares over the devices; micro-batches
// accumulate the same sums.
TEST(TensorParallel, ClippingAndAccumulationMatchSingle) {
    json j = tiny_gpt();
    j["train"]["clip_norm"] = 0.5;
    j["train"]["grad_accum"] = 2;
    expect_matches_single(j, 2);
}

// Recomputed forwards all-reduce again, on every device alike.
TEST(TensorParallel, RecomputationMatchesSingle) {
    for (const char* mode : {"selective", "full"}) {
        SCOPED_TRACE(mode);
        json j = tiny_gpt();
        j["train"]["recompute"] = mode;
        expect_matches_single(j, 2);
    }
}

// The tiny GPT with Llama's blocks: grouped-query attention (4 heads, 2 key/value heads: each
// device of 2 computes 2 query heads and their one key/value head), RoPE, RMSNorm, the SwiGLU MLP
// (gate and up column-, down row-parallel), no bias, and the output layer tied to the embedding.
json tiny_llama() {
    json j = tiny_gpt();
    j["name"] = "tp-llama";
    j["model"]["layers"] = json::parse(R"([
          {"type": "embedding", "vocab": 256, "dim": 16},
          {"type": "transformer_block", "heads": 4, "kv_heads": 2, "ffn": 24, "position": "rope",
           "norm": "rmsnorm", "mlp": "swiglu", "bias": false, "repeat": 2},
          {"type": "rmsnorm"}, {"type": "linear", "out": 256, "bias": false, "tie_embeddings": true}])");
    return j;
}

TEST(TensorParallel, LlamaBlocksMatchSingle) {
    expect_matches_single(tiny_llama(), 2);
    expect_matches_single(tiny_llama(), 2, kSequenceParallel);
}

// Each device computes kv_heads / N key/value heads: 2 over 4 devices is refused as the shards
// are built, before any step, at the key to change.
TEST(TensorParallel, KeyValueHeadsThatDoNotDivideAreRefused) {
    const auto issues = run::validate(run::parse_experiment(with_strategy(tiny_llama(), 4, kTensorParallel)));
    ASSERT_EQ(issues.size(), 1u);
    EXPECT_EQ(issues[0].path, "model.layers[1].kv_heads");
    // hybrid names its tp option
    const auto mesh = run::validate(run::parse_experiment(
        with_strategy(tiny_llama(), 4, {{"type", "hybrid"}, {"tp", 4}})));
    ASSERT_EQ(mesh.size(), 1u);
    EXPECT_EQ(mesh[0].path, "strategy.tp");
    EXPECT_NE(mesh[0].message.find("key/value heads of model.layers[1]"), std::string::npos) << mesh[0].message;
    try {
        run_it(with_strategy(tiny_llama(), 4, kTensorParallel));
        ADD_FAILURE() << "the run started";
    } catch (const ConfigError& err) {
        EXPECT_EQ(err.path(), "model.layers[1].kv_heads");
        EXPECT_NE(std::string(err.what()).find("2 kv_heads do not divide over 4 devices"), std::string::npos)
            << err.what();
    }
}

// Bytes and calls of the all-reduces, per device and step.
class CommCounter : public run::RunObserver {
public:
    void on_span(const config::Span& s) override {
        if (s.phase == "tp_all_reduce") {
            ++calls[{s.device, s.step}];
            bytes[{s.device, s.step}] += s.bytes;
        }
        phases.insert(s.phase);
    }
    std::map<std::pair<std::string, int64_t>, int64_t> calls, bytes;
    std::set<std::string> phases;
};

TEST(TensorParallel, FourAllReducesOfBTDPerBlockPerStep) {
    for (int n : {2, 4}) {
        CommCounter counter;
        const Result r =
            run_it(with_strategy(tiny_gpt(), n, {{"type", "tensor_parallel"}}), &counter);
        ASSERT_EQ(r.summary.status, "finished") << r.summary.error;
        const int64_t blocks = 2;
        // A ring all-reduce of C numbers moves 2 (N − 1) / N · C of them from each device.
        const int64_t per_call = 2 * (n - 1) * kB * kT * kD / n * 4;
        ASSERT_EQ(counter.calls.size(), static_cast<size_t>(n * r.summary.steps));
        for (const auto& [key, calls] : counter.calls) {
            EXPECT_EQ(calls, 4 * blocks) << key.first << " step " << key.second;
            EXPECT_EQ(counter.bytes.at(key), 4 * blocks * per_call)
                << key.first << " step " << key.second;
        }
        EXPECT_TRUE(counter.phases.count("forward") && counter.phases.count("backward"));
    }
}

// Parameters per device as the memory model predicts them: the blocks' divided, the rest whole.
TEST(TensorParallel, DividesTheBlocksParameters) {
    const json j = with_strategy(tiny_gpt(), 2, {{"type", "tensor_parallel"}});
    const Result r = run_it(j);
    ASSERT_EQ(r.summary.status, "finished") << r.summary.error;
    const config::Experiment e = run::parse_experiment(j);
    const auto cost = strategy::model_cost(e, Shape{kT});
    const auto predicted = strategy::estimate_memory(e, cost);
    // Whole: embedding, positions, the final layernorm and the head; per block 6D of 4D² + 2D·ffn +
    // 9D + ffn.
    const int64_t whole = 256 * kD + kT * kD + 2 * kD + (kD * 256 + 256);
    const int64_t block = 4 * kD * kD + 2 * kD * 16 + 9 * kD + 16;
    const int64_t expected = whole + 2 * (6 * kD + (block - 6 * kD) / 2);
    ASSERT_EQ(cost.parameters(), whole + 2 * block);
    const auto param = static_cast<size_t>(MemCategory::parameters);
    for (size_t k = 0; k < 2; ++k) {
        const auto& d = predicted[k];
        const auto& peak = r.artifacts.memory.at(d.device).peak;
        EXPECT_EQ(d.bytes[param], expected * 4) << d.device;
        EXPECT_LT(peak[param], cost.parameters() * 4) << d.device;
    }
    expect_memory_as_predicted(j, r, Shape{kT}, 1.10, 1.10);
}

// What it cannot split is refused before the run, at the key to change.
TEST(TensorParallel, RefusesWhatItCannotSplit) {
    struct Case {
        json model_change;  // merged into the tiny GPT's layers[2]
        json strategy;
        int devices;
        std::string path, reason;
    };
    const Case cases[] = {
        {{{"heads", 4}},
         {{"type", "tensor_parallel"}},
         3,
         "model.layers[2].heads",
         "4 heads do not divide over 3 devices"},
        {{{"ffn", 10}},
         {{"type", "tensor_parallel"}},
         4,
         "model.layers[2].ffn",
         "10 ffn units do not divide over 4 devices"},
    };
    for (const Case& c : cases) {
        json j = tiny_gpt();
        j["model"]["layers"][2].update(c.model_change);
        j = with_strategy(j, c.devices, c.strategy);
        const auto issues = run::validate(run::parse_experiment(j));
        ASSERT_EQ(issues.size(), 1u) << c.path;
        EXPECT_EQ(issues[0].path, c.path);
        EXPECT_NE(issues[0].message.find(c.reason), std::string::npos) << issues[0].message;
        // The run refuses it too, before any step.
        try {
            run_it(j);
            ADD_FAILURE() << c.path << ": the run started";
        } catch (const ConfigError& err) {
            EXPECT_EQ(err.path(), c.path);
        }
    }
    // A model without attention has nothing to split.
    const auto issues = run::validate(run::parse_experiment(with_strategy(
        spirals_mlp("mlp", {{"type", "sgd"}, {"lr", 0.1}}, 1), 2, {{"type", "tensor_parallel"}})));
    ASSERT_EQ(issues.size(), 1u);
    EXPECT_EQ(issues[0].path, "model.layers");
}

// ---- sequence_parallel ----------------------------------------------------------------------

TEST(SequenceParallel, BlocksMatchSingleOnTwoAndFourDevices) {
    for (int n : {2, 4}) {
        SCOPED_TRACE(n);
        expect_matches_single(tiny_gpt(), n, kSequenceParallel);
    }
}

// A bare attention splits and gathers the sequence itself (no block before or after it).
TEST(SequenceParallel, BareAttentionMatchesSingle) {
    for (int n : {2, 4}) {
        SCOPED_TRACE(n);
        expect_matches_single(tiny_attention(), n, kSequenceParallel);
    }
}

// A residual's attention, then two blocks: the residual's body splits and gathers by itself,
// the blocks pass the split sequence from one to the next.
TEST(SequenceParallel, SplitLayersInsideAResidualMatchSingle) {
    json j = tiny_gpt();
    j["name"] = "sp-residual";
    j["model"]["layers"] = json::parse(R"([
          {"type": "embedding", "vocab": 256, "dim": 16}, {"type": "position_embedding"},
          {"type": "residual", "layers": [{"type": "layernorm"}, {"type": "attention", "heads": 4}]},
          {"type": "transformer_block", "heads": 4, "ffn": 16, "repeat": 2},
          {"type": "layernorm"}, {"type": "linear", "out": 256}])");
    expect_matches_single(j, 2, kSequenceParallel);
}

// The layernorms' gradients (summed over the devices) enter the norm once.
TEST(SequenceParallel, ClippingAndAccumulationMatchSingle) {
    json j = tiny_gpt();
    j["train"]["clip_norm"] = 0.5;
    j["train"]["grad_accum"] = 2;
    for (int n : {2, 4}) {
        SCOPED_TRACE(n);
        expect_matches_single(j, n, kSequenceParallel);
    }
}

TEST(SequenceParallel, RecomputationMatchesSingle) {
    for (const char* mode : {"selective", "full"}) {
        SCOPED_TRACE(mode);
        json j = tiny_gpt();
        j["train"]["recompute"] = mode;
        expect_matches_single(j, 2, kSequenceParallel);
    }
}

// With dropout, the dropouts outside the split linears draw, at each device's positions, the
// masks one device draws for the whole sequence: the run is plain tensor parallelism's (whose
// attention masks are each device's own heads', so neither is the single device's).
TEST(SequenceParallel, DropoutMatchesPlainTensorParallel) {
    json j = tiny_gpt();
    j["name"] = "sp-dropout";
    j["model"]["layers"][2]["dropout"] = 0.2;
    for (int n : {2, 4}) {
        SCOPED_TRACE(n);
        const Result tp = run_on(j, n, kTensorParallel);
        const Result sp = run_on(j, n, kSequenceParallel);
        ASSERT_EQ(tp.summary.status, "finished") << tp.summary.error;
        ASSERT_EQ(sp.summary.status, "finished") << sp.summary.error;
        EXPECT_LE(max_rel_diff(tp.artifacts.parameters, sp.artifacts.parameters), 1e-5);
        EXPECT_NEAR(tp.summary.final_loss, sp.summary.final_loss, 1e-5 * (1 + tp.summary.final_loss));
        // The masks matter: the run is not the one without dropout.
        EXPECT_GT(max_rel_diff(single_of(tiny_gpt()).artifacts.parameters, sp.artifacts.parameters), 1e-3);
    }
}

// Bytes and calls of every tensor-parallel collective, per device and step.
class SequenceCommCounter : public run::RunObserver {
public:
    void on_span(const config::Span& s) override {
        if (s.phase.rfind("tp_", 0) != 0) return;
        ++calls[s.phase][{s.device, s.step}];
        bytes[s.phase][{s.device, s.step}] += s.bytes;
    }
    using PerStep = std::map<std::pair<std::string, int64_t>, int64_t>;
    std::map<std::string, PerStep> calls, bytes;
};

// Per device and step, with N devices, B·T·D = kB·kT·kD numbers per collective, L = 2 blocks
// in a row and 4-byte floats (a ring all-gather or reduce-scatter of C numbers moves
// (N − 1)/N · C of them per device; an all-reduce 2 (N − 1)/N · C):
//   all-gathers:     4 L + 2 of B·T·D: per block 2 in forward (before qkv and fc1) and 2 in
//                    backward (the output gradients of proj and fc2), plus the last block's
//                    output in forward and the first block's input gradient in backward
//   reduce-scatters: 4 L of B·T·D: per block 2 in forward (after proj and fc2) and 2 in
//                    backward (the input gradients of qkv and fc1)
//   one all-reduce of the layernorms' and row-parallel biases' gradients: 6 D per block
//   no all-reduce of activations
TEST(SequenceParallel, AllGathersAndReduceScattersOfBTDPerBlockPerStep) {
    for (int n : {2, 4}) {
        SCOPED_TRACE(n);
        SequenceCommCounter counter;
        const Result r = run_it(with_strategy(tiny_gpt(), n, kSequenceParallel), &counter);
        ASSERT_EQ(r.summary.status, "finished") << r.summary.error;
        const int64_t blocks = 2;
        const int64_t per_call = (n - 1) * kB * kT * kD / n * 4;
        const int64_t grads = blocks * 6 * kD;
        const int64_t grads_bytes = 2 * (n - 1) * grads / n * 4;
        EXPECT_EQ(counter.calls.count("tp_all_reduce"), 0u);
        ASSERT_EQ(counter.calls["tp_all_gather"].size(), static_cast<size_t>(n * r.summary.steps));
        ASSERT_EQ(counter.calls["tp_reduce_scatter"].size(), static_cast<size_t>(n * r.summary.steps));
        ASSERT_EQ(counter.calls["tp_sequence_grads"].size(), static_cast<size_t>(n * r.summary.steps));
        for (const auto& [key, calls] : counter.calls["tp_all_gather"]) {
            const std::string at = key.first + " step " + std::to_string(key.second);
            EXPECT_EQ(calls, 4 * blocks + 2) << at;
            EXPECT_EQ(counter.bytes["tp_all_gather"].at(key), (4 * blocks + 2) * per_call) << at;
            EXPECT_EQ(counter.calls["tp_reduce_scatter"].at(key), 4 * blocks) << at;
            EXPECT_EQ(counter.bytes["tp_reduce_scatter"].at(key), 4 * blocks * per_call) << at;
            EXPECT_EQ(counter.calls["tp_sequence_grads"].at(key), 1) << at;
            EXPECT_EQ(counter.bytes["tp_sequence_grads"].at(key), grads_bytes) << at;
        }
        // The whole per device and step: 8 L + 2 collectives' worth of (N − 1)/N · B·T·D, where
        // plain tensor parallelism moves 4 L all-reduces of 2 (N − 1)/N · B·T·D.
        int64_t total = 0;
        for (const auto& [phase, per_step] : counter.bytes)
            for (const auto& [key, b] : per_step) total += b;
        EXPECT_EQ(total, n * r.summary.steps * ((8 * blocks + 2) * per_call + grads_bytes));
    }
}

// Each device's peak of activation memory, measured by its allocator, is below the same run's
// without sequence parallelism: the layernorms keep 1/N of the positions.
TEST(SequenceParallel, HoldsLessActivationMemoryPerDevice) {
    json j = tiny_gpt();
    j["name"] = "sp-memory";
    j["data"]["seq_len"] = 32;
    j["data"]["batch_size"] = 8;
    j["model"]["input"] = {32};
    j["model"]["layers"] = json::parse(R"([
          {"type": "embedding", "vocab": 256, "dim": 64}, {"type": "position_embedding"},
          {"type": "transformer_block", "heads": 4, "ffn": 64, "repeat": 4},
          {"type": "layernorm"}, {"type": "linear", "out": 256}])");
    j["train"]["max_steps"] = 2;
    const auto act = static_cast<size_t>(MemCategory::activations);
    for (int n : {2, 4}) {
        const Result tp = run_on(j, n, kTensorParallel);
        const Result sp = run_on(j, n, kSequenceParallel);
        ASSERT_EQ(tp.summary.status, "finished") << tp.summary.error;
        ASSERT_EQ(sp.summary.status, "finished") << sp.summary.error;
        for (int d = 0; d < n; ++d) {
            const std::string device = "cpu:" + std::to_string(d);
            const int64_t without = tp.artifacts.memory.at(device).peak[act];
            const int64_t with = sp.artifacts.memory.at(device).peak[act];
            RecordProperty("activations_" + std::to_string(n) + "_" + device,
                           std::to_string(without) + " -> " + std::to_string(with));
            std::printf("tp %d %s: peak activations %lld bytes without sequence_parallel, %lld with\n", n,
                        device.c_str(), static_cast<long long>(without), static_cast<long long>(with));
            EXPECT_LT(with, without) << device;
        }
        // The memory model sees the same direction, within 10%.
        const auto predicted = [&](const json& strategy) {
            const config::Experiment e = run::parse_experiment(with_strategy(j, n, strategy));
            return strategy::estimate_memory(e, strategy::model_cost(e, Shape{32}))[0].bytes[act];
        };
        const int64_t want = predicted(kSequenceParallel);
        std::printf("tp %d: predicted activations %lld bytes without sequence_parallel, %lld with\n", n,
                    static_cast<long long>(predicted(kTensorParallel)), static_cast<long long>(want));
        EXPECT_LT(want, predicted(kTensorParallel));
        const double got = static_cast<double>(sp.artifacts.memory.at("cpu:0").peak[act]);
        EXPECT_TRUE(got / static_cast<double>(want) <= 1.10 && static_cast<double>(want) / got <= 1.10)
            << "predicted " << want << ", measured " << got;
    }
}

// A sequence that does not divide over the devices is refused before the run, at data.seq_len.
TEST(SequenceParallel, RefusesASequenceThatDoesNotDivide) {
    json j = tiny_gpt();
    j["data"]["seq_len"] = 6;
    j["model"]["input"] = {6};
    j = with_strategy(j, 4, kSequenceParallel);
    const auto issues = run::validate(run::parse_experiment(j));
    ASSERT_EQ(issues.size(), 1u);
    EXPECT_EQ(issues[0].path, "data.seq_len");
    EXPECT_NE(issues[0].message.find("6 positions do not divide over 4 devices"), std::string::npos)
        << issues[0].message;
    try {
        run_it(j);
        ADD_FAILURE() << "the run started";
    } catch (const ConfigError& err) {
        EXPECT_EQ(err.path(), "data.seq_len");
        EXPECT_NE(std::string(err.what()).find("6 positions do not divide over 4 devices"), std::string::npos)
            << err.what();
    }
    // The same sequence on 2 devices (3 positions each) and without sequence parallelism on 4
    // is fine.
    j = with_strategy(j, 2, kSequenceParallel);
    EXPECT_TRUE(run::validate(run::parse_experiment(j)).empty());
    j = with_strategy(j, 4, kTensorParallel);
    EXPECT_TRUE(run::validate(run::parse_experiment(j)).empty());
}

// Splitting the vocabulary is not an option of tensor_parallel: a file that asks for it, with or
// without sequence parallelism, is refused at the key as it is read.
TEST(SequenceParallel, VocabParallelStaysRefused) {
    for (json s : {json(kTensorParallel), json(kSequenceParallel)}) {
        s["vocab_parallel"] = true;
        try {
            run::parse_experiment(with_strategy(tiny_gpt(), 2, s));
            ADD_FAILURE() << "accepted: " << s.dump();
        } catch (const ConfigError& e) {
            EXPECT_EQ(e.path(), "strategy.vocab_parallel");
            EXPECT_NE(std::string(e.what()).find("unknown key"), std::string::npos) << e.what();
        }
    }
}

}  // namespace
