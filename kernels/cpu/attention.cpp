#include <kernels/cpu/attention.h>
#include <kernels/cpu/gemm.h>
#include <kernels/cpu/threads.h>
#include <kernels/cpu/vmath.h>

#include "simd_clones.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>
#include <type_traits>

namespace paralab::kernels::cpu {

namespace {

// Rows of the score matrix handled as one GEMM. With `causal`, row block [i0, i1) needs the
// columns [0, i1) only: the whole blocks right of the diagonal are never computed, read or
// (but for the zeros the layout asks for) written.
constexpr int64_t kRowBlock = 32;

template <class T>
T exp_of(T x) {
    if constexpr (std::is_same_v<T, float>) return vmath::exp(x);
    else return std::exp(x);
}

// The (b, h) pairs split over the calling thread's team; each pair's work is single-threaded
// GEMMs and row loops, so every output element is made by one thread in a fixed order.
template <class Body>
void for_each_head(int64_t B, int64_t H, const Body& body) {
    parallel_chunks(B * H, [&](int64_t lo, int64_t hi, int) {
        for (int64_t bh = lo; bh < hi; ++bh) body(bh / H, bh % H);
    });
}

struct Geometry {
    int64_t T, H, Dh, D;
    // Pointers into qkv [B, T, 3D] for sequence b, head h: q, k or v (part 0, 1, 2).
    template <class P>
    P* part(P* qkv, int64_t b, int64_t h, int part_index) const {
        return qkv + b * T * 3 * D + part_index * D + h * Dh;
    }
    template <class P>
    P* scores(P* probs, int64_t b, int64_t h) const {
        return probs + (b * H + h) * T * T;
    }
    int64_t columns_for(int64_t i1, bool causal) const { return causal ? i1 : T; }
};

// The row loops of the softmaxes, their float versions compiled for AVX-512 and AVX2 too
// (simd_clones.h): max over x[0, n); x = exp(x - shift) over [0, n) and its sum; the softmax's
// backward dx = p (dx - delta) scale.
template <class T>
[[gnu::always_inline]] inline T row_max_t(const T* x, int64_t n) {
    T max = x[0];
#pragma omp simd reduction(max : max)
    for (int64_t j = 1; j < n; ++j) max = std::max(max, x[j]);
    return max;
}
template <class T>
[[gnu::always_inline]] inline T exp_shift_sum_t(T* x, int64_t n, T shift) {
    T sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < n; ++j) {
        x[j] = exp_of(x[j] - shift);
        sum += x[j];
    }
    return sum;
}
template <class T>
[[gnu::always_inline]] inline void softmax_grad_t(const T* p, T* d, int64_t n, T delta, T scale) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) d[j] = p[j] * (d[j] - delta) * scale;
}

PARALAB_SIMD_CLONES float row_max_f32(const float* x, int64_t n) { return row_max_t(x, n); }
PARALAB_SIMD_CLONES float exp_shift_sum_f32(float* x, int64_t n, float shift) { return exp_shift_sum_t(x, n, shift); }
PARALAB_SIMD_CLONES void softmax_grad_f32(const float* p, float* d, int64_t n, float delta, float scale) {
    softmax_grad_t(p, d, n, delta, scale);
}

template <class T>
T row_max(const T* x, int64_t n) {
    if constexpr (std::is_same_v<T, float>) return row_max_f32(x, n);
    else return row_max_t(x, n);
}
template <class T>
T exp_shift_sum(T* x, int64_t n, T shift) {
    if constexpr (std::is_same_v<T, float>) return exp_shift_sum_f32(x, n, shift);
    else return exp_shift_sum_t(x, n, shift);
}
template <class T>
void softmax_grad(const T* p, T* d, int64_t n, T delta, T scale) {
    if constexpr (std::is_same_v<T, float>) softmax_grad_f32(p, d, n, delta, scale);
    else softmax_grad_t(p, d, n, delta, scale);
}

// Row i of a score block: softmax over [0, n) where n = i + 1 under the causal mask, zeros
// after. The row holds scaled scores on entry.
template <class T>
void softmax_row(T* row, int64_t n, int64_t T_) {
    const T sum = exp_shift_sum(row, n, row_max(row, n));
    const T inv = T(1) / sum;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) row[j] *= inv;
    std::fill(row + n, row + T_, T(0));
}

}  // namespace

template <class T>
void attention_scores_softmax(int64_t B, int64_t T_, int64_t H, int64_t Dh, bool causal,
                              const T* qkv, T* probs) {
    const Geometry g{T_, H, Dh, H * Dh};
    const T scale = T(1) / std::sqrt(static_cast<T>(Dh));
    for_each_head(B, H, [&](int64_t b, int64_t h) {
        const T* q = g.part(qkv, b, h, 0);
        const T* k = g.part(qkv, b, h, 1);
        T* p = g.scores(probs, b, h);
        for (int64_t i0 = 0; i0 < T_; i0 += kRowBlock) {
            const int64_t i1 = std::min(T_, i0 + kRowBlock);
            const int64_t cols = g.columns_for(i1, causal);
            gemm<T>(false, true, i1 - i0, cols, Dh, scale, q + i0 * 3 * g.D, 3 * g.D, k, 3 * g.D,
                    T(0), p + i0 * T_, T_);
            for (int64_t i = i0; i < i1; ++i) softmax_row(p + i * T_, causal ? i + 1 : T_, T_);
        }
    });
}

template <class T>
void attention_apply(int64_t B, int64_t T_, int64_t H, int64_t Dh, bool causal, const T* probs,
                     const T* qkv, T* out) {
    const Geometry g{T_, H, Dh, H * Dh};
    for_each_head(B, H, [&](int64_t b, int64_t h) {
        const T* v = g.part(qkv, b, h, 2);
        const T* p = g.scores(probs, b, h);
        T* o = out + b * T_ * g.D + h * Dh;
        for (int64_t i0 = 0; i0 < T_; i0 += kRowBlock) {
            const int64_t i1 = std::min(T_, i0 + kRowBlock);
            gemm<T>(false, false, i1 - i0, Dh, g.columns_for(i1, causal), T(1), p + i0 * T_, T_, v,
                    3 * g.D, T(0), o + i0 * g.D, g.D);
        }
    });
}

template <class T>
void attention_backward_values(int64_t B, int64_t T_, int64_t H, int64_t Dh, bool causal,
                               const T* probs, const T* qkv, const T* dout, T* dprobs, T* dqkv) {
    const Geometry g{T_, H, Dh, H * Dh};
    for_each_head(B, H, [&](int64_t b, int64_t h) {
        const T* v = g.part(qkv, b, h, 2);
        const T* p = g.scores(probs, b, h);
        const T* d_o = dout + b * T_ * g.D + h * Dh;
        T* dp = g.scores(dprobs, b, h);
        T* dv = g.part(dqkv, b, h, 2);
        for (int64_t i0 = 0; i0 < T_; i0 += kRowBlock) {
            const int64_t i1 = std::min(T_, i0 + kRowBlock);
            const int64_t cols = g.columns_for(i1, causal);
            // dP[i0:i1, :cols] = dO[i0:i1] V[:cols]^T, then the masked entries zeroed.
            gemm<T>(false, true, i1 - i0, cols, Dh, T(1), d_o + i0 * g.D, g.D, v, 3 * g.D, T(0),
                    dp + i0 * T_, T_);
            if (causal)
                for (int64_t i = i0; i < i1; ++i) std::fill(dp + i * T_ + i + 1, dp + (i + 1) * T_, T(0));
        }
        // dV[j0:j1] = P[:, j0:j1]^T dO; under the mask only rows i >= j0 contribute.
        for (int64_t j0 = 0; j0 < T_; j0 += kRowBlock) {
            const int64_t j1 = std::min(T_, j0 + kRowBlock);
            const int64_t first = causal ? j0 : 0;
            gemm<T>(true, false, j1 - j0, Dh, T_ - first, T(1), p + first * T_ + j0, T_,
                    d_o + first * g.D, g.D, T(0), dv + j0 * 3 * g.D, 3 * g.D);
        }
    });
}

template <class T>
void attention_backward_scores(int64_t B, int64_t T_, int64_t H, int64_t Dh, bool causal,
                               const T* probs, const T* qkv, T* dprobs, T* dqkv) {
    const Geometry g{T_, H, Dh, H * Dh};
    const T scale = T(1) / std::sqrt(static_cast<T>(Dh));
    for_each_head(B, H, [&](int64_t b, int64_t h) {
        const T* q = g.part(qkv, b, h, 0);
        const T* k = g.part(qkv, b, h, 1);
        const T* p = g.scores(probs, b, h);
        T* ds = g.scores(dprobs, b, h);
        T* dq = g.part(dqkv, b, h, 0);
        T* dk = g.part(dqkv, b, h, 1);
        // dS = P (dP - rowsum(dP P)) scale, in place over dP; zero where masked.
        for (int64_t i = 0; i < T_; ++i) {
            const int64_t n = causal ? i + 1 : T_;
            const T* pr = p + i * T_;
            T* dr = ds + i * T_;
            T dot = 0;
#pragma omp simd reduction(+ : dot)
            for (int64_t j = 0; j < n; ++j) dot += dr[j] * pr[j];
            softmax_grad(pr, dr, n, dot, scale);
            std::fill(dr + n, dr + T_, T(0));
        }
        // dQ[i0:i1] = dS[i0:i1, :cols] K[:cols]
        for (int64_t i0 = 0; i0 < T_; i0 += kRowBlock) {
            const int64_t i1 = std::min(T_, i0 + kRowBlock);
            gemm<T>(false, false, i1 - i0, Dh, g.columns_for(i1, causal), T(1), ds + i0 * T_, T_, k,
                    3 * g.D, T(0), dq + i0 * 3 * g.D, 3 * g.D);
        }
        // dK[j0:j1] = dS[:, j0:j1]^T Q; under the mask only rows i >= j0 contribute.
        for (int64_t j0 = 0; j0 < T_; j0 += kRowBlock) {
            const int64_t j1 = std::min(T_, j0 + kRowBlock);
            const int64_t first = causal ? j0 : 0;
            gemm<T>(true, false, j1 - j0, Dh, T_ - first, T(1), ds + first * T_ + j0, T_,
                    q + first * 3 * g.D, 3 * g.D, T(0), dk + j0 * 3 * g.D, 3 * g.D);
        }
    });
}

// ---- the fused pass ----------------------------------------------------------------------------
//
// FlashAttention-2's loop order (Dao 2023, Algorithms 1 and 2) on the CPU: per (b, h), query
// blocks of kFusedRows against key blocks of kFusedCols, the scores of one block pair in a
// thread's scratch and never more. Forward keeps a running max m and sum l per query row and
// rescales the output rows when the max grows; it saves lse = m + log l per row. Backward walks
// key blocks outermost, so each key block's dK and dV are finished before the next, and
// recomputes P = exp(S - lse) from q and k; dQ gathers over the key blocks.

namespace {

constexpr int64_t kFusedRows = 128;
constexpr int64_t kFusedCols = 128;

// The (b, h) pairs as for_each_head, each chunk of them with its own scratch of `words`.
template <class T, class Body>
void for_each_head_with_scratch(int64_t B, int64_t H, int64_t words, const Body& body) {
    parallel_chunks(B * H, [&](int64_t lo, int64_t hi, int) {
        std::vector<T> scratch(static_cast<size_t>(words));
        for (int64_t bh = lo; bh < hi; ++bh) body(bh / H, bh % H, scratch.data());
    });
}

// Entries of row i (a query position) of a block of key positions [j0, j0 + cols) that the
// causal mask lets through: j <= i.
int64_t visible(bool causal, int64_t i, int64_t j0, int64_t cols) {
    if (!causal) return cols;
    return std::clamp<int64_t>(i - j0 + 1, 0, cols);
}

}  // namespace

template <class T>
void attention_fused_forward(int64_t B, int64_t T_, int64_t H, int64_t Dh, bool causal,
                             const T* qkv, T* out, T* lse) {
    const Geometry g{T_, H, Dh, H * Dh};
    const T scale = T(1) / std::sqrt(static_cast<T>(Dh));
    const int64_t words = kFusedRows * kFusedCols + 2 * kFusedRows;
    for_each_head_with_scratch<T>(B, H, words, [&](int64_t b, int64_t h, T* scratch) {
        T* s = scratch;                              // [rows, kFusedCols] scores, then P
        T* m = scratch + kFusedRows * kFusedCols;    // running max of each row
        T* l = m + kFusedRows;                       // running sum of each row
        const T* q = g.part(qkv, b, h, 0);
        const T* k = g.part(qkv, b, h, 1);
        const T* v = g.part(qkv, b, h, 2);
        T* o = out + b * T_ * g.D + h * Dh;
        T* row_lse = lse + (b * H + h) * T_;
        for (int64_t i0 = 0; i0 < T_; i0 += kFusedRows) {
            const int64_t i1 = std::min(T_, i0 + kFusedRows), rows = i1 - i0;
            for (int64_t r = 0; r < rows; ++r) {
                std::fill(o + (i0 + r) * g.D, o + (i0 + r) * g.D + Dh, T(0));
                m[r] = -std::numeric_limits<T>::infinity();
                l[r] = 0;
            }
            const int64_t last = causal ? i1 : T_;  // key blocks wholly above the diagonal skipped
            for (int64_t j0 = 0; j0 < last; j0 += kFusedCols) {
                const int64_t cols = std::min(last, j0 + kFusedCols) - j0;
                gemm<T>(false, true, rows, cols, Dh, scale, q + i0 * 3 * g.D, 3 * g.D, k + j0 * 3 * g.D, 3 * g.D,
                        T(0), s, kFusedCols);
                for (int64_t r = 0; r < rows; ++r) {
                    T* sr = s + r * kFusedCols;
                    const int64_t n = visible(causal, i0 + r, j0, cols);
                    if (n == 0) {  // this row sees none of the block's keys
                        std::fill(sr, sr + cols, T(0));
                        continue;
                    }
                    const T m_new = std::max(m[r], row_max(sr, n));
                    const T alpha = exp_of(m[r] - m_new);  // 0 on the row's first block
                    const T sum = exp_shift_sum(sr, n, m_new);
                    std::fill(sr + n, sr + cols, T(0));
                    l[r] = l[r] * alpha + sum;
                    m[r] = m_new;
                    if (alpha != T(1)) {
                        T* orow = o + (i0 + r) * g.D;
#pragma omp simd
                        for (int64_t d = 0; d < Dh; ++d) orow[d] *= alpha;
                    }
                }
                // O[i0:i1] += P V[j0:j0 + cols]
                gemm<T>(false, false, rows, Dh, cols, T(1), s, kFusedCols, v + j0 * 3 * g.D, 3 * g.D, T(1),
                        o + i0 * g.D, g.D);
            }
            for (int64_t r = 0; r < rows; ++r) {
                const T inv = T(1) / l[r];
                T* orow = o + (i0 + r) * g.D;
#pragma omp simd
                for (int64_t d = 0; d < Dh; ++d) orow[d] *= inv;
                row_lse[i0 + r] = m[r] + std::log(l[r]);
            }
        }
    });
}

template <class T>
void attention_fused_backward(int64_t B, int64_t T_, int64_t H, int64_t Dh, bool causal, const T* qkv,
                              const T* out, const T* dout, const T* lse, T* dqkv) {
    const Geometry g{T_, H, Dh, H * Dh};
    const T scale = T(1) / std::sqrt(static_cast<T>(Dh));
    const int64_t words = 2 * kFusedRows * kFusedCols + T_;
    for_each_head_with_scratch<T>(B, H, words, [&](int64_t b, int64_t h, T* scratch) {
        T* p = scratch;                                  // [rows, kFusedCols] P
        T* ds = scratch + kFusedRows * kFusedCols;       // [rows, kFusedCols] dP, then dS
        T* delta = ds + kFusedRows * kFusedCols;         // [T] rowsum(dO * O)
        const T* q = g.part(qkv, b, h, 0);
        const T* k = g.part(qkv, b, h, 1);
        const T* v = g.part(qkv, b, h, 2);
        const T* o = out + b * T_ * g.D + h * Dh;
        const T* d_o = dout + b * T_ * g.D + h * Dh;
        const T* row_lse = lse + (b * H + h) * T_;
        T* dq = g.part(dqkv, b, h, 0);
        T* dk = g.part(dqkv, b, h, 1);
        T* dv = g.part(dqkv, b, h, 2);
        for (int64_t i = 0; i < T_; ++i) {
            T dot = 0;
#pragma omp simd reduction(+ : dot)
            for (int64_t d = 0; d < Dh; ++d) dot += d_o[i * g.D + d] * o[i * g.D + d];
            delta[i] = dot;
            std::fill(dq + i * 3 * g.D, dq + i * 3 * g.D + Dh, T(0));
            std::fill(dk + i * 3 * g.D, dk + i * 3 * g.D + Dh, T(0));
            std::fill(dv + i * 3 * g.D, dv + i * 3 * g.D + Dh, T(0));
        }
        for (int64_t j0 = 0; j0 < T_; j0 += kFusedCols) {
            const int64_t cols = std::min(T_, j0 + kFusedCols) - j0;
            // Query blocks wholly above the diagonal see none of these keys.
            const int64_t first = causal ? j0 / kFusedRows * kFusedRows : 0;
            for (int64_t i0 = first; i0 < T_; i0 += kFusedRows) {
                const int64_t rows = std::min(T_, i0 + kFusedRows) - i0;
                gemm<T>(false, true, rows, cols, Dh, scale, q + i0 * 3 * g.D, 3 * g.D, k + j0 * 3 * g.D, 3 * g.D,
                        T(0), p, kFusedCols);
                for (int64_t r = 0; r < rows; ++r) {
                    T* pr = p + r * kFusedCols;
                    const int64_t n = visible(causal, i0 + r, j0, cols);
                    exp_shift_sum(pr, n, row_lse[i0 + r]);
                    std::fill(pr + n, pr + cols, T(0));
                }
                // dV[j0:] += P^T dO[i0:]
                gemm<T>(true, false, cols, Dh, rows, T(1), p, kFusedCols, d_o + i0 * g.D, g.D, T(1),
                        dv + j0 * 3 * g.D, 3 * g.D);
                // dP = dO[i0:] V[j0:]^T; dS = P (dP - delta) scale, 0 where masked (P is 0 there)
                gemm<T>(false, true, rows, cols, Dh, T(1), d_o + i0 * g.D, g.D, v + j0 * 3 * g.D, 3 * g.D, T(0),
                        ds, kFusedCols);
                for (int64_t r = 0; r < rows; ++r)
                    softmax_grad(p + r * kFusedCols, ds + r * kFusedCols, cols, delta[i0 + r], scale);
                // dQ[i0:] += dS K[j0:];  dK[j0:] += dS^T Q[i0:]
                gemm<T>(false, false, rows, Dh, cols, T(1), ds, kFusedCols, k + j0 * 3 * g.D, 3 * g.D, T(1),
                        dq + i0 * 3 * g.D, 3 * g.D);
                gemm<T>(true, false, cols, Dh, rows, T(1), ds, kFusedCols, q + i0 * 3 * g.D, 3 * g.D, T(1),
                        dk + j0 * 3 * g.D, 3 * g.D);
            }
        }
    });
}

template <class T>
void attention_merge(int64_t B, int64_t T_, int64_t H, int64_t Dh, const T* block_out, const T* block_lse,
                     T* out, T* lse) {
    const int64_t D = H * Dh;
    for_each_head(B, H, [&](int64_t b, int64_t h) {
        for (int64_t i = 0; i < T_; ++i) {
            T& l = lse[(b * H + h) * T_ + i];
            const T lb = block_lse[(b * H + h) * T_ + i];
            T* o = out + (b * T_ + i) * D + h * Dh;
            const T* ob = block_out + (b * T_ + i) * D + h * Dh;
            if (l == -std::numeric_limits<T>::infinity()) {
                std::copy(ob, ob + Dh, o);
                l = lb;
                continue;
            }
            const T m = std::max(l, lb);
            const T merged = m + std::log(std::exp(l - m) + std::exp(lb - m));
            const T a = std::exp(l - merged), c = std::exp(lb - merged);
#pragma omp simd
            for (int64_t d = 0; d < Dh; ++d) o[d] = o[d] * a + ob[d] * c;
            l = merged;
        }
    });
}

#define PARALAB_INSTANTIATE_ATTENTION(T)                                                          \
    template void attention_scores_softmax<T>(int64_t, int64_t, int64_t, int64_t, bool, const T*, \
                                              T*);                                                \
    template void attention_apply<T>(int64_t, int64_t, int64_t, int64_t, bool, const T*,          \
                                     const T*, T*);                                               \
    template void attention_backward_values<T>(int64_t, int64_t, int64_t, int64_t, bool,          \
                                               const T*, const T*, const T*, T*, T*);             \
    template void attention_backward_scores<T>(int64_t, int64_t, int64_t, int64_t, bool,          \
                                               const T*, const T*, T*, T*);          \
    template void attention_fused_forward<T>(int64_t, int64_t, int64_t, int64_t, bool, const T*,  \
                                             T*, T*);                                             \
    template void attention_fused_backward<T>(int64_t, int64_t, int64_t, int64_t, bool, const T*, \
                                              const T*, const T*, const T*, T*);            \
    template void attention_merge<T>(int64_t, int64_t, int64_t, int64_t, const T*, const T*, T*, T*);

PARALAB_INSTANTIATE_ATTENTION(float)
PARALAB_INSTANTIATE_ATTENTION(double)
#undef PARALAB_INSTANTIATE_ATTENTION

}  // namespace paralab::kernels::cpu
