#include <kernels/cpu/gemm.h>
#include <kernels/cpu/recurrent.h>
#include <kernels/cpu/vmath.h>

#include "parallel_ranges.h"
#include "simd_clones.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

namespace paralab::kernels::cpu {

namespace {
// Elements (batch * hidden) of one step below which a parallel region costs more than it
// saves. Each element costs three to five exp, so threads pay off far earlier than for the
// memory-bound kernels.
constexpr int64_t kParallelMin = 4096;

// Single precision uses vmath's exp (it vectorizes; libm's expf is a scalar call), double
// precision, the gradient checks' reference, libm's.
template <class T>
inline T sigmoid(T x) {
    if constexpr (std::is_same_v<T, float>) return vmath::sigmoid(x);
    // exp(-x) overflows to inf for very negative x, and 1 / (1 + inf) is the right limit 0.
    return T(1) / (T(1) + std::exp(-x));
}

// tanh within ~2 ulp at a third of glibc's cost (it takes ~16 ns, and two of the five
// nonlinearities of an LSTM step are tanh). Above |x| = 1/8 it is (1 - e) / (1 + e) with
// e = exp(-2|x|); below, where 1 - e would cancel, the odd Taylor series to x^15 (the next
// term is under 1e-17 relative). NaN and +-inf come out as std::tanh gives them.
template <class T>
inline T tanh_via_exp(T x) {
    if constexpr (std::is_same_v<T, float>) return vmath::tanh(x);
    const T a = std::abs(x);
    if (a < T(0.125)) {
        const T s = x * x;
        return x * (T(1) +
                    s * (T(-1.0 / 3) +
                         s * (T(2.0 / 15) + s * (T(-17.0 / 315) +
                                                 s * (T(62.0 / 2835) +
                                                      s * (T(-1382.0 / 155925) +
                                                           s * (T(21844.0 / 6081075) +
                                                                s * T(-929569.0 / 638512875))))))));
    }
    const T e = std::exp(T(-2) * a);
    return std::copysign((T(1) - e) / (T(1) + e), x);
}

// ---- the cells' row loops -----------------------------------------------------------------
// Each takes rows [lo, hi) of the batch; the elementwise loop over j vectorizes (no branch in
// it: the first step, with no previous state, is its own instantiation). In single precision
// the loops run in functions cloned for AVX-512 and AVX2 (PARALAB_SIMD_CLONES): 16 lanes
// instead of SSE2's 4 on the gates' exp, sigmoid and tanh.

template <class T, bool HasPrev>
[[gnu::always_inline]] inline void lstm_forward_rows(int64_t lo, int64_t hi, int64_t H, T* gates,
                                                     int64_t ld_gates, const T* c_prev, T* c,
                                                     T* tanh_c, T* h, int64_t ld_state) {
    for (int64_t b = lo; b < hi; ++b) {
        T* __restrict g = gates + b * ld_gates;
        const T* __restrict cp = HasPrev ? c_prev + b * ld_state : nullptr;
        T* __restrict cr = c + b * ld_state;
        T* __restrict tc = tanh_c + b * ld_state;
        T* __restrict hr = h + b * ld_state;
#pragma omp simd
        for (int64_t j = 0; j < H; ++j) {
            const T i = sigmoid(g[j]);
            const T f = sigmoid(g[H + j]);
            const T gg = tanh_via_exp(g[2 * H + j]);
            const T o = sigmoid(g[3 * H + j]);
            g[j] = i;
            g[H + j] = f;
            g[2 * H + j] = gg;
            g[3 * H + j] = o;
            T cn = i * gg;
            if constexpr (HasPrev) cn += f * cp[j];
            const T t = tanh_via_exp(cn);
            cr[j] = cn;
            tc[j] = t;
            hr[j] = o * t;
        }
    }
}

template <class T, bool HasPrev>
[[gnu::always_inline]] inline void lstm_backward_rows(int64_t lo, int64_t hi, int64_t H,
                                                      const T* gates, int64_t ld_gates,
                                                      const T* c_prev, const T* tanh_c,
                                                      const T* dh, int64_t ld_state, T* dc,
                                                      T* dgates) {
    for (int64_t b = lo; b < hi; ++b) {
        const T* __restrict g = gates + b * ld_gates;
        const T* __restrict cp = HasPrev ? c_prev + b * ld_state : nullptr;
        const T* __restrict tc = tanh_c + b * ld_state;
        const T* __restrict dhr = dh + b * ld_state;
        T* __restrict dcr = dc + b * H;
        T* __restrict dg = dgates + b * ld_gates;
#pragma omp simd
        for (int64_t j = 0; j < H; ++j) {
            const T i = g[j], f = g[H + j], gg = g[2 * H + j], o = g[3 * H + j];
            const T t = tc[j];
            const T dhj = dhr[j];
            // c_t reaches the loss through h_t = o tanh(c_t) and through c_{t+1} = f c_t + ...
            const T dct = dcr[j] + dhj * o * (T(1) - t * t);
            T cprev = T(0);
            if constexpr (HasPrev) cprev = cp[j];
            dg[j] = dct * gg * i * (T(1) - i);
            dg[H + j] = dct * cprev * f * (T(1) - f);
            dg[2 * H + j] = dct * i * (T(1) - gg * gg);
            dg[3 * H + j] = dhj * t * o * (T(1) - o);
            dcr[j] = dct * f;
        }
    }
}

template <class T, bool HasPrev>
[[gnu::always_inline]] inline void gru_forward_rows(int64_t lo, int64_t hi, int64_t H, T* gates,
                                                    int64_t ld_gates, const T* hh,
                                                    const T* h_prev, T* hn, T* h,
                                                    int64_t ld_state) {
    for (int64_t b = lo; b < hi; ++b) {
        T* __restrict g = gates + b * ld_gates;
        const T* __restrict hhr = hh + b * 3 * H;
        const T* __restrict hp = HasPrev ? h_prev + b * ld_state : nullptr;
        T* __restrict hnr = hn + b * ld_state;
        T* __restrict hr = h + b * ld_state;
#pragma omp simd
        for (int64_t j = 0; j < H; ++j) {
            const T r = sigmoid(g[j] + hhr[j]);
            const T z = sigmoid(g[H + j] + hhr[H + j]);
            const T hnj = hhr[2 * H + j];
            const T n = tanh_via_exp(g[2 * H + j] + r * hnj);
            g[j] = r;
            g[H + j] = z;
            g[2 * H + j] = n;
            hnr[j] = hnj;
            T hj = (T(1) - z) * n;
            if constexpr (HasPrev) hj += z * hp[j];
            hr[j] = hj;
        }
    }
}

template <class T, bool HasPrev, bool HasDhPrev>
[[gnu::always_inline]] inline void gru_backward_rows(int64_t lo, int64_t hi, int64_t H,
                                                     const T* gates, int64_t ld_gates, const T* hn,
                                                     const T* h_prev, const T* dh, T* dh_prev,
                                                     int64_t ld_state, T* dgates_ih, T* dgates_hh) {
    for (int64_t b = lo; b < hi; ++b) {
        const T* __restrict g = gates + b * ld_gates;
        const T* __restrict hnr = hn + b * ld_state;
        const T* __restrict hp = HasPrev ? h_prev + b * ld_state : nullptr;
        const T* __restrict dhr = dh + b * ld_state;
        T* __restrict dhp = HasDhPrev ? dh_prev + b * ld_state : nullptr;
        T* __restrict dih = dgates_ih + b * ld_gates;
        T* __restrict dhh = dgates_hh + b * ld_gates;
#pragma omp simd
        for (int64_t j = 0; j < H; ++j) {
            const T r = g[j], z = g[H + j], n = g[2 * H + j];
            const T dhj = dhr[j];
            T hprev = T(0);
            if constexpr (HasPrev) hprev = hp[j];
            const T dn = dhj * (T(1) - z) * (T(1) - n * n);
            const T dr = dn * hnr[j] * r * (T(1) - r);
            const T dz = dhj * (hprev - n) * z * (T(1) - z);
            dih[j] = dr;
            dih[H + j] = dz;
            dih[2 * H + j] = dn;
            dhh[j] = dr;
            dhh[H + j] = dz;
            dhh[2 * H + j] = dn * r;  // hn enters n only through r * hn
            if constexpr (HasDhPrev) dhp[j] += dhj * z;
        }
    }
}

// The single-precision row loops, cloned per vector width.
PARALAB_SIMD_CLONES
void lstm_forward_rows_f32(bool has_prev, int64_t lo, int64_t hi, int64_t H, float* gates,
                           int64_t ld_gates, const float* c_prev, float* c, float* tanh_c,
                           float* h, int64_t ld_state) {
    if (has_prev) lstm_forward_rows<float, true>(lo, hi, H, gates, ld_gates, c_prev, c, tanh_c, h, ld_state);
    else lstm_forward_rows<float, false>(lo, hi, H, gates, ld_gates, c_prev, c, tanh_c, h, ld_state);
}

PARALAB_SIMD_CLONES
void lstm_backward_rows_f32(bool has_prev, int64_t lo, int64_t hi, int64_t H, const float* gates,
                            int64_t ld_gates, const float* c_prev, const float* tanh_c,
                            const float* dh, int64_t ld_state, float* dc, float* dgates) {
    if (has_prev) lstm_backward_rows<float, true>(lo, hi, H, gates, ld_gates, c_prev, tanh_c, dh, ld_state, dc, dgates);
    else lstm_backward_rows<float, false>(lo, hi, H, gates, ld_gates, c_prev, tanh_c, dh, ld_state, dc, dgates);
}

PARALAB_SIMD_CLONES
void gru_forward_rows_f32(bool has_prev, int64_t lo, int64_t hi, int64_t H, float* gates,
                          int64_t ld_gates, const float* hh, const float* h_prev, float* hn,
                          float* h, int64_t ld_state) {
    if (has_prev) gru_forward_rows<float, true>(lo, hi, H, gates, ld_gates, hh, h_prev, hn, h, ld_state);
    else gru_forward_rows<float, false>(lo, hi, H, gates, ld_gates, hh, h_prev, hn, h, ld_state);
}

PARALAB_SIMD_CLONES
void gru_backward_rows_f32(bool has_prev, bool has_dh_prev, int64_t lo, int64_t hi, int64_t H,
                           const float* gates, int64_t ld_gates, const float* hn,
                           const float* h_prev, const float* dh, float* dh_prev, int64_t ld_state,
                           float* dgates_ih, float* dgates_hh) {
    auto run = [&]<bool P, bool D>() {
        gru_backward_rows<float, P, D>(lo, hi, H, gates, ld_gates, hn, h_prev, dh, dh_prev, ld_state,
                                       dgates_ih, dgates_hh);
    };
    if (has_prev && has_dh_prev) run.template operator()<true, true>();
    else if (has_prev) run.template operator()<true, false>();
    else if (has_dh_prev) run.template operator()<false, true>();
    else run.template operator()<false, false>();
}

// Rows per thread below which a step's cell is not split: kParallelMin elements.
int64_t min_rows(int64_t hidden) { return (kParallelMin + hidden - 1) / std::max<int64_t>(hidden, 1); }
}  // namespace

// gates: [batch, 4H] (ld_gates), pre-activations -> activations; c_prev: [batch, H] or null
// -> c, tanh_c, h: [batch, H] (ld_state)
template <class T>
void lstm_cell_forward(int64_t batch, int64_t hidden, T* gates, int64_t ld_gates, const T* c_prev,
                       T* c, T* tanh_c, T* h, int64_t ld_state) {
    parallel_ranges(batch, min_rows(hidden), [&](int64_t lo, int64_t hi) {
        if constexpr (std::is_same_v<T, float>)
            lstm_forward_rows_f32(c_prev != nullptr, lo, hi, hidden, gates, ld_gates, c_prev, c,
                                  tanh_c, h, ld_state);
        else if (c_prev)
            lstm_forward_rows<T, true>(lo, hi, hidden, gates, ld_gates, c_prev, c, tanh_c, h, ld_state);
        else
            lstm_forward_rows<T, false>(lo, hi, hidden, gates, ld_gates, c_prev, c, tanh_c, h, ld_state);
    });
}

// gates: [batch, 4H] (ld_gates); c_prev, tanh_c, dh: [batch, H] (ld_state); dc: [batch, H]
// dense, in/out -> dgates: [batch, 4H] (ld_gates)
template <class T>
void lstm_cell_backward(int64_t batch, int64_t hidden, const T* gates, int64_t ld_gates,
                        const T* c_prev, const T* tanh_c, const T* dh, int64_t ld_state, T* dc,
                        T* dgates) {
    parallel_ranges(batch, min_rows(hidden), [&](int64_t lo, int64_t hi) {
        if constexpr (std::is_same_v<T, float>)
            lstm_backward_rows_f32(c_prev != nullptr, lo, hi, hidden, gates, ld_gates, c_prev,
                                   tanh_c, dh, ld_state, dc, dgates);
        else if (c_prev)
            lstm_backward_rows<T, true>(lo, hi, hidden, gates, ld_gates, c_prev, tanh_c, dh, ld_state, dc, dgates);
        else
            lstm_backward_rows<T, false>(lo, hi, hidden, gates, ld_gates, c_prev, tanh_c, dh, ld_state, dc, dgates);
    });
}

// gates: [batch, 3H] (ld_gates), input pre-activations -> r, z, n; hh: [batch, 3H] dense;
// h_prev: [batch, H] or null -> hn, h: [batch, H] (ld_state)
template <class T>
void gru_cell_forward(int64_t batch, int64_t hidden, T* gates, int64_t ld_gates, const T* hh,
                      const T* h_prev, T* hn, T* h, int64_t ld_state) {
    parallel_ranges(batch, min_rows(hidden), [&](int64_t lo, int64_t hi) {
        if constexpr (std::is_same_v<T, float>)
            gru_forward_rows_f32(h_prev != nullptr, lo, hi, hidden, gates, ld_gates, hh, h_prev, hn,
                                 h, ld_state);
        else if (h_prev)
            gru_forward_rows<T, true>(lo, hi, hidden, gates, ld_gates, hh, h_prev, hn, h, ld_state);
        else
            gru_forward_rows<T, false>(lo, hi, hidden, gates, ld_gates, hh, h_prev, hn, h, ld_state);
    });
}

// gates: [batch, 3H] (ld_gates); hn, h_prev, dh: [batch, H] (ld_state) -> dh_prev += (ld_state),
// dgates_ih, dgates_hh: [batch, 3H] (ld_gates)
template <class T>
void gru_cell_backward(int64_t batch, int64_t hidden, const T* gates, int64_t ld_gates, const T* hn,
                       const T* h_prev, const T* dh, T* dh_prev, int64_t ld_state, T* dgates_ih,
                       T* dgates_hh) {
    parallel_ranges(batch, min_rows(hidden), [&](int64_t lo, int64_t hi) {
        if constexpr (std::is_same_v<T, float>) {
            gru_backward_rows_f32(h_prev != nullptr, dh_prev != nullptr, lo, hi, hidden, gates,
                                  ld_gates, hn, h_prev, dh, dh_prev, ld_state, dgates_ih, dgates_hh);
        } else {
            auto run = [&]<bool P, bool D>() {
                gru_backward_rows<T, P, D>(lo, hi, hidden, gates, ld_gates, hn, h_prev, dh, dh_prev,
                                           ld_state, dgates_ih, dgates_hh);
            };
            if (h_prev && dh_prev) run.template operator()<true, true>();
            else if (h_prev) run.template operator()<true, false>();
            else if (dh_prev) run.template operator()<false, true>();
            else run.template operator()<false, false>();
        }
    });
}

// src: [rows, cols] (ld_src) -> dst: [rows, cols] (ld_dst)
template <class T>
void strided_rows_copy(int64_t rows, int64_t cols, const T* src, int64_t ld_src, T* dst,
                       int64_t ld_dst) {
    for (int64_t r = 0; r < rows; ++r) std::copy_n(src + r * ld_src, cols, dst + r * ld_dst);
}

// dgates: [batch, steps, G], h: [batch, steps, H] -> dw: [G, H] +=
template <class T>
void recurrent_weight_grad_accumulate(int64_t batch, int64_t steps, int64_t gate_cols,
                                      int64_t hidden, const T* dgates, const T* h, T* dw) {
    if (steps < 2) return;  // h_{-1} = 0: one step contributes nothing
    const int64_t G = gate_cols, H = hidden;
    if (steps - 1 >= batch) {
        // One sample's pairs (dgates[t], h[t-1]) are two dense row blocks, offset by one row.
        for (int64_t b = 0; b < batch; ++b)
            gemm<T>(true, false, G, H, steps - 1, T(1), dgates + (b * steps + 1) * G, G,
                    h + b * steps * H, H, T(1), dw, H);
    } else {
        // One step's rows across the batch are `steps` rows apart.
        for (int64_t t = 1; t < steps; ++t)
            gemm<T>(true, false, G, H, batch, T(1), dgates + t * G, steps * G, h + (t - 1) * H,
                    steps * H, T(1), dw, H);
    }
}

#define PARALAB_INSTANTIATE_RECURRENT(T)                                                         \
    template void lstm_cell_forward<T>(int64_t, int64_t, T*, int64_t, const T*, T*, T*, T*,      \
                                       int64_t);                                                 \
    template void lstm_cell_backward<T>(int64_t, int64_t, const T*, int64_t, const T*, const T*, \
                                        const T*, int64_t, T*, T*);                              \
    template void gru_cell_forward<T>(int64_t, int64_t, T*, int64_t, const T*, const T*, T*, T*, \
                                      int64_t);                                                  \
    template void gru_cell_backward<T>(int64_t, int64_t, const T*, int64_t, const T*, const T*,  \
                                       const T*, T*, int64_t, T*, T*);                           \
    template void strided_rows_copy<T>(int64_t, int64_t, const T*, int64_t, T*, int64_t);        \
    template void recurrent_weight_grad_accumulate<T>(int64_t, int64_t, int64_t, int64_t,        \
                                                      const T*, const T*, T*);

PARALAB_INSTANTIATE_RECURRENT(float)
PARALAB_INSTANTIATE_RECURRENT(double)
#undef PARALAB_INSTANTIATE_RECURRENT

}  // namespace paralab::kernels::cpu
