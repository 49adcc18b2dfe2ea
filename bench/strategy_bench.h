// Strategy benchmarks (no main: `paralab bench` prints them, docs/benchmarks.md records them).
// Each case is an experiment built in code (run::parse_experiment), run with
// run::run_experiment for a fixed number of steps; the first `warmup` steps are left out of
// every statistic (allocator caches filling, loader prefetch starting, threads waking up).
//
// What a row holds, for the timed steps:
//   ms_per_step    median over steps of the step's wall time: the time between the ends of two
//                  consecutive steps over all devices (MetricsBus::on_step_end), so data wait
//                  and every device's lag are in it
//   compute/comm/idle/data_wait_ms  the StepRecord fields, mean over devices and steps
//                  (comm includes DDP's overlapped all-reduces, so the four can sum to more
//                  than the wall time)
//   samples_per_s  global-batch samples of the timed steps over their wall time
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/run/experiment_file.h"

namespace paralab::bench {

// The "data" section the MLP cases train on: Fashion-MNIST from `path` when its four IDX
// files are there, else the `blobs` synthetic set with the same 784 inputs (`fallback` true,
// `description` says so). `train_examples` caps the training split (enough for the steps).
struct BenchData {
    nlohmann::json data;
    bool fallback = false;
    std::string description;
};
BenchData fashion_mnist_or_blobs(const std::string& path, int64_t train_examples);

// The experiment of resources/examples/fashion-mlp.paralab.json (784-256-128-10, SGD with
// momentum, batch 128) on cpu:0..cpu:devices-1 with `strategy` (a strategy section), capped at
// `steps`; the test split is cut to 256 examples (the end-of-run evaluation is not timed, but
// it is waited for).
nlohmann::json fashion_mlp_experiment(const BenchData& data, int devices,
                                      const nlohmann::json& strategy, int64_t steps);

// A pipeline-friendly model: 8 x (linear 512, relu) and a linear 10 classifier on `blobs` with
// 512 features, so that a balanced split gives every stage the same work (the MLP above puts
// 85% of its parameters in its first layer, and no split balances it).
nlohmann::json uniform_mlp_experiment(int devices, const nlohmann::json& strategy, int64_t steps);

struct DeviceTiming {
    std::string device;
    double compute_ms = 0, comm_ms = 0, idle_ms = 0, data_wait_ms = 0;  // mean per timed step
    double idle_fraction = 0;  // sum of idle_ms / sum of step wall ms, over the timed steps
};

struct StrategyTiming {
    std::string label;     // e.g. "zero stage 2", "pipeline 1f1b m=4"
    std::string model;     // "fashion-mlp", "uniform-mlp"
    nlohmann::json strategy;  // the experiment's strategy section
    int devices = 1;
    bool oversubscribed = false;  // more devices than hardware threads
    int64_t steps = 0, warmup_steps = 0;
    std::string status;    // the run's status; "failed" rows carry `error` and no timings
    std::string error;
    double ms_per_step = 0;
    double compute_ms = 0, comm_ms = 0, idle_ms = 0, data_wait_ms = 0;
    double samples_per_s = 0;
    double final_loss = 0;
    int64_t peak_memory_bytes = 0;    // the busiest device's peak (the run summary's)
    double comm_bytes_per_step = 0;   // bytes its communication phases moved, per device and timed step
    std::vector<DeviceTiming> per_device;
    std::vector<double> ms_per_step_rounds;  // every round's median; the row is the fastest round
};

// Runs `e` (its train.max_steps set) with one compute thread per device and times it.
// Configuration errors propagate (ConfigError); a run that fails is a row with status "failed".
StrategyTiming time_experiment(const config::Experiment& e, int64_t warmup_steps, int compute_threads = 1);

using Progress = std::function<void(const std::string& what)>;

// Each table runs its cases `rounds` times, round-robin (all cases, then all again), and keeps
// for each case the round with the lowest ms_per_step: on a machine that other processes share
// in bursts, the fastest of rounds spread over tens of seconds is the closest to an idle
// machine's figure (the way timeit reports the minimum).
struct StrategySuiteOptions {
    std::string data_path = "/usr/share/datasets/fashion-mnist";
    int rounds = 3;
    int64_t steps = 110;         // per run, warm-up included
    int64_t warmup_steps = 10;
    int64_t pipeline_steps = 30;  // per uniform-MLP pipeline run (its steps are ~8x longer)
    int64_t pipeline_warmup_steps = 5;
    std::vector<int> device_counts{2, 4};
    std::vector<int64_t> micro_batches{1, 2, 4, 8};
    std::vector<std::string> pipeline_schedules{"gpipe", "1f1b"};
    bool uniform_pipeline = true;  // the idle-fraction table also on the balanced model
    // The transformer table: the char-GPT on 4 devices with every strategy that splits it.
    bool transformer = true;
    int64_t transformer_steps = 30;
    int64_t transformer_warmup_steps = 5;
    bool transformer_all = true;  // false: only single and tensor_parallel (the smoke run)
};

// One row per strategy of docs/strategies.md on the Fashion-MNIST MLP: single on 1 device, every
// other strategy on each of `device_counts` where it applies (param_server needs 2).
std::vector<StrategyTiming> bench_strategies(const BenchData& data, const StrategySuiteOptions& o,
                                             const Progress& progress = {});

// ddp with and without overlap, with 0.1, 1 and 25 MB buckets (the MLP's gradients are
// 0.94 MB: 1 and 25 MB are one bucket, 0.1 MB splits the first layer off).
std::vector<StrategyTiming> bench_ddp_variants(const BenchData& data, const StrategySuiteOptions& o,
                                               const Progress& progress = {});

// Pipeline idle fraction against the bubble (p-1)/(m+p-1) of an evenly split pipeline.
struct PipelineIdleRow {
    std::string model;     // fashion-mlp | uniform-mlp
    std::string schedule;  // gpipe | 1f1b
    int stages = 0;
    int64_t micro_batches = 0;
    double measured = 0;        // mean over stages of DeviceTiming::idle_fraction
    double theory = 0;          // (p-1)/(m+p-1)
    std::vector<double> per_stage;
    double ms_per_step = 0;
    bool oversubscribed = false;
    std::string status, error;
    StrategyTiming timing;      // the run's row, with its per-stage times
};
double pipeline_bubble_fraction(int stages, int64_t micro_batches);

std::vector<PipelineIdleRow> bench_pipeline_idle(const BenchData& data, const StrategySuiteOptions& o,
                                                 const Progress& progress = {});

// The three tables at once, their cases in one round-robin (so that a case's rounds lie a
// whole round apart, half a minute on the default suite).
struct StrategySuite {
    // transformer: the char-GPT example (4 blocks, D 128, T 64, batch 12, AdamW) on random
    // bytes: single, recompute full and selective on one device, then ddp, zero 3,
    // tensor_parallel and the hybrid meshes dp2·tp2 (zero 0, 1), tp2·pp2 and dp2·pp2 on 4.
    std::vector<StrategyTiming> strategies, ddp, transformer;
    std::vector<PipelineIdleRow> pipeline;
};
StrategySuite bench_strategy_suite(const BenchData& data, const StrategySuiteOptions& o,
                                   const Progress& progress = {});

nlohmann::json to_json(const StrategyTiming& t);
nlohmann::json to_json(const PipelineIdleRow& r);

}  // namespace paralab::bench
