// Checkpoints of runs on GPUs (engine/run/checkpoint.h): fp16 mixed precision, whose loss
// scaler's state is part of a checkpoint, stopped at a chosen step and resumed, ends with the
// parameters of the run never stopped, bit for bit; on one GPU and sharded over two virtual
// GPUs. SKIPPED without a GPU (the fake-GPU build runs it on the host).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>

#include <unistd.h>

#include "../engine/strategy_testing.h"
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

}  // namespace
}  // namespace paralab
