#include <kernels/cpu/elementwise.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include <kernels/cpu/vmath.h>

#include <type_traits>

#include "parallel_ranges.h"
#include "simd_clones.h"

namespace paralab::kernels::cpu {

namespace {
// Below this many elements a parallel region costs more than the loop: these kernels are
// memory-bound, so threads only pay on arrays well past the L2 cache.
constexpr int64_t kParallelMin = int64_t{1} << 16;
// Columns per task of column_sums_accumulate: a block of partial sums stays in L1 while the
// rows stream past, and the inner loop over the block vectorizes.
constexpr int64_t kColumnBlock = 256;

template <class T>
constexpr T kInvSqrt2 = T(0.70710678118654752440);
template <class T>
constexpr T kInvSqrt2Pi = T(0.39894228040143267794);
}  // namespace

// x: [n] -> y: [n]
template <class T>
void relu_forward(int64_t n, const T* x, T* y) {
    // Written as a select, not std::max (which returns a reference and compiles to a compare
    // and a branch per element: on random signs half of them mispredicted, ~15 cycles each);
    // the select vectorizes. NaN < 0 is false, so NaN stays NaN as with std::max(NaN, 0).
    parallel_ranges(n, kParallelMin, [=](int64_t lo, int64_t hi) {
#pragma omp simd
        for (int64_t i = lo; i < hi; ++i) {
            const T v = x[i];
            y[i] = v < T(0) ? T(0) : v;
        }
    });
}

// x, dy: [n] -> dx: [n]
template <class T>
void relu_backward(int64_t n, const T* x, const T* dy, T* dx) {
    // dy is read unconditionally so that the loop is a select and vectorizes (a conditional
    // read is a branch per element).
    parallel_ranges(n, kParallelMin, [=](int64_t lo, int64_t hi) {
#pragma omp simd
        for (int64_t i = lo; i < hi; ++i) {
            const T g = dy[i];
            dx[i] = x[i] > T(0) ? g : T(0);
        }
    });
}

// x: [n] -> y: [n]. Single precision through vmath's normal_cdf in vector registers (libm's
// erf is a scalar call), double through std::erf.
namespace {
PARALAB_SIMD_CLONES void gelu_forward_f32(int64_t lo, int64_t hi, const float* x, float* y) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) y[i] = x[i] * vmath::normal_cdf(x[i]);
}
PARALAB_SIMD_CLONES void gelu_backward_f32(int64_t lo, int64_t hi, const float* x, const float* dy, float* dx) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) {
        dx[i] = dy[i] * vmath::gelu_derivative(x[i]);
    }
}
}  // namespace

template <class T>
void gelu_forward(int64_t n, const T* x, T* y) {
    if constexpr (std::is_same_v<T, float>) {
        parallel_ranges(n, kParallelMin / 8, [=](int64_t lo, int64_t hi) { gelu_forward_f32(lo, hi, x, y); });
    } else {
#pragma omp parallel for if (n >= kParallelMin / 8)
        for (int64_t i = 0; i < n; ++i) y[i] = T(0.5) * x[i] * (T(1) + std::erf(x[i] * kInvSqrt2<T>));
    }
}

// x, dy: [n] -> dx: [n]
template <class T>
void gelu_backward(int64_t n, const T* x, const T* dy, T* dx) {
    if constexpr (std::is_same_v<T, float>) {
        parallel_ranges(n, kParallelMin / 8, [=](int64_t lo, int64_t hi) { gelu_backward_f32(lo, hi, x, dy, dx); });
    } else {
#pragma omp parallel for if (n >= kParallelMin / 8)
        for (int64_t i = 0; i < n; ++i) {
            const T v = x[i];
            const T cdf = T(0.5) * (T(1) + std::erf(v * kInvSqrt2<T>));
            const T pdf = kInvSqrt2Pi<T> * std::exp(T(-0.5) * v * v);
            dx[i] = dy[i] * (cdf + v * pdf);
        }
    }
}

// x: [n] -> y: [n]
template <class T>
void tanh_forward(int64_t n, const T* x, T* y) {
#pragma omp parallel for if (n >= kParallelMin / 8)
    for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
}

// y, dy: [n] -> dx: [n]
template <class T>
void tanh_backward(int64_t n, const T* y, const T* dy, T* dx) {
    parallel_ranges(n, kParallelMin, [=](int64_t lo, int64_t hi) {
#pragma omp simd
        for (int64_t i = lo; i < hi; ++i) dx[i] = dy[i] * (T(1) - y[i] * y[i]);
    });
}

// x: [n] -> y: [n]
template <class T>
void sigmoid_forward(int64_t n, const T* x, T* y) {
    // exp(-x) overflows to inf for very negative x, and 1 / (1 + inf) is the right limit 0.
#pragma omp parallel for if (n >= kParallelMin / 8)
    for (int64_t i = 0; i < n; ++i) y[i] = T(1) / (T(1) + std::exp(-x[i]));
}

// y, dy: [n] -> dx: [n]
template <class T>
void sigmoid_backward(int64_t n, const T* y, const T* dy, T* dx) {
    parallel_ranges(n, kParallelMin, [=](int64_t lo, int64_t hi) {
#pragma omp simd
        for (int64_t i = lo; i < hi; ++i) dx[i] = dy[i] * y[i] * (T(1) - y[i]);
    });
}

// bias: [cols] -> y: [rows, cols]
template <class T>
void bias_broadcast_rows(int64_t rows, int64_t cols, const T* bias, T* y) {
#pragma omp parallel for if (rows * cols >= kParallelMin)
    for (int64_t r = 0; r < rows; ++r) std::memcpy(y + r * cols, bias, sizeof(T) * cols);
}

// bias: [cols], y: [rows, cols] (in place)
template <class T>
void bias_add_rows(int64_t rows, int64_t cols, const T* bias, T* y) {
#pragma omp parallel for if (rows * cols >= kParallelMin)
    for (int64_t r = 0; r < rows; ++r) {
        T* row = y + r * cols;
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) row[c] += bias[c];
    }
}

// x: [rows, cols] -> sums: [cols] (accumulated)
template <class T>
void column_sums_accumulate(int64_t rows, int64_t cols, const T* x, T* sums) {
    // Threads split columns, never rows: each sum is added in row order whatever the count.
    const int64_t blocks = (cols + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for if (rows * cols >= kParallelMin && blocks > 1)
    for (int64_t b = 0; b < blocks; ++b) {
        const int64_t c0 = b * kColumnBlock;
        const int64_t c1 = std::min(cols, c0 + kColumnBlock);
        T* s = sums + c0;
        for (int64_t r = 0; r < rows; ++r) {
            const T* row = x + r * cols + c0;
#pragma omp simd
            for (int64_t c = 0; c < c1 - c0; ++c) s[c] += row[c];
        }
    }
}

// a, b: [n] -> y: [n]
template <class T>
void multiply_elementwise(int64_t n, const T* a, const T* b, T* y) {
    parallel_ranges(n, kParallelMin, [=](int64_t lo, int64_t hi) {
#pragma omp simd
        for (int64_t i = lo; i < hi; ++i) y[i] = a[i] * b[i];
    });
}

// table: [?, cols], index: [n] -> out: [n, cols]
template <class T>
void gather_rows(int64_t n, int64_t cols, const T* table, const int64_t* index, T* out) {
#pragma omp parallel for if (n * cols >= kParallelMin)
    for (int64_t i = 0; i < n; ++i)
        std::memcpy(out + i * cols, table + index[i] * cols, sizeof(T) * cols);
}

// src: [n, cols], index: [n] -> table: [?, cols] (accumulated)
template <class T>
void scatter_add_rows(int64_t n, int64_t cols, const T* src, const int64_t* index, T* table) {
    // Serial over i: two positions holding the same id write the same row, and a fixed order
    // keeps the sum deterministic.
    for (int64_t i = 0; i < n; ++i) {
        T* dst = table + index[i] * cols;
        const T* s = src + i * cols;
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) dst[c] += s[c];
    }
}

// pred, target: [n] -> scalar
template <class T>
double squared_error_sum(int64_t n, const T* pred, const T* target) {
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
        const double d = static_cast<double>(pred[i]) - static_cast<double>(target[i]);
        sum += d * d;
    }
    return sum;
}

// pred, target: [n] -> dpred: [n]
template <class T>
void squared_error_backward(int64_t n, const T* pred, const T* target, T scale, T* dpred) {
    parallel_ranges(n, kParallelMin, [=](int64_t lo, int64_t hi) {
#pragma omp simd
        for (int64_t i = lo; i < hi; ++i) dpred[i] = scale * (pred[i] - target[i]);
    });
}

#define PARALAB_INSTANTIATE_ELEMENTWISE(T)                                             \
    template void relu_forward<T>(int64_t, const T*, T*);                              \
    template void relu_backward<T>(int64_t, const T*, const T*, T*);                   \
    template void gelu_forward<T>(int64_t, const T*, T*);                              \
    template void gelu_backward<T>(int64_t, const T*, const T*, T*);                   \
    template void tanh_forward<T>(int64_t, const T*, T*);                              \
    template void tanh_backward<T>(int64_t, const T*, const T*, T*);                   \
    template void sigmoid_forward<T>(int64_t, const T*, T*);                           \
    template void sigmoid_backward<T>(int64_t, const T*, const T*, T*);                \
    template void bias_broadcast_rows<T>(int64_t, int64_t, const T*, T*);              \
    template void bias_add_rows<T>(int64_t, int64_t, const T*, T*);                    \
    template void column_sums_accumulate<T>(int64_t, int64_t, const T*, T*);           \
    template void multiply_elementwise<T>(int64_t, const T*, const T*, T*);            \
    template void gather_rows<T>(int64_t, int64_t, const T*, const int64_t*, T*);      \
    template void scatter_add_rows<T>(int64_t, int64_t, const T*, const int64_t*, T*); \
    template double squared_error_sum<T>(int64_t, const T*, const T*);                 \
    template void squared_error_backward<T>(int64_t, const T*, const T*, T, T*);

PARALAB_INSTANTIATE_ELEMENTWISE(float)
PARALAB_INSTANTIATE_ELEMENTWISE(double)
#undef PARALAB_INSTANTIATE_ELEMENTWISE

}  // namespace paralab::kernels::cpu
