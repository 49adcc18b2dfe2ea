// The CUDA training path against the CPU engine: every layer with GPU kernels, forward
// and backward, on a GPU and on the CPU from the same parameters and inputs; runs of the single
// strategy on cuda:0 against cpu:0, ddp on two virtual GPUs (cuda:0 listed twice) against the
// single GPU, a run that converges, and what the GPU path refuses. SKIPPED without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <thread>
#include <string>
#include <vector>

#include <unistd.h>

#include <kernels/gpu/elementwise.h>
#include <nlohmann/json.hpp>

#include "engine/comm/gpu.h"
#include "engine/device/cuda_device.h"
#include "engine/device/device.h"
#include "engine/device/gpu_graph.h"
#include "engine/device/gpu_values.h"
#include "engine/nn/embedding.h"
#include "engine/nn/loss.h"
#include "engine/nn/model.h"
#include "engine/optim/loss_scaler.h"
#include "engine/run/experiment_file.h"
#include "engine/run/trainer.h"
#include "gpu_testing.h"
#include "../engine/strategy_testing.h"

namespace paralab {
namespace {

using nlohmann::json;
using gpu_testing::GpuTest;

// Largest |a - b| over max(|a| over the tensor, rms-like floor 1e-3): relative to the tensor's scale.
double rel_diff(const Tensor& a_any, const Tensor& b_any) {
    const Tensor a = gpu::on_host(a_any), b = gpu::on_host(b_any);
    EXPECT_EQ(a.shape(), b.shape());
    double diff = 0, scale = 1e-3;
    const auto x = a.span<float>(), y = b.span<float>();
    for (size_t i = 0; i < x.size(); ++i) {
        if (std::isnan(x[i]) || std::isnan(y[i])) return INFINITY;  // NaN never passes
        diff = std::max(diff, std::abs(static_cast<double>(x[i]) - y[i]));
        scale = std::max(scale, std::abs(static_cast<double>(x[i])));
    }
    return diff / scale;
}

Tensor random_host(const Shape& shape, std::mt19937& rng, float lo = -1, float hi = 1) {
    Tensor t = Tensor::empty(shape, DType::f32, detached_host_device(), MemCategory::workspace);
    std::uniform_real_distribution<float> u(lo, hi);
    for (float& v : t.span<float>()) v = u(rng);
    return t;
}

struct LayerCase {
    std::string name;
    json layers;
    std::vector<int64_t> input;
    std::string loss = "cross_entropy";
    int64_t batch = 16;
    double tol = 1e-5;
    int64_t id_vocab = 0;  // > 0: the inputs are token ids, integers in [0, id_vocab)
};

std::ostream& operator<<(std::ostream& os, const LayerCase& c) { return os << c.name; }

class GpuLayers : public gpu_testing::GpuParamTest<LayerCase> {};

// A leading tanh makes every tested layer compute its input gradient (a model's first layer
// computes none), and the model's loss drives a real backward.
TEST_P(GpuLayers, ForwardAndBackwardMatchTheCpu) {
    const LayerCase& c = GetParam();
    json j{{"paralab", 1}, {"name", "gpu-layers"}, {"seed", 3},
           {"data", {{"dataset", "blobs"}, {"samples", 64}, {"features", 4}, {"batch_size", 16}}},
           {"model", {{"input", c.input}, {"layers", c.layers}, {"loss", c.loss}}},
           {"devices", {"cpu:0"}}, {"strategy", {{"type", "single"}}}};
    const config::Experiment e = run::parse_experiment(j);
    const Shape input(c.input);
    auto cpu = make_cpu_device(0);
    auto gpu = make_cuda_device(0);
    gpu->make_current();
    nn::Model host(e.layers, input, c.loss, DType::f32, *cpu);
    nn::Model dev(e.layers, input, c.loss, DType::f32, *gpu);
    Rng init(17);
    host.reset_parameters(init);
    auto hp = host.parameters(), dp = dev.parameters();
    ASSERT_EQ(hp.size(), dp.size());
    for (size_t i = 0; i < hp.size(); ++i) dp[i]->value.copy_from(hp[i]->value);

    std::mt19937 rng(1234 + static_cast<unsigned>(c.name.size()));
    Tensor x = random_host(input.with_batch(c.batch), rng);
    if (c.id_vocab > 0) {
        std::uniform_int_distribution<int> id(0, static_cast<int>(c.id_vocab) - 1);
        for (float& v : x.span<float>()) v = static_cast<float>(id(rng));
    }
    const Shape out = host.output_shape();
    Tensor y;
    if (c.loss == "cross_entropy") {
        // A class per sample ([C] scores), or per position ([T, V] scores: a language model).
        const Shape target = out.rank() == 2 ? Shape{c.batch, out[0]} : Shape{c.batch};
        y = Tensor::empty(target, DType::f32, detached_host_device(), MemCategory::workspace);
        std::uniform_int_distribution<int> cls(0, static_cast<int>(out.back()) - 1);
        for (float& v : y.span<float>()) v = static_cast<float>(cls(rng));
    } else {
        y = random_host(out.with_batch(c.batch), rng);
    }

    for (int pass = 0; pass < 2; ++pass) {  // twice: gradients accumulate, plans are reused
        const Tensor xd = gpu::on_device(x, *gpu, MemCategory::activations);
        // Equal random states draw equal dropout masks (a later batch of a later step).
        host.set_random_state(29, 5 + pass, 3 * c.batch);
        dev.set_random_state(29, 5 + pass, 3 * c.batch);
        const Tensor oh = host.forward(x, nn::Mode::train);
        const Tensor od = dev.forward(xd, nn::Mode::train);
        EXPECT_LE(rel_diff(oh, od), c.tol) << "output, pass " << pass;
        const double lh = host.loss().forward(oh, y, 0);
        const double ld = dev.loss().forward(od, y, 0);
        EXPECT_NEAR(ld, lh, c.tol * std::max(1.0, std::abs(lh))) << "loss, pass " << pass;
        host.backward(host.loss().backward());
        dev.backward(dev.loss().backward());
        for (size_t i = 0; i < hp.size(); ++i)
            EXPECT_LE(rel_diff(hp[i]->grad, dp[i]->grad), 10 * c.tol)
                << "gradient of parameter " << i << " (" << hp[i]->name << "), pass " << pass;
        auto hb = host.buffers(), db = dev.buffers();  // batchnorm's running statistics
        ASSERT_EQ(hb.size(), db.size());
        for (size_t i = 0; i < hb.size(); ++i)
            EXPECT_LE(rel_diff(hb[i], db[i]), c.tol) << "buffer " << i << ", pass " << pass;
    }
    // Eval mode: dropout passes through, batchnorm normalises with the running statistics.
    const Tensor eh = host.forward(x, nn::Mode::eval);
    const Tensor ed = dev.forward(gpu::on_device(x, *gpu, MemCategory::activations), nn::Mode::eval);
    EXPECT_LE(rel_diff(eh, ed), c.tol) << "eval output";
}

INSTANTIATE_TEST_SUITE_P(
    Layers, GpuLayers,
    ::testing::Values(
        LayerCase{"mlp", json::parse(R"([{"type":"tanh"},{"type":"linear","out":32},{"type":"relu"},
            {"type":"linear","out":24},{"type":"gelu"},{"type":"linear","out":16},{"type":"sigmoid"},
            {"type":"linear","out":10}])"), {20}},
        LayerCase{"mlp_mse", json::parse(R"([{"type":"tanh"},{"type":"linear","out":12},{"type":"relu"},
            {"type":"linear","out":3,"bias":false}])"), {7}, "mse"},
        LayerCase{"cnn_max", json::parse(R"([{"type":"tanh"},{"type":"conv2d","out_channels":8,"kernel":3,"padding":1},
            {"type":"relu"},{"type":"maxpool2d","kernel":2},{"type":"conv2d","out_channels":6,"kernel":5,"padding":2},
            {"type":"relu"},{"type":"maxpool2d","kernel":2},{"type":"flatten"},{"type":"linear","out":10}])"),
                  {3, 16, 16}, "cross_entropy", 8, 2e-5},
        LayerCase{"cnn_avg", json::parse(R"([{"type":"tanh"},{"type":"conv2d","out_channels":4,"kernel":3,"stride":2},
            {"type":"avgpool2d","kernel":2},{"type":"conv2d","out_channels":5,"kernel":1},{"type":"global_avgpool"},
            {"type":"linear","out":4}])"), {2, 19, 19}, "cross_entropy", 5, 2e-5},
        LayerCase{"lenet", json::parse(R"([{"type":"tanh"},{"type":"conv2d","out_channels":16,"kernel":5,"padding":2},
            {"type":"relu"},{"type":"maxpool2d","kernel":2},{"type":"conv2d","out_channels":32,"kernel":5,"padding":2},
            {"type":"relu"},{"type":"maxpool2d","kernel":2},{"type":"flatten"},{"type":"linear","out":10}])"),
                  {1, 28, 28}, "cross_entropy", 64, 2e-5},
        LayerCase{"lstm_gru", json::parse(R"([{"type":"tanh"},{"type":"lstm","hidden":24,"num_layers":2,"return":"sequence"},
            {"type":"gru","hidden":16,"return":"last"},{"type":"linear","out":10}])"), {12, 8}, "cross_entropy", 16, 2e-5},
        LayerCase{"lstm_bench", json::parse(R"([{"type":"tanh"},{"type":"lstm","hidden":128,"return":"last"},
            {"type":"linear","out":10}])"), {50, 32}, "cross_entropy", 64, 2e-5},
        LayerCase{"mlp_dropout_layernorm", json::parse(R"([{"type":"tanh"},{"type":"linear","out":32},
            {"type":"layernorm"},{"type":"relu"},{"type":"dropout","p":0.3},{"type":"linear","out":24},
            {"type":"dropout","p":0.3},{"type":"layernorm"},{"type":"gelu"},{"type":"linear","out":10}])"),
                  {20}, "cross_entropy", 16, 2e-5},
        LayerCase{"cnn_batchnorm", json::parse(R"([{"type":"tanh"},{"type":"conv2d","out_channels":8,"kernel":3,"padding":1},
            {"type":"batchnorm"},{"type":"relu"},{"type":"maxpool2d","kernel":2},
            {"type":"conv2d","out_channels":6,"kernel":3,"padding":1},{"type":"batchnorm"},{"type":"relu"},
            {"type":"flatten"},{"type":"linear","out":16},{"type":"batchnorm"},{"type":"tanh"},
            {"type":"linear","out":10}])"), {3, 12, 12}, "cross_entropy", 8, 5e-5},
        LayerCase{"embedding_lstm", json::parse(R"([{"type":"embedding","vocab":20,"dim":8},
            {"type":"lstm","hidden":16,"return":"last"},{"type":"linear","out":10}])"),
                  {12}, "cross_entropy", 16, 2e-5, 20},
        LayerCase{"residual", json::parse(R"([{"type":"tanh"},
            {"type":"residual","layers":[{"type":"linear","out":16},{"type":"relu"},{"type":"linear","out":16}]},
            {"type":"residual","layers":[{"type":"linear","out":24},{"type":"tanh"},{"type":"linear","out":24}]},
            {"type":"linear","out":10}])"), {16}, "cross_entropy", 16, 2e-5},
        LayerCase{"gpt", json::parse(R"([{"type":"embedding","vocab":20,"dim":16},{"type":"position_embedding"},
            {"type":"transformer_block","heads":2,"ffn":32,"dropout":0.1,"repeat":2},
            {"type":"attention","heads":4,"causal":false},{"type":"layernorm"},{"type":"linear","out":20}])"),
                  {12}, "cross_entropy", 6, 2e-5, 20},
        // Today's models: grouped-query attention with RoPE, RMSNorm, SwiGLU, no bias, a bare
        // multi-query attention, an rmsnorm with bias, the output layer tied to the embedding.
        LayerCase{"llama", json::parse(R"([{"type":"embedding","vocab":20,"dim":16},
            {"type":"transformer_block","heads":4,"kv_heads":2,"ffn":24,"position":"rope","norm":"rmsnorm",
             "mlp":"swiglu","bias":false,"dropout":0.1,"repeat":2},
            {"type":"attention","heads":4,"kv_heads":1,"position":"rope","causal":false},
            {"type":"rmsnorm","bias":true},{"type":"linear","out":20,"bias":false,"tie_embeddings":true}])"),
                  {12}, "cross_entropy", 6, 2e-5, 20}),
    [](const auto& info) { return info.param.name; });

json spirals(const json& devices, const std::string& strategy) {
    json j = strategy_testing::spirals_mlp("gpu-spirals", {{"type", "sgd"}, {"lr", 0.05}, {"momentum", 0.9}}, 15);
    j["devices"] = devices;
    j["strategy"] = {{"type", strategy}};
    return j;
}

class GpuRuns : public GpuTest {};

TEST_F(GpuRuns, SingleOnTheGpuConvergesAndMatchesTheCpu) {
    using strategy_testing::run_it;
    json g = spirals({"cuda:0"}, "single"), c = spirals({"cpu:0"}, "single");
    g["train"]["max_steps"] = c["train"]["max_steps"] = 30;
    const auto rg = run_it(g), rc = run_it(c);
    ASSERT_EQ(rg.summary.status, "finished") << rg.summary.error;
    ASSERT_EQ(rc.summary.status, "finished") << rc.summary.error;
    // Float rounding differs (cuBLAS sums in another order), and 30 steps amplify it a little.
    EXPECT_LE(strategy_testing::max_rel_diff(rg.artifacts.parameters, rc.artifacts.parameters), 1e-4);
    EXPECT_GT(rg.summary.peak_memory_bytes.at("cuda:0"), 0);

    const auto full = run_it(spirals({"cuda:0"}, "single"));
    ASSERT_EQ(full.summary.status, "finished") << full.summary.error;
    ASSERT_TRUE(full.summary.test_accuracy.has_value());
    EXPECT_GE(*full.summary.test_accuracy, 0.9);
}

TEST_F(GpuRuns, DdpOnTwoVirtualGpusMatchesTheSingleGpu) {
    using strategy_testing::run_it;
    json one = spirals({"cuda:0"}, "single"), two = spirals({"cuda:0", "cuda:0"}, "ddp");
    one["train"]["max_steps"] = two["train"]["max_steps"] = 25;
    const auto r1 = run_it(one), r2 = run_it(two);
    ASSERT_EQ(r1.summary.status, "finished") << r1.summary.error;
    ASSERT_EQ(r2.summary.status, "finished") << r2.summary.error;
    EXPECT_LE(strategy_testing::max_rel_diff(r1.artifacts.parameters, r2.artifacts.parameters), 1e-5);
    // Each virtual GPU keeps its own accounting under its own name.
    EXPECT_GT(r2.summary.peak_memory_bytes.at("cuda:0"), 0);
    EXPECT_GT(r2.summary.peak_memory_bytes.at("cuda:0#1"), 0);
    json no_overlap = two;
    no_overlap["strategy"]["overlap"] = false;
    const auto r3 = run_it(no_overlap);
    ASSERT_EQ(r3.summary.status, "finished") << r3.summary.error;
    EXPECT_LE(strategy_testing::max_rel_diff(r1.artifacts.parameters, r3.artifacts.parameters), 1e-5);
}

// tensor_parallel's all-reduces run in the GPUs' memory and its evaluation on the host; in fp32
// and in fp16 (the shards agree on overflow) it ends where the single GPU does, and so do hybrid
// meshes of four virtual GPUs in fp16 (dp2·tp2 at zero 1, dp2·pp2 at zero 3, tp2·pp2).
TEST_F(GpuRuns, TensorParallelOnTwoVirtualGpusMatchesTheSingleGpu) {
    using strategy_testing::run_it;
    const auto corpus = std::filesystem::temp_directory_path() / ("paralab-gpu-tp-" + std::to_string(::getpid()) + ".txt");
    {
        std::ofstream out(corpus);
        for (int i = 0; i < 80; ++i) out << "Heads split over virtual GPUs, " << i << " sums all-reduced.\n";
    }
    json one = json::parse(R"({
      "paralab": 1, "name": "gpu-tp", "seed": 7,
      "data": {"dataset": "text", "seq_len": 8, "batch_size": 4, "test_limit": 4},
      "model": {"input": [8], "layers": [
          {"type": "embedding", "vocab": 256, "dim": 16}, {"type": "position_embedding"},
          {"type": "transformer_block", "heads": 4, "ffn": 16, "repeat": 2},
          {"type": "layernorm"}, {"type": "linear", "out": 256}], "loss": "cross_entropy"},
      "optimizer": {"type": "adamw", "lr": 0.01, "eps": 1e-6},
      "train": {"epochs": 1, "max_steps": 5},
      "devices": ["cuda:0"], "strategy": {"type": "single"}
    })");
    one["data"]["path"] = corpus.string();
    for (const char* precision : {"fp32", "fp16"}) {
        json two = one;
        two["devices"] = {"cuda:0", "cuda:0"};
        two["strategy"] = {{"type", "tensor_parallel"}};
        one["train"]["precision"] = two["train"]["precision"] = precision;
        const auto r1 = run_it(one), r2 = run_it(two);
        ASSERT_EQ(r1.summary.status, "finished") << precision << ": " << r1.summary.error;
        ASSERT_EQ(r2.summary.status, "finished") << precision << ": " << r2.summary.error;
        EXPECT_LE(strategy_testing::max_rel_diff(r1.artifacts.parameters, r2.artifacts.parameters),
                  std::string(precision) == "fp32" ? 1e-5 : 1e-3) << precision;
        ASSERT_TRUE(r1.summary.test_loss && r2.summary.test_loss);
        EXPECT_NEAR(*r1.summary.test_loss, *r2.summary.test_loss, 1e-3 * (1 + *r1.summary.test_loss)) << precision;
    }
    const auto r1 = run_it(one);  // fp16
    for (const char* mesh : {R"({"type":"hybrid","dp":2,"tp":2,"zero":1})", R"({"type":"hybrid","dp":2,"pp":2,"zero":3})",
                             R"({"type":"hybrid","tp":2,"pp":2,"micro_batches":2})"}) {
        json four = one;
        four["devices"] = {"cuda:0", "cuda:0", "cuda:0", "cuda:0"};
        four["strategy"] = json::parse(mesh);
        const auto r4 = run_it(four);
        ASSERT_EQ(r4.summary.status, "finished") << mesh << ": " << r4.summary.error;
        EXPECT_LE(strategy_testing::max_rel_diff(r1.artifacts.parameters, r4.artifacts.parameters), 1e-3) << mesh;
        ASSERT_TRUE(r1.summary.test_loss && r4.summary.test_loss);
        EXPECT_NEAR(*r1.summary.test_loss, *r4.summary.test_loss, 1e-3 * (1 + *r1.summary.test_loss)) << mesh;
    }
    std::filesystem::remove(corpus);
}

// The transformer strategies on virtual GPUs of one card end where the single GPU does: zero
// stage 3 (parameters gathered per layer, a prefetch thread), tensor_parallel over 4 (with and
// without sequence parallelism), and the
// hybrid meshes dp 2 x tp 2 (zero 0 and 1) and tp 2 x pp 2 (1f1b, and zb_h1: the linears' weight
// gradients deferred to W on the GPU's queue), on the miniature char-GPT.
using DevicesAndStrategy = std::pair<int, std::string>;  // virtual GPUs, the strategy as JSON
class GpuTransformerStrategies : public gpu_testing::GpuParamTest<DevicesAndStrategy> {};

TEST_P(GpuTransformerStrategies, MatchTheSingleGpu) {
    using strategy_testing::run_it;
    static const std::string corpus =
        strategy_testing::text_corpus("gpu-mesh", "Shards of one card, gathered and summed,", 80);
    json one = strategy_testing::tiny_gpt("gpu-mesh", corpus);
    one["devices"] = {"cuda:0"};
    one["strategy"] = {{"type", "single"}};
    json many = one;
    many["devices"] = json::array();
    for (int d = 0; d < GetParam().first; ++d) many["devices"].push_back("cuda:0");
    many["strategy"] = json::parse(GetParam().second);
    const auto r1 = run_it(one), rn = run_it(many);
    ASSERT_EQ(r1.summary.status, "finished") << r1.summary.error;
    ASSERT_EQ(rn.summary.status, "finished") << rn.summary.error;
    EXPECT_LE(strategy_testing::max_rel_diff(r1.artifacts.parameters, rn.artifacts.parameters), 1e-5);
    ASSERT_TRUE(r1.summary.test_loss && rn.summary.test_loss);
    EXPECT_NEAR(*r1.summary.test_loss, *rn.summary.test_loss, 1e-4 * (1 + *r1.summary.test_loss));
    EXPECT_GT(rn.summary.peak_memory_bytes.at("cuda:0#1"), 0);  // every virtual GPU counted its own
}

std::string transformer_case_name(size_t index) {
    static const char* names[] = {"zero3", "tensor_parallel4", "sequence_parallel4", "dp2_tp2", "dp2_tp2_zero1",
                                  "tp2_pp2_1f1b", "tp2_pp2_zb_h1"};
    return names[index];
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, GpuTransformerStrategies,
    ::testing::Values(DevicesAndStrategy(2, R"({"type":"zero","stage":3})"),
                      DevicesAndStrategy(4, R"({"type":"tensor_parallel"})"),
                      DevicesAndStrategy(4, R"({"type":"tensor_parallel","sequence_parallel":true})"),
                      DevicesAndStrategy(4, R"({"type":"hybrid","dp":2,"tp":2})"),
                      DevicesAndStrategy(4, R"({"type":"hybrid","dp":2,"tp":2,"zero":1})"),
                      DevicesAndStrategy(4, R"({"type":"hybrid","tp":2,"pp":2,"micro_batches":2,"schedule":"1f1b"})"),
                      DevicesAndStrategy(4, R"({"type":"hybrid","tp":2,"pp":2,"micro_batches":4,"schedule":"zb_h1"})")),
    [](const auto& info) { return transformer_case_name(info.index); });

// Every deterministic strategy on two virtual GPUs ends where the single GPU does (docs/strategies.md).
class GpuStrategies : public gpu_testing::GpuParamTest<std::string> {};

TEST_P(GpuStrategies, MatchTheSingleGpu) {
    using strategy_testing::run_it;
    json one = spirals({"cuda:0"}, "single");
    json two = spirals({"cuda:0", "cuda:0"}, "single");
    two["strategy"] = json::parse(GetParam());
    one["train"]["max_steps"] = two["train"]["max_steps"] = 20;
    const auto r1 = run_it(one), r2 = run_it(two);
    ASSERT_EQ(r1.summary.status, "finished") << r1.summary.error;
    ASSERT_EQ(r2.summary.status, "finished") << r2.summary.error;
    EXPECT_LE(strategy_testing::max_rel_diff(r1.artifacts.parameters, r2.artifacts.parameters), 1e-5);
    ASSERT_TRUE(r2.summary.test_accuracy.has_value());  // evaluated through the strategy's predict
}

INSTANTIATE_TEST_SUITE_P(Strategies, GpuStrategies,
                         ::testing::Values(R"({"type":"data_parallel"})", R"({"type":"zero","stage":1})",
                                           R"({"type":"zero","stage":2})", R"({"type":"zero","stage":3})",
                                           R"({"type":"model_parallel"})",
                                           R"({"type":"param_server","mode":"sync"})",
                                           R"({"type":"pipeline","micro_batches":4,"schedule":"gpipe"})",
                                           R"({"type":"pipeline","micro_batches":4,"schedule":"1f1b"})",
                                           R"({"type":"pipeline","micro_batches":4,"schedule":"zb_h1"})"),
                         [](const auto& info) {
                             const json j = json::parse(info.param);
                             std::string name = j["type"].get<std::string>();
                             if (j.contains("mode")) {
                                 name += "_";
                                 name += j["mode"].get<std::string>();
                             }
                             if (j.contains("stage")) name += std::to_string(j["stage"].get<int>());
                             if (j.contains("schedule")) {  // appended: GCC 12 warns (-Wrestrict) on "_" + s
                                 name += "_";
                                 name += j["schedule"].get<std::string>();
                             }
                             return name;
                         });

// Mixed precision: GEMMs with bf16/fp16 inputs and fp32 accumulation stay near fp32 (and do
// differ from it: the half path ran), and runs converge; fp16 with dynamic loss scaling.
TEST_F(GpuRuns, HalfPrecisionGemmsStayNearFp32) {
    const json layers = json::parse(R"([{"type":"linear","out":64},{"type":"relu"},{"type":"linear","out":10}])");
    json j{{"paralab", 1}, {"name", "half"}, {"seed", 3},
           {"data", {{"dataset", "blobs"}, {"samples", 64}, {"features", 4}, {"batch_size", 16}}},
           {"model", {{"input", {48}}, {"layers", layers}, {"loss", "cross_entropy"}}},
           {"devices", {"cpu:0"}}, {"strategy", {{"type", "single"}}}};
    const config::Experiment e = run::parse_experiment(j);
    auto cpu = make_cpu_device(0);
    nn::Model host(e.layers, Shape{48}, "cross_entropy", DType::f32, *cpu);
    Rng init(5);
    host.reset_parameters(init);
    std::mt19937 rng(99);
    const Tensor x = random_host(Shape{32, 48}, rng);
    const Tensor ref = host.forward(x, nn::Mode::eval);
    for (MatmulPrecision p : {MatmulPrecision::bf16, MatmulPrecision::fp16}) {
        auto gpu = make_cuda_device(0);
        gpu->make_current();
        gpu->set_matmul_precision(p);
        nn::Model dev(e.layers, Shape{48}, "cross_entropy", DType::f32, *gpu);
        auto hp = host.parameters(), dp = dev.parameters();
        for (size_t i = 0; i < hp.size(); ++i) dp[i]->value.copy_from(hp[i]->value);
        const double d = rel_diff(ref, dev.forward(gpu::on_device(x, *gpu, MemCategory::activations), nn::Mode::eval));
        EXPECT_LE(d, p == MatmulPrecision::bf16 ? 3e-2 : 5e-3) << static_cast<int>(p);
        EXPECT_GT(d, 1e-6) << "the half-precision GEMM did not run";
    }
}

TEST_F(GpuRuns, MixedPrecisionRunsConverge) {
    using strategy_testing::run_it;
    for (const char* p : {"bf16", "fp16"}) {
        json j = spirals({"cuda:0"}, "single");
        j["train"]["precision"] = p;
        const auto r = run_it(j);
        ASSERT_EQ(r.summary.status, "finished") << p << ": " << r.summary.error;
        ASSERT_TRUE(r.summary.test_accuracy.has_value());
        EXPECT_GE(*r.summary.test_accuracy, 0.9) << p;
    }
}

// fp16 on two virtual GPUs ends near fp16 on one: ddp's ranks unscale the same reduced
// gradients, data_parallel's device 0 unscales the sum, zero's shards and the stages agree on
// overflow through an all-reduce (LossScalersAgreeOnAnOverflow below checks the agreement),
// param_server's worker unscales with the scale the server sent.
class GpuFp16Strategies : public gpu_testing::GpuParamTest<std::string> {};

TEST_P(GpuFp16Strategies, MatchTheSingleGpuInFp16) {
    using strategy_testing::run_it;
    json one = spirals({"cuda:0"}, "single"), two = spirals({"cuda:0", "cuda:0"}, "single");
    two["strategy"] = json::parse(GetParam());
    one["train"]["precision"] = two["train"]["precision"] = "fp16";
    one["train"]["max_steps"] = two["train"]["max_steps"] = 20;
    const auto r1 = run_it(one), r2 = run_it(two);
    ASSERT_EQ(r1.summary.status, "finished") << r1.summary.error;
    ASSERT_EQ(r2.summary.status, "finished") << r2.summary.error;
    EXPECT_LE(strategy_testing::max_rel_diff(r1.artifacts.parameters, r2.artifacts.parameters), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Strategies, GpuFp16Strategies,
                         ::testing::Values(R"({"type":"ddp"})", R"({"type":"data_parallel"})",
                                           R"({"type":"zero","stage":1})", R"({"type":"zero","stage":2})",
                                           R"({"type":"model_parallel"})",
                                           R"({"type":"pipeline","micro_batches":4})",
                                           R"({"type":"param_server","mode":"sync"})"),
                         [](const auto& info) {
                             const json j = json::parse(info.param);
                             std::string name = j["type"].get<std::string>();
                             if (j.contains("stage")) name += std::to_string(j["stage"].get<int>());
                             return name;
                         });

// The asynchronous strategies in fp16: each hogwild rank skips its own overflowed updates, the
// async server each overflowed push.
TEST_F(GpuRuns, AsyncStrategiesInFp16Learn) {
    // Two hogwild ranks, as in HogwildOnVirtualGpusLearns (each rank's own momentum on the one
    // parameter set: three made the run depend on the interleaving, 0.78 once on the host fakes
    // under load); the server and two workers.
    for (const char* strategy : {R"({"type":"hogwild"})", R"({"type":"param_server","mode":"async","staleness":2})"}) {
        const bool hogwild = std::string(strategy).find("hogwild") != std::string::npos;
        json j = spirals(hogwild ? json{"cuda:0", "cuda:0"} : json{"cuda:0", "cuda:0", "cuda:0"}, "single");
        j["strategy"] = json::parse(strategy);
        j["train"]["precision"] = "fp16";
        const auto r = strategy_testing::run_it(j);
        ASSERT_EQ(r.summary.status, "finished") << strategy << ": " << r.summary.error;
        ASSERT_TRUE(r.summary.test_accuracy.has_value());
        EXPECT_GE(*r.summary.test_accuracy, 0.85) << strategy;
    }
}

TEST_F(GpuRuns, LossScalerSkipsAnOverflowAndBacksOff) {
    auto gpu = make_cuda_device(0);
    gpu->make_current();
    nn::Param p;
    p.value = Tensor::zeros(Shape{4}, DType::f32, *gpu, MemCategory::parameters);
    p.grad = Tensor::empty(Shape{4}, DType::f32, *gpu, MemCategory::gradients);
    Tensor h = Tensor::empty(Shape{4}, DType::f32, detached_host_device(), MemCategory::workspace);
    const auto set = [&](std::vector<float> v) {
        std::copy(v.begin(), v.end(), h.span<float>().begin());
        p.grad.copy_from(h);
    };
    optim::LossScaler scaler(1024.0, 2.0, 0.5, 2);
    std::vector<nn::Param*> ps{&p};
    set({1024, -2048, 512, 0});
    ASSERT_TRUE(scaler.unscale(ps));
    const Tensor g = gpu::on_host(p.grad);
    EXPECT_EQ(g.span<float>()[0], 1.0f);
    EXPECT_EQ(g.span<float>()[1], -2.0f);
    EXPECT_EQ(g.span<float>()[2], 0.5f);
    EXPECT_EQ(scaler.scale(), 1024.0);
    set({1, INFINITY, 0, 0});
    EXPECT_FALSE(scaler.unscale(ps));
    EXPECT_EQ(scaler.scale(), 512.0);
    EXPECT_EQ(scaler.skipped_steps(), 1);
    set({1, NAN, 0, 0});
    EXPECT_FALSE(scaler.unscale(ps));
    EXPECT_EQ(scaler.scale(), 256.0);
    set({1, 2, 3, 4});
    EXPECT_TRUE(scaler.unscale(ps));
    set({1, 2, 3, 4});
    EXPECT_TRUE(scaler.unscale(ps));  // two clean steps in a row: the scale grows
    EXPECT_EQ(scaler.scale(), 512.0);
}

// `j` run with CUDA graphs off, then on (observed by the observers given): both finish and end
// on the same parameters and final loss, bit for bit. `counts` holds the graphs of the second
// run. Call through ASSERT_NO_FATAL_FAILURE.
struct EagerAndGraphed {
    strategy_testing::Result eager, graphed;
    gpu::GraphCounts counts;
};
void run_eager_and_graphed(const json& j, EagerAndGraphed& out, run::RunObserver* eager_observer = nullptr,
                           run::RunObserver* graphed_observer = nullptr) {
    gpu::set_graphs_enabled(false);
    out.eager = strategy_testing::run_it(j, eager_observer);
    gpu::set_graphs_enabled(true);
    const gpu::GraphCounts before = gpu::graph_counts();
    out.graphed = strategy_testing::run_it(j, graphed_observer);
    const gpu::GraphCounts after = gpu::graph_counts();
    out.counts = {after.captures - before.captures, after.launches - before.launches,
                  after.step_recordings - before.step_recordings, after.step_replays - before.step_replays};
    ASSERT_EQ(out.eager.summary.status, "finished") << out.eager.summary.error;
    ASSERT_EQ(out.graphed.summary.status, "finished") << out.graphed.summary.error;
    EXPECT_EQ(strategy_testing::max_rel_diff(out.eager.artifacts.parameters, out.graphed.artifacts.parameters), 0.0);
    EXPECT_EQ(out.eager.summary.final_loss, out.graphed.summary.final_loss);
}

// The recurrent layers' time loops replay as CUDA graphs: the same kernels with the same
// arguments, so a run ends on the same bits as with every kernel launched on its own; and the
// loops are captured a few times, not every step (the activations' addresses recur).
TEST_F(GpuRuns, RecurrentTimeLoopsAsCudaGraphsChangeNoBit) {
    json j = json::parse(R"({
      "paralab": 1, "name": "gpu-graphs", "seed": 5,
      "data": {"dataset": "seqclass", "samples": 256, "seq_len": 12, "features": 6, "classes": 3,
               "batch_size": 32},
      "model": {"layers": [{"type": "lstm", "hidden": 24, "num_layers": 2, "return": "sequence"},
                           {"type": "gru", "hidden": 16, "return": "last"}, {"type": "linear", "out": 3}],
        "loss": "cross_entropy"},
      "optimizer": {"type": "adam", "lr": 0.01},
      "devices": ["cuda:0"], "strategy": {"type": "single"},
      "train": {"epochs": 3}
    })");
    EagerAndGraphed r;
    ASSERT_NO_FATAL_FAILURE(run_eager_and_graphed(j, r));
    // 3 epochs of 7 steps (6 of 32 rows, 1 of 13), each 3 time loops forward and 3 backward,
    // and the evaluations' forwards (51 rows): each loop is captured once per batch shape. A
    // step replayed as one graph (step_graph.h) runs its loops inside it.
    const int64_t launches = r.counts.launches, captures = r.counts.captures;
    EXPECT_GE(launches + 6 * r.counts.step_replays, 21 * 6);
    EXPECT_LE(captures, 6 * 2 + 3) << captures << " captures for " << launches << " launches";
}

// The phases of a run's spans, counted, and each step's memory peak.
struct StepPhases : run::RunObserver {
    std::multiset<std::string> phases;
    std::set<int64_t> replayed;  // the steps with a replayed graph
    std::vector<int64_t> step_peaks;
    void on_span(const config::Span& s) override {
        phases.insert(s.phase);
        if (s.phase == "forward+backward (CUDA graph)") replayed.insert(s.step);
    }
    void on_step(const config::StepRecord& r) override { step_peaks.push_back(r.memory.step_peak_total); }
};
constexpr const char* kGraphPhase = "forward+backward (CUDA graph)";

// A single-device step's forward and backward are recorded once as a CUDA graph and replayed
// (engine/strategy/step_graph.h): the same kernels with the same arguments, so every model ends
// on the bits of the eager run. A convolutional net with batch norm (SGD with momentum), a
// miniature GPT (AdamW; its token ids staged; with full recomputation too), an LSTM under MSE (its loop graphs enclosed in the step's) and an MLP
// in fp16 (the loss scale recorded with the graph); short last batches run eagerly, the graph
// is recorded once per shape and replayed for the rest. Dropout draws new masks each step: that
// model is never recorded.
TEST_F(GpuRuns, WholeStepsAsCudaGraphsChangeNoBit) {
    const char* fashion = "/usr/share/datasets/fashion-mnist";
    struct Case {
        const char* name;
        json experiment;
        int64_t min_replays;  // replayed steps at least
    };
    std::vector<Case> cases;
    if (std::filesystem::exists(std::string(fashion) + "/train-images-idx3-ubyte.gz")) {
        cases.push_back({"cnn", json::parse(R"({
          "paralab": 1, "seed": 3,
          "data": {"dataset": "fashion-mnist", "train_limit": 237, "test_limit": 40, "batch_size": 32},
          "model": {"layers": [
              {"type": "conv2d", "out_channels": 6, "kernel": 5, "padding": 2}, {"type": "relu"},
              {"type": "maxpool2d", "kernel": 2}, {"type": "conv2d", "out_channels": 8, "kernel": 3},
              {"type": "batchnorm"}, {"type": "relu"}, {"type": "maxpool2d", "kernel": 2},
              {"type": "flatten"}, {"type": "linear", "out": 10}], "loss": "cross_entropy"},
          "optimizer": {"type": "sgd", "lr": 0.05, "momentum": 0.9},
          "train": {"epochs": 2}
        })"), 2 * 7 - 2});  // 2 epochs of 7 steps of 32 and one of 13: all but the first two of 32 replayed
    }
    json gpt = strategy_testing::tiny_gpt("gpt", strategy_testing::text_corpus("step-graph", "the step as one graph", 60));
    gpt["train"]["max_steps"] = 9;
    cases.push_back({"gpt", gpt, 9 - 2});
    gpt["train"]["recompute"] = "full";
    cases.push_back({"gpt-recompute", gpt, 9 - 2});
    cases.push_back({"lstm-mse", json::parse(R"({
      "paralab": 1, "seed": 5,
      "data": {"dataset": "sine", "samples": 300, "seq_len": 10, "batch_size": 32},
      "model": {"layers": [{"type": "lstm", "hidden": 12, "return": "last"}, {"type": "linear", "out": 1}],
                "loss": "mse"},
      "optimizer": {"type": "adam", "lr": 0.01},
      "train": {"epochs": 2}
    })"), 2});
    json fp16 = strategy_testing::spirals_mlp("fp16", {{"type", "sgd"}, {"lr", 0.05}}, 1);
    fp16["train"]["precision"] = "fp16";
    cases.push_back({"mlp-fp16", fp16, 1});
    json dropout = strategy_testing::spirals_mlp("dropout", {{"type", "sgd"}, {"lr", 0.05}}, 1);
    dropout["model"]["layers"].insert(dropout["model"]["layers"].begin() + 2, json{{"type", "dropout"}, {"p", 0.2}});
    cases.push_back({"dropout", dropout, 0});

    for (Case& c : cases) {
        SCOPED_TRACE(c.name);
        c.experiment["name"] = std::string("step-graph-") + c.name;
        c.experiment["devices"] = {"cuda:0"};
        StepPhases eager_phases, graphed_phases;
        EagerAndGraphed r;
        ASSERT_NO_FATAL_FAILURE(run_eager_and_graphed(c.experiment, r, &eager_phases, &graphed_phases));
        EXPECT_EQ(strategy_testing::max_rel_diff(r.eager.artifacts.buffers, r.graphed.artifacts.buffers), 0.0);
        EXPECT_EQ(r.eager.summary.test_loss, r.graphed.summary.test_loss);
        const int64_t recordings = r.counts.step_recordings;
        const int64_t replays = r.counts.step_replays;
        if (c.min_replays == 0) {
            EXPECT_EQ(recordings, 0);
            EXPECT_EQ(replays, 0);
        } else {
            EXPECT_GE(recordings, 1);
            EXPECT_LE(recordings, 2);  // fp16: once more if the loss scale moved
            EXPECT_GE(replays, c.min_replays);
        }
        // The timeline: a replayed step is one span. The memory picture: a replayed step's record
        // carries the recorded step's peak (a replay allocates nothing), the eager step's within
        // 30 % (the staged batch and the blocks the graph keeps on one side; on the other, what
        // was live when it was recorded).
        EXPECT_EQ(graphed_phases.phases.count(kGraphPhase), static_cast<size_t>(replays));
        EXPECT_EQ(eager_phases.phases.count(kGraphPhase), 0u);
        ASSERT_EQ(graphed_phases.step_peaks.size(), eager_phases.step_peaks.size());
        for (const int64_t step : graphed_phases.replayed) {
            const double graphed_peak = static_cast<double>(graphed_phases.step_peaks.at(static_cast<size_t>(step - 1)));
            const double eager_peak = static_cast<double>(eager_phases.step_peaks.at(static_cast<size_t>(step - 1)));
            EXPECT_NEAR(graphed_peak, eager_peak, 0.3 * eager_peak) << "step " << step;
        }
    }
}

// ddp on two virtual GPUs without overlap: each rank replays its forward and backward as a graph
// of its own, then all-reduces its buckets; it ends on the eager run's bits. With overlap (the
// buckets start during backward) and under SyncBatchNorm (an all-reduce in forward) it records
// nothing.
TEST_F(GpuRuns, DdpWithoutOverlapReplaysEachRanksStep) {
    struct Case {
        const char* name;
        json strategy;
        bool batchnorm;
        bool records;
    };
    const std::vector<Case> cases{{"no-overlap", {{"type", "ddp"}, {"overlap", false}}, false, true},
                                  {"overlap", {{"type", "ddp"}}, false, false},
                                  {"sync-batchnorm", {{"type", "ddp"}, {"overlap", false}}, true, false}};
    for (const Case& c : cases) {
        SCOPED_TRACE(c.name);
        json j = spirals({"cuda:0", "cuda:0"}, "ddp");
        j["strategy"] = c.strategy;
        j["train"]["max_steps"] = 12;
        if (c.batchnorm) j["model"]["layers"].insert(j["model"]["layers"].begin() + 1, json{{"type", "batchnorm"}});
        EagerAndGraphed r;
        ASSERT_NO_FATAL_FAILURE(run_eager_and_graphed(j, r));
        EXPECT_EQ(r.counts.step_recordings, c.records ? 2 : 0);
        EXPECT_EQ(r.counts.step_replays, c.records ? 2 * (12 - 2) : 0);
    }
}

// What a step graph stages before it records: a loss forward queued on a staged target reads
// back the loss the plain forward returns and leaves the same gradient, for cross-entropy (per
// sample and per position) and MSE; an embedding's staged ids gather what its plain forward
// does. Bad targets and ids are refused at staging, naming them.
TEST_F(GpuRuns, StagedTargetsAndIdsGiveThePlainForwards) {
    auto gpu = make_cuda_device(0);
    gpu->make_current();
    std::mt19937 rng(77);
    const auto host_of = [](const Shape& shape, std::vector<float> values) {
        Tensor t = Tensor::empty(shape, DType::f32, detached_host_device(), MemCategory::activations);
        std::copy(values.begin(), values.end(), t.data<float>());
        return t;
    };
    struct Case {
        const char* loss;
        Shape pred;
        Tensor target;  // on the host
    };
    const std::vector<Case> cases{
        {"cross_entropy", Shape{4, 5}, host_of(Shape{4}, {0, 4, 2, 2})},
        {"cross_entropy", Shape{2, 3, 5}, host_of(Shape{2, 3}, {1, 0, 4, 3, 3, 2})},
        {"mse", Shape{3, 2}, host_of(Shape{3, 2}, {0.5f, -1, 2, 0, 0.25f, 3})},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(std::string(c.loss) + " " + c.pred.to_string());
        const Tensor pred = gpu::on_device(random_host(c.pred, rng), *gpu, MemCategory::activations);
        auto plain = nn::make_loss(c.loss), staged = nn::make_loss(c.loss);
        const double want = plain->forward(pred, c.target, c.pred[0]);
        const Tensor want_grad = gpu::on_host(plain->backward());
        Tensor target;
        staged->stage_target(c.target, c.pred, DType::f32, *gpu, target);
        staged->queue_forward(pred, target, c.pred[0]);
        EXPECT_EQ(staged->queued_loss(), want);
        const Tensor grad = gpu::on_host(staged->backward());
        EXPECT_EQ(0, std::memcmp(grad.raw(), want_grad.raw(), grad.nbytes()));
        const void* kept = target.raw();  // staged again: written in place
        staged->stage_target(c.target, c.pred, DType::f32, *gpu, target);
        EXPECT_EQ(target.raw(), kept);
    }
    auto ce = nn::make_loss("cross_entropy");
    Tensor target;
    try {
        ce->stage_target(host_of(Shape{2}, {1, 7}), Shape{2, 5}, DType::f32, *gpu, target);
        FAIL() << "expected an error for class 7 of 5";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("target 7 at row 1 is not a class id in [0, 5)"), std::string::npos)
            << e.what();
    }
    EXPECT_THROW(ce->stage_target(host_of(Shape{3}, {1, 2, 3}), Shape{2, 5}, DType::f32, *gpu, target), ShapeError);
    const Tensor on_cpu = Tensor::zeros(Shape{2, 5}, DType::f32, detached_host_device(), MemCategory::activations);
    EXPECT_THROW(ce->queue_forward(on_cpu, target, 2), Error);

    // The embedding: staged ids against its plain forward.
    const json layers = json::parse(R"([{"type": "embedding", "vocab": 9, "dim": 4}])");
    const config::Experiment e = run::parse_experiment(
        {{"paralab", 1}, {"name", "stage-ids"}, {"data", {{"dataset", "blobs"}, {"samples", 8}, {"features", 3}}},
         {"model", {{"input", {3}}, {"layers", layers}, {"loss", "mse"}}}, {"devices", {"cpu:0"}}});
    nn::Model model(e.layers, Shape{3}, "mse", DType::f32, *gpu);
    Rng init(5);
    model.reset_parameters(init);
    auto& embedding = dynamic_cast<nn::Embedding&>(model.net().at(0));
    const Tensor ids = host_of(Shape{2, 3}, {8, 0, 3, 3, 1, 8});
    const Tensor x = gpu::on_device(ids, *gpu, MemCategory::activations);
    const Tensor want = gpu::on_host(model.forward(x, nn::Mode::train));
    Tensor staged_ids;
    embedding.stage_ids(ids, x, staged_ids);
    const Tensor got = gpu::on_host(model.forward(x, nn::Mode::train));
    EXPECT_EQ(0, std::memcmp(got.raw(), want.raw(), got.nbytes()));
    try {
        embedding.stage_ids(host_of(Shape{2, 3}, {8, 0, 3, 3, 9, 8}), x, staged_ids);
        FAIL() << "expected an error for token 9 of 9";
    } catch (const Error& err) {
        EXPECT_NE(std::string(err.what()).find("token id 9 (sample 1, position 1)"), std::string::npos) << err.what();
    }
}

// A GraphReplay captures for a key it has not seen and launches the graph of a key it has; the
// replay computes what running the work eagerly does.
TEST_F(GpuRuns, GraphReplayFollowsItsKey) {
    auto d = make_cuda_device(0);
    d->make_current();
    Tensor a = Tensor::zeros(Shape{64}, DType::f32, *d, MemCategory::workspace);
    Tensor b = Tensor::zeros(Shape{64}, DType::f32, *d, MemCategory::workspace);
    Tensor one = Tensor::empty(Shape{64}, DType::f32, *d, MemCategory::workspace);
    one.fill(1.0);
    gpu::GraphReplay replay;
    const auto add_one = [&](Tensor& t) {
        replay.run(d->queue(), {gpu::key_of(t.raw())}, [&] {
            kernels::gpu::bias_add_rows<float>(1, 64, one.data<float>(), t.data<float>(), d->queue());
        });
    };
    for (int i = 0; i < 3; ++i) add_one(a);
    add_one(b);
    add_one(a);
    EXPECT_EQ(gpu::on_host(a).span<float>()[63], 4.0f);
    EXPECT_EQ(gpu::on_host(b).span<float>()[0], 1.0f);
    EXPECT_EQ(replay.captures(), 2);  // a, then b; a again is a launch of its graph
}

// Two ranks, each holding part of the gradients (zero's shards, the stages): an overflow on one
// makes both skip and back off; a rank without parameters still takes part.
TEST_F(GpuRuns, LossScalersAgreeOnAnOverflow) {
    auto d0 = make_cuda_device(0, "cuda:0"), d1 = make_cuda_device(0, "cuda:0#1");
    auto group = comm::make_device_group({d0.get(), d1.get()});
    Tensor h = Tensor::empty(Shape{2}, DType::f32, detached_host_device(), MemCategory::workspace);
    nn::Param p;
    p.value = Tensor::zeros(Shape{2}, DType::f32, *d0, MemCategory::parameters);
    p.grad = Tensor::empty(Shape{2}, DType::f32, *d0, MemCategory::gradients);
    optim::LossScaler s0(1024.0, 2.0, 0.5, 1000), s1(1024.0, 2.0, 0.5, 1000);
    bool ok[2] = {true, true};
    const auto step = [&](float second) {
        h.span<float>()[0] = 1;
        h.span<float>()[1] = second;
        p.grad.copy_from(h);
        std::thread other([&] {
            d1->make_current();
            ok[1] = s1.unscale({}, *d1, [&](float* f) { group->rank(1).all_reduce(f, 1, DType::f32, comm::ReduceOp::max); });
        });
        d0->make_current();
        ok[0] = s0.unscale({&p}, *d0, [&](float* f) { group->rank(0).all_reduce(f, 1, DType::f32, comm::ReduceOp::max); });
        other.join();
    };
    step(INFINITY);
    EXPECT_FALSE(ok[0]);
    EXPECT_FALSE(ok[1]);
    EXPECT_EQ(s0.scale(), 512.0);
    EXPECT_EQ(s1.scale(), 512.0);
    step(2.0f);
    EXPECT_TRUE(ok[0]);
    EXPECT_TRUE(ok[1]);
    EXPECT_EQ(gpu::on_host(p.grad).span<float>()[1], 2.0f / 512.0f);
    EXPECT_EQ(s1.skipped_steps(), 1);
}

// Hogwild on two virtual GPUs: both ranks update rank 0's parameters in place, unlocked (the
// strategy's point), and the model still learns.
TEST_F(GpuRuns, HogwildOnVirtualGpusLearns) {
    const auto r = strategy_testing::run_it(spirals({"cuda:0", "cuda:0"}, "hogwild"));
    ASSERT_EQ(r.summary.status, "finished") << r.summary.error;
    ASSERT_TRUE(r.summary.test_accuracy.has_value());
    EXPECT_GE(*r.summary.test_accuracy, 0.85);
    // The one parameter set lives on cuda:0; cuda:0#1 holds only its gradients and activations.
    EXPECT_GT(r.summary.peak_memory_bytes.at("cuda:0"), r.summary.peak_memory_bytes.at("cuda:0#1"));
}

// param_server on three virtual GPUs (a server and two workers): sync sums the two pushes in
// rank order and equals the single GPU; async learns. A batchnorm model's running statistics
// (the workers' mean, taken on the host) reach the server's model.
TEST_F(GpuRuns, ParamServerOnVirtualGpus) {
    using strategy_testing::run_it;
    const json three = {"cuda:0", "cuda:0", "cuda:0"};
    json one = spirals({"cuda:0"}, "single"), sync = spirals(three, "param_server");
    sync["strategy"]["mode"] = "sync";
    one["train"]["max_steps"] = sync["train"]["max_steps"] = 20;
    const auto r1 = run_it(one), r2 = run_it(sync);
    ASSERT_EQ(r1.summary.status, "finished") << r1.summary.error;
    ASSERT_EQ(r2.summary.status, "finished") << r2.summary.error;
    EXPECT_LE(strategy_testing::max_rel_diff(r1.artifacts.parameters, r2.artifacts.parameters), 1e-5);

    json async = spirals(three, "param_server");
    async["strategy"]["mode"] = "async";
    async["strategy"]["staleness"] = 2;
    const auto ra = run_it(async);
    ASSERT_EQ(ra.summary.status, "finished") << ra.summary.error;
    ASSERT_TRUE(ra.summary.test_accuracy.has_value());
    EXPECT_GE(*ra.summary.test_accuracy, 0.85);

    json bn = sync;
    bn["model"]["layers"][1] = {{"type", "batchnorm"}};
    bn["train"]["max_steps"] = 5;
    const auto rb = run_it(bn);
    ASSERT_EQ(rb.summary.status, "finished") << rb.summary.error;
    ASSERT_EQ(rb.artifacts.buffers.size(), 2u);  // running mean and variance
    // Moved off their initial 0 and 1 by the workers' batches, and finite.
    const auto mean = rb.artifacts.buffers[0].span<float>();
    EXPECT_TRUE(std::all_of(mean.begin(), mean.end(), [](float v) { return std::isfinite(v); }));
    EXPECT_TRUE(std::any_of(mean.begin(), mean.end(), [](float v) { return v != 0.0f; }));
}

// SyncBatchNorm on two virtual GPUs: the statistics of the global batch, so the parameters and
// the running statistics are the single GPU's; without it each device normalises its own rows.
TEST_F(GpuRuns, SyncBatchNormOnVirtualGpusMatchesTheSingleGpu) {
    using strategy_testing::run_it;
    json one = spirals({"cuda:0"}, "single");
    one["model"]["layers"][1] = {{"type", "batchnorm"}};
    one["train"]["max_steps"] = 15;
    const auto r1 = run_it(one);
    ASSERT_EQ(r1.summary.status, "finished") << r1.summary.error;
    for (const char* strategy : {"ddp", "data_parallel", "zero"}) {
        json two = one;
        two["devices"] = {"cuda:0", "cuda:0"};
        two["strategy"] = {{"type", strategy}};
        const auto r2 = run_it(two);
        ASSERT_EQ(r2.summary.status, "finished") << strategy << ": " << r2.summary.error;
        EXPECT_LE(strategy_testing::max_rel_diff(r1.artifacts.parameters, r2.artifacts.parameters), 1e-5) << strategy;
        EXPECT_LE(strategy_testing::max_rel_diff(r1.artifacts.buffers, r2.artifacts.buffers), 1e-5) << strategy;
    }
    json local = one;
    local["devices"] = {"cuda:0", "cuda:0"};
    local["strategy"] = {{"type", "ddp"}, {"sync_batchnorm", false}};
    const auto r3 = run_it(local);
    ASSERT_EQ(r3.summary.status, "finished") << r3.summary.error;
    EXPECT_GT(strategy_testing::max_rel_diff(r1.artifacts.buffers, r3.artifacts.buffers), 1e-4);
}

// Clipping sums squared norms over the ranks (zero's shards, the stages) with an all-reduce of
// host doubles, which on GPUs goes through device memory; ddp's speed balance all-gathers them.
TEST_F(GpuRuns, ClippedShardsAndBalancedDdpMatchTheSingleGpu) {
    using strategy_testing::run_it;
    json one = spirals({"cuda:0"}, "single");
    one["train"]["max_steps"] = 15;
    one["train"]["clip_norm"] = 0.05;
    const auto r1 = run_it(one);
    ASSERT_EQ(r1.summary.status, "finished") << r1.summary.error;
    for (const char* strategy : {R"({"type":"zero","stage":2})", R"({"type":"pipeline","micro_batches":2})",
                                 R"({"type":"ddp","balance":"speed"})"}) {
        json two = one;
        two["devices"] = {"cuda:0", "cuda:0"};
        two["strategy"] = json::parse(strategy);
        const auto r2 = run_it(two);
        ASSERT_EQ(r2.summary.status, "finished") << strategy << ": " << r2.summary.error;
        EXPECT_LE(strategy_testing::max_rel_diff(r1.artifacts.parameters, r2.artifacts.parameters), 1e-5) << strategy;
    }
}

TEST_F(GpuRuns, WhatTheGpuPathRefusesIsNamed) {
    using strategy_testing::run_it;
    auto r = [&](const json& x) {
        try {
            run_it(x);
        } catch (const ConfigError& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    json j = spirals({"cuda:0", "cpu:0"}, "ddp");
    EXPECT_NE(r(j).find("cannot be mixed"), std::string::npos) << r(j);
}

}  // namespace
}  // namespace paralab
