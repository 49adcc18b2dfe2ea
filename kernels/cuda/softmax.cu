// Fused softmax + cross-entropy, its gradient, and the row argmax (kernels/gpu/softmax.h),
// after kernels/cpu/softmax.cpp: one block per row.
#include <kernels/gpu/softmax.h>
#include <kernels/gpu/detail/op_lists.h>

#include "launch.cuh"
#include "reduce.cuh"

namespace paralab::kernels::gpu {

namespace {

using namespace detail;

// logits: [rows, classes], targets: [rows] -> probs: [rows, classes], row_loss: [rows]
template <class T>
__global__ void __launch_bounds__(kRowBlock)
    softmax_cross_entropy_forward_kernel(int64_t classes, const T* logits, const int64_t* targets,
                                         T* probs, double* row_loss) {
    __shared__ double shared[32];
    const int64_t r = blockIdx.x;
    const T* z = logits + r * classes;
    T* p = probs + r * classes;
    double local_max = -INFINITY;
    for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) local_max = fmax(local_max, static_cast<double>(z[c]));
    const T max = static_cast<T>(detail::block_max(local_max, shared));
    double sum = 0;
    for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) {
        const T e = exp(z[c] - max);
        p[c] = e;
        sum += static_cast<double>(e);
    }
    sum = detail::block_sum(sum, shared);
    const double inv = 1.0 / sum;
    for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) p[c] = static_cast<T>(p[c] * inv);
    if (threadIdx.x == 0)
        row_loss[r] = log(sum) - (static_cast<double>(z[targets[r]]) - static_cast<double>(max));
}

// probs: [rows, classes], targets: [rows] -> dlogits: [rows, classes]
template <class T>
__global__ void softmax_cross_entropy_backward_kernel(int64_t rows, int64_t classes, const T* probs,
                                                      const int64_t* targets, T scale, T* dlogits) {
    PARALAB_GRID_STRIDE_LOOP(i, rows * classes) {
        const int64_t r = i / classes, c = i - r * classes;
        T d = scale * probs[i];
        if (c == targets[r]) d -= scale;
        dlogits[i] = d;
    }
}

// The better of two (value, index) candidates: index < 0 is "none"; larger value wins, the
// smaller index on ties.
template <class T>
__device__ void take_better(T& v, int64_t& i, T other_v, int64_t other_i) {
    if (other_i < 0) return;
    if (i < 0 || other_v > v || (other_v == v && other_i < i)) {
        v = other_v;
        i = other_i;
    }
}

// x: [rows, cols] -> out: [rows]
template <class T>
__global__ void __launch_bounds__(kRowBlock) argmax_rows_kernel(int64_t cols, const T* x, int64_t* out) {
    __shared__ T best_v[kRowBlock];
    __shared__ int64_t best_i[kRowBlock];
    const int64_t r = blockIdx.x;
    const T* row = x + r * cols;
    T v = 0;
    int64_t i = -1;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        if (!isnan(row[c])) take_better(v, i, row[c], c);
    best_v[threadIdx.x] = v;
    best_i[threadIdx.x] = i;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) {
            take_better(v, i, best_v[threadIdx.x + half], best_i[threadIdx.x + half]);
            best_v[threadIdx.x] = v;
            best_i[threadIdx.x] = i;
        }
        __syncthreads();
    }
    // std::max_element keeps a NaN at column 0 (nothing compares greater than it).
    if (threadIdx.x == 0) out[r] = (isnan(row[0]) || i < 0) ? 0 : i;
}

}  // namespace

// logits: [rows, classes], targets: [rows] -> probs, row_loss: [rows], *loss_sum
template <class T>
void softmax_cross_entropy_forward(int64_t rows, int64_t classes, const T* logits,
                                   const int64_t* targets, T* probs, double* row_loss,
                                   double* loss_sum, void* stream) {
    require(rows >= 0 && rows <= INT32_MAX, "softmax_cross_entropy_forward", "rows out of range");
    require(classes > 0, "softmax_cross_entropy_forward", "classes must be positive");
    const cudaStream_t s = as_stream(stream);
    if (rows > 0) {
        softmax_cross_entropy_forward_kernel<T>
            <<<static_cast<unsigned>(rows), kRowBlock, 0, s>>>(classes, logits, targets, probs, row_loss);
        PARALAB_GPU_CHECK_LAUNCH("softmax_cross_entropy_forward_kernel");
    }
    detail::launch_final_sum(rows, row_loss, loss_sum, false, s);
}

// probs: [rows, classes], targets: [rows] -> dlogits: [rows, classes]
template <class T>
void softmax_cross_entropy_backward(int64_t rows, int64_t classes, const T* probs,
                                    const int64_t* targets, T scale, T* dlogits, void* stream) {
    require(rows >= 0 && classes > 0, "softmax_cross_entropy_backward", "bad size");
    if (rows == 0) return;
    softmax_cross_entropy_backward_kernel<T><<<detail::grid_for(rows * classes), detail::kBlock, 0,
                                               as_stream(stream)>>>(rows, classes, probs, targets, scale, dlogits);
    PARALAB_GPU_CHECK_LAUNCH("softmax_cross_entropy_backward_kernel");
}

// x: [rows, cols] -> out: [rows]
template <class T>
void argmax_rows(int64_t rows, int64_t cols, const T* x, int64_t* out, void* stream) {
    require(rows >= 0 && rows <= INT32_MAX, "argmax_rows", "rows out of range");
    require(cols > 0, "argmax_rows", "cols must be positive");
    if (rows == 0) return;
    argmax_rows_kernel<T><<<static_cast<unsigned>(rows), kRowBlock, 0, as_stream(stream)>>>(cols, x, out);
    PARALAB_GPU_CHECK_LAUNCH("argmax_rows_kernel");
}

PARALAB_GPU_INSTANTIATE_FLOAT_TYPES(PARALAB_GPU_SOFTMAX_OPS)

}  // namespace paralab::kernels::gpu
