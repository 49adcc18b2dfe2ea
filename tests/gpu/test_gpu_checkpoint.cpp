// Checkpoints of runs on GPUs (engine/run/checkpoint.h): fp16 mixed precision, whose loss
// scaler's state is part of a checkpoint, stopped at a chosen step and resumed, ends with the
// parameters of the run never stopped, bit for bit; on one GPU and sharded over virtual GPUs
// (tensor_parallel's shards on two, hybrid's meshes on four). SKIPPED without a GPU (the
// fake-GPU build runs it on the host).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>

#include <unistd.h>

#include "../engine/strategy_testing.h"
#include "engine/device/device.h"
#include "engine/run/checkpoint.h"
#include "gpu_testing.h"

namespace paralab {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

class StopAt : public run::RunObserver {
public:
    StopAt(run::RunControl& control, int64_t at) : m_control(control), m_at(at) {}
    void on_step_end(const config::StepRecord& r) override {
        if (r.step >= m_at) m_control.stop = true;
    }

private:
    run::RunControl& m_control;
    int64_t m_at;
};

class GpuCheckpoints : public gpu_testing::GpuParamTest<std::string> {};

TEST_P(GpuCheckpoints, Fp16StoppedAndResumedEndsAsTheUninterruptedRun) {
    using strategy_testing::run_it;
    json j = strategy_testing::spirals_mlp("gpu-ckpt", {{"type", "adam"}, {"lr", 0.01}}, 2);
    j["data"]["samples"] = 1000;  // 25 steps an epoch
    j["train"]["precision"] = "fp16";
    j["strategy"] = json::parse(GetParam());
    j["devices"] = j["strategy"]["type"] == "single" ? json{"cuda:0"} : json{"cuda:0", "cuda:0"};
    const auto whole = run_it(j);
    ASSERT_EQ(whole.summary.status, "finished") << whole.summary.error;

    const fs::path folder =
        fs::temp_directory_path() / ("paralab-gpu-ckpt-" + std::to_string(::getpid()));
    fs::remove_all(folder);
    {
        run::RunControl control;
        run::Checkpointing cp;
        cp.folder = folder.string();
        control.checkpoints = &cp;
        StopAt stop(control, 31);
        EXPECT_EQ(run_it(j, &stop, &control).summary.status, "stopped");
    }
    run::RunControl control;
    run::Checkpointing cp;
    cp.folder = folder.string();
    cp.resume = true;
    control.checkpoints = &cp;
    const auto resumed = run_it(j, nullptr, &control);
    fs::remove_all(folder);
    ASSERT_EQ(resumed.summary.status, "finished") << resumed.summary.error;
    EXPECT_GE(cp.resumed_from_step, 31);
    const auto& a = resumed.artifacts.parameters;
    const auto& b = whole.artifacts.parameters;
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i)
        EXPECT_EQ(0, std::memcmp(a[i].raw(), b[i].raw(), a[i].nbytes()))
            << "tensor " << i << " differs";
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, GpuCheckpoints,
    ::testing::Values(R"({"type":"single"})", R"({"type":"zero","stage":2})",
                      R"({"type":"pipeline","micro_batches":2,"schedule":"1f1b"})"),
    [](const auto& info) {
        const json s = json::parse(info.param);
        std::string name = s["type"].get<std::string>();
        if (s.contains("stage")) name += std::to_string(s["stage"].get<int>());
        return name;
    });

// The sharded strategies on virtual GPUs in fp16 (the shards agree on every overflow; the
// scaler's state is device 0's, the same on all): tensor_parallel on two, with and without
// sequence parallelism, and hybrid on four at zero 1, whose optimizer state lies in 1/dp shards
// on the GPUs: dp2·tp2, and dp2·pp2 interleaved (v 2). The miniature char-GPT stopped at step 7
// and resumed ends as the run never stopped, bit for bit: its parameters, and its last
// checkpoint's optimizer state and loss scaler position.
class GpuShardedCheckpoints : public gpu_testing::GpuParamTest<std::string> {};

TEST_P(GpuShardedCheckpoints, Fp16StoppedAndResumedEndsAsTheUninterruptedRun) {
    using strategy_testing::run_it;
    static const std::string corpus =
        strategy_testing::text_corpus("gpu-shard-ckpt", "Half-precision shards, stopped and resumed,", 80);
    json j = strategy_testing::tiny_gpt("gpu-shard-ckpt", corpus);
    j["train"]["precision"] = "fp16";
    j["train"]["max_steps"] = 12;
    j["train"]["checkpoint_every"] = 4;
    j["strategy"] = json::parse(GetParam());
    j["devices"] = json::array();
    for (int d = 0; d < (j["strategy"]["type"] == "hybrid" ? 4 : 2); ++d) j["devices"].push_back("cuda:0");
    const fs::path folder =
        fs::temp_directory_path() / ("paralab-gpu-shard-ckpt-" + std::to_string(::getpid()));
    const fs::path whole_folder = folder.string() + "-whole";
    fs::remove_all(folder);
    fs::remove_all(whole_folder);
    strategy_testing::Result whole;
    {
        run::RunControl control;
        run::Checkpointing cp;
        cp.folder = whole_folder.string();
        control.checkpoints = &cp;
        whole = run_it(j, nullptr, &control);
    }
    ASSERT_EQ(whole.summary.status, "finished") << whole.summary.error;
    {
        run::RunControl control;
        run::Checkpointing cp;
        cp.folder = folder.string();
        control.checkpoints = &cp;
        StopAt stop(control, 7);
        EXPECT_EQ(run_it(j, &stop, &control).summary.status, "stopped");
    }
    run::RunControl control;
    run::Checkpointing cp;
    cp.folder = folder.string();
    cp.resume = true;
    control.checkpoints = &cp;
    const auto resumed = run_it(j, nullptr, &control);
    // The last checkpoints of both runs: the same tensors (parameters and AdamW moments) and
    // the same loss scaler position (its clean steps counted across the resume).
    const config::Experiment e = run::parse_experiment(j);
    auto host = make_cpu_device(0);
    nn::Model model(e.layers, run::model_input_shape(e), e.loss, DType::f32, *host);
    std::vector<Shape> shapes;
    for (const nn::Param* p : model.parameters()) shapes.push_back(p->value.shape());
    const auto last = [&](const fs::path& f) {
        return run::read_checkpoint((f / "step-12.safetensors").string(), e, run::checkpoint_names(model), shapes, {}, 12);
    };
    const run::Checkpoint want = last(whole_folder), got = last(folder);
    fs::remove_all(folder);
    fs::remove_all(whole_folder);
    ASSERT_TRUE(want.state.has_scaler && got.state.has_scaler);
    EXPECT_EQ(got.state.scaler.scale, want.state.scaler.scale);
    EXPECT_EQ(got.state.scaler.clean, want.state.scaler.clean);
    EXPECT_EQ(got.state.scaler.skipped, want.state.scaler.skipped);
    EXPECT_EQ(got.state.optimizer_steps, want.state.optimizer_steps);
    ASSERT_EQ(got.state.optimizer_state.size(), want.state.optimizer_state.size());
    for (size_t i = 0; i < want.state.optimizer_state.size(); ++i) {
        ASSERT_EQ(got.state.optimizer_state[i].size(), want.state.optimizer_state[i].size());
        ASSERT_EQ(want.state.optimizer_state[i].size(), 2u) << "AdamW's two moments of parameter " << i;
        for (size_t k = 0; k < want.state.optimizer_state[i].size(); ++k)
            EXPECT_EQ(0, std::memcmp(got.state.optimizer_state[i][k].raw(), want.state.optimizer_state[i][k].raw(),
                                     want.state.optimizer_state[i][k].nbytes()))
                << "optimizer state " << k << " of parameter " << i << " differs";
    }
    ASSERT_EQ(resumed.summary.status, "finished") << resumed.summary.error;
    EXPECT_GE(cp.resumed_from_step, 7);
    EXPECT_LT(cp.resumed_from_step, 12);
    EXPECT_EQ(resumed.summary.final_loss, whole.summary.final_loss);
    const auto& a = resumed.artifacts.parameters;
    const auto& b = whole.artifacts.parameters;
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i)
        EXPECT_EQ(0, std::memcmp(a[i].raw(), b[i].raw(), a[i].nbytes()))
            << "tensor " << i << " differs";
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, GpuShardedCheckpoints,
    ::testing::Values(R"({"type":"tensor_parallel"})", R"({"type":"tensor_parallel","sequence_parallel":true})",
                      R"({"type":"hybrid","dp":2,"tp":2,"zero":1})",
                      R"({"type":"hybrid","dp":2,"pp":2,"zero":1,"schedule":"interleaved_1f1b",)"
                      R"("interleave":2,"micro_batches":2})"),
    [](const auto& info) {
        const json s = json::parse(info.param);
        if (s["type"] == "tensor_parallel") return std::string(s.contains("sequence_parallel") ? "sequence_parallel" : "tensor_parallel");
        return s.contains("tp") ? std::string("dp2tp2_zero1") : std::string("dp2pp2_interleaved_zero1");
    });

}  // namespace
}  // namespace paralab
