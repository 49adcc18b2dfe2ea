// Grouped-query attention's key/value heads and rotary position embedding (RoPE) on the CPU:
// the step between an attention's qkv projection and the passes of kernels/cpu/attention.h.
// T = float or double; contiguous row-major arrays.
//
// Layouts, for B sequences of T positions, H query heads and KV key/value heads of width Dh
// (KV divides H; query head h reads key/value head h / (H / KV)):
//   compact [B, T, (H + 2 KV) Dh]: row (b, t) holds q (H heads) | k (KV heads) | v (KV heads),
//                                  the projection's output;
//   full    [B, T, 3 H Dh]:        q | k | v with H heads each (kernels/cpu/attention.h's qkv).
// With `rope`, q and k of every head at position t are rotated in the rotate-half convention
// (GPT-NeoX, Hugging Face Llama): the pairs (i, i + Dh/2), i < Dh/2, turn by the angle
// t * theta^(-2i/Dh) (formed in double): (a, b) -> (a cos - b sin, b cos + a sin). Dh even.
#pragma once

#include <cstdint>

namespace paralab::kernels::cpu {

// compact -> full (overwritten): q rotated, each key/value head copied to the query heads that
// read it, k rotated.
template <class T>
void qkv_expand_rope(int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t Dh, bool rope, double theta,
                     const T* compact, T* full);

// The backward: dfull [B, T, 3 H Dh] -> dcompact [B, T, (H + 2 KV) Dh] (overwritten): the q and
// k gradients turned back (the transpose of the rotation), each key/value head's gradient the
// sum over the query heads that read it, in head order.
template <class T>
void qkv_expand_rope_backward(int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t Dh, bool rope,
                              double theta, const T* dfull, T* dcompact);

// Both with row t of every sequence at position positions[t] (t < T_) instead of t: a
// context-parallel device's rows, chunks of the sequence that are not its start (nn::ContextShard).
template <class T>
void qkv_expand_rope_at(int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t Dh, bool rope, double theta,
                        const int64_t* positions, const T* compact, T* full);
template <class T>
void qkv_expand_rope_backward_at(int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t Dh, bool rope,
                                 double theta, const int64_t* positions, const T* dfull, T* dcompact);

}  // namespace paralab::kernels::cpu
