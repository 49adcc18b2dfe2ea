// `paralab bench`: the project's benchmark suite (README "Benchmarks", docs/benchmarks.md).
#pragma once

#include <string>

namespace paralab::bench {

struct BenchArgs {
    bool json = false;   // one JSON object with every table on stdout
    bool quick = false;  // ~20 s: fewer steps, sizes and micro-batch counts
    bool smoke = false;  // a few seconds: one case of each table, for the CLI test
    bool models_only = false;  // only the models table (MLP, LeNet, LSTM, char GPT at 1 and 2 threads)
    bool attention_only = false;  // only the attention kernels table
    std::string data_path = "/usr/share/datasets/fashion-mnist";
    // The models table on this device: "cpu" (cpu:0, 1 and 2 threads) or "cuda:N" (the ddp rows
    // on two virtual GPUs cuda:N, cuda:N).
    std::string device = "cpu";
};

// Runs the suite, prints aligned text tables (or JSON) on stdout and progress on stderr.
// Returns the exit code (0; configuration problems throw).
int run_suite(const BenchArgs& args);

}  // namespace paralab::bench
