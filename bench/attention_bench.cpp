#include "bench/attention_bench.h"

#include <kernels/cpu/threads.h>

#include <algorithm>
#include <chrono>
#include <limits>

#include "engine/device/device.h"
#include "engine/nn/attention.h"
#include "engine/util/own_thread.h"
#include "engine/util/rng.h"

namespace paralab::bench {

namespace {

constexpr int64_t kBatch = 4, kWidth = 128, kHeads = 4;

Tensor random_tensor(const Shape& shape, Device& device, uint64_t seed) {
    Rng rng(seed);
    Tensor t = Tensor::empty(shape, DType::f32, device, MemCategory::activations);
    for (float& v : t.span<float>()) v = static_cast<float>(rng.normal());
    return t;
}

AttentionTiming time_one(int64_t T, nn::AttentionKernel kernel, int threads, int reps) {
    AttentionTiming t;
    t.seq_len = T;
    t.kernel = kernel == nn::AttentionKernel::fused ? "fused" : "materialized";
    t.threads = threads;
    auto device = make_cpu_device(0, threads);
    nn::Attention layer(nn::AttentionOptions{kHeads, 0, true, 0.0, false, 10000.0, true, kernel});
    layer.set_label("attention", "model.layers[0]");
    layer.build(Shape{T, kWidth}, DType::f32, *device);
    Rng rng(1);
    layer.reset_parameters(rng);
    t.saved_floats = layer.saved_per_sample();
    const Tensor x = random_tensor(Shape{kBatch, T, kWidth}, *device, 2);
    const Tensor dy = random_tensor(Shape{kBatch, T, kWidth}, *device, 3);
    const int saved_threads = kernels::cpu::num_threads();
    kernels::cpu::set_num_threads(threads);
    double best = std::numeric_limits<double>::infinity();
    for (int rep = 0; rep <= reps; ++rep) {  // rep 0 warms the caches and the allocator up
        Allocator& memory = device->allocator();
        memory.reset_peak();
        const int64_t before = memory.stats().current_total;
        const auto t0 = std::chrono::steady_clock::now();
        layer.forward(x, nn::Mode::train);
        layer.backward(dy);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        t.step_bytes = memory.stats().peak_total - before;
        if (rep > 0) best = std::min(best, s);
    }
    kernels::cpu::set_num_threads(saved_threads);
    t.ms_per_step = best * 1e3;
    return t;
}

}  // namespace

std::vector<AttentionTiming> bench_attention(const std::vector<int64_t>& seq_lens, const std::vector<int>& threads,
                                             int reps, const Progress& progress) {
    std::vector<AttentionTiming> rows;
    for (int64_t T : seq_lens)
        for (int n : threads)
            for (auto kernel : {nn::AttentionKernel::fused, nn::AttentionKernel::materialized}) {
                if (progress)
                    progress("attention T " + std::to_string(T) + ", " +
                             (kernel == nn::AttentionKernel::fused ? "fused" : "materialized") + ", " +
                             std::to_string(n) + " thread" + (n == 1 ? "" : "s"));
                // On a thread of its own: this one must not keep an OpenMP team (engine/util/own_thread.h).
                rows.push_back(on_own_thread([&] { return time_one(T, kernel, n, reps); }));
            }
    return rows;
}

nlohmann::json to_json(const AttentionTiming& t) {
    return {{"seq_len", t.seq_len},         {"kernel", t.kernel},         {"threads", t.threads},
            {"ms_per_step", t.ms_per_step}, {"step_bytes", t.step_bytes}, {"saved_floats_per_sample", t.saved_floats},
            {"batch", kBatch},              {"width", kWidth},            {"heads", kHeads}};
}

}  // namespace paralab::bench
