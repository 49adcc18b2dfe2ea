// Scaled dot-product attention on the CPU: the four passes a layer with attention dropout needs
// (the probabilities are stored, and dropped between the softmax and the product with V), and one
// fused pass forward and one backward that never store them.
// T = float or double; plain pointers to contiguous row-major arrays.
//
// Layouts, for B sequences of T positions, H heads of width Dh (D = H * Dh):
//   qkv   [B, T, 3D]: row (b, t) holds q | k | v, each D wide; head h's part of each starts at
//                     column h * Dh of its third (torch's qkv.split(D) then view(T, H, Dh)).
//   probs [B, H, T, T]: softmax over the last index of q_i . k_j / sqrt(Dh); with `causal`,
//                     position i attends to j <= i only and probs[..., i, j > i] is 0.
//   out   [B, T, D]: head h's output at columns h * Dh (the heads concatenated).
// With `causal` the passes skip the masked upper triangle wherever a block of it is whole.
// Work is split over (b, h) pairs; every output element is made by one thread in a fixed
// order, so results do not depend on the thread count.
#pragma once

#include <cstdint>

namespace paralab::kernels::cpu {

// probs = softmax(q k^T / sqrt(Dh)) per (b, h), masked when causal.
template <class T>
void attention_scores_softmax(int64_t B, int64_t T_, int64_t H, int64_t Dh, bool causal,
                              const T* qkv, T* probs);

// out[b, i, head h] = sum over j of probs[b, h, i, j] v_j (overwritten). `probs` may be the
// softmax's output or a dropped-out copy of it; with `causal` its entries j > i must be 0 (as
// the softmax leaves them): whole masked blocks are skipped, the diagonal ones multiplied.
template <class T>
void attention_apply(int64_t B, int64_t T_, int64_t H, int64_t Dh, bool causal, const T* probs,
                     const T* qkv, T* out);

// The backward of attention_apply: dprobs[b, h, i, j] = dout_i . v_j (overwritten; 0 where
// causal masks), and the v part of dqkv = sum over i of probs[b, h, i, j] dout_i (overwritten;
// the q and k parts are left alone).
template <class T>
void attention_backward_values(int64_t B, int64_t T_, int64_t H, int64_t Dh, bool causal,
                               const T* probs, const T* qkv, const T* dout, T* dprobs, T* dqkv);

// The backward of attention_scores_softmax: with P = probs (the softmax's own output, before
// any dropout) and dP = dprobs, dS = P * (dP - rowsum(dP * P)) / sqrt(Dh) (written over dprobs),
// then the q part of dqkv = dS k and the k part = dS^T q (both overwritten; v left alone).
template <class T>
void attention_backward_scores(int64_t B, int64_t T_, int64_t H, int64_t Dh, bool causal,
                               const T* probs, const T* qkv, T* dprobs, T* dqkv);

// The fused pass: out = softmax(q k^T / sqrt(Dh)) v per (b, h), masked when causal, without the
// [T, T] probabilities in memory (blocks of scores in a thread's scratch, an online softmax);
// lse [B, H, T] receives each row's log-sum-exp of its scaled scores, what backward needs to
// recompute the probabilities. Both overwritten.
template <class T>
void attention_fused_forward(int64_t B, int64_t T_, int64_t H, int64_t Dh, bool causal,
                             const T* qkv, T* out, T* lse);

// Its backward from the forward's qkv, out and lse and the output gradient dout: all three parts
// of dqkv (overwritten), the probabilities recomputed block by block.
//
// Ring attention's backward uses it as is for one block of a longer row: when the queries of
// qkv attend to more keys than the block's (others held elsewhere), and out and lse are those of
// the whole row (attention_merge's), dqkv receives this block's share of the query gradient and
// the block's keys' and values' whole gradients from these queries.
template <class T>
void attention_fused_backward(int64_t B, int64_t T_, int64_t H, int64_t Dh, bool causal, const T* qkv,
                              const T* out, const T* dout, const T* lse, T* dqkv);

// Ring attention's merge of two fused forwards of the same query rows against two disjoint sets
// of keys: with (out, lse) the running result [B, T, D] and [B, H, T] and (block_out, block_lse)
// another block's, each row becomes
//   lse' = log(exp(lse) + exp(block_lse)),  out' = out exp(lse - lse') + block_out exp(block_lse - lse'),
// the attention of the row over both sets of keys. A running lse of -infinity (no keys yet)
// takes the block's as it is.
template <class T>
void attention_merge(int64_t B, int64_t T_, int64_t H, int64_t Dh, const T* block_out, const T* block_lse,
                     T* out, T* lse);

}  // namespace paralab::kernels::cpu
