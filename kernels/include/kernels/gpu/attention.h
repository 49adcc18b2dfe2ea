// Scaled dot-product attention on the GPU, the twins of kernels/cpu/attention.h: the same four
// passes and the fused pair, layouts and semantics (read that header for them). Device pointers; T = float or
// double; `stream` is an opaque cudaStream_t. The products are strided-batched cuBLAS GEMMs
// (one batch of H heads per sequence), the softmax and its backward fused row kernels that
// apply the scale and the causal mask. Throws std::invalid_argument for a bad size, GpuError
// when a launch or cuBLAS fails.
#pragma once

#include <cstdint>

namespace paralab::kernels::gpu {

template <class T>
void attention_scores_softmax(int64_t B, int64_t T_, int64_t H, int64_t Dh, bool causal,
                              const T* qkv, T* probs, void* stream);

template <class T>
void attention_apply(int64_t B, int64_t T_, int64_t H, int64_t Dh, bool causal, const T* probs,
                     const T* qkv, T* out, void* stream);

template <class T>
void attention_backward_values(int64_t B, int64_t T_, int64_t H, int64_t Dh, bool causal,
                               const T* probs, const T* qkv, const T* dout, T* dprobs, T* dqkv,
                               void* stream);

template <class T>
void attention_backward_scores(int64_t B, int64_t T_, int64_t H, int64_t Dh, bool causal,
                               const T* probs, const T* qkv, T* dprobs, T* dqkv, void* stream);

// The fused pass and its backward, without the probabilities in memory: one warp per query row
// (forward, dq) or key row (dk, dv) walking the other side's rows with an online softmax, the
// row's numbers in registers. Dh at most kFusedMaxHeadWidth.
constexpr int64_t kFusedMaxHeadWidth = 256;

template <class T>
void attention_fused_forward(int64_t B, int64_t T_, int64_t H, int64_t Dh, bool causal, const T* qkv,
                             T* out, T* lse, void* stream);

template <class T>
void attention_fused_backward(int64_t B, int64_t T_, int64_t H, int64_t Dh, bool causal, const T* qkv,
                              const T* out, const T* dout, const T* lse, T* dqkv, void* stream);

}  // namespace paralab::kernels::gpu
