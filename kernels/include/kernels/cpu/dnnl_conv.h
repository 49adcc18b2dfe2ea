// 2-D convolution through oneDNN's JIT convolutions (forward, backward data, backward weights),
// for single precision where the build has oneDNN. The caller's tensors stay in the plain
// layouts the engine uses (x [N, C, H, W], w [K, C, k, k], y [N, K, OH, OW]); oneDNN computes in
// the blocked layouts it picks for the machine (nChw16c on AVX-512) and the plan reorders into
// and out of them. Every buffer it needs (blocked copies, oneDNN's scratchpad) lives in one
// workspace the caller allocates, so the engine's memory accounting sees it.
//
// No oneDNN type appears here: the plan is opaque, and a build without oneDNN compiles this
// header with dnnl_conv_available() false.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include <kernels/cpu/conv.h>

namespace paralab::kernels::cpu {

// True when this build has oneDNN's convolutions.
bool dnnl_conv_available();

class DnnlConv2dPlan {
public:
    // A convolution of `batch` samples of geometry g into out_channels channels. Throws
    // std::runtime_error naming the geometry when oneDNN has no implementation for it (or the
    // build has no oneDNN); the caller then keeps its own im2col path.
    DnnlConv2dPlan(const Conv2dGeometry& g, int64_t batch, int64_t out_channels, bool bias);
    ~DnnlConv2dPlan();
    DnnlConv2dPlan(const DnnlConv2dPlan&) = delete;
    DnnlConv2dPlan& operator=(const DnnlConv2dPlan&) = delete;

    int64_t batch() const;
    // Bytes of workspace forward() and backward() need (64-byte aligned pointers).
    size_t forward_workspace_bytes() const;
    size_t backward_workspace_bytes() const;

    // y = conv(x, w) + b (b may be null when the plan has no bias). Runs on the calling
    // thread's OpenMP team.
    void forward(const float* x, const float* w, const float* b, float* y, void* workspace) const;
    // From the forward's input x and the output gradient dy: dx (skipped when null), and the
    // parameter gradients ADDED into dw_acc and db_acc (db_acc null without bias), the engine's
    // convention that backward accumulates.
    void backward(const float* x, const float* dy, const float* w, float* dx, float* dw_acc,
                  float* db_acc, void* workspace) const;

private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

}  // namespace paralab::kernels::cpu
