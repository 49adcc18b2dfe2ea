// Runs across the processes of an MPI job, run by `mpirun -np N` (N = 2 and 3; CTest
// label `mpi`): every process runs one device, or two, and
//   - ddp, zero (stage 1; stage 3 with and without prefetch), data_parallel, model_parallel,
//     pipeline, the sync parameter server, tensor_parallel (a small char-GPT; with
//     sequence_parallel too) and hybrid meshes of the char-GPT (dp · tp at zero 1, tp · pp with
//     sequence parallelism, dp · pp at zero 3) train to the parameters of the in-process run on as many devices
//     (rank 0 runs that too): the same to float rounding (MPI's reduction order), exactly for
//     the stage strategies and the server, whose messages carry values unchanged;
//   - the async parameter server runs with its workers in other processes;
//   - rank 0's observer hears every rank's step records and spans, under the world's names;
//   - an eval during training and the final one evaluate the model put together on rank 0;
//   - the ranks' loaders cover each epoch exactly once between them;
//   - hogwild is refused on every process, and so is a problem of one process, with rank 0
//     saying why.
// Faults (a rank killed or hung, a stop) are tested on the real CLI by test_mpi_faults.sh.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "engine/data/dataset.h"
#include "engine/data/loader.h"
#include "engine/run/experiment_file.h"
#include "engine/run/trainer.h"
#include "../engine/strategy_testing.h"
#include "mpi_testing.h"

using namespace paralab;
using nlohmann::json;
namespace pcomm = paralab::comm;

namespace {

// The text the GPT experiment trains on: one file for every process of the job (the experiment
// must be the same everywhere), named by rank 0's pid and written by rank 0 once.
const std::string& job_corpus() {
    static const std::string path = [] {
        double pid = mpi_testing::comm().rank() == 0 ? double(::getpid()) : 0.0;
        mpi_testing::comm().all_reduce(&pid, 1, DType::f64, pcomm::ReduceOp::sum);
        const auto p = std::filesystem::temp_directory_path() /
                       ("paralab-mpi-gpt-" + std::to_string(static_cast<long long>(pid)) + ".txt");
        if (mpi_testing::comm().rank() == 0) {
            std::ofstream out(p);
            for (int i = 0; i < 120; ++i) out << "Each process holds its heads; the sums cross over MPI. " << i << "\n";
        }
        mpi_testing::comm().barrier();
        return p.string();
    }();
    return path;
}

// tensor_parallel's (and, as "sequence_parallel", with its sequence parallelism): a char-GPT in
// miniature whose 12 heads, ffn 24 and 12 positions divide over 2, 3, 4 and 6 devices. AdamW's
// eps is 1e-6 (see tests/engine/test_strategy_tensor_parallel.cpp: qkv's k bias has a gradient
// of zero up to rounding, and rounding differs with the reduction order).
json gpt_experiment(const std::string& strategy) {
    json j = json::parse(R"({
      "paralab": 1, "name": "job-gpt", "seed": 7,
      "data": {"dataset": "text", "seq_len": 12, "batch_size": 4, "test_limit": 6},
      "model": {"input": [12], "layers": [
          {"type": "embedding", "vocab": 256, "dim": 24}, {"type": "position_embedding"},
          {"type": "transformer_block", "heads": 12, "ffn": 24, "repeat": 2},
          {"type": "layernorm"}, {"type": "linear", "out": 256}], "loss": "cross_entropy"},
      "optimizer": {"type": "adamw", "lr": 0.01, "weight_decay": 0.01, "eps": 1e-6},
      "train": {"epochs": 1, "max_steps": 6, "eval_every": 3}
    })");
    j["data"]["path"] = job_corpus();
    j["strategy"] = {{"type", "tensor_parallel"}};
    if (strategy == "sequence_parallel") j["strategy"]["sequence_parallel"] = true;
    return j;
}

// Dropout (masks follow the global row index) and 26 rows per batch (3 does not divide it).
// "zero3" is zero at stage 3 (FSDP's schedule; its all-gathers on a second thread of each rank,
// the default prefetch), "zero3_no_prefetch" the same with every all-gather on the rank thread.
// hybrid meshes of the char-GPT over the job's `world` devices (2, 3, 4 or 6), f = 2 for an even
// world, else 3: "hybrid_dp_tp" dp f · tp world/f at zero 1; "hybrid_tp_pp" tp f · pp world/f
// with sequence parallelism and 2 micro-batches; "hybrid_zero3" dp f · pp world/f at zero 3. With
// one device per process every group spans processes; with two, some do.
json hybrid_experiment(const std::string& strategy, int world) {
    const int f = world % 2 == 0 ? 2 : 3, rest = world / f;
    json j = gpt_experiment("tensor_parallel");
    if (strategy == "hybrid_dp_tp") j["strategy"] = {{"type", "hybrid"}, {"dp", f}, {"tp", rest}, {"zero", 1}};
    if (strategy == "hybrid_tp_pp")
        j["strategy"] = {{"type", "hybrid"}, {"tp", f}, {"pp", rest}, {"micro_batches", 2}, {"sequence_parallel", true}};
    if (strategy == "hybrid_zero3") j["strategy"] = {{"type", "hybrid"}, {"dp", f}, {"pp", rest}, {"zero", 3}};
    return j;
}

json experiment(const std::string& strategy, int world = 0) {
    if (strategy == "tensor_parallel" || strategy == "sequence_parallel") return gpt_experiment(strategy);
    if (strategy.starts_with("hybrid")) return hybrid_experiment(strategy, world);
    json j = json::parse(R"({
      "paralab": 1, "name": "job", "seed": 5,
      "data": {"dataset": "spirals", "samples": 300, "classes": 3, "batch_size": 26},
      "model": {"layers": [
          {"type": "linear", "out": 32}, {"type": "relu"}, {"type": "dropout", "p": 0.2},
          {"type": "linear", "out": 32}, {"type": "tanh"}, {"type": "linear", "out": 3}],
        "loss": "cross_entropy"},
      "optimizer": {"type": "sgd", "lr": 0.1, "momentum": 0.9},
      "train": {"epochs": 1, "max_steps": 6, "eval_every": 3}
    })");
    j["strategy"] = {{"type", strategy}};
    if (strategy == "zero3") j["strategy"] = {{"type", "zero"}, {"stage", 3}};
    if (strategy == "zero3_no_prefetch") j["strategy"] = {{"type", "zero"}, {"stage", 3}, {"prefetch", false}};
    if (strategy == "pipeline") j["strategy"]["micro_batches"] = 3;
    if (strategy == "param_server") j["strategy"]["mode"] = "sync";
    return j;
}

// What rank 0's observer hears.
class Heard : public run::RunObserver {
public:
    void on_start(const config::Experiment& e, int64_t) override { devices = e.devices; }
    void on_span(const config::Span& s) override {
        std::lock_guard lock(m);
        span_devices.insert(s.device);
    }
    void on_step(const config::StepRecord& r) override {
        std::lock_guard lock(m);
        steps[r.device].push_back(r.step);
    }
    void on_step_end(const config::StepRecord& r) override { ended.push_back(r.step); }
    void on_eval(const config::EvalResult& r) override { evals.push_back(r); }
    void on_finish(const config::RunSummary& s) override { finished = s.status; }

    std::mutex m;
    std::vector<std::string> devices;
    std::set<std::string> span_devices;
    std::map<std::string, std::vector<int64_t>> steps;
    std::vector<int64_t> ended;
    std::vector<config::EvalResult> evals;
    std::string finished;
};

using JobTest = mpi_testing::AgreedTest;

// (strategy, devices per process): with one, MPI's own collectives (MpiRankGroup); with two,
// the hierarchical ones of MpiDeviceGroup, and messages between devices of one process too.
class JobParity : public mpi_testing::AgreedTest,
                  public ::testing::WithParamInterface<std::tuple<const char*, int>> {};

TEST_P(JobParity, SameParametersAsTheInProcessRunAndRankZeroHearsEveryRank) {
    const std::string strategy = std::get<0>(GetParam());
    const int per_process = std::get<1>(GetParam());
    const int processes = mpi_testing::comm().world();
    const int world = processes * per_process;
    const int me = mpi_testing::comm().rank();
    json j = experiment(strategy, world);
    j["devices"] = strategy_testing::devices(per_process);
    run::JobOptions job;
    job.rank_timeout_s = 30;
    Heard heard;
    run::RunArtifacts artifacts;
    const config::RunSummary s =
        run::run_experiment(run::parse_experiment(j), me == 0 ? &heard : nullptr, nullptr, 1, &artifacts, &job);
    ASSERT_EQ(s.status, "finished") << s.error;
    if (me != 0) {
        EXPECT_TRUE(artifacts.parameters.empty()) << "only rank 0 holds the trained model";
        return;
    }
    std::vector<std::string> names;
    for (int p = 0; p < processes; ++p)
        for (int d = 0; d < per_process; ++d) {  // appended: GCC 12 warns (-Wrestrict) on "r" + s
            std::string name = "r";
            name += std::to_string(p) + "/cpu:" + std::to_string(d);
            names.push_back(name);
        }
    EXPECT_EQ(s.devices, names);
    EXPECT_EQ(heard.devices, names);
    EXPECT_EQ(heard.finished, "finished");
    EXPECT_EQ(s.steps, 6);
    EXPECT_EQ(heard.ended, (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
    for (const std::string& d : names) {
        EXPECT_EQ(heard.steps[d], (std::vector<int64_t>{1, 2, 3, 4, 5, 6})) << d;
        EXPECT_TRUE(heard.span_devices.count(d)) << "no spans from " << d;
        EXPECT_TRUE(s.peak_memory_bytes.count(d) && s.peak_memory_bytes.at(d) > 0) << d;
    }
    ASSERT_EQ(heard.evals.size(), 2u);  // at step 3, and the final one
    EXPECT_EQ(heard.evals[0].step, 3);

    // The same run with N devices in this process.
    json local = experiment(strategy, world);
    local["devices"] = strategy_testing::devices(world);
    const strategy_testing::Result ref = strategy_testing::run_it(local);
    ASSERT_EQ(ref.summary.status, "finished") << ref.summary.error;
    // Messages carry values unchanged: the stages', and the sync server's (it sums the pushes
    // in rank order itself); hybrid's groups across processes take the local ring's sums.
    const bool exact = strategy == "pipeline" || strategy == "model_parallel" || strategy == "param_server" ||
                       strategy.starts_with("hybrid");
    const double diff = strategy_testing::max_rel_diff(artifacts.parameters, ref.artifacts.parameters);
    if (exact)
        EXPECT_EQ(diff, 0.0) << strategy;
    else
        EXPECT_LT(diff, 1e-5) << strategy;
    EXPECT_NEAR(s.final_loss, ref.summary.final_loss, 1e-5);
    ASSERT_TRUE(s.test_loss && ref.summary.test_loss);
    EXPECT_NEAR(*s.test_loss, *ref.summary.test_loss, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Strategies, JobParity,
                         ::testing::Combine(::testing::Values("ddp", "zero", "zero3", "zero3_no_prefetch",
                                                              "data_parallel", "model_parallel", "pipeline",
                                                              "param_server", "tensor_parallel",
                                                              "sequence_parallel", "hybrid_dp_tp", "hybrid_tp_pp",
                                                              "hybrid_zero3"),
                                            ::testing::Values(1, 2)),
                         [](const auto& info) {
                             return std::string(std::get<0>(info.param)) + "_" +
                                    std::to_string(std::get<1>(info.param)) + "_per_process";
                         });

TEST_F(JobTest, LoadersOfTheRanksCoverAnEpochExactlyOnce) {
    const int world = mpi_testing::comm().world();
    const int me = mpi_testing::comm().rank();
    data::DataConfig dc;
    dc.dataset = "spirals";
    dc.samples = 301;
    dc.classes = 3;
    const data::DataSplits splits = data::load_data(dc, 11);
    const int64_t n = splits.train.size();
    data::DataLoader::Options opt;
    opt.batch_size = 20;  // 20 rows over 2 or 3 ranks, and a last batch of n % 20
    opt.shuffle = true;
    opt.seed = 11;
    opt.workers = 1;
    opt.shard = me;
    opt.num_shards = world;
    data::DataLoader loader(splits.train, opt);
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
        loader.start_epoch(epoch);
        std::vector<double> seen(static_cast<size_t>(n), 0.0);
        data::Batch b;
        while (loader.next(b))
            for (int64_t id : b.sample_ids) seen[static_cast<size_t>(id)] += 1;
        mpi_testing::comm().all_reduce(seen.data(), n, DType::f64, pcomm::ReduceOp::sum);
        for (int64_t i = 0; i < n; ++i)
            ASSERT_EQ(seen[static_cast<size_t>(i)], 1.0) << "example " << i << " in epoch " << epoch;
    }
}

TEST_F(JobTest, AsyncParameterServerRunsWithItsWorkersInOtherProcesses) {
    json j = experiment("param_server");
    j["strategy"] = {{"type", "param_server"}, {"mode", "async"}, {"staleness", 1},
                     {"straggler", {{"device", "r1/cpu:0"}, {"delay_ms", 3}}}};
    j["devices"] = json::array({"cpu:0"});
    run::JobOptions job;
    job.rank_timeout_s = 30;
    Heard heard;
    run::RunArtifacts artifacts;
    const int me = mpi_testing::comm().rank();
    const config::RunSummary s =
        run::run_experiment(run::parse_experiment(j), me == 0 ? &heard : nullptr, nullptr, 1, &artifacts, &job);
    ASSERT_EQ(s.status, "finished") << s.error;
    if (me != 0) return;
    EXPECT_EQ(heard.ended.size(), 6u);
    for (int r = 0; r < mpi_testing::comm().world(); ++r)
        EXPECT_EQ(heard.steps["r" + std::to_string(r) + "/cpu:0"].size(), 6u) << r;
    EXPECT_TRUE(std::isfinite(s.final_loss));
    ASSERT_TRUE(s.test_loss.has_value());
    EXPECT_TRUE(std::isfinite(*s.test_loss));
    EXPECT_FALSE(artifacts.parameters.empty());
}

// Runs `j` (one device per process) as a job that every process must refuse before training:
// rank 0 with a ConfigError whose text holds `want`, the others quietly (JobRefused).
void expect_refused_on_every_rank(json j, const std::string& want) {
    j["devices"] = json::array({"cpu:0"});
    run::JobOptions job;
    std::string message;
    bool refused_quietly = false;
    try {
        run::run_experiment(run::parse_experiment(j), nullptr, nullptr, 1, nullptr, &job);
        ADD_FAILURE() << "the job ran";
    } catch (const run::JobRefused& e) {
        refused_quietly = true;
        message = e.what();
    } catch (const ConfigError& e) {
        message = e.what();
    }
    if (mpi_testing::comm().rank() == 0) {
        EXPECT_FALSE(refused_quietly);
        EXPECT_NE(message.find(want), std::string::npos) << message;
    } else {
        EXPECT_TRUE(refused_quietly) << message;
    }
}

TEST_F(JobTest, HogwildIsRefusedOnEveryRank) {
    expect_refused_on_every_rank(experiment("hogwild"), "runs in one process");
}

// Each process lists one device, which one head divides; the job's world does not: every
// process refuses, and rank 0 names the key.
TEST_F(JobTest, TensorParallelChecksItsSplitAgainstTheWholeWorld) {
    json j = gpt_experiment("tensor_parallel");
    j["model"]["layers"][2] = {{"type", "transformer_block"}, {"heads", 1}, {"ffn", 24}};
    expect_refused_on_every_rank(j, "model.layers[2].heads: 1 heads do not divide over " +
                                        std::to_string(mpi_testing::comm().world()) + " devices");
}

TEST_F(JobTest, AProblemOfOneRankIsRefusedOnEveryRankBeforeTraining) {
    json j = experiment("ddp");
    // Rank 1 lists a device twice: every process refuses, and rank 0 names rank 1.
    j["devices"] = mpi_testing::comm().rank() == 1 ? json::array({"cpu:0", "cpu:0"}) : json::array({"cpu:0"});
    run::JobOptions job;
    std::string message;
    try {
        run::run_experiment(run::parse_experiment(j), nullptr, nullptr, 1, nullptr, &job);
        ADD_FAILURE() << "the job ran";
    } catch (const ConfigError& e) {
        message = e.what();
    }
    if (mpi_testing::comm().rank() == 0) {
        EXPECT_NE(message.find("rank 1: devices[1]: cpu:0 is listed twice"), std::string::npos)
            << message;
    }
}

}  // namespace

int main(int argc, char** argv) {
    return mpi_testing::run_all(argc, argv, "test_mpi_job");
}
