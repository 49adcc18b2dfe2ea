// Activation recomputation (train.recompute): the same gradients bit for bit, with every
// strategy; less activation memory, as the memory model predicts; its own timeline phase.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
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
    static const std::string path = text_corpus("recompute", "The quick brown fox jumps over the lazy dog; a stitch in time saves nine.", 200);
    return path;
}

// Embedding, positions, two transformer blocks with dropout (so that recomputed masks must
// match), a layernorm and the head: a char-GPT in miniature.
json tiny_gpt(const std::string& recompute, int devices = 1, json strategy = {{"type", "single"}}) {
    json j = json::parse(R"({
      "paralab": 1, "name": "tiny-gpt", "seed": 5,
      "data": {"dataset": "text", "seq_len": 16, "batch_size": 8, "test_limit": 4},
      "model": {"input": [16], "layers": [
          {"type": "embedding", "vocab": 256, "dim": 16}, {"type": "position_embedding"},
          {"type": "transformer_block", "heads": 2, "ffn": 32, "dropout": 0.1, "repeat": 2},
          {"type": "layernorm"}, {"type": "linear", "out": 256}], "loss": "cross_entropy"},
      "optimizer": {"type": "adamw", "lr": 0.003},
      "train": {"epochs": 1, "max_steps": 6}
    })");
    j["data"]["path"] = corpus();
    j["train"]["recompute"] = recompute;
    return with_strategy(j, devices, strategy);
}

// Records the phases of the timeline's spans.
class Phases : public run::RunObserver {
public:
    void on_span(const config::Span& s) override { seen.insert(s.phase); }
    std::set<std::string> seen;
};

int64_t peak_activations(const Result& r, const std::string& device = "cpu:0") {
    return r.artifacts.memory.at(device).peak[static_cast<size_t>(MemCategory::activations)];
}

TEST(Recompute, GradientsAreBitForBitThoseWithoutIt) {
    const Result none = run_it(tiny_gpt("none"));
    ASSERT_EQ(none.summary.status, "finished") << none.summary.error;
    for (const std::string mode : {"selective", "full"}) {
        const Result r = run_it(tiny_gpt(mode));
        ASSERT_EQ(r.summary.status, "finished") << r.summary.error;
        EXPECT_EQ(max_rel_diff(none.artifacts.parameters, r.artifacts.parameters), 0.0) << mode;
        EXPECT_EQ(r.summary.final_loss, none.summary.final_loss) << mode;
    }
}

// On 2 devices each strategy ends where it ends without recomputation, to the bit (and so as
// near the single device as it is without it).
TEST(Recompute, WorksWithEveryKindOfStrategy) {
    const json strategies[] = {{{"type", "ddp"}}, {{"type", "zero"}, {"stage", 2}},
                               {{"type", "pipeline"}, {"micro_batches", 2}}, {{"type", "model_parallel"}},
                               {{"type", "data_parallel"}}};
    for (const json& s : strategies) {
        const Result none = run_it(tiny_gpt("none", 2, s));
        ASSERT_EQ(none.summary.status, "finished") << s.dump() << ": " << none.summary.error;
        for (const std::string mode : {"selective", "full"}) {
            const Result r = run_it(tiny_gpt(mode, 2, s));
            ASSERT_EQ(r.summary.status, "finished") << s.dump() << ": " << r.summary.error;
            EXPECT_EQ(max_rel_diff(none.artifacts.parameters, r.artifacts.parameters), 0.0) << s.dump() << " " << mode;
        }
    }
}

TEST(Recompute, IsItsOwnPhaseOnTheTimeline) {
    for (const std::string mode : {"none", "selective", "full"}) {
        Phases phases;
        const Result r = run_it(tiny_gpt(mode), &phases);
        ASSERT_EQ(r.summary.status, "finished");
        EXPECT_EQ(phases.seen.count("recompute"), mode == "none" ? 0u : 1u) << mode;
        EXPECT_EQ(phases.seen.count("backward"), 1u);
    }
}

// Measured peaks fall as the memory model says they do, and the model's figures are near them.
TEST(Recompute, KeepsLessAndTheMemoryModelKnowsHowMuch) {
    int64_t measured[3], predicted[3];
    const char* modes[] = {"none", "selective", "full"};
    for (int i = 0; i < 3; ++i) {
        const json j = tiny_gpt(modes[i]);
        const Result r = run_it(j);
        ASSERT_EQ(r.summary.status, "finished");
        measured[i] = peak_activations(r);
        const config::Experiment e = run::parse_experiment(j);
        predicted[i] = strategy::model_cost(e, Shape{16}).activations_per_example() * 8 * 4;
        std::printf("recompute %-9s activations: measured %lld bytes, predicted %lld (%+.0f%%)\n", modes[i],
                    static_cast<long long>(measured[i]), static_cast<long long>(predicted[i]),
                    100.0 * (static_cast<double>(predicted[i]) / static_cast<double>(measured[i]) - 1));
    }
    EXPECT_LT(measured[1], measured[0]);
    EXPECT_LT(measured[2], measured[1]);
    EXPECT_LT(predicted[1], predicted[0]);
    EXPECT_LT(predicted[2], predicted[1]);
    for (int i = 0; i < 3; ++i)
        EXPECT_NEAR(static_cast<double>(predicted[i]) / static_cast<double>(measured[i]), 1.0, 0.10) << modes[i];
}

TEST(Recompute, BatchNormStatisticsMoveOnce) {
    json j = json::parse(R"({
      "paralab": 1, "name": "bn", "seed": 3,
      "data": {"dataset": "blobs", "samples": 96, "features": 6, "classes": 3, "batch_size": 16},
      "model": {"input": [6], "layers": [
          {"type": "linear", "out": 12}, {"type": "batchnorm"}, {"type": "relu"},
          {"type": "linear", "out": 3}], "loss": "cross_entropy"},
      "train": {"epochs": 1}
    })");
    const Result none = run_it(j);
    j["train"]["recompute"] = "full";
    const Result full = run_it(j);
    ASSERT_EQ(full.summary.status, "finished") << full.summary.error;
    EXPECT_EQ(max_rel_diff(none.artifacts.parameters, full.artifacts.parameters), 0.0);
    ASSERT_FALSE(none.artifacts.buffers.empty());
    EXPECT_EQ(max_rel_diff(none.artifacts.buffers, full.artifacts.buffers), 0.0);
}

TEST(Recompute, AnUnknownModeIsNamed) {
    json j = tiny_gpt("partial");
    try {
        run::parse_experiment(j);
        FAIL() << "recompute \"partial\" was accepted";
    } catch (const ConfigError& e) {
        EXPECT_EQ(e.path(), "train.recompute");
        EXPECT_NE(std::string(e.what()).find("selective"), std::string::npos) << e.what();
    }
}

}  // namespace
