// The host-side argument checks of the GPU launchers (kernels/gpu/*.h), in one place for the
// CUDA implementations (kernels/cuda) and the host fakes the tests run them against
// (tests/engine/fake_gpu_kernels.cpp), so that both refuse the same calls with the same
// messages. Each throws std::invalid_argument naming the launcher, before anything is queued.
// Free of CUDA; private to kernels/cuda and the fakes.
#pragma once

#include <kernels/cpu/conv.h>
#include <kernels/cpu/pool.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace paralab::kernels::gpu::detail {

// A precondition (a size < 0, a null pointer where data is needed).
inline void require(bool ok, const char* launcher, const char* what) {
    if (!ok) throw std::invalid_argument(std::string(launcher) + ": " + what);
}

// The host arrays of a multi-tensor launcher: count >= 0 and every sizes[k] >= 0.
inline void require_tensor_sizes(const char* launcher, int64_t count, const int64_t* sizes) {
    require(count >= 0, launcher, "negative tensor count");
    for (int64_t k = 0; k < count; ++k) require(sizes[k] >= 0, launcher, "negative tensor size");
}

// gemm, gemm_half: row-major op(A) [M, K], op(B) [K, N], C [M, N] with leading dimensions that
// hold a row, every size within cuBLAS's int.
inline void check_gemm_shape(const char* name, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                             int64_t lda, int64_t ldb, int64_t ldc) {
    require(M >= 0 && N >= 0 && K >= 0, name, "negative size");
    require(M <= INT_MAX && N <= INT_MAX && K <= INT_MAX && lda <= INT_MAX && ldb <= INT_MAX &&
                ldc <= INT_MAX,
            name, "a size or leading dimension does not fit cuBLAS's int");
    require(lda >= std::max<int64_t>(1, trans_a ? M : K), name, "lda is smaller than a row of A");
    require(ldb >= std::max<int64_t>(1, trans_b ? K : N), name, "ldb is smaller than a row of B");
    require(ldc >= std::max<int64_t>(1, N), name, "ldc is smaller than a row of C");
}

// The attention passes (kernels/gpu/attention.h): B sequences of T positions, H heads of Dh;
// the leading dimensions (3 H Dh), T and the head count within cuBLAS's int, and the B H T rows
// of probabilities within a grid's x dimension (one block per row).
inline void check_attention_sizes(const char* launcher, int64_t B, int64_t T, int64_t H,
                                  int64_t Dh) {
    require(B >= 0 && T >= 0 && H >= 0, launcher, "negative size");
    require(Dh >= 1, launcher, "Dh (the head width) must be >= 1");
    require(T <= INT_MAX && Dh <= INT_MAX / 3 && H <= INT_MAX / (3 * Dh), launcher,
            "a size or leading dimension does not fit cuBLAS's int");
    require(B == 0 || H == 0 || T == 0 || B <= INT32_MAX / (H * T), launcher,
            "more than 2^31 - 1 rows of probabilities (B * H * T)");
}

// The fused attention pass keeps a row of Dh numbers in each warp's registers.
inline void check_fused_attention_sizes(const char* launcher, int64_t B, int64_t T, int64_t H,
                                        int64_t Dh) {
    check_attention_sizes(launcher, B, T, H, Dh);
    require(Dh <= 256, launcher, "Dh (the head width) above 256, the widest head the fused pass keeps in registers");
}

// qkv_expand_rope and its backward (kernels/gpu/rope.h): KV key/value heads dividing H query
// heads, the head width even when rotated.
inline void check_rope_sizes(const char* launcher, int64_t B, int64_t T, int64_t H, int64_t KV, int64_t Dh,
                             bool rope) {
    require(B >= 0 && T >= 0, launcher, "negative size");
    require(H >= 1 && KV >= 1 && H % KV == 0, launcher, "KV must divide H");
    require(Dh >= 1 && (!rope || Dh % 2 == 0), launcher, "Dh must be positive (and even with rope)");
}

// The recurrent cells: gate rows of gate_blocks * hidden, state rows of hidden.
inline void check_cell_sizes(const char* name, int64_t batch, int64_t hidden, int64_t ld_gates,
                             int64_t gate_blocks, int64_t ld_state) {
    require(batch >= 0 && hidden >= 0, name, "negative size");
    require(ld_gates >= gate_blocks * hidden, name, "ld_gates is smaller than the gate row");
    require(ld_state >= hidden, name, "ld_state is smaller than hidden");
}

// The batch norm launchers: [N, C, S] inputs.
inline void check_batchnorm_sizes(int64_t N, int64_t C, int64_t S, const char* launcher) {
    require(N >= 0 && S >= 0, launcher, "N and S must be >= 0");
    require(C >= 0 && C <= INT32_MAX, launcher, "C out of range");
}

// Every 2-D pooling launcher.
inline void check_pool_geometry(const cpu::Pool2dGeometry& g, const char* launcher) {
    require(g.planes >= 0, launcher, "planes must be >= 0");
    require(g.kernel >= 1 && g.stride >= 1, launcher, "kernel and stride must be >= 1");
    require(g.height >= g.kernel && g.width >= g.kernel, launcher,
            "height and width must be >= kernel (no window fits otherwise)");
    require(g.height * g.width <= INT32_MAX, launcher, "a plane of more than 2^31 - 1 elements (int32 argmax)");
}

// A convolution plan's geometry in words, for its messages:
// "conv2d of 64 x [1, 28, 28] into 16 channels, kernel 5, stride 1, padding 2, with bias, f32"
inline std::string describe_conv(const cpu::Conv2dGeometry& g, int64_t batch, int64_t out_channels, bool bias,
                                 bool f64, bool tf32) {
    return "conv2d of " + std::to_string(batch) + " x [" + std::to_string(g.channels) + ", " +
           std::to_string(g.height) + ", " + std::to_string(g.width) + "] into " +
           std::to_string(out_channels) + " channels, kernel " + std::to_string(g.kernel) +
           ", stride " + std::to_string(g.stride) + ", padding " + std::to_string(g.padding) +
           (bias ? ", with bias, " : ", no bias, ") + (f64 ? "f64" : tf32 ? "f32 (TF32 allowed)" : "f32");
}

// A convolution plan's preconditions, with `what` its describe_conv: std::invalid_argument
// "CudnnConv2dPlan(<what>): <cause>".
inline void validate_conv_plan(const cpu::Conv2dGeometry& g, int64_t batch, int64_t out_channels,
                               const std::string& what) {
    auto need = [&](bool ok, const char* cause) {
        if (!ok) throw std::invalid_argument("CudnnConv2dPlan(" + what + "): " + cause);
    };
    need(batch >= 0, "batch must be >= 0");
    need(g.channels >= 1 && g.height >= 1 && g.width >= 1, "channels, height and width must be >= 1");
    need(out_channels >= 1, "out_channels must be >= 1");
    need(g.kernel >= 1 && g.stride >= 1 && g.padding >= 0, "kernel and stride must be >= 1 and padding >= 0");
    need(g.height + 2 * g.padding >= g.kernel && g.width + 2 * g.padding >= g.kernel,
         "the kernel is larger than the padded input (no output position)");
}

}  // namespace paralab::kernels::gpu::detail
