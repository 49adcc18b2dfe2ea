// What the strategy tests share: device lists, running an experiment with its artifacts, and
// comparing trained parameters with the single device's.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/run/experiment_file.h"
#include "engine/run/trainer.h"
#include "engine/strategy/registry.h"

namespace strategy_testing {

using nlohmann::json;

// ["cpu:0", ..., "cpu:<n-1>"]
inline json devices(int n) {
    json d = json::array();
    for (int i = 0; i < n; ++i) d.push_back("cpu:" + std::to_string(i));
    return d;
}

// Text-like lines in a temporary file of this process, written once: the corpus of the text
// models the tests train (`tag` names the file).
inline std::string text_corpus(const std::string& tag, const std::string& line, int lines) {
    const auto p = std::filesystem::temp_directory_path() /
                   ("paralab-" + tag + "-" + std::to_string(::getpid()) + ".txt");
    std::ofstream out(p);
    for (int i = 0; i < lines; ++i) out << line << " " << i << "\n";
    return p.string();
}

// A char-GPT in miniature over `corpus`: two transformer blocks of 4 heads, D 16, ffn 16, no
// dropout, AdamW with eps 1e-6 (the tensor_parallel tests say why), 5 steps of batch 4 × 8.
inline json tiny_gpt(const std::string& name, const std::string& corpus) {
    json j = json::parse(R"({
      "paralab": 1, "seed": 7,
      "data": {"dataset": "text", "seq_len": 8, "batch_size": 4, "test_limit": 6},
      "model": {"input": [8], "layers": [
          {"type": "embedding", "vocab": 256, "dim": 16}, {"type": "position_embedding"},
          {"type": "transformer_block", "heads": 4, "ffn": 16, "repeat": 2},
          {"type": "layernorm"}, {"type": "linear", "out": 256}], "loss": "cross_entropy"},
      "optimizer": {"type": "adamw", "lr": 0.01, "weight_decay": 0.01, "eps": 1e-6},
      "train": {"epochs": 1, "max_steps": 5}
    })");
    j["name"] = name;
    j["data"]["path"] = corpus;
    return j;
}

// The spirals MLP 2-32-32-3 (1,500 samples, batch 32, seed 11) that tests of several files
// train; the run's name, optimizer and epochs are the caller's.
inline json spirals_mlp(const std::string& name, json optimizer, int epochs) {
    json j = json::parse(R"({
      "paralab": 1, "seed": 11,
      "data": {"dataset": "spirals", "samples": 1500, "classes": 3, "batch_size": 32},
      "model": {"input": [2], "layers": [
          {"type": "linear", "out": 32}, {"type": "relu"},
          {"type": "linear", "out": 32}, {"type": "relu"},
          {"type": "linear", "out": 3}], "loss": "cross_entropy"}
    })");
    j["name"] = name;
    j["optimizer"] = std::move(optimizer);
    j["train"] = {{"epochs", epochs}};
    return j;
}

inline json with_strategy(json j, int n, json strategy) {
    j["devices"] = devices(n);
    j["strategy"] = std::move(strategy);
    return j;
}

struct Result {
    paralab::config::RunSummary summary;
    paralab::run::RunArtifacts artifacts;  // host copies: valid after the run
};

inline Result run_it(const json& j, paralab::run::RunObserver* observer = nullptr,
                     paralab::run::RunControl* control = nullptr) {
    Result r;
    r.summary = paralab::run::run_experiment(paralab::run::parse_experiment(j), observer, control, 1, &r.artifacts);
    return r;
}

// Largest |a - b| over all elements, relative to 1 + the largest |a|.
inline double max_rel_diff(const std::vector<paralab::Tensor>& a, const std::vector<paralab::Tensor>& b) {
    EXPECT_EQ(a.size(), b.size());
    double diff = 0, scale = 0;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
        EXPECT_EQ(a[i].shape(), b[i].shape()) << "tensor " << i;
        if (a[i].shape() != b[i].shape()) return INFINITY;
        const float* x = a[i].data<float>();
        const float* y = b[i].data<float>();
        for (int64_t k = 0; k < a[i].numel(); ++k) {
            diff = std::max(diff, std::abs(static_cast<double>(x[k]) - y[k]));
            scale = std::max(scale, std::abs(static_cast<double>(x[k])));
        }
    }
    return diff / (1 + scale);
}

// The registry's memory model for the run `r` of experiment `j` (per-example model `input`)
// against what each device measured: per category, the predicted bytes within `factor` of the
// measured peak either way (activations within `activations_factor`); a category predicted and
// measured as 0 passes. Returns the predictions.
inline std::vector<paralab::strategy::DeviceMemoryEstimate> expect_memory_as_predicted(
    const json& j, const Result& r, const paralab::Shape& input, double factor, double activations_factor) {
    using paralab::MemCategory;
    const paralab::config::Experiment e = paralab::run::parse_experiment(j);
    auto predicted = paralab::strategy::estimate_memory(e, paralab::strategy::model_cost(e, input));
    EXPECT_EQ(predicted.size(), e.devices.size());
    for (const auto& d : predicted) {
        const auto& peak = r.artifacts.memory.at(d.device).peak;
        for (MemCategory c : {MemCategory::parameters, MemCategory::gradients, MemCategory::optimizer_state,
                              MemCategory::activations}) {
            const double want = static_cast<double>(d.bytes[static_cast<size_t>(c)]);
            const double got = static_cast<double>(peak[static_cast<size_t>(c)]);
            if (want == 0 && got == 0) continue;
            const double f = c == MemCategory::activations ? activations_factor : factor;
            EXPECT_TRUE(got / want <= f && want / got <= f)
                << d.device << " " << paralab::mem_category_name(c) << ": predicted " << want << ", measured " << got
                << " (" << (want / got - 1) * 100 << " %)";
        }
    }
    return predicted;
}

}  // namespace strategy_testing
