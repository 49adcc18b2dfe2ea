// The attention kernels side by side, for the "attention" table of `paralab bench`: one
// attention layer (D 128, 4 heads of 32, causal, batch 4, f32, on cpu:0) trained one step —
// forward then backward — with the fused and the materialized kernel at each sequence length
// and thread count.
//
// Figures (the fastest of `reps` steps after one warm-up step):
//   ms_per_step   forward + backward wall time
//   step_bytes    the device's high-water mark over the step above what was live before it
//                 (q, k, v, the kernel's own tensors, the gradients), measured by the allocator
//   saved_floats  per sample, what the layer keeps from forward to backward beyond its
//                 projections' inputs (Attention::saved_per_sample: q, k, v and the
//                 probabilities [H, T, T] or the log-sum-exp [H, T])
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/strategy_bench.h"

namespace paralab::bench {

struct AttentionTiming {
    int64_t seq_len = 0;
    std::string kernel;  // "fused" or "materialized"
    int threads = 1;
    double ms_per_step = 0;
    int64_t step_bytes = 0;
    int64_t saved_floats = 0;
};

std::vector<AttentionTiming> bench_attention(const std::vector<int64_t>& seq_lens, const std::vector<int>& threads,
                                             int reps, const Progress& progress = {});

nlohmann::json to_json(const AttentionTiming& t);

}  // namespace paralab::bench
