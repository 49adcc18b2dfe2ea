// The experiment file contract of docs/experiment-format.md: valid files parse, and every bad value is an
// error naming its JSON path and what was expected.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <tuple>
#include <utility>

#include "engine/nn/model.h"
#include "engine/device/device.h"
#include "engine/run/experiment_file.h"
#include "engine/run/trainer.h"

using namespace paralab;
using nlohmann::json;

namespace {

json minimal() {
    return json::parse(R"({
      "paralab": 1, "name": "t", "seed": 3,
      "data": {"dataset": "spirals", "batch_size": 16},
      "model": {"input": [2], "layers": [{"type": "linear", "out": 3}], "loss": "cross_entropy"}
    })");
}

TEST(Experiment, MinimalFileGetsDefaults) {
    const auto e = run::parse_experiment(minimal());
    EXPECT_EQ(e.name, "t");
    EXPECT_EQ(e.seed, 3u);
    EXPECT_EQ(e.devices, std::vector<std::string>{"cpu:0"});
    EXPECT_EQ(e.strategy.type, "single");
    EXPECT_EQ(e.optimizer.type, "sgd");
    EXPECT_EQ(e.train.epochs, 1);
    EXPECT_FALSE(e.train.max_steps.has_value());
    ASSERT_TRUE(e.input.has_value());
    EXPECT_EQ(*e.input, (Shape{2}));
}

// A rotating straggler: read, written back, and a wrong type refused with its path.
TEST(Experiment, StragglerRotates) {
    json j = minimal();
    j["devices"] = {"cpu:0", "cpu:1", "cpu:2"};
    j["strategy"] = {{"type", "ddp"}, {"straggler", {{"device", "cpu:1"}, {"delay_ms", 20}, {"rotate", true}}}};
    const auto e = run::parse_experiment(j);
    EXPECT_EQ(e.strategy.straggler_device, "cpu:1");
    EXPECT_TRUE(e.strategy.straggler_rotate);
    const json canonical = run::to_json(e);
    EXPECT_EQ(canonical["strategy"]["straggler"]["rotate"], true);
    EXPECT_TRUE(run::parse_experiment(canonical).strategy.straggler_rotate);
    // Not rotating: the key is not written (files without it read as before).
    j["strategy"]["straggler"].erase("rotate");
    EXPECT_FALSE(run::to_json(run::parse_experiment(j))["strategy"]["straggler"].contains("rotate"));
    j["strategy"]["straggler"]["rotate"] = "yes";
    try {
        (void)run::parse_experiment(j);
        ADD_FAILURE() << "a string rotate was accepted";
    } catch (const ConfigError& err) {
        EXPECT_NE(std::string(err.what()).find("strategy.straggler.rotate"), std::string::npos) << err.what();
    }
}

TEST(Experiment, EveryShippedExampleParsesAndRoundTrips) {
    int count = 0;
    for (const auto& entry : std::filesystem::directory_iterator(PARALAB_EXAMPLES_DIR)) {
        if (entry.path().string().find(".paralab.json") == std::string::npos) continue;
        ++count;
        SCOPED_TRACE(entry.path().string());
        const auto e = run::load_experiment(entry.path().string());
        const json canonical = run::to_json(e);
        EXPECT_EQ(run::to_json(run::parse_experiment(canonical)), canonical);
    }
    EXPECT_GE(count, 1);
}

// nn::summarize reads every shipped model's shapes, parameters and FLOPs as building it does,
// and allocates nothing: a model of 10^10 parameters is summarised at once.
TEST(Experiment, SummarizeMatchesTheBuiltModelAndAllocatesNothing) {
    for (const auto& entry : std::filesystem::directory_iterator(PARALAB_EXAMPLES_DIR)) {
        if (entry.path().string().find(".paralab.json") == std::string::npos) continue;
        SCOPED_TRACE(entry.path().string());
        const auto e = run::load_experiment(entry.path().string());
        if (!e.input) continue;  // the shape comes from a data set that may not be installed
        auto device = make_cpu_device(0);
        nn::Model model(e.layers, *e.input, e.loss, DType::f32, *device);
        const nn::ModelSummary s = nn::summarize(e.layers, *e.input, e.loss);
        const auto rows = model.summary();
        ASSERT_EQ(s.layers.size(), rows.size());
        for (size_t i = 0; i < rows.size(); ++i) {
            EXPECT_EQ(s.layers[i].path, rows[i].path);
            EXPECT_EQ(s.layers[i].output, rows[i].output);
            EXPECT_EQ(s.layers[i].parameters, rows[i].parameters);
            EXPECT_EQ(s.layers[i].flops, rows[i].flops);
        }
        EXPECT_EQ(s.parameters, model.parameter_count());
        EXPECT_EQ(s.output, model.output_shape());
    }
    const std::vector<nn::LayerSpec> huge{{.type = "linear", .out = 100000}, {.type = "relu"},
                                          {.type = "linear", .out = 10}};
    const nn::ModelSummary s = nn::summarize(huge, Shape{100000}, "cross_entropy");
    EXPECT_EQ(s.parameters, int64_t{100000} * 100000 + 100000 + 100000 * 10 + 10);
    EXPECT_EQ(meta_device().allocator().stats().peak_total, 0);
    // A size that overflows a 64-bit count is an error naming the layer, never a wrapped count.
    try {
        nn::summarize({{.type = "flatten"}, {.type = "linear", .out = 2}}, Shape{int64_t{1} << 31, int64_t{1} << 31, 4},
                      "cross_entropy");
        FAIL() << "2^64 elements fit";
    } catch (const ShapeError& err) {
        EXPECT_EQ(err.path(), "model.layers[0]");
        EXPECT_NE(std::string(err.what()).find("more elements than a 64-bit count holds"), std::string::npos) << err.what();
    }
    // A shape error names its layer by path, as building does.
    try {
        nn::summarize({{.type = "conv2d", .out_channels = 4, .kernel = 3}}, Shape{10}, "mse");
        FAIL() << "a conv2d on a vector built";
    } catch (const ShapeError& err) {
        EXPECT_EQ(err.path(), "model.layers[0]");
    }
}

struct BadCase {
    const char* name;
    const char* pointer;  // JSON pointer of the value to replace ("" = remove key `remove`)
    json value;
    const char* expected;  // a piece of the message
};

class BadExperiment : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadExperiment, NamesThePathAndTheProblem) {
    const auto& c = GetParam();
    json j = minimal();
    if (c.value.is_discarded()) j.erase(std::string(c.pointer).substr(1));
    else j[json::json_pointer(c.pointer)] = c.value;
    try {
        run::parse_experiment(j);
        FAIL() << "accepted: " << j.dump();
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find(c.expected), std::string::npos)
            << "message: " << e.what();
    }
}

INSTANTIATE_TEST_SUITE_P(
    Table, BadExperiment,
    ::testing::Values(
        BadCase{"negative_out", "/model/layers/0/out", -4,
                "model.layers[0].out: expected a positive integer, got -4"},
        BadCase{"string_out", "/model/layers/0/out", "ten",
                "model.layers[0].out: expected a positive integer, got \"ten\""},
        BadCase{"unknown_layer", "/model/layers/0/type", "lineer",
                "model.layers[0].type: unknown value \"lineer\" (did you mean \"linear\"?)"},
        BadCase{"misspelled_key", "/data/batch_sise", 8,
                "data.batch_sise: unknown key (did you mean \"batch_size\"?)"},
        BadCase{"wrong_variant_key", "/model/layers/0/kernel", 3,
                "model.layers[0].kernel: not an option of a linear layer"},
        BadCase{"unknown_strategy", "/strategy", json{{"type", "ddq"}},
                "strategy.type: unknown value \"ddq\" (did you mean \"ddp\"?)"},
        BadCase{"zero_batch", "/data/batch_size", 0, "data.batch_size: expected a positive integer, got 0"},
        BadCase{"bad_dataset", "/data/dataset", "imagenet", "data.dataset: unknown value \"imagenet\""},
        BadCase{"bad_device", "/devices", json{"cpu:0", "tpu:1"}, "devices[1]: unknown device 'tpu:1'"},
        BadCase{"empty_devices", "/devices", json::array(), "devices: expected a non-empty array"},
        BadCase{"negative_lr", "/optimizer", json{{"type", "sgd"}, {"lr", -1}},
                "optimizer.lr: expected a positive number, got -1"},
        BadCase{"momentum_one", "/optimizer", json{{"type", "sgd"}, {"momentum", 1.0}},
                "optimizer.momentum: expected a number in [0, 1)"},
        BadCase{"nesterov_without_momentum", "/optimizer", json{{"type", "sgd"}, {"nesterov", true}},
                "optimizer.nesterov: needs a momentum greater than 0"},
        BadCase{"bad_betas", "/optimizer", json{{"type", "adam"}, {"betas", {0.9}}},
                "optimizer.betas: expected two numbers in [0, 1)"},
        BadCase{"zero_stage_4", "/strategy", json{{"type", "zero"}, {"stage", 4}},
                "strategy.stage: expected an integer from 1 to 3, got 4"},
        BadCase{"bad_precision", "/train", json{{"precision", "fp8"}}, "train.precision: unknown value \"fp8\""},
        BadCase{"float_epochs", "/train", json{{"epochs", 1.5}}, "train.epochs: expected a positive integer, got 1.5"},
        BadCase{"dropout_p_one", "/model/layers/0", json{{"type", "dropout"}, {"p", 1.0}},
                "model.layers[0].p: expected a number in [0, 1)"},
        BadCase{"residual_empty", "/model/layers/0", json{{"type", "residual"}, {"layers", json::array()}},
                "model.layers[0].layers: expected a non-empty array"},
        BadCase{"nested_error_path", "/model/layers/0",
                json{{"type", "residual"}, {"layers", {{{"type", "linear"}, {"out", 0}}}}},
                "model.layers[0].layers[0].out: expected a positive integer, got 0"},
        BadCase{"layers_not_array", "/model/layers", "linear", "model.layers: expected a non-empty array"},
        BadCase{"newer_format", "/paralab", 2, "newer than this ParaLab reads"},
        BadCase{"missing_format", "/paralab", json::value_t::discarded, "paralab: missing"},
        BadCase{"missing_data", "/data", json::value_t::discarded, "data: missing"},
        BadCase{"unknown_top_level", "/modle", json::object(), "modle: unknown key (did you mean \"model\"?)"},
        BadCase{"straggler_device", "/strategy",
                json{{"type", "ddp"}, {"straggler", {{"device", "cpu"}, {"delay_ms", -1}}}},
                "strategy.straggler.delay_ms: expected a number in [0, 60000], got -1"},
        BadCase{"straggler_of_a_process", "/strategy",
                json{{"type", "ddp"}, {"straggler", {{"device", "x3/cpu:0"}, {"delay_ms", 1}}}},
                "strategy.straggler.device: expected a device such as \"cpu:1\", or \"r2/cpu:0\""},
        BadCase{"straggler_of_a_process_bad_device", "/strategy",
                json{{"type", "ddp"}, {"straggler", {{"device", "r3/gpu:0"}, {"delay_ms", 1}}}},
                "strategy.straggler.device: "}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(Experiment, BrokenJsonNamesFileLineAndColumn) {
    const auto path = std::filesystem::temp_directory_path() / "paralab_broken.paralab.json";
    {
        std::ofstream out(path);
        out << "{\n  \"paralab\": 1,\n  \"name\": \"x\"\n  \"seed\": 1\n}\n";
    }
    try {
        run::load_experiment(path.string());
        FAIL();
    } catch (const ConfigError& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find(path.string() + ":4:"), std::string::npos) << msg;
        EXPECT_NE(msg.find("not valid JSON"), std::string::npos) << msg;
    }
    std::filesystem::remove(path);
}

TEST(Experiment, MissingFileIsAClearError) {
    try {
        run::load_experiment("/nonexistent/x.paralab.json");
        FAIL();
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos);
    }
}

// The text data set's keys: defaults, the canonical JSON, and the input shape known from
// seq_len alone (no corpus read: the path here does not exist).
TEST(Experiment, TextDataKeys) {
    json j = minimal();
    j["data"] = {{"dataset", "text"}, {"path", "/nonexistent/corpus"}, {"seq_len", 64}};
    j["model"].erase("input");
    auto e = run::parse_experiment(j);
    EXPECT_EQ(e.data.dataset, "text");
    EXPECT_EQ(e.data.seq_len, 64);
    EXPECT_DOUBLE_EQ(e.data.val_fraction, 0.1);
    EXPECT_EQ(e.data.tokenizer, "byte");
    EXPECT_EQ(run::model_input_shape(e), (Shape{64}));
    const json canonical = run::to_json(e);
    EXPECT_EQ(canonical["data"]["val_fraction"], 0.1);
    EXPECT_EQ(canonical["data"]["tokenizer"], "byte");
    j["data"]["val_fraction"] = 0.25;
    e = run::parse_experiment(j);
    EXPECT_DOUBLE_EQ(e.data.val_fraction, 0.25);
    EXPECT_EQ(run::to_json(run::parse_experiment(run::to_json(e))), run::to_json(e));
    EXPECT_TRUE(run::validate(e).empty());

    auto error_of = [&](const json& data) -> std::pair<std::string, std::string> {
        json bad = minimal();
        bad["data"] = data;
        try {
            run::parse_experiment(bad);
        } catch (const ConfigError& err) {
            return {err.path(), err.what()};
        }
        ADD_FAILURE() << "accepted: " << bad.dump();
        return {};
    };
    auto [path, msg] = error_of({{"dataset", "text"}});
    EXPECT_EQ(path, "data.seq_len");
    EXPECT_NE(msg.find("data.seq_len: missing; the text data set needs seq_len"), std::string::npos) << msg;
    for (double bad : {0.0, 1.0, 1.5}) {
        std::tie(path, msg) = error_of({{"dataset", "text"}, {"seq_len", 8}, {"val_fraction", bad}});
        EXPECT_EQ(path, "data.val_fraction");
        EXPECT_NE(msg.find("expected a number in (0, 1"), std::string::npos) << msg;
    }
    std::tie(path, msg) = error_of({{"dataset", "text"}, {"seq_len", 8}, {"tokenizer", "bpe"}});
    EXPECT_EQ(path, "data.tokenizer");
    std::tie(path, msg) = error_of({{"dataset", "spirals"}, {"val_fraction", 0.5}});
    EXPECT_NE(msg.find("data.val_fraction: not an option of the spirals data set"), std::string::npos) << msg;
}

// model.input, when given, must be the text examples' [seq_len].
TEST(Experiment, TextModelInputMustBeSeqLen) {
    const auto corpus = std::filesystem::temp_directory_path() /
                        ("paralab_text_corpus_" + std::to_string(getpid()) + ".txt");
    {
        std::ofstream out(corpus);
        for (int i = 0; i < 40; ++i) out << "the quick brown fox jumps over the lazy dog\n";
    }
    json j = minimal();
    j["data"] = {{"dataset", "text"}, {"path", corpus.string()}, {"seq_len", 16}};
    j["model"] = json::parse(R"({"input": [8], "layers": [{"type": "embedding", "vocab": 256, "dim": 4},
                                                           {"type": "linear", "out": 256}]})");
    try {
        run::check_before_training(run::parse_experiment(j));
        ADD_FAILURE() << "accepted model.input [8] with seq_len 16";
    } catch (const ConfigError& err) {
        EXPECT_EQ(err.path(), "model.input");
        EXPECT_NE(std::string(err.what()).find("[8] must be [T] = [seq_len] = [16] for the text data set"),
                  std::string::npos)
            << err.what();
    }
    j["model"]["input"] = {16};
    EXPECT_EQ(run::check_before_training(run::parse_experiment(j)).input, (Shape{16}));
    std::filesystem::remove(corpus);
}

}  // namespace
