// A model's tensors by name (engine/io/weights.h), its weights through a safetensors file, and
// `paralab run --init`: a run started from another run's final weights evaluates as that run
// ended, under every strategy, and a file that does not fit is refused before any step.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>

#include "engine/device/device.h"
#include "engine/io/safetensors.h"
#include "engine/io/weights.h"
#include "engine/nn/model.h"
#include "engine/run/experiment_file.h"
#include "engine/run/trainer.h"
#include "engine/util/error.h"
#include "engine/util/rng.h"
#include "strategy_testing.h"

namespace fs = std::filesystem;
using namespace paralab;
using nlohmann::json;

namespace {

#define EXPECT_CONTAINS(text, part) \
    EXPECT_NE(std::string(text).find(part), std::string::npos) << "message: " << (text)

class TempDir {
public:
    TempDir() {
        static std::atomic<int> counter{0};
        m_path = fs::temp_directory_path() /
                 ("paralab_weights_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
        fs::create_directories(m_path);
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(m_path, ec);
    }
    std::string file(const std::string& name) const { return (m_path / name).string(); }

private:
    fs::path m_path;
};

nn::LayerSpec spec(std::string type) {
    nn::LayerSpec s;
    s.type = std::move(type);
    return s;
}

nn::LayerSpec linear(int64_t out, int64_t repeat = 1) {
    nn::LayerSpec s = spec("linear");
    s.out = out;
    s.repeat = repeat;
    return s;
}

// linear x2 (a repeat), relu, residual(linear, relu, linear to 6: a projection), batchnorm.
std::vector<nn::LayerSpec> mlp_layers() {
    nn::LayerSpec res = spec("residual");
    res.layers = {linear(4), spec("relu"), linear(6)};
    return {linear(4, 2), spec("relu"), res, spec("batchnorm"), linear(3)};
}

std::vector<nn::LayerSpec> gpt_layers() {
    nn::LayerSpec emb = spec("embedding");
    emb.vocab = 16;
    emb.dim = 8;
    nn::LayerSpec block = spec("transformer_block");
    block.heads = 2;
    block.ffn = 16;
    return {emb, spec("position_embedding"), block, spec("layernorm"), linear(16)};
}

std::vector<float> values(const Tensor& t) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    std::memcpy(v.data(), t.raw(), v.size() * sizeof(float));
    return v;
}

std::vector<std::vector<float>> all_values(nn::Model& m) {
    std::vector<std::vector<float>> out;
    for (nn::Param* p : m.parameters()) out.push_back(values(p->value));
    for (const Tensor& b : m.buffers()) out.push_back(values(b));
    return out;
}

}  // namespace

TEST(Weights, NamesFollowTheStateDictOfTheLayerTree) {
    auto dev = make_cpu_device(0);
    nn::Model m(mlp_layers(), Shape{3}, "cross_entropy", DType::f32, *dev);
    EXPECT_EQ(io::parameter_names(m),
              (std::vector<std::string>{"layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias",
                                        "layers.3.layers.0.weight", "layers.3.layers.0.bias",
                                        "layers.3.layers.2.weight", "layers.3.layers.2.bias",
                                        "layers.3.projection.weight", "layers.3.projection.bias", "layers.4.weight", "layers.4.bias",
                                        "layers.5.weight", "layers.5.bias"}));
    EXPECT_EQ(io::buffer_names(m), (std::vector<std::string>{"layers.4.running_mean", "layers.4.running_var"}));

    nn::Model gpt(gpt_layers(), Shape{4}, "cross_entropy", DType::f32, *dev);
    EXPECT_EQ(io::parameter_names(gpt),
              (std::vector<std::string>{
                  "layers.0.weight", "layers.1.weight",
                  "layers.2.layers.0.layers.0.weight", "layers.2.layers.0.layers.0.bias",
                  "layers.2.layers.0.layers.1.qkv.weight", "layers.2.layers.0.layers.1.qkv.bias",
                  "layers.2.layers.0.layers.1.proj.weight", "layers.2.layers.0.layers.1.proj.bias",
                  "layers.2.layers.1.layers.0.weight", "layers.2.layers.1.layers.0.bias",
                  "layers.2.layers.1.layers.1.weight", "layers.2.layers.1.layers.1.bias",
                  "layers.2.layers.1.layers.3.weight", "layers.2.layers.1.layers.3.bias",
                  "layers.3.weight", "layers.3.bias", "layers.4.weight", "layers.4.bias"}));

    // A stage names its layers by their index in the whole model.
    auto stage = nn::Model::stage(mlp_layers(), 3, 5, Shape{4}, "cross_entropy", DType::f32, *dev);
    EXPECT_EQ(io::parameter_names(*stage).front(), "layers.3.layers.0.weight");
    EXPECT_EQ(io::parameter_names(*stage).back(), "layers.4.bias");
}

TEST(Weights, WrittenWeightsLoadIntoADifferentlyInitialisedModel) {
    TempDir dir;
    auto dev = make_cpu_device(0);
    for (const auto& layers : {mlp_layers(), gpt_layers()}) {
        const Shape input = layers.front().type == "embedding" ? Shape{4} : Shape{3};
        nn::Model a(layers, input, "cross_entropy", DType::f32, *dev);
        Rng ra(1);
        a.reset_parameters(ra);
        for (const Tensor& b : a.buffers()) b.fill(0.5);
        const std::string path = dir.file("a.safetensors");
        io::write_weights(path, a, {{"source", "test"}});
        EXPECT_EQ(io::SafetensorsFile::read(path).metadata().at("source"), "test");

        nn::Model b(layers, input, "cross_entropy", DType::f32, *dev);
        Rng rb(2);
        b.reset_parameters(rb);
        ASSERT_NE(all_values(a), all_values(b));
        io::load_weights(b, path);
        EXPECT_EQ(all_values(a), all_values(b));

        // Into an f64 model: converted.
        nn::Model c(layers, input, "cross_entropy", DType::f64, *dev);
        io::load_weights(c, path);
        const Tensor& w = c.parameters().front()->value;
        EXPECT_EQ(w.data<double>()[0], double(a.parameters().front()->value.data<float>()[0]));
    }
}

TEST(Weights, ConvertsHalfAndDoublePrecisionFiles) {
    TempDir dir;
    auto dev = make_cpu_device(0);
    nn::Model m({linear(2)}, Shape{2}, "mse", DType::f32, *dev);
    // weight [2, 2] as F16: 1.5, -2, 2^-24 (the smallest subnormal), 65504; bias [2] as BF16: 0.25, -3.
    const uint16_t w16[] = {0x3e00, 0xc000, 0x0001, 0x7bff};
    const uint16_t b16[] = {0x3e80, 0xc040};
    const std::string path = dir.file("half.safetensors");
    io::write_safetensors(path, {{"layers.0.weight", io::StDType::F16, {2, 2}, w16, 8},
                                 {"layers.0.bias", io::StDType::BF16, {2}, b16, 4}});
    io::load_weights(m, path);
    EXPECT_EQ(values(m.parameters()[0]->value), (std::vector<float>{1.5f, -2.0f, 0x1p-24f, 65504.0f}));
    EXPECT_EQ(values(m.parameters()[1]->value), (std::vector<float>{0.25f, -3.0f}));

    const double w64[] = {0.1, 0.2, 0.3, 0.4}, b64[] = {1, 2};
    io::write_safetensors(path, {{"layers.0.weight", io::StDType::F64, {2, 2}, w64, 32},
                                 {"layers.0.bias", io::StDType::F64, {2}, b64, 16}});
    io::load_weights(m, path);
    EXPECT_EQ(values(m.parameters()[0]->value), (std::vector<float>{0.1f, 0.2f, 0.3f, 0.4f}));
}

// Each mismatch is a ConfigError at "--init" naming the file, the tensor and both shapes, and
// no parameter changes.
TEST(Weights, RefusesAFileThatDoesNotFitTheModelAndChangesNothing) {
    TempDir dir;
    auto dev = make_cpu_device(0);
    nn::Model m({linear(2), spec("relu"), linear(3)}, Shape{4}, "cross_entropy", DType::f32, *dev);
    Rng rng(3);
    m.reset_parameters(rng);
    const auto before = all_values(m);
    const std::vector<float> w0(8, 1.0f), b0(2, 1.0f), w2(6, 1.0f), b2(3, 1.0f), bad(12, 1.0f);
    const std::vector<int64_t> ids = {1, 2};
    using T = io::StTensor;
    const T good_w0{"layers.0.weight", io::StDType::F32, {2, 4}, w0.data(), 32};
    const T good_b0{"layers.0.bias", io::StDType::F32, {2}, b0.data(), 8};
    const T good_w2{"layers.2.weight", io::StDType::F32, {3, 2}, w2.data(), 24};
    const T good_b2{"layers.2.bias", io::StDType::F32, {3}, b2.data(), 12};
    struct Case {
        const char* what;
        std::vector<T> tensors;
        const char* message;
    };
    const std::vector<Case> cases = {
        {"missing", {good_w0, good_b0, good_w2},
         "no tensor \"layers.2.bias\" (the model's parameter of shape [3])"},
        {"extra", {good_w0, good_b0, good_w2, good_b2, {"layers.9.weight", io::StDType::F32, {3}, b2.data(), 12}},
         "tensor \"layers.9.weight\" [3] is not a parameter of this model"},
        {"shape", {good_w0, good_b0, {"layers.2.weight", io::StDType::F32, {3, 4}, bad.data(), 48}, good_b2},
         "tensor \"layers.2.weight\" has shape [3, 4] in the file, the model's is [3, 2]"},
        {"integers", {good_w0, {"layers.0.bias", io::StDType::I64, {2}, ids.data(), 16}, good_w2, good_b2},
         "tensor \"layers.0.bias\" holds I64, not floating-point numbers"},
    };
    const std::string path = dir.file("bad.safetensors");
    for (const Case& c : cases) {
        SCOPED_TRACE(c.what);
        io::write_safetensors(path, c.tensors);
        try {
            io::load_weights(m, path);
            ADD_FAILURE() << "loaded";
        } catch (const ConfigError& e) {
            EXPECT_EQ(e.path(), "--init");
            EXPECT_CONTAINS(e.what(), path + ": ");
            EXPECT_CONTAINS(e.what(), c.message);
        }
        EXPECT_EQ(all_values(m), before);
    }
    try {
        io::load_weights(m, dir.file("absent.safetensors"));
        ADD_FAILURE() << "loaded";
    } catch (const ConfigError& e) {
        EXPECT_EQ(e.path(), "--init");
        EXPECT_CONTAINS(e.what(), "absent.safetensors: cannot open: No such file or directory");
    }
}

// Weights to start from must be numbers: a NaN or an infinity in any tensor is refused, naming
// the tensor and the element; so is a file whose checksum does not match (a flipped bit), and a
// FIFO given as the file (refused at once: its open would block until a writer came). No
// parameter changes.
TEST(Weights, RefusesNonFiniteCorruptAndIrregularFilesAndChangesNothing) {
    TempDir dir;
    auto dev = make_cpu_device(0);
    nn::Model m({linear(2), spec("relu"), linear(3)}, Shape{4}, "cross_entropy", DType::f32, *dev);
    Rng rng(3);
    m.reset_parameters(rng);
    const auto before = all_values(m);
    const std::vector<float> w0(8, 1.0f), w2(6, 1.0f), b2(3, 1.0f);
    std::vector<float> nan_b0 = {1.0f, NAN};
    const std::vector<double> inf_b0 = {0.0, -INFINITY};
    const uint16_t inf16_b0[] = {0x3c00, 0x7c00}, nan_bf16_b0[] = {0x7fc0, 0x3f80};
    using T = io::StTensor;
    const T good_w0{"layers.0.weight", io::StDType::F32, {2, 4}, w0.data(), 32};
    const T good_w2{"layers.2.weight", io::StDType::F32, {3, 2}, w2.data(), 24};
    const T good_b2{"layers.2.bias", io::StDType::F32, {3}, b2.data(), 12};
    struct Case {
        const char* what;
        T b0;
        const char* message;
    };
    const std::vector<Case> cases = {
        {"F32 NaN", {"layers.0.bias", io::StDType::F32, {2}, nan_b0.data(), 8}, "tensor \"layers.0.bias\" holds NaN at element 1"},
        {"F64 -inf", {"layers.0.bias", io::StDType::F64, {2}, inf_b0.data(), 16}, "tensor \"layers.0.bias\" holds -inf at element 1"},
        {"F16 +inf", {"layers.0.bias", io::StDType::F16, {2}, inf16_b0, 4}, "tensor \"layers.0.bias\" holds +inf at element 1"},
        {"BF16 NaN", {"layers.0.bias", io::StDType::BF16, {2}, nan_bf16_b0, 4}, "tensor \"layers.0.bias\" holds NaN at element 0"},
    };
    const std::string path = dir.file("w.safetensors");
    auto init_error = [&] {
        try {
            io::load_weights(m, path);
        } catch (const ConfigError& e) {
            EXPECT_EQ(e.path(), "--init");
            return std::string(e.what());
        }
        return std::string("loaded");
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.what);
        io::write_safetensors(path, {good_w0, c.b0, good_w2, good_b2});
        const std::string error = init_error();
        EXPECT_CONTAINS(error, path + ": " + c.message);
        EXPECT_EQ(all_values(m), before);
    }

    // A bit flipped in the last weight (1.0f -> 1.0000001f: a finite number, a plausible weight).
    nan_b0[1] = 2.0f;
    io::write_safetensors(path, {good_w0, {"layers.0.bias", io::StDType::F32, {2}, nan_b0.data(), 8}, good_w2, good_b2});
    {
        std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
        f.seekg(-4, std::ios::end);
        char byte = 0;
        f.read(&byte, 1);
        f.seekp(-4, std::ios::end);
        byte ^= 1;
        f.write(&byte, 1);
    }
    EXPECT_CONTAINS(init_error(), path + ": the checksum of the data does not match");
    EXPECT_EQ(all_values(m), before);

    // A FIFO: refused without waiting for a writer (a hang fails the test at the ceiling).
    const std::string fifo = dir.file("fifo.safetensors");
    ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
    auto done = std::async(std::launch::async, [&] {
        try {
            io::load_weights(m, fifo);
        } catch (const ConfigError& e) {
            return std::string(e.what());
        }
        return std::string("loaded");
    });
    if (done.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
        // Opening the write end and closing it lets the blocked reader see the end of the file.
        const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
        if (fd >= 0) ::close(fd);
        ADD_FAILURE() << "load_weights blocked on a FIFO";
    }
    EXPECT_CONTAINS(done.get(), fifo + " is a FIFO, not a regular file");
    EXPECT_EQ(all_values(m), before);
}

namespace {

json spirals(json strategy, int devices, double lr) {
    // No batchnorm: its running statistics move in training whatever the learning rate.
    json j = strategy_testing::spirals_mlp("init-test", {{"type", "sgd"}, {"lr", lr}}, 2);
    return strategy_testing::with_strategy(j, devices, std::move(strategy));
}

// The trained parameters and buffers of `r`, written under the names of the experiment's model.
void write_final_weights(const json& j, const strategy_testing::Result& r, const std::string& path) {
    const config::Experiment e = run::parse_experiment(j);
    auto dev = make_cpu_device(0);
    nn::Model m(e.layers, Shape{2}, e.loss, DType::f32, *dev);
    const auto params = m.parameters();
    const auto buffers = m.buffers();
    ASSERT_EQ(params.size(), r.artifacts.parameters.size());
    ASSERT_EQ(buffers.size(), r.artifacts.buffers.size());
    for (size_t i = 0; i < params.size(); ++i) params[i]->value.copy_from(r.artifacts.parameters[i]);
    for (size_t i = 0; i < buffers.size(); ++i) buffers[i].copy_from(r.artifacts.buffers[i]);
    io::write_weights(path, m);
}

struct StepCounter : run::RunObserver {
    int steps = 0;
    void on_step(const config::StepRecord&) override { ++steps; }
};

}  // namespace

// A run trains and its final weights are written; runs that start from them (--init) with a
// learning rate too small to move an f32 parameter evaluate the same test loss, whatever the
// strategy, where a run from the seed does not.
TEST(Weights, InitStartsARunFromAnotherRunsFinalWeightsUnderEveryStrategy) {
    TempDir dir;
    const json first = spirals({{"type", "single"}}, 1, 0.1);
    const strategy_testing::Result trained = strategy_testing::run_it(first);
    ASSERT_EQ(trained.summary.status, "finished");
    const std::string path = dir.file("final.safetensors");
    write_final_weights(first, trained, path);

    const std::vector<std::pair<json, int>> strategies = {
        {{{"type", "single"}}, 1},
        {{{"type", "ddp"}}, 2},
        {{{"type", "model_parallel"}, {"split", {2}}}, 2},
        {{{"type", "pipeline"}, {"micro_batches", 2}}, 2},
        {{{"type", "zero"}}, 2},
        {{{"type", "param_server"}}, 2},
    };
    for (const auto& [strategy, devices] : strategies) {
        SCOPED_TRACE(strategy.dump());
        run::RunControl control;
        control.init_weights = path;
        json again = spirals(strategy, devices, 1e-30);
        again["train"]["max_steps"] = 2;
        const strategy_testing::Result r = strategy_testing::run_it(again, nullptr, &control);
        ASSERT_EQ(r.summary.status, "finished") << r.summary.error;
        ASSERT_TRUE(r.summary.test_loss && trained.summary.test_loss);
        EXPECT_NEAR(*r.summary.test_loss, *trained.summary.test_loss, 1e-6 * std::abs(*trained.summary.test_loss));
    }
    json fresh = spirals({{"type", "single"}}, 1, 1e-30);
    fresh["train"]["max_steps"] = 2;
    const strategy_testing::Result from_seed = strategy_testing::run_it(fresh);
    EXPECT_GT(std::abs(*from_seed.summary.test_loss - *trained.summary.test_loss), 1e-3);

    // Weights of another model: refused before the first step, naming the tensor.
    json wider = fresh;
    wider["model"]["layers"][0]["out"] = 16;
    run::RunControl control;
    control.init_weights = path;
    StepCounter steps;
    try {
        run::run_experiment(run::parse_experiment(wider), &steps, &control);
        ADD_FAILURE() << "ran";
    } catch (const ConfigError& e) {
        EXPECT_EQ(e.path(), "--init");
        EXPECT_CONTAINS(e.what(), "tensor \"layers.0.weight\" has shape [32, 2] in the file, the model's is [16, 2]");
    }
    EXPECT_EQ(steps.steps, 0);
}
