// Pooling layers like torch.nn.MaxPool2d / AvgPool2d (square window, no padding, floor mode)
// and a global average pool (torch.nn.AdaptiveAvgPool2d(1) followed by a flatten).
#pragma once

#include <cstdint>

#include <kernels/cpu/pool.h>

#include "engine/nn/layer.h"

namespace paralab::nn {

// Shared by the two windowed pools: geometry from [C, H, W] and the shape checks.
class Pool2dBase : public Layer {
public:
    bool runs_on_gpu() const override { return true; }

protected:
    // Throws ConfigError when kernel < 1 or stride < 0 (stride 0 means stride = kernel).
    Pool2dBase(std::string type, int64_t kernel, int64_t stride);

    // input: [C, H, W] -> [C, OH, OW], OH = (H - kernel) / stride + 1.
    Shape build_impl(const Shape& input) override;
    int64_t flops_impl() const override;
    // The geometry of a batch of `batch` samples: B*C planes.
    kernels::cpu::Pool2dGeometry geometry(int64_t batch) const;

    int64_t m_kernel;
    int64_t m_stride;
};

class MaxPool2d : public Pool2dBase {
public:
    MaxPool2d(int64_t kernel, int64_t stride = 0);

protected:
    Tensor forward_impl(const Tensor& x, Mode mode) override;
    Tensor backward_impl(const Tensor& dy) override;
    void release_saved_impl() override { m_argmax = Tensor(); }
    int64_t activations_impl() override { return output_shape().numel(); }  // the argmax

private:
    // The forward's argmax per output (int32 positions within the input plane), kept in an
    // f32 tensor's storage so the allocator accounts for it; released by backward.
    Tensor m_argmax;
};

class AvgPool2d : public Pool2dBase {
public:
    AvgPool2d(int64_t kernel = 2, int64_t stride = 0);

protected:
    int64_t activations_impl() override { return 0; }  // its backward needs no input
    Tensor forward_impl(const Tensor& x, Mode mode) override;
    Tensor backward_impl(const Tensor& dy) override;
};

// [C, H, W] -> [C]: the mean of each channel's plane.
class GlobalAvgPool : public Layer {
public:
    bool runs_on_gpu() const override { return true; }
    GlobalAvgPool();

protected:
    int64_t activations_impl() override { return 0; }
    Shape build_impl(const Shape& input) override;
    Tensor forward_impl(const Tensor& x, Mode mode) override;
    Tensor backward_impl(const Tensor& dy) override;
    int64_t flops_impl() const override;
};

}  // namespace paralab::nn
