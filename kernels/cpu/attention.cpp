#include <kernels/cpu/attention.h>
#include <kernels/cpu/gemm.h>
#include <kernels/cpu/threads.h>
#include <kernels/cpu/vmath.h>

#include <algorithm>
#include <cmath>
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

// Row i of a score block: softmax over [0, n) where n = i + 1 under the causal mask, zeros
// after. The row holds scaled scores on entry.
template <class T>
void softmax_row(T* row, int64_t n, int64_t T_) {
    T max = row[0];
    for (int64_t j = 1; j < n; ++j) max = std::max(max, row[j]);
    T sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < n; ++j) {
        row[j] = exp_of(row[j] - max);
        sum += row[j];
    }
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
#pragma omp simd
            for (int64_t j = 0; j < n; ++j) dr[j] = pr[j] * (dr[j] - dot) * scale;
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

#define PARALAB_INSTANTIATE_ATTENTION(T)                                                          \
    template void attention_scores_softmax<T>(int64_t, int64_t, int64_t, int64_t, bool, const T*, \
                                              T*);                                                \
    template void attention_apply<T>(int64_t, int64_t, int64_t, int64_t, bool, const T*,          \
                                     const T*, T*);                                               \
    template void attention_backward_values<T>(int64_t, int64_t, int64_t, int64_t, bool,          \
                                               const T*, const T*, const T*, T*, T*);             \
    template void attention_backward_scores<T>(int64_t, int64_t, int64_t, int64_t, bool,          \
                                               const T*, const T*, T*, T*);

PARALAB_INSTANTIATE_ATTENTION(float)
PARALAB_INSTANTIATE_ATTENTION(double)
#undef PARALAB_INSTANTIATE_ATTENTION

}  // namespace paralab::kernels::cpu
