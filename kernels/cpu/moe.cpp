#include <kernels/cpu/moe.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "parallel_ranges.h"

namespace paralab::kernels::cpu {

namespace {
constexpr int64_t kParallelMin = int64_t{1} << 14;  // numbers touched before threads pay off
int64_t rows_before_threads(int64_t width) { return std::max<int64_t>(1, kParallelMin / std::max<int64_t>(1, width)); }
}  // namespace

// logits: [N, E] -> probs: [N, E], lse: [N], choice, weight: [N, k]
template <class T>
void moe_route_forward(int64_t N, int64_t E, int64_t k, const T* logits, T* probs, T* lse, int64_t* choice,
                       T* weight) {
    parallel_ranges(N, rows_before_threads(E), [=](int64_t lo, int64_t hi) {
        std::vector<int64_t> order(static_cast<size_t>(E));
        for (int64_t t = lo; t < hi; ++t) {
            const T* z = logits + t * E;
            T* p = probs + t * E;
            const T m = *std::max_element(z, z + E);
            T sum = 0;
            for (int64_t e = 0; e < E; ++e) sum += (p[e] = std::exp(z[e] - m));
            for (int64_t e = 0; e < E; ++e) p[e] /= sum;
            lse[t] = m + std::log(sum);
            for (int64_t e = 0; e < E; ++e) order[static_cast<size_t>(e)] = e;
            std::partial_sort(order.begin(), order.begin() + k, order.end(),
                              [p](int64_t a, int64_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
            T chosen = 0;
            for (int64_t j = 0; j < k; ++j) chosen += p[order[static_cast<size_t>(j)]];
            for (int64_t j = 0; j < k; ++j) {
                choice[t * k + j] = order[static_cast<size_t>(j)];
                weight[t * k + j] = p[order[static_cast<size_t>(j)]] / chosen;
            }
        }
    });
}

// probs, dlogits: [N, E]; lse: [N]; choice, weight, dweight: [N, k]; dprobs_all: [E]
template <class T>
void moe_route_backward(int64_t N, int64_t E, int64_t k, const T* probs, const T* lse, const int64_t* choice,
                        const T* weight, const T* dweight, const T* dprobs_all, T z_scale, T* dlogits) {
    parallel_ranges(N, rows_before_threads(E), [=](int64_t lo, int64_t hi) {
        std::vector<T> dp(static_cast<size_t>(E));
        for (int64_t t = lo; t < hi; ++t) {
            const T* p = probs + t * E;
            for (int64_t e = 0; e < E; ++e) dp[static_cast<size_t>(e)] = dprobs_all ? dprobs_all[e] : T(0);
            T chosen = 0, mean = 0;
            for (int64_t j = 0; j < k; ++j) {
                chosen += p[choice[t * k + j]];
                mean += dweight[t * k + j] * weight[t * k + j];
            }
            for (int64_t j = 0; j < k; ++j)
                dp[static_cast<size_t>(choice[t * k + j])] += (dweight[t * k + j] - mean) / chosen;
            T dot = 0;
            for (int64_t e = 0; e < E; ++e) dot += p[e] * dp[static_cast<size_t>(e)];
            const T dz = z_scale * lse[t];  // d lse / d logit_e = p_e
            for (int64_t e = 0; e < E; ++e) dlogits[t * E + e] = p[e] * (dp[static_cast<size_t>(e)] - dot + dz);
        }
    });
}

// x: [*, D] -> out: [n, D]
template <class T>
void moe_gather_rows(int64_t n, int64_t D, const T* x, const int64_t* rows, const T* scale, T* out) {
    parallel_ranges(n, rows_before_threads(D), [=](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r) {
            const T* src = x + rows[r] * D;
            const T s = scale ? scale[r] : T(1);
            T* dst = out + r * D;
#pragma omp simd
            for (int64_t i = 0; i < D; ++i) dst[i] = s * src[i];
        }
    });
}

// src: [n, D] -> out: [*, D] (rows distinct: the ranges write disjoint rows)
template <class T>
void moe_scatter_add_rows(int64_t n, int64_t D, const T* src, const int64_t* rows, const T* scale, T* out) {
    parallel_ranges(n, rows_before_threads(D), [=](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r) {
            const T s = scale ? scale[r] : T(1);
            const T* a = src + r * D;
            T* dst = out + rows[r] * D;
#pragma omp simd
            for (int64_t i = 0; i < D; ++i) dst[i] += s * a[i];
        }
    });
}

// a: [*, D], b: [n, D] -> dots: [n]
template <class T>
void moe_row_dots(int64_t n, int64_t D, const T* a, const int64_t* rows, const T* b, T* dots) {
    parallel_ranges(n, rows_before_threads(D), [=](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r) {
            const T* x = a + rows[r] * D;
            const T* y = b + r * D;
            T s = 0;
#pragma omp simd reduction(+ : s)
            for (int64_t i = 0; i < D; ++i) s += x[i] * y[i];
            dots[r] = s;
        }
    });
}

#define PARALAB_INSTANTIATE_MOE(T)                                                                             \
    template void moe_route_forward<T>(int64_t, int64_t, int64_t, const T*, T*, T*, int64_t*, T*);            \
    template void moe_route_backward<T>(int64_t, int64_t, int64_t, const T*, const T*, const int64_t*,        \
                                        const T*, const T*, const T*, T, T*);                                  \
    template void moe_gather_rows<T>(int64_t, int64_t, const T*, const int64_t*, const T*, T*);               \
    template void moe_scatter_add_rows<T>(int64_t, int64_t, const T*, const int64_t*, const T*, T*);          \
    template void moe_row_dots<T>(int64_t, int64_t, const T*, const int64_t*, const T*, T*);

PARALAB_INSTANTIATE_MOE(float)
PARALAB_INSTANTIATE_MOE(double)
#undef PARALAB_INSTANTIATE_MOE

}  // namespace paralab::kernels::cpu
