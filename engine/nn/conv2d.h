// 2-D convolution like torch.nn.Conv2d with a square kernel and equal padding on every side:
// [C, H, W] -> [K, OH, OW], OH = (H + 2*padding - kernel) / stride + 1. In single precision
// through oneDNN's convolutions where the build has oneDNN (kernels/cpu/dnnl_conv.h); otherwise,
// and always in double precision (the gradient checks' reference), as im2col and one GEMM per
// sample (kernels/cpu/conv.h).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <kernels/cpu/conv.h>
#include <kernels/cpu/dnnl_conv.h>
#include <kernels/gpu/conv.h>

#include "engine/nn/layer.h"

namespace paralab::nn {

class Conv2d : public Layer {
public:
    // Throws ConfigError when out_channels, kernel or stride < 1, or padding < 0.
    Conv2d(int64_t out_channels, int64_t kernel, int64_t stride = 1, int64_t padding = 0,
           bool bias = true);

    // On a GPU, through cuDNN's convolutions where the build has cuDNN.
    bool runs_on_gpu() const override { return kernels::gpu::cudnn_available(); }

protected:
    Shape build_impl(const Shape& input) override;
    void reset_parameters_impl(Rng& rng) override;
    Tensor forward_impl(const Tensor& x, Mode mode) override;
    Tensor backward_impl(const Tensor& dy) override;
    int64_t flops_impl() const override;
    void release_saved_impl() override { m_x = Tensor(); }

private:
    // The oneDNN plan for this batch size (made on first use, kept for the next steps), or null
    // where the im2col path runs: double precision, no oneDNN, or no oneDNN implementation.
    const kernels::cpu::DnnlConv2dPlan* dnnl_plan(const Tensor& x);
    const kernels::gpu::CudnnConv2dPlan& cudnn_plan(const Tensor& x);
    Tensor forward_cudnn(const Tensor& x);
    Tensor backward_cudnn(const Tensor& dy);
    Tensor forward_im2col(const Tensor& x);
    Tensor backward_im2col(const Tensor& dy);

    int64_t m_out_channels;
    int64_t m_kernel;
    int64_t m_stride;
    int64_t m_padding;
    bool m_has_bias;
    kernels::cpu::Conv2dGeometry m_geometry;  // of one sample, set by build
    Param* m_weight = nullptr;                // [K, C, k, k]
    Param* m_bias = nullptr;                  // [K], null without bias
    Tensor m_x;                               // the last forward's input, released by backward
    std::vector<std::unique_ptr<kernels::cpu::DnnlConv2dPlan>> m_plans;  // by batch size, few
    bool m_dnnl_refused = false;  // oneDNN has no implementation for this geometry
    std::vector<std::unique_ptr<kernels::gpu::CudnnConv2dPlan>> m_gpu_plans;  // by batch size
};

}  // namespace paralab::nn
