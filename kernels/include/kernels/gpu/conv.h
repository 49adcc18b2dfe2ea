// 2-D convolution on the GPU through cuDNN, the twin of the CPU's im2col + GEMM convolution
// (kernels/cpu/conv.h): the same geometry, cross-correlation (no kernel flip), zero padding,
// plain contiguous NCHW arrays. A plan holds the cuDNN handle, the descriptors and the chosen
// algorithms of one (geometry, batch, out_channels, precision); the caller owns every buffer,
// the workspace included, so that the engine's memory accounting sees it. Device pointers; the
// stream is an opaque cudaStream_t (nullptr: the legacy default stream). Free of CUDA and cuDNN
// types (docs/design.md, "Layers"). Implemented by kernels/cuda/conv.cu; a build without cuDNN, or without
// CUDA (kernels/stub/conv_stub.cpp), answers cudnn_available() false and its plans throw.
#pragma once

#include <kernels/cpu/conv.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace paralab::kernels::gpu {

// True when this build has cuDNN's convolutions and the cuDNN library loaded at run time has
// them too (its convolution sub-library, libcudnn_cnn, answers its version check). False in a
// CUDA build without cuDNN (or configured -DPARALAB_CUDNN=OFF) and in the CPU-only stub. Needs
// no GPU.
bool cudnn_available();

class CudnnConv2dPlan {
public:
    // A convolution of `batch` samples of geometry g (x [N, C, H, W], w [K, C, k, k],
    // y [N, K, OH, OW], all plain contiguous NCHW like the CPU) into out_channels = K channels
    // on GPU `device`. f64: double, else float. tf32: allow TF32 tensor-op math for float
    // (ignored for double); without it float convolutions are restricted to FMA math
    // (CUDNN_FMA_MATH) and, like double ones, to algorithms without an FFT or Winograd
    // transform, so fp32 results stay ~1e-6 accurate. Algorithms come from cuDNN's heuristics
    // (the *_v7 queries), deterministic ones first, so that reruns repeat bit for bit. batch may be 0: then forward and backward do nothing. Throws std::invalid_argument
    // for a bad geometry (sizes < 1, an output smaller than 1x1, a dimension past int), and
    // GpuError / std::runtime_error naming the geometry when cuDNN has no algorithm for it or
    // the build has no cuDNN.
    CudnnConv2dPlan(int device, const cpu::Conv2dGeometry& g, int64_t batch, int64_t out_channels,
                    bool bias, bool f64, bool tf32 = false);
    ~CudnnConv2dPlan();
    CudnnConv2dPlan(const CudnnConv2dPlan&) = delete;
    CudnnConv2dPlan& operator=(const CudnnConv2dPlan&) = delete;

    int64_t batch() const;

    // The algorithms chosen and their math, for logs and reports: "forward
    // IMPLICIT_PRECOMP_GEMM (FMA math), backward data ALGO_1 (FMA math), backward filter ALGO_1
    // (FMA math)".
    std::string algorithms() const;

    // Bytes of device workspace forward() and backward() need (the caller allocates them on
    // the plan's device; may be 0, then workspace may be null). backward's covers both of its
    // convolutions, which run one after the other on the stream.
    size_t forward_workspace_bytes() const;
    size_t backward_workspace_bytes() const;

    // y = conv(x, w) + b, ordered on `stream`. b must be null exactly when the plan has no
    // bias. y is overwritten.
    void forward(const void* x, const void* w, const void* b, void* y, void* workspace,
                 void* stream) const;

    // dx = the input gradient from dy and w, overwritten (skipped when dx is null); the
    // parameter gradients ADDED into dw_acc and db_acc (beta = 1: the engine's convention that
    // backward accumulates). dw_acc null skips the weight gradient; db_acc must be null when
    // the plan has no bias (null with a bias skips the bias gradient). x is read only for the
    // weight gradient.
    void backward(const void* x, const void* dy, const void* w, void* dx, void* dw_acc,
                  void* db_acc, void* workspace, void* stream) const;

    // A plan may be called from several threads: calls on one plan are serialised (a cuDNN
    // handle is not thread-safe), calls on different plans run concurrently, also on one GPU.

private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

}  // namespace paralab::kernels::gpu
