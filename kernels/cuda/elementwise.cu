// Activations, bias rows, column sums, products and the squared error on the GPU
// (kernels/gpu/elementwise.h); each kernel is the loop body of kernels/cpu/elementwise.cpp.
#include <kernels/gpu/elementwise.h>
#include <kernels/gpu/detail/op_lists.h>

#include "column_sums.cuh"
#include "launch.cuh"
#include "reduce.cuh"

namespace paralab::kernels::gpu {

namespace {

using namespace detail;

template <class T>
constexpr T kInvSqrt2 = T(0.70710678118654752440);
template <class T>
constexpr T kInvSqrt2Pi = T(0.39894228040143267794);

// y[i] = op(x[i]) for i < n, grid-stride.
template <class T, class Op>
__global__ void map_kernel(int64_t n, const T* x, T* y, Op op) {
    PARALAB_GRID_STRIDE_LOOP(i, n)
        y[i] = op(x[i]);
}

// c[i] = op(a[i], b[i]) for i < n, grid-stride.
template <class T, class Op>
__global__ void zip_kernel(int64_t n, const T* a, const T* b, T* c, Op op) {
    PARALAB_GRID_STRIDE_LOOP(i, n)
        c[i] = op(a[i], b[i]);
}

template <class T, class Op>
void launch_map(const char* name, int64_t n, const T* x, T* y, void* stream, Op op) {
    require(n >= 0, name, "negative size");
    if (n == 0) return;
    map_kernel<<<grid_for(n), kBlock, 0, as_stream(stream)>>>(n, x, y, op);
    PARALAB_GPU_CHECK_LAUNCH("map_kernel");
}

template <class T, class Op>
void launch_zip(const char* name, int64_t n, const T* a, const T* b, T* c, void* stream, Op op) {
    require(n >= 0, name, "negative size");
    if (n == 0) return;
    zip_kernel<<<grid_for(n), kBlock, 0, as_stream(stream)>>>(n, a, b, c, op);
    PARALAB_GPU_CHECK_LAUNCH("zip_kernel");
}

// The ops, as functors: nvcc inlines them into the loops.
template <class T>
struct Relu {
    __device__ T operator()(T v) const { return v < T(0) ? T(0) : v; }  // NaN stays NaN
};
template <class T>
struct ReluGrad {
    __device__ T operator()(T x, T g) const { return x > T(0) ? g : T(0); }
};
template <class T>
struct Gelu {
    __device__ T operator()(T v) const { return T(0.5) * v * (T(1) + erf(v * kInvSqrt2<T>)); }
};
template <class T>
struct GeluGrad {
    __device__ T operator()(T v, T g) const {
        const T cdf = T(0.5) * (T(1) + erf(v * kInvSqrt2<T>));
        const T pdf = kInvSqrt2Pi<T> * exp(T(-0.5) * v * v);
        return g * (cdf + v * pdf);
    }
};
template <class T>
struct Tanh {
    __device__ T operator()(T v) const { return tanh(v); }
};
template <class T>
struct TanhGrad {
    __device__ T operator()(T y, T g) const { return g * (T(1) - y * y); }
};
template <class T>
struct Sigmoid {
    // exp(-x) overflows to inf for very negative x, and 1 / (1 + inf) is the right limit 0.
    __device__ T operator()(T v) const { return T(1) / (T(1) + exp(-v)); }
};
template <class T>
struct SigmoidGrad {
    __device__ T operator()(T y, T g) const { return g * y * (T(1) - y); }
};
template <class T>
struct Product {
    __device__ T operator()(T a, T b) const { return a * b; }
};

// y: [rows, cols]; add: y[r, c] (+)= bias[c]. Threads run along a row's columns (x), blocks
// down the rows (y): no division per entry, and each thread reads its bias entries once.
template <class T, bool Add>
__global__ void bias_rows_kernel(int64_t rows, int64_t cols, const T* bias, T* y) {
    const int64_t row_step = gridDim.y;
    for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < cols;
         c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const T b = bias[c];
        for (int64_t r = blockIdx.y; r < rows; r += row_step) {
            T* p = y + r * cols + c;
            *p = Add ? *p + b : b;
        }
    }
}

template <class T, bool Add>
void launch_bias_rows(const char* name, int64_t rows, int64_t cols, const T* bias, T* y, void* stream) {
    require(rows >= 0 && cols >= 0, name, "negative size");
    if (rows * cols == 0) return;
    // About kMaxGrid blocks in all, at most 65535 down (the y limit), each thread a few rows.
    const int64_t across = std::min<int64_t>((cols + kBlock - 1) / kBlock, kMaxGrid);
    const int64_t down = std::clamp<int64_t>(kMaxGrid / across / 4, 1, std::min<int64_t>(rows, 65535));
    const dim3 grid(static_cast<unsigned>(across), static_cast<unsigned>(down));
    bias_rows_kernel<T, Add><<<grid, kBlock, 0, as_stream(stream)>>>(rows, cols, bias, y);
    PARALAB_GPU_CHECK_LAUNCH("bias_rows_kernel");
}

template <class T>
struct SquaredDiff {
    const T* pred;
    const T* target;
    __device__ double operator()(int64_t i) const {
        const double d = static_cast<double>(pred[i]) - static_cast<double>(target[i]);
        return d * d;
    }
};

template <class T>
__global__ void squared_error_backward_kernel(int64_t n, const T* pred, const T* target, T scale,
                                              T* dpred) {
    PARALAB_GRID_STRIDE_LOOP(i, n)
        dpred[i] = scale * (pred[i] - target[i]);
}

}  // namespace

// x: [n] -> y: [n]
template <class T>
void relu_forward(int64_t n, const T* x, T* y, void* stream) {
    launch_map("relu_forward", n, x, y, stream, Relu<T>{});
}
// x, dy: [n] -> dx: [n]
template <class T>
void relu_backward(int64_t n, const T* x, const T* dy, T* dx, void* stream) {
    launch_zip("relu_backward", n, x, dy, dx, stream, ReluGrad<T>{});
}
// x: [n] -> y: [n]
template <class T>
void gelu_forward(int64_t n, const T* x, T* y, void* stream) {
    launch_map("gelu_forward", n, x, y, stream, Gelu<T>{});
}
// x, dy: [n] -> dx: [n]
template <class T>
void gelu_backward(int64_t n, const T* x, const T* dy, T* dx, void* stream) {
    launch_zip("gelu_backward", n, x, dy, dx, stream, GeluGrad<T>{});
}
// x: [n] -> y: [n]
template <class T>
void tanh_forward(int64_t n, const T* x, T* y, void* stream) {
    launch_map("tanh_forward", n, x, y, stream, Tanh<T>{});
}
// y, dy: [n] -> dx: [n]
template <class T>
void tanh_backward(int64_t n, const T* y, const T* dy, T* dx, void* stream) {
    launch_zip("tanh_backward", n, y, dy, dx, stream, TanhGrad<T>{});
}
// x: [n] -> y: [n]
template <class T>
void sigmoid_forward(int64_t n, const T* x, T* y, void* stream) {
    launch_map("sigmoid_forward", n, x, y, stream, Sigmoid<T>{});
}
// y, dy: [n] -> dx: [n]
template <class T>
void sigmoid_backward(int64_t n, const T* y, const T* dy, T* dx, void* stream) {
    launch_zip("sigmoid_backward", n, y, dy, dx, stream, SigmoidGrad<T>{});
}

// bias: [cols] -> y: [rows, cols]
template <class T>
void bias_broadcast_rows(int64_t rows, int64_t cols, const T* bias, T* y, void* stream) {
    launch_bias_rows<T, false>("bias_broadcast_rows", rows, cols, bias, y, stream);
}
// bias: [cols], y: [rows, cols] (in place)
template <class T>
void bias_add_rows(int64_t rows, int64_t cols, const T* bias, T* y, void* stream) {
    launch_bias_rows<T, true>("bias_add_rows", rows, cols, bias, y, stream);
}
// x: [rows, cols] -> sums: [cols] (accumulated)
template <class T>
void column_sums_accumulate(int64_t rows, int64_t cols, const T* x, T* sums, void* stream) {
    require(rows >= 0 && cols >= 0, "column_sums_accumulate", "negative size");
    detail::launch_column_sums(rows, cols, x, sums, as_stream(stream));
}
// a, b: [n] -> y: [n]
template <class T>
void multiply_elementwise(int64_t n, const T* a, const T* b, T* y, void* stream) {
    launch_zip("multiply_elementwise", n, a, b, y, stream, Product<T>{});
}

// pred, target: [n] -> *sum
template <class T>
void squared_error_sum(int64_t n, const T* pred, const T* target, double* sum, double* scratch,
                       void* stream) {
    require(n >= 0, "squared_error_sum", "negative size");
    detail::reduce_to_device(n, SquaredDiff<T>{pred, target}, sum, scratch, false, as_stream(stream));
}
// pred, target: [n] -> dpred: [n]
template <class T>
void squared_error_backward(int64_t n, const T* pred, const T* target, T scale, T* dpred,
                            void* stream) {
    require(n >= 0, "squared_error_backward", "negative size");
    if (n == 0) return;
    squared_error_backward_kernel<T><<<grid_for(n), kBlock, 0, as_stream(stream)>>>(n, pred, target, scale, dpred);
    PARALAB_GPU_CHECK_LAUNCH("squared_error_backward_kernel");
}

PARALAB_GPU_INSTANTIATE_FLOAT_TYPES(PARALAB_GPU_ELEMENTWISE_OPS)

}  // namespace paralab::kernels::gpu
