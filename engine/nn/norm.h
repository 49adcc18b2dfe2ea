// Normalization layers: BatchNorm (torch.nn.BatchNorm1d / BatchNorm2d by input rank), LayerNorm
// over the last dimension (torch.nn.LayerNorm(normalized_shape = last dim)) and RMSNorm over the
// last dimension (torch.nn.RMSNorm, Llama's norm).
#pragma once

#include <map>

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/nn/layer.h"

namespace paralab::nn {

// Per-sample input [C], [C, L] or [C, H, W]; the channel is the first dimension, statistics
// run over the batch and the remaining dimensions. Train mode normalizes with the biased batch
// variance and moves the running statistics towards the batch's (the running variance takes
// the unbiased one), as PyTorch does; eval mode normalizes with the running statistics.
//
// A synchronised batch norm derives from this class and overrides reduce_channel_stats; the
// train-mode forward and backward are split into local per-channel sums, that hook, and the
// formulas on the (reduced) sums.
class BatchNorm : public Layer {
public:
    // Throws ConfigError when eps <= 0 or momentum is outside [0, 1].
    explicit BatchNorm(double eps = 1e-5, double momentum = 0.1);

    double eps() const { return m_eps; }
    double momentum() const { return m_momentum; }
    // The buffers, [C] each (also in buffers(): running_mean first).
    const Tensor& running_mean() const { return m_running_mean; }
    const Tensor& running_var() const { return m_running_var; }

    // SyncBatchNorm without a subclass: a data-parallel strategy installs a reducer that sums
    // the `n` doubles at `stats` (the sums and, last, the count; see reduce_channel_stats) over
    // its ranks, in place; the layer then normalises with the statistics of the global batch.
    // `stats` is in the memory of the layer's device (on a GPU ordered on its queue, as the
    // GPU communicators expect). Empty: local statistics.
    using StatsReducer = std::function<void(double* stats, int64_t n)>;
    void set_stats_reducer(StatsReducer reducer);
    bool runs_on_gpu() const override { return true; }

protected:
    Shape build_impl(const Shape& input) override;
    void reset_parameters_impl(Rng& rng) override;
    Tensor forward_impl(const Tensor& x, Mode mode) override;
    Tensor backward_impl(const Tensor& dy) override;
    int64_t flops_impl() const override;
    void release_saved_impl() override {
        m_x = Tensor();
        m_mean = Tensor();
        m_invstd = Tensor();
    }

    // Called in train mode between the local sums and the formulas. stats is [2C + 1]: in
    // forward (sum of x [C], sum of x^2 [C]), in backward (sum of dy, sum of dy * (x - mean)),
    // then the number of elements per channel that went into them; in the memory of the
    // layer's device (on a GPU ordered on its queue). A synchronised batch norm replaces all of it,
    // in place, by its sums over all devices; every device calls it the same number of times
    // in the same order. The parameter gradients are taken from the local sums before the
    // backward call, so that the usual gradient all-reduce of data parallelism stays correct.
    virtual void reduce_channel_stats(double* stats, int64_t n) {
        if (m_stats_reducer) m_stats_reducer(stats, n);
    }

private:
    void set_count(void* q, double* stats, int64_t n);

    StatsReducer m_stats_reducer;
    double m_eps;
    double m_momentum;
    int64_t m_channels = 0;
    int64_t m_spatial = 1;      // elements per channel in one sample: 1, L or H*W
    Param* m_weight = nullptr;  // [C]
    Param* m_bias = nullptr;    // [C]
    Tensor m_running_mean;      // [C], shares storage with the buffer
    Tensor m_running_var;       // [C]

    // What the last forward normalized with, for backward (on the layer's device).
    Tensor m_x;
    Mode m_mode = Mode::train;
    int64_t m_count = 0;  // CPU: elements per channel of the train-mode statistics
    Tensor m_mean;        // [C], T
    Tensor m_invstd;      // [C], f64: 1 / sqrt(var + eps)
    std::map<int64_t, Tensor> m_counts_on_gpu;  // set_count's device doubles, by count
};

// What LayerNorm and RMSNorm share: per-sample input [..., D], each vector along the last
// dimension normalized, then scaled by weight [D] (initially 1) and, with bias, shifted by bias
// [D] (initially 0); the last forward's input and its rows' 1/sqrt statistic kept for backward.
class LastDimNorm : public Layer {
public:
    bool runs_on_gpu() const override { return true; }
    double eps() const { return m_eps; }

protected:
    LastDimNorm(const char* type, double eps, bool bias) : Layer(type), m_eps(eps), m_has_bias(bias) {}
    Shape build_impl(const Shape& input) override;
    void reset_parameters_impl(Rng& rng) override;
    void release_saved_impl() override {
        m_x = Tensor();
        m_rstd = Tensor();
    }

    double m_eps;
    bool m_has_bias;
    int64_t m_dim = 0;
    Param* m_weight = nullptr;  // [D]
    Param* m_bias = nullptr;    // [D], null without bias
    Tensor m_x;                 // the last forward's input
    Tensor m_rstd;              // [rows]
};

// Normalized to zero mean and unit (biased) variance (without bias: torch.nn.LayerNorm(bias=False),
// weight only).
class LayerNorm : public LastDimNorm {
public:
    // Throws ConfigError when eps <= 0.
    explicit LayerNorm(double eps = 1e-5, bool bias = true);

protected:
    Tensor forward_impl(const Tensor& x, Mode mode) override;
    Tensor backward_impl(const Tensor& dy) override;
    int64_t flops_impl() const override;
    void release_saved_impl() override {
        LastDimNorm::release_saved_impl();
        m_mean = Tensor();
    }

private:
    Tensor m_mean;  // [rows]
};

// y = x / sqrt(mean(x^2) + eps) * weight (+ bias, only when asked).
class RMSNorm : public LastDimNorm {
public:
    // Throws ConfigError when eps <= 0.
    explicit RMSNorm(double eps = 1e-5, bool bias = false);

protected:
    Tensor forward_impl(const Tensor& x, Mode mode) override;
    Tensor backward_impl(const Tensor& dy) override;
    int64_t flops_impl() const override;
};

}  // namespace paralab::nn
