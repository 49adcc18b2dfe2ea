// Sums, sums of squares (one tensor or many) and in-place scaling (kernels/gpu/reduce.h).
#include <kernels/gpu/reduce.h>
#include <kernels/gpu/detail/op_lists.h>

#include <array>
#include <cmath>

#include "multi_tensor.cuh"
#include "reduce.cuh"

namespace paralab::kernels::gpu {

namespace detail {

namespace {
constexpr int kFinalBlock = 1024;

// partials: [parts] -> *result (= or +=) their sum; thread t adds partials t, t + 1024, ...
__global__ void __launch_bounds__(kFinalBlock)
    final_sum_kernel(int64_t parts, const double* partials, double* result, bool accumulate) {
    __shared__ double shared[32];
    double acc = 0;
    for (int64_t i = threadIdx.x; i < parts; i += blockDim.x) acc += partials[i];
    acc = block_sum(acc, shared);
    if (threadIdx.x == 0) *result = accumulate ? *result + acc : acc;
}
}  // namespace

void launch_final_sum(int64_t parts, const double* partials, double* result, bool accumulate,
                      cudaStream_t stream) {
    final_sum_kernel<<<1, kFinalBlock, 0, stream>>>(parts, partials, result, accumulate);
    PARALAB_GPU_CHECK_LAUNCH("final_sum_kernel");
}

}  // namespace detail

namespace {

using namespace detail;

template <class T>
struct ValueTerm {
    const T* x;
    __device__ double operator()(int64_t i) const { return static_cast<double>(x[i]); }
};

template <class T>
struct SquareTerm {
    const T* x;
    __device__ double operator()(int64_t i) const {
        const double v = static_cast<double>(x[i]);
        return v * v;
    }
};

// Block b of the launch sums the squares of its chunk into partials[first_block + b].
template <class T>
__global__ void __launch_bounds__(detail::kReduceBlock)
    multi_sum_of_squares_kernel(detail::TensorList<1> list, int64_t chunk, double* partials) {
    __shared__ double shared[32];
    const int k = list.block_tensor[blockIdx.x];
    const T* x = static_cast<const T*>(list.ptr[0][k]);
    const int64_t begin = static_cast<int64_t>(list.block_chunk[blockIdx.x]) * chunk;
    const int64_t end = min(begin + chunk, list.size[k]);
    double acc = 0;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
        const double v = static_cast<double>(x[i]);
        acc += v * v;
    }
    acc = detail::block_sum(acc, shared);
    if (threadIdx.x == 0) partials[list.first_block + blockIdx.x] = acc;
}

template <class T>
__global__ void scale_kernel(int64_t n, T* x, T factor) {
    PARALAB_GRID_STRIDE_LOOP(i, n)
        x[i] *= factor;
}

template <class T>
__global__ void scale_by_device_scalar_kernel(int64_t n, T* x, const double* factor) {
    const T f = static_cast<T>(*factor);
    PARALAB_GRID_STRIDE_LOOP(i, n)
        x[i] *= f;
}

// The CPU's clip_coefficient (engine/optim/clip.cpp) on a device squared norm.
__global__ void clip_coefficient_kernel(const double* sq_norm, double max_norm, double* coef) {
    const double norm = sqrt(*sq_norm);
    *coef = isfinite(norm) ? fmin(1.0, max_norm / (norm + 1e-6)) : 1.0;
}

}  // namespace

void clip_coefficient(const double* sq_norm, double max_norm, double* coef, void* stream) {
    require(max_norm >= 0 && std::isfinite(max_norm), "clip_coefficient",
            "max_norm must be a finite number >= 0");
    clip_coefficient_kernel<<<1, 1, 0, as_stream(stream)>>>(sq_norm, max_norm, coef);
    PARALAB_GPU_CHECK_LAUNCH("clip_coefficient_kernel");
}

// x: [n] -> *result
template <class T>
void sum(int64_t n, const T* x, double* result, double* scratch, void* stream) {
    require(n >= 0, "sum", "negative size");
    detail::reduce_to_device(n, ValueTerm<T>{x}, result, scratch, false, as_stream(stream));
}

// x: [n] -> *result
template <class T>
void sum_of_squares(int64_t n, const T* x, double* result, double* scratch, void* stream) {
    require(n >= 0, "sum_of_squares", "negative size");
    detail::reduce_to_device(n, SquareTerm<T>{x}, result, scratch, false, as_stream(stream));
}

// xs[k]: [sizes[k]] for k < count -> *result
template <class T>
void sum_of_squares_multi(int64_t count, const T* const* xs, const int64_t* sizes, double* result,
                          double* scratch, void* stream) {
    require(count >= 0, "sum_of_squares_multi", "negative tensor count");
    const cudaStream_t s = as_stream(stream);
    // Tensors go in groups small enough that a group's chunks fit the scratch
    // (chunk_to_fit); each group's partials are added to the result in group order.
    constexpr int64_t kGroup = kReduceScratch / 4;
    constexpr int64_t kMinChunk = 4096;
    bool accumulate = false;
    int64_t g0 = 0;
    do {  // once at least, so that no tensor (or only empty ones) still writes *result = 0
        const int64_t g1 = std::min(count, g0 + kGroup);
        int64_t total = 0;
        for (int64_t k = g0; k < g1; ++k) {
            require(sizes[k] >= 0, "sum_of_squares_multi", "negative tensor size");
            total += sizes[k];
        }
        const int64_t chunk = detail::chunk_to_fit(total, g1 - g0, kReduceScratch, kMinChunk);
        const std::array<void* const*, 1> lists{
            reinterpret_cast<void* const*>(const_cast<T* const*>(xs + g0))};
        const int64_t parts = detail::for_each_tensor_chunk<1>(
            g1 - g0, lists, sizes + g0, chunk, [&](const detail::TensorList<1>& list, int blocks) {
                multi_sum_of_squares_kernel<T>
                    <<<blocks, detail::kReduceBlock, 0, s>>>(list, chunk, scratch);
                PARALAB_GPU_CHECK_LAUNCH("multi_sum_of_squares_kernel");
            });
        detail::launch_final_sum(parts, scratch, result, accumulate, s);
        accumulate = true;
        g0 = g1;
    } while (g0 < count);
}

// x: [n]
template <class T>
void scale_in_place(int64_t n, T* x, double factor, void* stream) {
    require(n >= 0, "scale_in_place", "negative size");
    if (n == 0) return;
    scale_kernel<T><<<detail::grid_for(n), detail::kBlock, 0, as_stream(stream)>>>(n, x, static_cast<T>(factor));
    PARALAB_GPU_CHECK_LAUNCH("scale_kernel");
}

// x: [n], factor: device scalar
template <class T>
void scale_in_place_by_device_scalar(int64_t n, T* x, const double* factor, void* stream) {
    require(n >= 0, "scale_in_place_by_device_scalar", "negative size");
    if (n == 0) return;
    scale_by_device_scalar_kernel<T><<<detail::grid_for(n), detail::kBlock, 0, as_stream(stream)>>>(n, x, factor);
    PARALAB_GPU_CHECK_LAUNCH("scale_by_device_scalar_kernel");
}

PARALAB_GPU_INSTANTIATE_FLOAT_TYPES(PARALAB_GPU_REDUCE_OPS)

}  // namespace paralab::kernels::gpu
