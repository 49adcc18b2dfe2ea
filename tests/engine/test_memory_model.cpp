// The registry's memory model against what every strategy measures on the char-GPT example
// (resources/examples/gpt-char.paralab.json: 4 blocks of width 128, 64 positions, a batch of 12)
// on 4 virtual devices for two steps, with and without train.recompute: per device and category
// (parameters, gradients, optimizer state, activations), the predicted bytes are within 10 % of
// the measured peak. The same for llama-char and moe-char under a few strategies.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "engine/run/experiment_file.h"
#include "strategy_testing.h"

using namespace paralab;
using namespace strategy_testing;

namespace {

const std::string& corpus() {
    static const std::string path =
        text_corpus("memory-model", "Every byte predicted, every byte measured, side by side.", 200);
    return path;
}

// Example `file` on the test corpus for two steps, run with `strategy` (its "recompute", if any,
// is train.recompute) on `devices`: each device's measured peaks within 10% of the prediction.
void expect_example_as_predicted(const std::string& file, json strategy, int devices) {
    std::ifstream in(std::string(PARALAB_EXAMPLES_DIR) + "/" + file);
    json j = json::parse(in);
    j["data"]["path"] = corpus();
    j["data"]["test_limit"] = 4;
    j["train"] = {{"epochs", 1}, {"max_steps", 2}};
    if (strategy.contains("recompute")) {
        j["train"]["recompute"] = strategy["recompute"];
        strategy.erase("recompute");
    }
    j = with_strategy(j, devices, strategy);
    const Result r = run_it(j);
    ASSERT_EQ(r.summary.status, "finished") << r.summary.error;
    expect_memory_as_predicted(j, r, run::model_input_shape(run::parse_experiment(j)), 1.10, 1.10);
}

// A test's name from its strategy's JSON: its letters and digits.
std::string param_name(const ::testing::TestParamInfo<const char*>& info) {
    std::string name;
    for (char c : std::string(info.param))
        if (std::isalnum(static_cast<unsigned char>(c))) name += c;
    return name;
}

class MemoryModel : public ::testing::TestWithParam<const char*> {};

TEST_P(MemoryModel, PredictsEveryDeviceWithinTenPercentOnTheGptExample) {
    const json strategy = json::parse(GetParam());
    expect_example_as_predicted("gpt-char.paralab.json", strategy, strategy["type"] == "single" ? 1 : 4);
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, MemoryModel,
    ::testing::Values(R"({"type":"single"})", R"({"type":"data_parallel"})", R"({"type":"ddp"})",
                      R"({"type":"zero","stage":1})", R"({"type":"zero","stage":2})", R"({"type":"zero","stage":3})",
                      R"({"type":"pipeline","schedule":"gpipe","micro_batches":4})",
                      R"({"type":"pipeline","schedule":"1f1b","micro_batches":4})",
                      R"({"type":"pipeline","schedule":"1f1b","micro_batches":12})",
                      R"({"type":"pipeline","schedule":"gpipe","micro_batches":12})",
                      R"({"type":"pipeline","schedule":"gpipe","micro_batches":1})",
                      R"({"type":"single","recompute":"full"})", R"({"type":"single","recompute":"selective"})",
                      R"({"type":"pipeline","schedule":"1f1b","micro_batches":4,"recompute":"selective"})",
                      R"({"type":"hybrid","dp":2,"tp":2,"zero":1,"recompute":"full"})",
                      R"({"type":"hybrid","tp":2,"pp":2,"micro_batches":2,"recompute":"selective"})",
                      R"({"type":"tensor_parallel"})", R"({"type":"tensor_parallel","sequence_parallel":true})",
                      R"({"type":"hybrid","dp":2,"tp":2})", R"({"type":"hybrid","dp":2,"tp":2,"zero":1})",
                      R"({"type":"hybrid","dp":2,"tp":2,"zero":2})", R"({"type":"hybrid","dp":2,"tp":2,"zero":3})",
                      R"({"type":"hybrid","dp":2,"tp":2,"sequence_parallel":true})",
                      R"({"type":"hybrid","tp":2,"pp":2,"micro_batches":2})",
                      R"({"type":"hybrid","dp":2,"pp":2,"zero":1,"micro_batches":2})",
                      R"({"type":"hybrid","dp":2,"pp":2,"micro_batches":2,"schedule":"interleaved_1f1b","interleave":2})"),
    param_name);

// llama-char (resources/examples/llama-char.paralab.json): grouped-query attention with RoPE,
// RMSNorm and the SwiGLU MLP.
class LlamaMemoryModel : public ::testing::TestWithParam<const char*> {};

TEST_P(LlamaMemoryModel, PredictsEveryDeviceWithinTenPercentOnTheLlamaExample) {
    const json strategy = json::parse(GetParam());
    // tensor_parallel splits over every device, and the 2 key/value heads divide over 2.
    const int devices = strategy["type"] == "single" ? 1 : strategy["type"] == "tensor_parallel" ? 2 : 4;
    expect_example_as_predicted("llama-char.paralab.json", strategy, devices);
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, LlamaMemoryModel,
    ::testing::Values(R"({"type":"single"})", R"({"type":"ddp"})", R"({"type":"zero","stage":2})",
                      R"({"type":"single","recompute":"selective"})", R"({"type":"tensor_parallel"})",
                      R"({"type":"tensor_parallel","sequence_parallel":true})", R"({"type":"hybrid","dp":2,"tp":2})"),
    param_name);

// moe-char (resources/examples/moe-char.paralab.json): mixtures of 8 SwiGLU experts, top 2, and
// a shared expert; every expert's parameters, the routed tokens' activations (dropless: k rows
// per token).
class MoEMemoryModel : public ::testing::TestWithParam<const char*> {};

TEST_P(MoEMemoryModel, PredictsEveryDeviceWithinTenPercentOnTheMoEExample) {
    const json strategy = json::parse(GetParam());
    const int devices = strategy["type"] == "single" ? 1 : 2;
    expect_example_as_predicted("moe-char.paralab.json", strategy, devices);
}

INSTANTIATE_TEST_SUITE_P(Strategies, MoEMemoryModel,
                         ::testing::Values(R"({"type":"single"})", R"({"type":"ddp"})",
                                           R"({"type":"tensor_parallel"})"),
                         param_name);

}  // namespace
