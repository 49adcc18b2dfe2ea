// Scaled dot-product attention's four passes (kernels/gpu/attention.h), after
// kernels/cpu/attention.cpp: the products are batched cuBLAS GEMMs, one call over all B * H
// heads (head h's q, k, v and out start Dh columns after head h-1's, its probabilities T*T
// entries after), and the softmax, its backward and the causal mask are row kernels: one warp
// per row of probabilities for the first two, one block for the mask.
//
// The GEMMs are dense: with `causal` they compute the masked upper triangle of scores and dprobs
// too (the row kernels then overwrite it with 0), and the products with probs read its masked
// entries, which therefore must hold 0, as the softmax and dropout leave them. (The CPU twin
// skips only whole masked blocks and reads the masked entries of its diagonal blocks as well.)
#include <kernels/gpu/attention.h>
#include <kernels/gpu/detail/op_lists.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "cublas_api.cuh"
#include "launch.cuh"

namespace paralab::kernels::gpu {

namespace {

using namespace detail;

// Rows of T_ entries get one block of a multiple of 32 threads (block_sum), at most kRowBlock,
// fewer for short rows.
int row_threads(int64_t T_) {
    return static_cast<int>(std::clamp<int64_t>((T_ + 31) / 32 * 32, 32, kRowBlock));
}

// The softmax and its backward give each row of probabilities one warp (kRowsPerBlock rows to
// a block): a row of T entries is read from L1 in a few coalesced passes, and its max, sum and
// dot product are warp shuffles, with no block-wide barrier between the passes.
constexpr int kRowsPerBlock = kRowBlock / 32;

unsigned row_warp_blocks(int64_t rows) {
    return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

// scores: [rows = B*H*T, T] row r = (b, h, i) holding q_i . k_j (unscaled), overwritten by
// softmax(scale * scores) over j < n (n = i + 1 under the causal mask, T otherwise), 0 after.
// The max and the exponentials in T, their sum in double (as softmax.cu).
template <class T>
__global__ void __launch_bounds__(kRowBlock)
    attention_softmax_rows_kernel(int64_t rows, int64_t T_, bool causal, T scale, T* probs) {
    const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
    if (r >= rows) return;  // the whole warp: its lanes share r
    const int lane = threadIdx.x % 32;
    const int64_t n = causal ? r % T_ + 1 : T_;
    T* p = probs + r * T_;
    double local_max = -INFINITY;
    for (int64_t j = lane; j < n; j += 32) local_max = fmax(local_max, static_cast<double>(p[j] * scale));
    const T max = static_cast<T>(warp_max(local_max));
    double sum = 0;
    for (int64_t j = lane; j < n; j += 32) {
        const T e = exp(p[j] * scale - max);
        p[j] = e;
        sum += static_cast<double>(e);
    }
    const double inv = 1.0 / warp_sum(sum);
    for (int64_t j = lane; j < n; j += 32) p[j] = static_cast<T>(p[j] * inv);
    for (int64_t j = n + lane; j < T_; j += 32) p[j] = T(0);
}

// probs, dprobs: [rows = B*H*T, T] -> dprobs overwritten by dS = P (dP - rowsum(dP P)) scale
// over j < n, 0 after (n as in the softmax). One warp per row, as the softmax.
template <class T>
__global__ void __launch_bounds__(kRowBlock)
    attention_softmax_backward_rows_kernel(int64_t rows, int64_t T_, bool causal, T scale,
                                           const T* probs, T* dprobs) {
    const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
    if (r >= rows) return;
    const int lane = threadIdx.x % 32;
    const int64_t n = causal ? r % T_ + 1 : T_;
    const T* p = probs + r * T_;
    T* d = dprobs + r * T_;
    double local = 0;
    for (int64_t j = lane; j < n; j += 32)
        local += static_cast<double>(p[j]) * static_cast<double>(d[j]);
    const T dot = static_cast<T>(warp_sum(local));
    for (int64_t j = lane; j < n; j += 32) d[j] = p[j] * (d[j] - dot) * scale;
    for (int64_t j = n + lane; j < T_; j += 32) d[j] = T(0);
}

// x: [B*H*T, T] -> the entries j > i of row r = (b, h, i) set to 0.
template <class T>
__global__ void __launch_bounds__(kRowBlock) attention_causal_zero_kernel(int64_t T_, T* x) {
    const int64_t r = blockIdx.x;
    T* row = x + r * T_;
    for (int64_t j = r % T_ + 1 + threadIdx.x; j < T_; j += blockDim.x) row[j] = T(0);
}

cublasOperation_t op(bool trans) {
    return trans ? CUBLAS_OP_T : CUBLAS_OP_N;
}

// One operand of the per-(sequence, head) products: head (b, h)'s matrix starts at
// base + b * per_b + h * per_h, rows ld apart.
template <class P>
struct HeadOperand {
    P* base;
    int64_t ld, per_b, per_h;
    __host__ __device__ P* at(int64_t b, int64_t h) const { return base + b * per_b + h * per_h; }
};

// pointers[0, n), [n, 2n), [2n, 3n) = A, B, C of product i = b * H + h (n = B * H)
template <class T>
__global__ void head_pointers_kernel(int64_t B, int64_t H, HeadOperand<const T> a,
                                     HeadOperand<const T> b, HeadOperand<T> c, void** pointers) {
    const int64_t n = B * H;
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int64_t s = i / H, h = i % H;
    pointers[i] = const_cast<T*>(a.at(s, h));
    pointers[n + i] = const_cast<T*>(b.at(s, h));
    pointers[2 * n + i] = c.at(s, h);
}

// For every sequence b < B and head h < H, row-major C_bh[M, N] = op(A_bh) op(B_bh)
// (overwritten), swapped into cuBLAS's column-major as gemm.cu does: one pointer-array batched
// product over all B * H heads, whose operand pointers a kernel writes first (a sequence's heads
// are Dh columns apart, sequences a whole [T, 3D] block apart: no single stride spans both, and
// B products of H heads each leave the GPU mostly idle on short sequences). While the stream is
// captured into a graph and the pointer array would have to grow, one strided product per
// sequence instead. The sizes were checked to fit an int.
template <class T>
void gemm_heads(void* stream, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                int64_t B, int64_t H, HeadOperand<const T> a, HeadOperand<const T> b,
                HeadOperand<T> c) {
    const T one = 1, zero = 0;
    const cublasHandle_t handle = cublas_handle_for(stream);
    const int64_t n = B * H;
    void** pointers = cublas_pointer_arrays_for(stream, 3 * n);
    if (pointers) {
        head_pointers_kernel<T><<<static_cast<unsigned>((n + kBlock - 1) / kBlock), kBlock, 0,
                                  as_stream(stream)>>>(B, H, a, b, c, pointers);
        PARALAB_GPU_CHECK_LAUNCH("head_pointers_kernel");
        const auto as = reinterpret_cast<const T* const*>(pointers);
        const auto bs = reinterpret_cast<const T* const*>(pointers + n);
        const auto cs = reinterpret_cast<T* const*>(pointers + 2 * n);
        if constexpr (std::is_same_v<T, float>) {
            PARALAB_GPU_CHECK(cublas().sgemm_batched(
                handle, op(trans_b), op(trans_a), static_cast<int>(N), static_cast<int>(M),
                static_cast<int>(K), &one, bs, static_cast<int>(b.ld), as, static_cast<int>(a.ld),
                &zero, cs, static_cast<int>(c.ld), static_cast<int>(n)));
        } else {
            static_assert(std::is_same_v<T, double>, "attention: T = float or double");
            PARALAB_GPU_CHECK(cublas().dgemm_batched(
                handle, op(trans_b), op(trans_a), static_cast<int>(N), static_cast<int>(M),
                static_cast<int>(K), &one, bs, static_cast<int>(b.ld), as, static_cast<int>(a.ld),
                &zero, cs, static_cast<int>(c.ld), static_cast<int>(n)));
        }
        return;
    }
    for (int64_t s = 0; s < B; ++s) {
        if constexpr (std::is_same_v<T, float>) {
            PARALAB_GPU_CHECK(cublas().sgemm_strided_batched(
                handle, op(trans_b), op(trans_a), static_cast<int>(N), static_cast<int>(M),
                static_cast<int>(K), &one, b.at(s, 0), static_cast<int>(b.ld), b.per_h,
                a.at(s, 0), static_cast<int>(a.ld), a.per_h, &zero, c.at(s, 0),
                static_cast<int>(c.ld), c.per_h, static_cast<int>(H)));
        } else {
            PARALAB_GPU_CHECK(cublas().dgemm_strided_batched(
                handle, op(trans_b), op(trans_a), static_cast<int>(N), static_cast<int>(M),
                static_cast<int>(K), &one, b.at(s, 0), static_cast<int>(b.ld), b.per_h,
                a.at(s, 0), static_cast<int>(a.ld), a.per_h, &zero, c.at(s, 0),
                static_cast<int>(c.ld), c.per_h, static_cast<int>(H)));
        }
    }
}

// The operands: part 0, 1, 2 (q, k, v) of qkv [B, T, 3D], out [B, T, D] and probs [B, H, T, T];
// head h is Dh columns (of qkv, out) or T*T entries (of probs) further on.
struct Geometry {
    int64_t T, H, Dh, D;
    template <class P>
    HeadOperand<P> part(P* qkv, int part_index) const {
        return {qkv + part_index * D, 3 * D, T * 3 * D, Dh};
    }
    template <class P>
    HeadOperand<P> rows(P* out) const {
        return {out, D, T * D, Dh};
    }
    template <class P>
    HeadOperand<P> scores(P* probs) const {
        return {probs, T, H * T * T, T * T};
    }
};

template <class T>
T inverse_sqrt(int64_t Dh) {
    return static_cast<T>(1.0 / std::sqrt(static_cast<double>(Dh)));
}

}  // namespace

// qkv: [B, T, 3D] -> probs: [B, H, T, T]
template <class T>
void attention_scores_softmax(int64_t B, int64_t T_, int64_t H, int64_t Dh, bool causal,
                              const T* qkv, T* probs, void* stream) {
    check_attention_sizes("attention_scores_softmax", B, T_, H, Dh);
    if (B == 0 || T_ == 0 || H == 0) return;
    const Geometry g{T_, H, Dh, H * Dh};
    // scores = q k^T
    gemm_heads<T>(stream, false, true, T_, T_, Dh, B, H, g.part(qkv, 0), g.part(qkv, 1), g.scores(probs));
    attention_softmax_rows_kernel<T><<<row_warp_blocks(B * H * T_), kRowBlock, 0, as_stream(stream)>>>(
        B * H * T_, T_, causal, inverse_sqrt<T>(Dh), probs);
    PARALAB_GPU_CHECK_LAUNCH("attention_softmax_rows_kernel");
}

// probs: [B, H, T, T], qkv: [B, T, 3D] -> out: [B, T, D]
template <class T>
void attention_apply(int64_t B, int64_t T_, int64_t H, int64_t Dh, bool /*causal*/, const T* probs,
                     const T* qkv, T* out, void* stream) {
    check_attention_sizes("attention_apply", B, T_, H, Dh);
    if (B == 0 || T_ == 0 || H == 0) return;
    const Geometry g{T_, H, Dh, H * Dh};
    // out = P v
    gemm_heads<T>(stream, false, false, T_, Dh, T_, B, H, g.scores(probs), g.part(qkv, 2), g.rows(out));
}

// probs: [B, H, T, T], qkv: [B, T, 3D], dout: [B, T, D] -> dprobs: [B, H, T, T], the v part of
// dqkv: [B, T, 3D]
template <class T>
void attention_backward_values(int64_t B, int64_t T_, int64_t H, int64_t Dh, bool causal,
                               const T* probs, const T* qkv, const T* dout, T* dprobs, T* dqkv,
                               void* stream) {
    check_attention_sizes("attention_backward_values", B, T_, H, Dh);
    if (B == 0 || T_ == 0 || H == 0) return;
    const Geometry g{T_, H, Dh, H * Dh};
    // dP = dout v^T
    gemm_heads<T>(stream, false, true, T_, T_, Dh, B, H, g.rows(dout), g.part(qkv, 2), g.scores(dprobs));
    // dv = P^T dout
    gemm_heads<T>(stream, true, false, T_, Dh, T_, B, H, g.scores(probs), g.rows(dout), g.part(dqkv, 2));
    if (causal && T_ > 1) {
        const unsigned rows = static_cast<unsigned>(B * H * T_);
        attention_causal_zero_kernel<T>
            <<<rows, row_threads(T_), 0, as_stream(stream)>>>(T_, dprobs);
        PARALAB_GPU_CHECK_LAUNCH("attention_causal_zero_kernel");
    }
}

// probs, dprobs: [B, H, T, T], qkv: [B, T, 3D] -> dS over dprobs, the q and k parts of dqkv
template <class T>
void attention_backward_scores(int64_t B, int64_t T_, int64_t H, int64_t Dh, bool causal,
                               const T* probs, const T* qkv, T* dprobs, T* dqkv, void* stream) {
    check_attention_sizes("attention_backward_scores", B, T_, H, Dh);
    if (B == 0 || T_ == 0 || H == 0) return;
    const Geometry g{T_, H, Dh, H * Dh};
    attention_softmax_backward_rows_kernel<T>
        <<<row_warp_blocks(B * H * T_), kRowBlock, 0, as_stream(stream)>>>(
            B * H * T_, T_, causal, inverse_sqrt<T>(Dh), probs, dprobs);
    PARALAB_GPU_CHECK_LAUNCH("attention_softmax_backward_rows_kernel");
    const T* ds = dprobs;
    // dq = dS k
    gemm_heads<T>(stream, false, false, T_, Dh, T_, B, H, g.scores(ds), g.part(qkv, 1), g.part(dqkv, 0));
    // dk = dS^T q
    gemm_heads<T>(stream, true, false, T_, Dh, T_, B, H, g.scores(ds), g.part(qkv, 0), g.part(dqkv, 1));
}

// ---- the fused pass ---------------------------------------------------------------------------
// One warp per row of the side it produces. Lane l keeps the row's numbers d = l, l + 32, ...
// (at most kFusedPerLane of them) in registers; a dot product of two rows is each lane's part
// summed over the warp (every lane gets the sum), so the online softmax runs in every lane alike.

namespace {

constexpr int kFusedPerLane = static_cast<int>(kFusedMaxHeadWidth / 32);

template <class T>
struct FusedRow {
    T x[kFusedPerLane];

    __device__ void load(const T* p, int64_t Dh, int lane, T scale = T(1)) {
#pragma unroll
        for (int t = 0; t < kFusedPerLane; ++t) {
            const int64_t d = lane + 32 * t;
            x[t] = d < Dh ? p[d] * scale : T(0);
        }
    }
    __device__ void zero() {
#pragma unroll
        for (int t = 0; t < kFusedPerLane; ++t) x[t] = T(0);
    }
    // this . p over the warp (every lane gets the sum)
    __device__ T dot(const T* p, int64_t Dh, int lane) const {
        T s = 0;
#pragma unroll
        for (int t = 0; t < kFusedPerLane; ++t) {
            const int64_t d = lane + 32 * t;
            if (d < Dh) s += x[t] * p[d];
        }
        return warp_sum(s);
    }
    // this = this * a + b * p
    __device__ void scale_add(T a, T b, const T* p, int64_t Dh, int lane) {
#pragma unroll
        for (int t = 0; t < kFusedPerLane; ++t) {
            const int64_t d = lane + 32 * t;
            if (d < Dh) x[t] = x[t] * a + b * p[d];
        }
    }
    __device__ void store(T* p, int64_t Dh, int lane, T scale = T(1)) const {
#pragma unroll
        for (int t = 0; t < kFusedPerLane; ++t) {
            const int64_t d = lane + 32 * t;
            if (d < Dh) p[d] = x[t] * scale;
        }
    }
};

// Where row i of sequence b, head h starts: in qkv's part (0 q, 1 k, 2 v) or in out / dout.
struct FusedGeometry {
    int64_t T, H, Dh, D;
    __device__ int64_t qkv_row(int64_t b, int64_t h, int64_t i, int part) const {
        return (b * T + i) * 3 * D + part * D + h * Dh;
    }
    __device__ int64_t out_row(int64_t b, int64_t h, int64_t i) const { return (b * T + i) * D + h * Dh; }
};

// The row of [B, H, T] this warp produces: row = (b, h, pos); false past the last one.
struct FusedWarp {
    int64_t row, pos, b, h;
    int lane;
    __device__ bool init(int64_t B, const FusedGeometry& g) {
        row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
        lane = static_cast<int>(threadIdx.x % 32);
        pos = row % g.T;
        b = row / g.T / g.H;
        h = row / g.T % g.H;
        return row < B * g.H * g.T;  // the whole warp alike: its lanes share the row
    }
};

template <class T>
__global__ void __launch_bounds__(kRowBlock)
    attention_fused_forward_kernel(int64_t B, FusedGeometry g, bool causal, T scale, const T* qkv, T* out, T* lse) {
    FusedWarp w;
    if (!w.init(B, g)) return;
    const int64_t row = w.row, i = w.pos, b = w.b, h = w.h;
    const int lane = w.lane;
    FusedRow<T> q, o;
    q.load(qkv + g.qkv_row(b, h, i, 0), g.Dh, lane, scale);
    o.zero();
    T m = -INFINITY, l = 0;
    const int64_t n = causal ? i + 1 : g.T;
    for (int64_t j = 0; j < n; ++j) {
        const T s = q.dot(qkv + g.qkv_row(b, h, j, 1), g.Dh, lane);
        const T m_new = fmax(m, s);
        const T alpha = exp(m - m_new), p = exp(s - m_new);
        l = l * alpha + p;
        o.scale_add(alpha, p, qkv + g.qkv_row(b, h, j, 2), g.Dh, lane);
        m = m_new;
    }
    o.store(out + g.out_row(b, h, i), g.Dh, lane, T(1) / l);
    if (lane == 0) lse[row] = m + log(l);
}

// dq of query row (b, h, i): the sum over visible j of dS_ij k_j, dS_ij = P_ij (dP_ij - delta_i)
// scale, P_ij = exp(q_i . k_j scale - lse_i), dP_ij = dout_i . v_j, delta_i = dout_i . out_i.
template <class T>
__global__ void __launch_bounds__(kRowBlock)
    attention_fused_dq_kernel(int64_t B, FusedGeometry g, bool causal, T scale, const T* qkv, const T* out,
                              const T* dout, const T* lse, T* dqkv) {
    FusedWarp w;
    if (!w.init(B, g)) return;
    const int64_t row = w.row, i = w.pos, b = w.b, h = w.h;
    const int lane = w.lane;
    FusedRow<T> q, d_o, dq;
    q.load(qkv + g.qkv_row(b, h, i, 0), g.Dh, lane, scale);
    d_o.load(dout + g.out_row(b, h, i), g.Dh, lane);
    dq.zero();
    const T delta = d_o.dot(out + g.out_row(b, h, i), g.Dh, lane), shift = lse[row];
    const int64_t n = causal ? i + 1 : g.T;
    for (int64_t j = 0; j < n; ++j) {
        const T p = exp(q.dot(qkv + g.qkv_row(b, h, j, 1), g.Dh, lane) - shift);
        const T dp = d_o.dot(qkv + g.qkv_row(b, h, j, 2), g.Dh, lane);
        dq.scale_add(T(1), p * (dp - delta) * scale, qkv + g.qkv_row(b, h, j, 1), g.Dh, lane);
    }
    dq.store(dqkv + g.qkv_row(b, h, i, 0), g.Dh, lane);
}

// dk and dv of key row (b, h, j): the sums over the query rows i that see it of dS_ij q_i and
// P_ij dout_i.
template <class T>
__global__ void __launch_bounds__(kRowBlock)
    attention_fused_dkv_kernel(int64_t B, FusedGeometry g, bool causal, T scale, const T* qkv, const T* out,
                               const T* dout, const T* lse, T* dqkv) {
    FusedWarp w;
    if (!w.init(B, g)) return;
    const int64_t row = w.row, j = w.pos, b = w.b, h = w.h;
    const int lane = w.lane;
    FusedRow<T> k, v, dk, dv;
    k.load(qkv + g.qkv_row(b, h, j, 1), g.Dh, lane, scale);
    v.load(qkv + g.qkv_row(b, h, j, 2), g.Dh, lane);
    dk.zero();
    dv.zero();
    const int64_t bh = row / g.T;
    for (int64_t i = causal ? j : 0; i < g.T; ++i) {
        const T* d_o = dout + g.out_row(b, h, i);
        const T p = exp(k.dot(qkv + g.qkv_row(b, h, i, 0), g.Dh, lane) - lse[bh * g.T + i]);
        const T dp = v.dot(d_o, g.Dh, lane);
        FusedRow<T> o_row;
        o_row.load(d_o, g.Dh, lane);
        const T delta = o_row.dot(out + g.out_row(b, h, i), g.Dh, lane);
        dv.scale_add(T(1), p, d_o, g.Dh, lane);
        dk.scale_add(T(1), p * (dp - delta) * scale, qkv + g.qkv_row(b, h, i, 0), g.Dh, lane);
    }
    dk.store(dqkv + g.qkv_row(b, h, j, 1), g.Dh, lane);
    dv.store(dqkv + g.qkv_row(b, h, j, 2), g.Dh, lane);
}

}  // namespace

// qkv: [B, T, 3D] -> out: [B, T, D], lse: [B, H, T]
template <class T>
void attention_fused_forward(int64_t B, int64_t T_, int64_t H, int64_t Dh, bool causal, const T* qkv,
                             T* out, T* lse, void* stream) {
    check_fused_attention_sizes("attention_fused_forward", B, T_, H, Dh);
    if (B == 0 || T_ == 0 || H == 0) return;
    const FusedGeometry g{T_, H, Dh, H * Dh};
    attention_fused_forward_kernel<T><<<row_warp_blocks(B * H * T_), kRowBlock, 0, as_stream(stream)>>>(
        B, g, causal, inverse_sqrt<T>(Dh), qkv, out, lse);
    PARALAB_GPU_CHECK_LAUNCH("attention_fused_forward_kernel");
}

// qkv: [B, T, 3D], out, dout: [B, T, D], lse: [B, H, T] -> dqkv: [B, T, 3D]
template <class T>
void attention_fused_backward(int64_t B, int64_t T_, int64_t H, int64_t Dh, bool causal, const T* qkv,
                              const T* out, const T* dout, const T* lse, T* dqkv, void* stream) {
    check_fused_attention_sizes("attention_fused_backward", B, T_, H, Dh);
    if (B == 0 || T_ == 0 || H == 0) return;
    const FusedGeometry g{T_, H, Dh, H * Dh};
    const unsigned blocks = row_warp_blocks(B * H * T_);
    attention_fused_dq_kernel<T><<<blocks, kRowBlock, 0, as_stream(stream)>>>(
        B, g, causal, inverse_sqrt<T>(Dh), qkv, out, dout, lse, dqkv);
    PARALAB_GPU_CHECK_LAUNCH("attention_fused_dq_kernel");
    attention_fused_dkv_kernel<T><<<blocks, kRowBlock, 0, as_stream(stream)>>>(
        B, g, causal, inverse_sqrt<T>(Dh), qkv, out, dout, lse, dqkv);
    PARALAB_GPU_CHECK_LAUNCH("attention_fused_dkv_kernel");
}

PARALAB_GPU_INSTANTIATE_FLOAT_TYPES(PARALAB_GPU_ATTENTION_OPS)

}  // namespace paralab::kernels::gpu
