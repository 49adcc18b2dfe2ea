// Checkpoints and resume (engine/run/checkpoint.h): a run stopped at a chosen step and resumed
// from its checkpoint ends with the parameters of the run that was never stopped, bit for bit,
// for every strategy that checkpoints (tensor_parallel's and hybrid's on the miniature char-GPT,
// whose checkpoints hold the single device's layout); a corrupt or foreign checkpoint is refused with
// its reason and the previous one used (a FIFO, a sparse file of 100 GB and a flipped bit among
// them); a counter out of range or inconsistent is refused; a strategy that cannot checkpoint is
// refused; 100,000 tensors read back in linear time.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>

#include "engine/device/device.h"
#include "engine/io/safetensors.h"
#include "engine/run/checkpoint.h"
#include "strategy_testing.h"

namespace {

namespace fs = std::filesystem;
using namespace paralab;
using namespace strategy_testing;

// A folder of its own per test, removed at the end.
struct TempDir {
    fs::path path;
    explicit TempDir(const std::string& name)
        : path(fs::temp_directory_path() /
               ("paralab-ckpt-" + std::to_string(getpid()) + "-" + name)) {
        fs::remove_all(path);
        fs::create_directories(path);
    }
    ~TempDir() { fs::remove_all(path); }
};

// Sets the stop flag once step `at` has ended on every device: a condition, not a timer.
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

// The steps of each epoch end in checkpoints; every 20th step too.
json experiment(const json& strategy, int devices) {
    json j = spirals_mlp("ckpt", {{"type", "adam"}, {"lr", 0.01}}, 2);
    j["data"]["samples"] = 1000;  // 800 training examples: 25 steps an epoch
    j["train"]["checkpoint_every"] = 20;
    j["schedule"] = {{"type", "cosine"}, {"warmup_steps", 5}};
    return with_strategy(j, devices, strategy);
}

void expect_bitwise_equal(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_EQ(a[i].shape(), b[i].shape()) << "tensor " << i;
        EXPECT_EQ(0, std::memcmp(a[i].raw(), b[i].raw(), a[i].nbytes()))
            << "tensor " << i << " differs";
    }
}

// Stopped at `stop_at` (with checkpoints in `folder`), then resumed: the resumed run's result.
Result stop_and_resume(const json& j, const std::string& folder, int64_t stop_at,
                       int64_t* resumed_from, std::vector<std::string>* refused = nullptr) {
    {
        run::RunControl control;
        run::Checkpointing cp;
        cp.folder = folder;
        control.checkpoints = &cp;
        StopAt stop(control, stop_at);
        const Result stopped = run_it(j, &stop, &control);
        EXPECT_EQ(stopped.summary.status, "stopped");
    }
    if (refused) {  // the test spoils checkpoints between the runs
        std::vector<std::string> files = run::checkpoint_files(folder);
        EXPECT_FALSE(files.empty());
        std::ofstream(files.front(), std::ios::binary | std::ios::trunc) << "not a checkpoint";
    }
    run::RunControl control;
    run::Checkpointing cp;
    cp.folder = folder;
    cp.resume = true;
    cp.refused = [&](const std::string& path, const std::string& reason) {
        if (refused) refused->push_back(path + " | " + reason);
    };
    control.checkpoints = &cp;
    Result r = run_it(j, nullptr, &control);
    *resumed_from = cp.resumed_from_step;
    return r;
}

struct Case {
    const char* name;
    json strategy;
    int devices;
};

class ResumeExactly : public ::testing::TestWithParam<Case> {};

TEST_P(ResumeExactly, StoppedAndResumedEndsAsTheUninterruptedRun) {
    const Case& c = GetParam();
    const json j = experiment(c.strategy, c.devices);
    const Result whole = run_it(j);  // no checkpoints at all
    ASSERT_EQ(whole.summary.status, "finished");

    TempDir dir(c.name);
    int64_t from = 0;
    const Result resumed = stop_and_resume(j, dir.path.string(), 31, &from);
    EXPECT_GE(from, 31);  // the stop's own checkpoint, not the periodic one at 20
    EXPECT_LT(from, whole.summary.steps);
    ASSERT_EQ(resumed.summary.status, "finished") << resumed.summary.error;
    EXPECT_EQ(resumed.summary.steps, whole.summary.steps);
    // The step's loss sums the devices' parts in the order they arrive: with three or more
    // devices its last bits vary from run to run, resumed or not. The parameters do not.
    EXPECT_NEAR(resumed.summary.final_loss, whole.summary.final_loss,
                1e-12 * std::abs(whole.summary.final_loss));
    expect_bitwise_equal(resumed.artifacts.parameters, whole.artifacts.parameters);
    // The last kCheckpointsKept stay: the run ended at step 50 (epoch end and last step).
    const auto files = run::checkpoint_files(dir.path.string());
    ASSERT_EQ(files.size(), static_cast<size_t>(run::kCheckpointsKept));
    EXPECT_EQ(fs::path(files.front()).filename(), "step-50.safetensors");
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, ResumeExactly,
    ::testing::Values(
        Case{"single", {{"type", "single"}}, 1},
        Case{"data_parallel", {{"type", "data_parallel"}}, 2}, Case{"ddp", {{"type", "ddp"}}, 2},
        Case{"zero1", {{"type", "zero"}, {"stage", 1}}, 2},
        Case{"zero2", {{"type", "zero"}, {"stage", 2}}, 3},
        Case{"zero3", {{"type", "zero"}, {"stage", 3}}, 2},
        Case{"model_parallel", {{"type", "model_parallel"}}, 2},
        Case{"gpipe", {{"type", "pipeline"}, {"schedule", "gpipe"}, {"micro_batches", 4}}, 2},
        Case{"onef1b", {{"type", "pipeline"}, {"schedule", "1f1b"}, {"micro_batches", 4}}, 3}),
    [](const auto& info) { return std::string(info.param.name); });

// ---- tensor_parallel: shards written whole, cut again on resume -------------------------------

// The char-GPT in miniature (strategy_testing::tiny_gpt: two blocks of 4 heads, AdamW) for 12
// steps, a checkpoint every 4.
json gpt_experiment(const json& strategy, int devices) {
    static const std::string corpus =
        text_corpus("ckpt-gpt", "Cut the heads over the devices, stop, resume; the shards come back whole.", 120);
    json j = tiny_gpt("ckpt-gpt", corpus);
    j["train"]["max_steps"] = 12;
    j["train"]["checkpoint_every"] = 4;
    j["schedule"] = {{"type", "cosine"}, {"warmup_steps", 3}};
    return with_strategy(j, devices, strategy);
}

// The checkpoint at `path` of the experiment `j`, read as a resume reads it.
run::Checkpoint read_gpt_checkpoint(const json& j, const std::string& path) {
    const config::Experiment e = run::parse_experiment(j);
    auto device = make_cpu_device(0);
    nn::Model model(e.layers, run::model_input_shape(e), e.loss, DType::f32, *device);
    std::vector<Shape> shapes, buffer_shapes;
    for (const nn::Param* p : model.parameters()) shapes.push_back(p->value.shape());
    for (const Tensor& b : model.buffers()) buffer_shapes.push_back(b.shape());
    return run::read_checkpoint(path, e, run::checkpoint_names(model), shapes, buffer_shapes, 12);
}

// Largest |a - b| of each tensor pair relative to the largest |a| of that tensor (optimizer
// moments are far below 1, where max_rel_diff's 1 + scale would hide any difference).
double max_diff_per_tensor(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
    EXPECT_EQ(a.size(), b.size());
    double worst = 0;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
        EXPECT_EQ(a[i].shape(), b[i].shape()) << "tensor " << i;
        if (a[i].shape() != b[i].shape()) return INFINITY;
        double diff = 0, scale = 0;
        for (int64_t k = 0; k < a[i].numel(); ++k) {
            const double x = a[i].data<float>()[k], y = b[i].data<float>()[k];
            diff = std::max(diff, std::abs(x - y));
            scale = std::max(scale, std::abs(x));
        }
        worst = std::max(worst, diff / std::max(scale, 1e-30));
    }
    return worst;
}

// Stopped at step 7 and resumed, a run of strategy `c` ends with the uninterrupted run's
// parameters bit for bit. Its checkpoints hold the single device's layout: the stopped run's
// last checkpoint holds the whole parameters the run ended with, and the periodic one at step 4
// holds, tensor by tensor, the parameters and AdamW moments of a single device's run at step 4.
void expect_resumes_exactly_in_single_layout(const Case& c) {
    const json j = gpt_experiment(c.strategy, c.devices);
    const Result whole = run_it(j);
    ASSERT_EQ(whole.summary.status, "finished") << whole.summary.error;
    ASSERT_EQ(whole.summary.steps, 12);

    TempDir single_dir(std::string(c.name) + "-single");
    {
        run::RunControl control;
        run::Checkpointing cp;
        cp.folder = single_dir.path.string();
        control.checkpoints = &cp;
        ASSERT_EQ(run_it(gpt_experiment({{"type", "single"}}, 1), nullptr, &control).summary.status, "finished");
    }

    TempDir dir(c.name);
    {
        run::RunControl control;
        run::Checkpointing cp;
        cp.folder = dir.path.string();
        control.checkpoints = &cp;
        StopAt stop(control, 7);
        const Result stopped = run_it(j, &stop, &control);
        ASSERT_EQ(stopped.summary.status, "stopped") << stopped.summary.error;
        ASSERT_GE(stopped.summary.steps, 7);
        ASSERT_LT(stopped.summary.steps, 12);
        const auto files = run::checkpoint_files(dir.path.string());
        ASSERT_FALSE(files.empty());
        EXPECT_EQ(fs::path(files.front()).filename(),
                  "step-" + std::to_string(stopped.summary.steps) + ".safetensors");
        const run::Checkpoint last = read_gpt_checkpoint(j, files.front());
        expect_bitwise_equal(last.state.parameters, stopped.artifacts.parameters);

        const fs::path at4 = dir.path / "step-4.safetensors";
        ASSERT_TRUE(fs::exists(at4));
        const run::Checkpoint mine = read_gpt_checkpoint(j, at4.string());
        const run::Checkpoint single =
            read_gpt_checkpoint(gpt_experiment({{"type", "single"}}, 1), (single_dir.path / "step-4.safetensors").string());
        EXPECT_EQ(mine.state.optimizer_steps, 4);
        EXPECT_EQ(mine.state.optimizer_state_names, single.state.optimizer_state_names);
        EXPECT_LE(max_rel_diff(single.state.parameters, mine.state.parameters), 1e-5);
        ASSERT_EQ(mine.state.optimizer_state.size(), single.state.optimizer_state.size());
        for (size_t i = 0; i < single.state.optimizer_state.size(); ++i)
            EXPECT_LE(max_diff_per_tensor(single.state.optimizer_state[i], mine.state.optimizer_state[i]), 1e-5)
                << "optimizer state of parameter " << i;
    }

    run::RunControl control;
    run::Checkpointing cp;
    cp.folder = dir.path.string();
    cp.resume = true;
    control.checkpoints = &cp;
    const Result resumed = run_it(j, nullptr, &control);
    EXPECT_GE(cp.resumed_from_step, 7);  // the stop's own checkpoint, not the periodic one at 4
    EXPECT_LT(cp.resumed_from_step, 12);
    ASSERT_EQ(resumed.summary.status, "finished") << resumed.summary.error;
    EXPECT_EQ(resumed.summary.steps, whole.summary.steps);
    EXPECT_EQ(resumed.summary.final_loss, whole.summary.final_loss);
    expect_bitwise_equal(resumed.artifacts.parameters, whole.artifacts.parameters);
    const auto files = run::checkpoint_files(dir.path.string());
    ASSERT_EQ(files.size(), static_cast<size_t>(run::kCheckpointsKept));
    EXPECT_EQ(fs::path(files.front()).filename(), "step-12.safetensors");
}

class TensorParallelResumesExactly : public ::testing::TestWithParam<Case> {};

TEST_P(TensorParallelResumesExactly, StoppedAndResumedEndsAsTheUninterruptedRun) {
    expect_resumes_exactly_in_single_layout(GetParam());
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, TensorParallelResumesExactly,
    ::testing::Values(Case{"tensor_parallel2", {{"type", "tensor_parallel"}}, 2},
                      Case{"tensor_parallel4", {{"type", "tensor_parallel"}}, 4},
                      Case{"sequence_parallel2", {{"type", "tensor_parallel"}, {"sequence_parallel", true}}, 2},
                      Case{"sequence_parallel4", {{"type", "tensor_parallel"}, {"sequence_parallel", true}}, 4}),
    [](const auto& info) { return std::string(info.param.name); });

// ---- hybrid: each device's slices (and, at zero 1 to 3, its shard of them) written whole -----

class HybridResumesExactly : public ::testing::TestWithParam<Case> {};

TEST_P(HybridResumesExactly, StoppedAndResumedEndsAsTheUninterruptedRun) {
    expect_resumes_exactly_in_single_layout(GetParam());
}

json hybrid_mesh(json options) {
    options["type"] = "hybrid";
    return options;
}

// dp2·tp2 at zero 0 to 3 (2 of the batch of 4 a replica), tp2·pp2 under 1f1b (2
// micro-batches), dp2·pp2 interleaved (v 2: the 6 top-level layers in 4 chunks) at zero 1 to 3,
// and dp2·tp2 with sequence parallelism at zero 1.
INSTANTIATE_TEST_SUITE_P(
    Meshes, HybridResumesExactly,
    ::testing::Values(Case{"dp2tp2_zero0", hybrid_mesh({{"dp", 2}, {"tp", 2}, {"zero", 0}}), 4},
                      Case{"dp2tp2_zero1", hybrid_mesh({{"dp", 2}, {"tp", 2}, {"zero", 1}}), 4},
                      Case{"dp2tp2_zero2", hybrid_mesh({{"dp", 2}, {"tp", 2}, {"zero", 2}}), 4},
                      Case{"dp2tp2_zero3", hybrid_mesh({{"dp", 2}, {"tp", 2}, {"zero", 3}}), 4},
                      Case{"tp2pp2_1f1b",
                           hybrid_mesh({{"tp", 2}, {"pp", 2}, {"schedule", "1f1b"}, {"micro_batches", 2}}), 4},
                      Case{"dp2pp2_interleaved_zero1",
                           hybrid_mesh({{"dp", 2}, {"pp", 2}, {"zero", 1}, {"schedule", "interleaved_1f1b"},
                                        {"interleave", 2}, {"micro_batches", 2}}),
                           4},
                      Case{"dp2pp2_interleaved_zero2",
                           hybrid_mesh({{"dp", 2}, {"pp", 2}, {"zero", 2}, {"schedule", "interleaved_1f1b"},
                                        {"interleave", 2}, {"micro_batches", 2}}),
                           4},
                      Case{"dp2pp2_interleaved_zero3",
                           hybrid_mesh({{"dp", 2}, {"pp", 2}, {"zero", 3}, {"schedule", "interleaved_1f1b"},
                                        {"interleave", 2}, {"micro_batches", 2}}),
                           4},
                      Case{"dp2tp2_sequence_parallel_zero1",
                           hybrid_mesh({{"dp", 2}, {"tp", 2}, {"zero", 1}, {"sequence_parallel", true}}), 4}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(Checkpoint, ACorruptCheckpointIsRefusedAndThePreviousOneUsed) {
    const json j = experiment({{"type", "single"}}, 1);
    const Result whole = run_it(j);
    TempDir dir("corrupt");
    int64_t from = 0;
    std::vector<std::string> refused;
    const Result resumed = stop_and_resume(j, dir.path.string(), 31, &from, &refused);
    ASSERT_EQ(refused.size(), 1u);
    EXPECT_NE(refused[0].find("step-31.safetensors"), std::string::npos) << refused[0];
    EXPECT_EQ(from, 25);  // the epoch's end before it
    ASSERT_EQ(resumed.summary.status, "finished");
    expect_bitwise_equal(resumed.artifacts.parameters, whole.artifacts.parameters);
}

TEST(Checkpoint, AnotherExperimentsCheckpointIsRefused) {
    TempDir dir("foreign");
    {
        run::RunControl control;
        run::Checkpointing cp;
        cp.folder = dir.path.string();
        control.checkpoints = &cp;
        run_it(experiment({{"type", "single"}}, 1), nullptr, &control);
    }
    json other = experiment({{"type", "single"}}, 1);
    other["optimizer"]["lr"] = 0.02;
    run::RunControl control;
    run::Checkpointing cp;
    cp.folder = dir.path.string();
    cp.resume = true;
    std::vector<std::string> reasons;
    cp.refused = [&](const std::string&, const std::string& reason) { reasons.push_back(reason); };
    control.checkpoints = &cp;
    try {
        run_it(other, nullptr, &control);
        FAIL() << "resumed from another experiment's checkpoints";
    } catch (const ConfigError& err) {
        EXPECT_NE(std::string(err.what()).find("could be used"), std::string::npos) << err.what();
    }
    ASSERT_EQ(reasons.size(), static_cast<size_t>(run::kCheckpointsKept));
    EXPECT_NE(reasons[0].find("another experiment"), std::string::npos) << reasons[0];
}

TEST(Checkpoint, ARunWithoutCheckpointsCannotResume) {
    TempDir dir("none");
    run::RunControl control;
    run::Checkpointing cp;
    cp.folder = dir.path.string();
    cp.resume = true;
    control.checkpoints = &cp;
    try {
        run_it(experiment({{"type", "single"}}, 1), nullptr, &control);
        FAIL() << "resumed without a checkpoint";
    } catch (const ConfigError& err) {
        EXPECT_NE(std::string(err.what()).find("no checkpoint"), std::string::npos) << err.what();
    }
}

TEST(Checkpoint, AStrategyThatCannotCheckpointIsRefused) {
    TempDir dir("hogwild");
    const json j = experiment({{"type", "hogwild"}}, 2);
    std::string error;
    {
        run::RunControl control;
        run::Checkpointing cp;
        cp.folder = dir.path.string();
        cp.written = [&](const std::string&, int64_t, double, const std::string& e) { error = e; };
        control.checkpoints = &cp;
        EXPECT_EQ(run_it(j, nullptr, &control).summary.status, "finished");
    }
    EXPECT_NE(error.find("hogwild writes no checkpoints"), std::string::npos) << error;
    EXPECT_TRUE(run::checkpoint_files(dir.path.string()).empty());
    run::RunControl control;
    run::Checkpointing cp;
    cp.folder = dir.path.string();
    cp.resume = true;
    control.checkpoints = &cp;
    try {
        run_it(j, nullptr, &control);
        FAIL() << "a hogwild run resumed";
    } catch (const ConfigError& err) {
        EXPECT_NE(std::string(err.what()).find("cannot resume"), std::string::npos) << err.what();
    }
}

TEST(Checkpoint, FileHoldsNamedTensorsAndMetadata) {
    TempDir dir("format");
    run::RunControl control;
    run::Checkpointing cp;
    cp.folder = dir.path.string();
    control.checkpoints = &cp;
    const config::Experiment e = run::parse_experiment(experiment({{"type", "single"}}, 1));
    // What a process killed while writing leaves: removed by the next checkpoint.
    const fs::path stale = dir.path / "step-7.safetensors.tmp-AbC123";
    std::ofstream(stale) << "partial";
    run::run_experiment(e, nullptr, &control);
    EXPECT_FALSE(fs::exists(stale));
    const auto files = run::checkpoint_files(dir.path.string());
    ASSERT_FALSE(files.empty());
    std::ifstream in(files.front(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), {});
    for (const char* name :
         {"layers.0.weight", "layers.4.bias", "optim.layers.0.weight.exp_avg",
          "optim.layers.2.bias.exp_avg_sq", "identity", "batch_index", "shuffle_seed"})
        EXPECT_NE(bytes.find(name), std::string::npos) << name;
    EXPECT_NE(bytes.find(run::experiment_identity(e)), std::string::npos);
}

// The state a checkpoint holds comes back as written: tensors by name, the optimizer's steps,
// the loss scaler's policy (fp16; tests/gpu/test_gpu_checkpoint.cpp resumes such runs), the
// position.
TEST(Checkpoint, StateRoundTripsThroughTheFile) {
    TempDir dir("roundtrip");
    const config::Experiment e = run::parse_experiment(experiment({{"type", "single"}}, 1));
    auto device = make_cpu_device(0);
    nn::Model model(e.layers, run::model_input_shape(e), e.loss, DType::f32, *device);
    Rng rng(5);
    model.reset_parameters(rng);
    const run::TensorNames names = run::checkpoint_names(model);
    strategy::TrainingState st;
    std::vector<Shape> shapes;
    st.optimizer_state_names = {"exp_avg", "exp_avg_sq"};
    for (const nn::Param* p : model.parameters()) {
        shapes.push_back(p->value.shape());
        st.parameters.push_back(p->value.clone(MemCategory::workspace));
        Tensor m = p->value.clone(MemCategory::workspace),
               v = p->value.clone(MemCategory::workspace);
        m.fill(0.25);
        v.fill(0.5);
        st.optimizer_state.push_back({m, v});
    }
    st.optimizer_steps = 31;
    st.has_scaler = true;
    st.scaler = {1024.0, 7, 3};
    const std::string path = run::write_checkpoint(dir.path.string(), e, names, {31, 1, 6}, st);
    const run::Checkpoint c = run::read_checkpoint(path, e, names, shapes, {}, 50);
    EXPECT_EQ(c.position.step, 31);
    EXPECT_EQ(c.position.epoch, 1);
    EXPECT_EQ(c.position.batch_index, 6);
    EXPECT_EQ(c.state.optimizer_steps, 31);
    ASSERT_TRUE(c.state.has_scaler);
    EXPECT_EQ(c.state.scaler.scale, 1024.0);
    EXPECT_EQ(c.state.scaler.clean, 7);
    EXPECT_EQ(c.state.scaler.skipped, 3);
    expect_bitwise_equal(c.state.parameters, st.parameters);
    ASSERT_EQ(c.state.optimizer_state.size(), st.optimizer_state.size());
    for (size_t i = 0; i < st.optimizer_state.size(); ++i)
        expect_bitwise_equal(c.state.optimizer_state[i], st.optimizer_state[i]);
    // A shape that is not the model's is refused, naming the tensor.
    shapes[0] = Shape{3, 3};
    try {
        run::read_checkpoint(path, e, names, shapes, {}, 50);
        FAIL() << "a checkpoint of other shapes was read";
    } catch (const Error& err) {
        EXPECT_NE(std::string(err.what()).find(names.parameters[0]), std::string::npos)
            << err.what();
    }
}

// ---- an attacker's checkpoints -------------------------------------------------------------

// A newer FIFO (its open would block forever), a newer sparse file of 100 GB (a checkpoint with a
// hole after it: allocating for it failed with std::bad_alloc) and the newest real checkpoint
// with a bit flipped in its data: each refused with its reason, naming the file; the resume goes
// on from the checkpoint before them and ends as the run never stopped.
TEST(Checkpoint, UnusableNewerFilesAreRefusedAndTheResumeFallsBack) {
    const json j = experiment({{"type", "single"}}, 1);
    const Result whole = run_it(j);
    TempDir dir("attacked");
    const std::string folder = dir.path.string();
    {
        run::RunControl control;
        run::Checkpointing cp;
        cp.folder = folder;
        control.checkpoints = &cp;
        StopAt stop(control, 31);
        ASSERT_EQ(run_it(j, &stop, &control).summary.status, "stopped");
    }
    const fs::path at31 = dir.path / "step-31.safetensors", at25 = dir.path / "step-25.safetensors";
    ASSERT_TRUE(fs::exists(at31) && fs::exists(at25));
    {
        std::fstream f(at31, std::ios::in | std::ios::out | std::ios::binary);
        f.seekg(-1, std::ios::end);
        char byte = 0;
        f.read(&byte, 1);
        f.seekp(-1, std::ios::end);
        byte ^= 0x10;
        f.write(&byte, 1);
    }
    const fs::path sparse = dir.path / "step-998.safetensors", fifo = dir.path / "step-999.safetensors";
    fs::copy_file(at25, sparse);
    fs::resize_file(sparse, fs::file_size(sparse) + (uint64_t(100) << 30));
    ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);

    run::RunControl control;
    run::Checkpointing cp;
    cp.folder = folder;
    cp.resume = true;
    std::vector<std::pair<std::string, std::string>> refused;
    cp.refused = [&](const std::string& path, const std::string& reason) { refused.emplace_back(path, reason); };
    control.checkpoints = &cp;
    auto resumed = std::async(std::launch::async, [&] { return run_it(j, nullptr, &control); });
    if (resumed.wait_for(std::chrono::seconds(300)) != std::future_status::ready) {
        // Opening the FIFO's write end and closing it lets a blocked reader see the end of the file.
        const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
        if (fd >= 0) ::close(fd);
        ADD_FAILURE() << "the resume blocked";
    }
    const Result r = resumed.get();
    ASSERT_EQ(refused.size(), 3u);
    EXPECT_EQ(refused[0].first, fifo.string());
    EXPECT_NE(refused[0].second.find(fifo.string() + " is a FIFO, not a regular file"), std::string::npos)
        << refused[0].second;
    EXPECT_EQ(refused[1].first, sparse.string());
    EXPECT_NE(refused[1].second.find(sparse.string() + ": the data area has 107374182400 bytes after the last tensor"),
              std::string::npos)
        << refused[1].second;
    EXPECT_EQ(refused[2].first, at31.string());
    EXPECT_NE(refused[2].second.find(at31.string() + ": the checksum of the data does not match"), std::string::npos)
        << refused[2].second;
    EXPECT_EQ(cp.resumed_from_step, 25);
    ASSERT_EQ(r.summary.status, "finished") << r.summary.error;
    expect_bitwise_equal(r.artifacts.parameters, whole.artifacts.parameters);
}

namespace {

// A checkpoint of the spirals experiment at `position`, its optimizer state included, from a
// model of its own.
struct WrittenCheckpoint {
    config::Experiment e;
    std::unique_ptr<Device> device;
    std::unique_ptr<nn::Model> model;
    run::TensorNames names;
    std::vector<Shape> shapes;
    std::string path;
};

WrittenCheckpoint write_spirals_checkpoint(const std::string& folder, const run::CheckpointPosition& position) {
    WrittenCheckpoint w;
    w.e = run::parse_experiment(experiment({{"type", "single"}}, 1));
    w.device = make_cpu_device(0);
    w.model = std::make_unique<nn::Model>(w.e.layers, run::model_input_shape(w.e), w.e.loss, DType::f32, *w.device);
    Rng rng(5);
    w.model->reset_parameters(rng);
    w.names = run::checkpoint_names(*w.model);
    strategy::TrainingState st;
    st.optimizer_state_names = {"exp_avg", "exp_avg_sq"};
    for (const nn::Param* p : w.model->parameters()) {
        w.shapes.push_back(p->value.shape());
        st.parameters.push_back(p->value.clone(MemCategory::workspace));
        st.optimizer_state.push_back({p->value.clone(MemCategory::workspace), p->value.clone(MemCategory::workspace)});
    }
    st.optimizer_steps = position.step;
    w.path = run::write_checkpoint(folder, w.e, w.names, position, st);
    return w;
}

// The checkpoint at `path` written again with its "paralab" metadata changed by `change`, and
// fresh checksums: what a flipped digit that the checksums missed would leave.
void rewrite_metadata(const std::string& path, const std::function<void(json&)>& change) {
    const io::SafetensorsFile f = io::SafetensorsFile::read(path);
    std::vector<io::StTensor> tensors;
    for (const io::StEntry& e : f.entries()) tensors.push_back({e.name, e.dtype, e.shape, f.data(e), e.bytes});
    std::map<std::string, std::string> meta = f.metadata();
    json m = json::parse(meta.at("paralab"));
    change(m);
    meta["paralab"] = m.dump();
    io::write_safetensors(path, tensors, meta);
}

}  // namespace

// A flipped digit in the stored step (156 -> 556 in a run of 380 steps) is refused: by the
// header's checksum, and, where the checksums are rewritten, by the step's range and by the
// step's other copies; every counter of the metadata is checked so.
TEST(Checkpoint, CountersOutOfRangeOrInconsistentAreRefused) {
    TempDir dir("counters");
    const WrittenCheckpoint w = write_spirals_checkpoint(dir.path.string(), {156, 1, 6});
    const std::string& path = w.path;
    auto read_error = [&](int64_t planned_steps) -> std::string {
        try {
            run::read_checkpoint(path, w.e, w.names, w.shapes, {}, planned_steps);
        } catch (const Error& err) {
            return err.what();
        }
        return "read";
    };
    ASSERT_EQ(read_error(380), "read");
    const std::string good = [&] {
        std::ifstream in(path, std::ios::binary);
        return std::string((std::istreambuf_iterator<char>(in)), {});
    }();

    // The digit flipped in place ('1' -> '5', one bit): the header's checksum no longer matches.
    {
        std::string bytes = good;
        const size_t at = bytes.rfind("\\\"step\\\":156");  // the top-level step, after schedule.step
        ASSERT_NE(at, std::string::npos);
        bytes[at + 9] = '5';
        std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
        EXPECT_NE(read_error(380).find(path + ": the checksum of the header does not match"), std::string::npos)
            << read_error(380);
    }

    struct Case {
        const char* what;
        std::function<void(json&)> change;
        const char* message;
    };
    const std::vector<Case> cases = {
        {"step beyond the plan", [](json& m) { m["step"] = 556; }, "the checkpoint's step 556 is outside the run's steps 1 to 380"},
        {"step copies differ", [](json& m) { m["step"] = 150; }, "the checkpoint's step 150 and its schedule.step 156 differ"},
        {"dropout step differs", [](json& m) { m["rng"]["dropout_step"] = 155; }, "its rng.dropout_step 155 differ"},
        {"step past int64", [](json& m) { m["step"] = uint64_t(INT64_MAX) + 1; }, "\"step\" is 9223372036854775808, not an integer in range"},
        {"step as a float", [](json& m) { m["step"] = 1e300; }, "not an integer in range"},
        {"step zero", [](json& m) { m["step"] = 0; m["schedule"]["step"] = 0; m["rng"]["dropout_step"] = 0; },
         "the checkpoint's step 0 is outside the run's steps 1 to 380"},
        {"more optimizer steps", [](json& m) { m["optimizer"]["steps_taken"] = 556; }, "optimizer.steps_taken 556 is outside [0, 156]"},
        {"epochs differ", [](json& m) { m["epoch"] = 5; }, "the checkpoint's epoch 5 and its loader.epoch 1 differ"},
        {"epoch beyond the plan", [](json& m) { m["epoch"] = 7; m["loader"]["epoch"] = 7; }, "loader.epoch 7 is outside [0, 2]"},
        {"negative batch", [](json& m) { m["loader"]["batch_index"] = -6; }, "loader.batch_index -6 is outside [0, 156]"},
        {"scaler", [](json& m) { m["loss_scaler"] = {{"scale", -1.0}, {"clean", 0}, {"skipped", 0}}; },
         "loss_scaler.scale -1.0 is not a positive finite number"},
        {"state names beyond the file", [](json& m) { m["optimizer"]["state_names"] = std::vector<std::string>(100, "exp_avg"); },
         "optimizer.state_names lists 100 states, more than its 18 tensors can hold"},
        {"scaler skips", [](json& m) { m["loss_scaler"] = {{"scale", 1024.0}, {"clean", 0}, {"skipped", 557}}; },
         "loss_scaler.skipped 557 is outside [0, 156]"},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.what);
        std::ofstream(path, std::ios::binary | std::ios::trunc) << good;
        rewrite_metadata(path, c.change);
        const std::string error = read_error(380);
        EXPECT_NE(error.find(path + ": "), std::string::npos) << error;
        EXPECT_NE(error.find(c.message), std::string::npos) << error;
    }
}

// A checkpoint of 100,000 tensors (a model of 100,000 layers) reads back in time linear in its
// size: its header took minutes to parse.
TEST(Checkpoint, AHundredThousandTensorsReadBack) {
    TempDir dir("many");
    const config::Experiment e = run::parse_experiment(experiment({{"type", "single"}}, 1));
    constexpr int n = 100'000;
    run::TensorNames names;
    std::vector<Shape> shapes(n, Shape{1});
    strategy::TrainingState st;
    for (int i = 0; i < n; ++i) {
        names.parameters.push_back("layers." + std::to_string(i) + ".weight");
        Tensor t = Tensor::empty(Shape{1}, DType::f32, detached_host_device(), MemCategory::workspace);
        t.data<float>()[0] = float(i);
        st.parameters.push_back(t);
    }
    st.optimizer_steps = 31;
    const std::string path = run::write_checkpoint(dir.path.string(), e, names, {31, 1, 6}, st);
    const auto t0 = std::chrono::steady_clock::now();
    auto read = std::async(std::launch::async, [&] { return run::read_checkpoint(path, e, names, shapes, {}, 50); });
    if (read.wait_for(std::chrono::seconds(120)) != std::future_status::ready) {
        ADD_FAILURE() << "still reading after 120 s";
        std::fflush(stdout);
        std::_Exit(1);  // the reading thread cannot be stopped
    }
    const run::Checkpoint c = read.get();
    std::printf("read a checkpoint of %d tensors in %.3f s\n", n,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    ASSERT_EQ(c.state.parameters.size(), size_t(n));
    for (int i : {0, 77'777, n - 1}) EXPECT_EQ(c.state.parameters[size_t(i)].data<float>()[0], float(i)) << i;
}

}  // namespace

