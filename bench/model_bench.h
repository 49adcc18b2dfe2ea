// Single-device training speed on the CPU-speed issue's three models, for the
// "models" table of `paralab bench` and the comparison with PyTorch
// (bench/compare_torch.py runs the same models, batches and optimizer).
//
//   mlp     784-512-512-10, ReLU, batch 128, on `blobs` with 784 features
//   lenet   conv 5x5 16 pad 2 - relu - maxpool 2 - conv 5x5 32 pad 2 - relu - maxpool 2 -
//           linear 10, batch 64, on Fashion-MNIST ([1, 28, 28], the first images)
//   lstm    LSTM input 32, hidden 128, 50 steps, classifier (linear 10) on the last step,
//           batch 64, on `seqclass` (seq_len 50, features 32)
//   gpt-char  resources/examples/gpt-char.paralab.json: byte embedding 256 x 128, learned
//           positions, 4 x transformer_block (4 heads, ffn 512), layernorm, linear 256; T 64,
//           batch 12, AdamW lr 1e-3 (weight decay 0.01), cross entropy over every position; on
//           the `text` data set over a file of random bytes (RandomBytesFile below)
//   llama-char  resources/examples/llama-char.paralab.json: byte embedding 256 x 128, 4 x
//           transformer_block (8 heads, 2 kv heads, RoPE, RMSNorm, SwiGLU ffn 384, no bias),
//           rmsnorm, linear 256 without bias; otherwise as gpt-char
//   moe-char  resources/examples/moe-char.paralab.json: byte embedding 256 x 64, 2 x
//           transformer_block (4 heads, 2 kv heads, RoPE, RMSNorm, a mixture of 8 SwiGLU
//           experts of width 96, top 2, one shared, aux_loss 0.01, no bias), rmsnorm, linear
//           256 without bias; batch 16, AdamW lr 1e-3, otherwise as gpt-char
//   mlp-ddp2, mlp-ddp2-b256   the MLP with ddp on cpu:0 and cpu:1, 1 compute thread each, global
//           batch 128 (64 per device) and 256 (128 per device, the single device's batch);
//           their note gives samples/s over the 1-thread single-device MLP's (the goal: >= 1.6)
//   mlp-zero2   the MLP with zero stage 1 (the optimizer step sharded) on the same two devices,
//           global batch 128
// All but gpt-char: SGD lr 0.01, momentum 0.9; all: constant schedule, cross entropy, one CPU
// device (cpu:0) with `threads` compute threads; the optimizer step is in the step time.
//
// Figures (per model and thread count, the fastest of `rounds` runs):
//   ms_per_step    median wall time of the timed steps (warm-up steps left out)
//   samples_per_s  samples of the timed steps over their wall time
//   tokens_per_s   gpt-char: samples/s x T (64 positions a sample), the figure nanoGPT reports
//   gflops         achieved: 3 x forward FLOPs (Model::flops_per_sample) x samples/s / 1e9
//                  (forward + backward ~ 3 x forward)
//   sgemm_gflops   a 1024 x 1024 x 1024 GEMM (kernels::cpu::gemm) at the same thread count, for scale
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/strategy_bench.h"

namespace paralab::bench {

struct ModelBenchOptions {
    std::string data_path = "/usr/share/datasets/fashion-mnist";  // for lenet
    std::vector<int> threads{1, 2};
    int rounds = 3;
    double step_scale = 1.0;  // multiplies every model's step counts (smoke: small)
    std::string device = "cpu";  // or "cuda:N": every case on that GPU (ddp: two virtual GPUs)
};

struct ModelTiming {
    std::string model;   // mlp | lenet | lstm | gpt-char | mlp-ddp2 | mlp-ddp2-b256 | mlp-zero2
    std::string description;
    int threads = 1;   // compute threads per device
    int devices = 1;   // > 1: ddp, batch is the global batch
    int64_t batch = 0;
    int64_t steps = 0, warmup_steps = 0;
    std::string status, error;  // status "finished", else no timings
    double ms_per_step = 0;
    double samples_per_s = 0;
    int64_t tokens_per_sample = 0;  // > 0: a token model (gpt-char: T)
    double tokens_per_s = 0;
    int64_t forward_flops_per_sample = 0;
    double gflops = 0;
    double sgemm_gflops = 0;
    std::vector<double> samples_per_s_rounds;
    double vs_one_device = 0;  // ddp rows: samples/s over the 1-thread single-device mlp's
};

// The experiment of one of the models (name as above), capped at `steps`. `data_path`: the
// Fashion-MNIST folder for lenet, the text file for gpt-char, unused by the others.
// `device`: "cpu" (cpu:0, cpu:1, ...) or "cuda:N" (listed once per device: virtual GPUs).
nlohmann::json model_bench_experiment(const std::string& model, const std::string& data_path, int64_t steps,
                                      const std::string& device = "cpu");

// A file of `bytes` random bytes (seeded: the same every time) in the temporary folder, removed
// with this object: gpt-char's corpus, random token ids that need no text installed.
class RandomBytesFile {
public:
    explicit RandomBytesFile(int64_t bytes);  // throws Error when it cannot be written
    ~RandomBytesFile();
    RandomBytesFile(const RandomBytesFile&) = delete;
    RandomBytesFile& operator=(const RandomBytesFile&) = delete;
    const std::string& path() const { return m_path; }

private:
    std::string m_path;
};

// OpenBLAS's kernel (core) name, e.g. "Haswell": OPENBLAS_CORETYPE changes it. OpenBLAS runs the
// double-precision GEMMs, and the single-precision ones in a build without oneDNN.
std::string blas_kernel();

// GFLOP/s of C = A B with M = N = K = n, float, on `threads` threads (best of a few calls).
double measure_sgemm_gflops(int64_t n, int threads);

// Every model at every thread count, `rounds` times round-robin, the fastest round kept.
std::vector<ModelTiming> bench_models(const ModelBenchOptions& o, const Progress& progress = {});

nlohmann::json to_json(const ModelTiming& t);

}  // namespace paralab::bench
