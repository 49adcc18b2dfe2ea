// A mixture-of-experts layer's routing and its token movement on the CPU (nn/moe.h): the
// router's softmax and top-k, its backward, and the gathers and weighted scatters that let each
// expert run its GEMMs on its own tokens' rows. T = float or double; row-major arrays.
#pragma once

#include <cstdint>

namespace paralab::kernels::cpu {

// logits: [N, E] -> probs: [N, E] (softmax of each row), lse: [N] (each row's log-sum-exp),
// choice: [N, k] (each token's k most probable experts, most probable first, a tie to the lower
// index), weight: [N, k] (their probabilities renormalised to sum 1). 1 <= k <= E.
template <class T>
void moe_route_forward(int64_t N, int64_t E, int64_t k, const T* logits, T* probs, T* lse, int64_t* choice,
                       T* weight);

// The router's logits gradient: dweight: [N, k] (d loss / d weight), probs, lse, choice as the
// forward's, dprobs_all: [E] (a gradient every token's probabilities get: the load-balancing
// loss's), z_scale (d loss / d lse_t = z_scale * lse_t: the z-loss's) -> dlogits: [N, E]
// (overwritten). Through the renormalisation w_j = p_j / S (S the sum of the k chosen p):
// d p_i = (dw_i - sum_j dw_j w_j) / S for a chosen i, then the softmax's backward.
template <class T>
void moe_route_backward(int64_t N, int64_t E, int64_t k, const T* probs, const T* lse, const int64_t* choice,
                        const T* weight, const T* dweight, const T* dprobs_all, T z_scale, T* dlogits);

// x: [*, D], rows: [n] -> out: [n, D], out[r] = scale[r] * x[rows[r]] (scale null: 1).
template <class T>
void moe_gather_rows(int64_t n, int64_t D, const T* x, const int64_t* rows, const T* scale, T* out);

// src: [n, D], rows: [n] -> out[rows[r]] += scale[r] * src[r] (scale null: 1); rows are
// distinct within one call.
template <class T>
void moe_scatter_add_rows(int64_t n, int64_t D, const T* src, const int64_t* rows, const T* scale, T* out);

// a: [*, D], rows: [n], b: [n, D] -> dots[r] = a[rows[r]] . b[r].
template <class T>
void moe_row_dots(int64_t n, int64_t D, const T* a, const int64_t* rows, const T* b, T* dots);

}  // namespace paralab::kernels::cpu
