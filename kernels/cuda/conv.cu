// 2-D convolution through cuDNN's convolution API (kernels/gpu/conv.h). Built with cuDNN where
// CMake found its headers (PARALAB_HAVE_CUDNN); the library is opened at the first use
// (cudnn_api.cuh), so that a machine without it answers cudnn_available() false and a plan's
// constructor says why. Without the headers the same API answers false and a plan's constructor
// throws "built without cuDNN".
//
// Per plan: one cuDNN handle (a handle is not thread-safe, and two rank threads may run two
// plans on one GPU at once), the tensor and filter descriptors, and one convolution descriptor
// per direction (forward, backward data, backward filter), each carrying the math type of the
// algorithm chosen for it. Algorithms come from the *_v7 heuristics: the first candidate that
// succeeded, is deterministic and needs at most kWorkspaceLimit of workspace; fp32 without
// TF32 runs FMA math only (no TF32 tensor cores). The bias gradient is a deterministic kernel of this file
// (per channel, in double, a fixed order), not cudnnConvolutionBackwardBias, whose reduction
// order cuDNN does not document. The weight gradient of an exact plan (no TF32) is one cuBLAS
// GEMM over the whole batch where its operands fit kGemmFilterLimit: dW += dy' col', with col the
// batch's im2col [C k k, N OH OW] and dy' the output gradient as [K, N OH OW], both written by
// kernels of this file into the workspace. cuDNN's deterministic backward-filter algorithm
// (ALGO_1) ran LeNet's two convolutions in 0.50 ms a step on an H100, a tenth of the FMA rate;
// its faster ones add with atomics, or round through a transform.
#include <kernels/gpu/conv.h>
#include <kernels/gpu/detail/launch_checks.h>
#include <kernels/gpu/error.h>
#include <kernels/gpu/gemm.h>

#include <stdexcept>
#include <string>

#include "launch.cuh"

#if PARALAB_HAVE_CUDNN
#include <algorithm>
#include <climits>
#include <mutex>
#include <vector>

#include "check_cudnn.cuh"
#include "cudnn_api.cuh"
#endif

namespace paralab::kernels::gpu {

// The plan's messages and preconditions (kernels/gpu/detail/launch_checks.h): every build
// checks them the same way.
using detail::describe_conv;
using detail::validate_conv_plan;

#if PARALAB_HAVE_CUDNN

namespace {

using detail::as_stream;
using detail::DeviceGuard;

// cuDNN's functions, from the library opened at the first use. Reached only once
// cudnn_available() said it opened, so it does not throw here.
const detail::CudnnApi& dnn() {
    return detail::cudnn();
}

// The largest workspace an algorithm may ask for while a candidate needing less exists.
constexpr size_t kWorkspaceLimit = size_t{256} << 20;
// The largest workspace of the weight gradient as one GEMM (col and dy'); larger batches take
// cuDNN's algorithm.
constexpr size_t kGemmFilterLimit = size_t{64} << 20;

// Rethrows a cuDNN or CUDA failure with the plan's description appended to the statement, so
// that the message names the geometry; the type (GpuError) and the status stay.
[[noreturn]] void rethrow_naming(const GpuError& e, const std::string& what) {
    throw GpuError(e.library(), e.status(), e.status_text(), e.statement() + " [" + what + "]", e.file(),
                   e.line());
}

// db[k] += sum over n < N, p < plane of dy[n, k, p], for k < K: block k sums channel k in
// double (each thread a strided share, then block_sum's fixed tree), so the result does not
// depend on timing.
// One block of kBiasBlock threads per channel; thread t sums the elements t, t + kBiasBlock, ...
// of the channel's N planes taken as one sequence: a fixed order, so the result repeats.
constexpr int kBiasBlock = 1024;
template <class T>
__global__ void __launch_bounds__(kBiasBlock)
    conv_bias_grad_kernel(int64_t N, int64_t K, int64_t plane, const T* dy, T* db) {
    __shared__ double shared[32];
    const int64_t k = blockIdx.x;
    double s = 0;
    for (int64_t i = threadIdx.x; i < N * plane; i += blockDim.x) {
        const int64_t n = i / plane, p = i - n * plane;
        s += static_cast<double>(dy[(n * K + k) * plane + p]);
    }
    s = detail::block_sum(s, shared);
    if (threadIdx.x == 0) db[k] = static_cast<T>(static_cast<double>(db[k]) + s);
}

// The whole batch's im2col: col[(c k + r) k + q][n OH OW + oh OW + ow] =
// x[n, c, oh stride - pad + r, ow stride - pad + q], 0 in the padding.
template <class T>
__global__ void im2col_batch_kernel(int64_t total, int64_t N, int64_t C, int64_t H, int64_t W, int64_t R,
                                    int64_t stride, int64_t pad, int64_t OH, int64_t OW, const T* x, T* col) {
    const int64_t P = OH * OW, NP = N * P;
    PARALAB_GRID_STRIDE_LOOP(i, total) {
        const int64_t row = i / NP, j = i - row * NP;
        const int64_t n = j / P, pos = j - n * P;
        const int64_t oh = pos / OW, ow = pos - oh * OW;
        const int64_t q = row % R, r = (row / R) % R, c = row / (R * R);
        const int64_t ih = oh * stride - pad + r, iw = ow * stride - pad + q;
        col[i] = ih >= 0 && ih < H && iw >= 0 && iw < W ? x[((n * C + c) * H + ih) * W + iw] : T(0);
    }
}

// dy [N, K, P] -> dyt [K, N P].
template <class T>
__global__ void batch_major_to_channel_major_kernel(int64_t total, int64_t N, int64_t K, int64_t P, const T* dy,
                                                    T* dyt) {
    PARALAB_GRID_STRIDE_LOOP(i, total) {
        const int64_t k = i / (N * P), j = i - k * (N * P);
        const int64_t n = j / P, p = j - n * P;
        dyt[i] = dy[(n * K + k) * P + p];
    }
}

// Algorithms through a transform (FFT, Winograd) round otherwise than a direct sum: on an H100,
// fp32 weight gradients of LeNet's first convolution came out 4e-3 off (relative) through one.
// Left out unless TF32 is allowed (whose own error is of that order).
bool through_transform(cudnnConvolutionFwdAlgo_t a) {
    return a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
           a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
}
bool through_transform(cudnnConvolutionBwdDataAlgo_t a) {
    return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
           a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
}
bool through_transform(cudnnConvolutionBwdFilterAlgo_t a) {
    return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
           a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD ||
           a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

const char* algo_name(cudnnConvolutionFwdAlgo_t a) {
    switch (a) {
        case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM: return "IMPLICIT_GEMM";
        case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM: return "IMPLICIT_PRECOMP_GEMM";
        case CUDNN_CONVOLUTION_FWD_ALGO_GEMM: return "GEMM";
        case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT: return "DIRECT";
        case CUDNN_CONVOLUTION_FWD_ALGO_FFT: return "FFT";
        case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING: return "FFT_TILING";
        case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD: return "WINOGRAD";
        case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED: return "WINOGRAD_NONFUSED";
        default: return "?";
    }
}
const char* algo_name(cudnnConvolutionBwdDataAlgo_t a) {
    switch (a) {
        case CUDNN_CONVOLUTION_BWD_DATA_ALGO_0: return "ALGO_0";
        case CUDNN_CONVOLUTION_BWD_DATA_ALGO_1: return "ALGO_1";
        case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT: return "FFT";
        case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING: return "FFT_TILING";
        case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD: return "WINOGRAD";
        case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED: return "WINOGRAD_NONFUSED";
        default: return "?";
    }
}
const char* algo_name(cudnnConvolutionBwdFilterAlgo_t a) {
    switch (a) {
        case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0: return "ALGO_0";
        case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1: return "ALGO_1";
        case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT: return "FFT";
        case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3: return "ALGO_3";
        case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD: return "WINOGRAD";
        case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED: return "WINOGRAD_NONFUSED";
        case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING: return "FFT_TILING";
        default: return "?";
    }
}

const char* math_name(cudnnMathType_t m) {
    switch (m) {
        case CUDNN_DEFAULT_MATH: return "default math";
        case CUDNN_TENSOR_OP_MATH: return "tensor-op math";
        case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "tensor-op math with conversion";
        case CUDNN_FMA_MATH: return "FMA math";
        default: return "?";
    }
}

// One algorithm choice: the algorithm, the math type it runs with, its workspace.
template <class Algo>
struct Choice {
    Algo algo{};
    cudnnMathType_t math = CUDNN_DEFAULT_MATH;
    size_t workspace = 0;
    bool deterministic = false;
};

// Picks from heuristic results (best first) the candidates that succeeded (and, when exact, do
// not go through a transform); then the first
// deterministic one within kWorkspaceLimit, else the first within it, else the one needing the
// least workspace. fma_only (fp32 without TF32): tensor-op candidates are left out and the rest
// run with CUDNN_FMA_MATH (the heuristics answer FMA for an FMA descriptor; a DEFAULT answer is
// run as FMA too, and kept only if cuDNN sizes its workspace under FMA). workspace_of(algo,
// math, &bytes) sets the convolution descriptor's math type and asks cuDNN for the workspace
// (false: unusable).
template <class Algo, class Perf, class WorkspaceOf>
Choice<Algo> choose(const std::vector<Perf>& perfs, bool fma_only, bool exact, WorkspaceOf workspace_of,
                    const char* direction, const std::string& what) {
    std::vector<Choice<Algo>> candidates;
    for (const Perf& p : perfs) {
        if (p.status != CUDNN_STATUS_SUCCESS) continue;
        if (exact && through_transform(p.algo)) continue;
        if (fma_only && p.mathType != CUDNN_FMA_MATH && p.mathType != CUDNN_DEFAULT_MATH) continue;
        const cudnnMathType_t math = fma_only ? CUDNN_FMA_MATH : p.mathType;
        size_t bytes = 0;
        if (!workspace_of(p.algo, math, &bytes)) continue;
        candidates.push_back({p.algo, math, bytes, p.determinism == CUDNN_DETERMINISTIC});
    }
    if (candidates.empty())
        throw std::runtime_error("CudnnConv2dPlan(" + what + "): cuDNN has no " + direction + " algorithm for it" +
                                 (fma_only ? " with FMA math (fp32 without TF32)" : "") +
                                 (exact ? " other than FFT and Winograd" : ""));
    for (const auto& c : candidates)
        if (c.deterministic && c.workspace <= kWorkspaceLimit) return c;
    for (const auto& c : candidates)
        if (c.workspace <= kWorkspaceLimit) return c;
    return *std::min_element(candidates.begin(), candidates.end(),
                             [](const auto& a, const auto& b) { return a.workspace < b.workspace; });
}

int to_int(int64_t v, const char* name, const std::string& what) {
    if (v > INT_MAX)
        throw std::invalid_argument("CudnnConv2dPlan(" + what + "): " + name + " = " + std::to_string(v) +
                                    " is past cuDNN's int range");
    return static_cast<int>(v);
}

}  // namespace

bool cudnn_available() {
    // libcudnn opened (cudnn_api.cuh), and the dispatcher's libcudnn_cnn (the convolutions,
    // loaded on demand) there and matching: asked once.
    static const bool available =
        detail::cudnn_load_error().empty() && dnn().cudnnCnnVersionCheck() == CUDNN_STATUS_SUCCESS;
    return available;
}

struct CudnnConv2dPlan::Impl {
    int device = 0;
    int64_t batch = 0, out_channels = 0, plane = 0;
    bool bias = false, f64 = false;
    std::string what;
    cudnnHandle_t handle = nullptr;
    cudnnTensorDescriptor_t x_desc = nullptr, y_desc = nullptr, b_desc = nullptr;
    cudnnFilterDescriptor_t w_desc = nullptr;
    cudnnConvolutionDescriptor_t fwd_conv = nullptr, data_conv = nullptr, filter_conv = nullptr;
    Choice<cudnnConvolutionFwdAlgo_t> fwd;
    Choice<cudnnConvolutionBwdDataAlgo_t> data;
    Choice<cudnnConvolutionBwdFilterAlgo_t> filter;
    cpu::Conv2dGeometry g;
    bool gemm_filter = false;  // the weight gradient as one GEMM (see the top of this file)
    size_t gemm_workspace = 0;  // its col and dy'
    std::mutex mutex;  // one call at a time on the handle

    ~Impl() {
        // Best effort, as destructors must not throw; the handle belongs to `device`.
        int previous = 0;
        const bool switched = cudaGetDevice(&previous) == cudaSuccess && previous != device &&
                              cudaSetDevice(device) == cudaSuccess;
        if (fwd_conv) dnn().cudnnDestroyConvolutionDescriptor(fwd_conv);
        if (data_conv) dnn().cudnnDestroyConvolutionDescriptor(data_conv);
        if (filter_conv) dnn().cudnnDestroyConvolutionDescriptor(filter_conv);
        if (w_desc) dnn().cudnnDestroyFilterDescriptor(w_desc);
        if (x_desc) dnn().cudnnDestroyTensorDescriptor(x_desc);
        if (y_desc) dnn().cudnnDestroyTensorDescriptor(y_desc);
        if (b_desc) dnn().cudnnDestroyTensorDescriptor(b_desc);
        if (handle) dnn().cudnnDestroy(handle);
        if (switched) cudaSetDevice(previous);
    }

    // alpha = 1 and beta = 0 or 1 in the precision cuDNN expects: double for double data,
    // float otherwise.
    const void* scalar(int v) const {
        static const float f[2] = {0.0f, 1.0f};
        static const double d[2] = {0.0, 1.0};
        return f64 ? static_cast<const void*>(&d[v]) : static_cast<const void*>(&f[v]);
    }

    void build(const cpu::Conv2dGeometry& g, bool tf32) {
        const cudnnDataType_t type = f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
        const int n = to_int(batch, "batch", what), c = to_int(g.channels, "channels", what);
        const int h = to_int(g.height, "height", what), w = to_int(g.width, "width", what);
        const int k = to_int(out_channels, "out_channels", what), r = to_int(g.kernel, "kernel", what);
        const int oh = to_int(g.out_height(), "out_height", what), ow = to_int(g.out_width(), "out_width", what);
        to_int(batch * g.channels * g.height * g.width, "the input's element count", what);
        to_int(batch * out_channels * g.out_height() * g.out_width(), "the output's element count", what);
        to_int(out_channels * g.channels * g.kernel * g.kernel, "the weight's element count", what);

        PARALAB_GPU_CHECK(dnn().cudnnCreate(&handle));
        PARALAB_GPU_CHECK(dnn().cudnnCreateTensorDescriptor(&x_desc));
        PARALAB_GPU_CHECK(dnn().cudnnSetTensor4dDescriptor(x_desc, CUDNN_TENSOR_NCHW, type, n, c, h, w));
        PARALAB_GPU_CHECK(dnn().cudnnCreateFilterDescriptor(&w_desc));
        PARALAB_GPU_CHECK(dnn().cudnnSetFilter4dDescriptor(w_desc, type, CUDNN_TENSOR_NCHW, k, c, r, r));
        PARALAB_GPU_CHECK(dnn().cudnnCreateTensorDescriptor(&y_desc));
        PARALAB_GPU_CHECK(dnn().cudnnSetTensor4dDescriptor(y_desc, CUDNN_TENSOR_NCHW, type, n, k, oh, ow));
        if (bias) {
            PARALAB_GPU_CHECK(dnn().cudnnCreateTensorDescriptor(&b_desc));
            PARALAB_GPU_CHECK(dnn().cudnnSetTensor4dDescriptor(b_desc, CUDNN_TENSOR_NCHW, type, 1, k, 1, 1));
        }
        // fp32 without TF32: FMA math only (CUDNN_DEFAULT_MATH lets Ampere and later GPUs use
        // TF32 tensor cores); otherwise the heuristics choose, each result saying its math.
        const bool fma_only = !f64 && !tf32;
        const bool exact = !tf32;  // f64, or f32 without TF32: no FFT or Winograd either
        const cudnnMathType_t math = fma_only ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH;
        const int pad = to_int(g.padding, "padding", what), stride = to_int(g.stride, "stride", what);
        for (cudnnConvolutionDescriptor_t* conv : {&fwd_conv, &data_conv, &filter_conv}) {
            PARALAB_GPU_CHECK(dnn().cudnnCreateConvolutionDescriptor(conv));
            PARALAB_GPU_CHECK(dnn().cudnnSetConvolution2dDescriptor(*conv, pad, pad, stride, stride, 1, 1,
                                                              CUDNN_CROSS_CORRELATION, type));
            PARALAB_GPU_CHECK(dnn().cudnnSetConvolutionMathType(*conv, math));
        }
        int dims[4] = {};
        PARALAB_GPU_CHECK(dnn().cudnnGetConvolution2dForwardOutputDim(fwd_conv, x_desc, w_desc, &dims[0], &dims[1],
                                                                &dims[2], &dims[3]));
        if (dims[0] != n || dims[1] != k || dims[2] != oh || dims[3] != ow)
            throw std::logic_error("CudnnConv2dPlan(" + what + "): cuDNN's output [" + std::to_string(dims[0]) +
                                   ", " + std::to_string(dims[1]) + ", " + std::to_string(dims[2]) + ", " +
                                   std::to_string(dims[3]) + "] differs from the geometry's");

        int count = 0;
        PARALAB_GPU_CHECK(dnn().cudnnGetConvolutionForwardAlgorithmMaxCount(handle, &count));
        std::vector<cudnnConvolutionFwdAlgoPerf_t> fwd_perfs(static_cast<size_t>(std::max(count, 1)));
        PARALAB_GPU_CHECK(dnn().cudnnGetConvolutionForwardAlgorithm_v7(handle, x_desc, w_desc, fwd_conv, y_desc,
                                                                 static_cast<int>(fwd_perfs.size()), &count,
                                                                 fwd_perfs.data()));
        fwd_perfs.resize(static_cast<size_t>(count));
        fwd = choose<cudnnConvolutionFwdAlgo_t>(
            fwd_perfs, fma_only, exact,
            [&](cudnnConvolutionFwdAlgo_t algo, cudnnMathType_t m, size_t* bytes) {
                return dnn().cudnnSetConvolutionMathType(fwd_conv, m) == CUDNN_STATUS_SUCCESS &&
                       dnn().cudnnGetConvolutionForwardWorkspaceSize(handle, x_desc, w_desc, fwd_conv, y_desc, algo,
                                                               bytes) == CUDNN_STATUS_SUCCESS;
            },
            "forward", what);
        PARALAB_GPU_CHECK(dnn().cudnnSetConvolutionMathType(fwd_conv, fwd.math));

        PARALAB_GPU_CHECK(dnn().cudnnGetConvolutionBackwardDataAlgorithmMaxCount(handle, &count));
        std::vector<cudnnConvolutionBwdDataAlgoPerf_t> data_perfs(static_cast<size_t>(std::max(count, 1)));
        PARALAB_GPU_CHECK(dnn().cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, w_desc, y_desc, data_conv, x_desc,
                                                                      static_cast<int>(data_perfs.size()), &count,
                                                                      data_perfs.data()));
        data_perfs.resize(static_cast<size_t>(count));
        data = choose<cudnnConvolutionBwdDataAlgo_t>(
            data_perfs, fma_only, exact,
            [&](cudnnConvolutionBwdDataAlgo_t algo, cudnnMathType_t m, size_t* bytes) {
                return dnn().cudnnSetConvolutionMathType(data_conv, m) == CUDNN_STATUS_SUCCESS &&
                       dnn().cudnnGetConvolutionBackwardDataWorkspaceSize(handle, w_desc, y_desc, data_conv, x_desc,
                                                                    algo, bytes) == CUDNN_STATUS_SUCCESS;
            },
            "backward-data", what);
        PARALAB_GPU_CHECK(dnn().cudnnSetConvolutionMathType(data_conv, data.math));

        PARALAB_GPU_CHECK(dnn().cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(handle, &count));
        std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> filter_perfs(static_cast<size_t>(std::max(count, 1)));
        PARALAB_GPU_CHECK(dnn().cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, x_desc, y_desc, filter_conv, w_desc,
                                                                        static_cast<int>(filter_perfs.size()),
                                                                        &count, filter_perfs.data()));
        filter_perfs.resize(static_cast<size_t>(count));
        filter = choose<cudnnConvolutionBwdFilterAlgo_t>(
            filter_perfs, fma_only, exact,
            [&](cudnnConvolutionBwdFilterAlgo_t algo, cudnnMathType_t m, size_t* bytes) {
                return dnn().cudnnSetConvolutionMathType(filter_conv, m) == CUDNN_STATUS_SUCCESS &&
                       dnn().cudnnGetConvolutionBackwardFilterWorkspaceSize(handle, x_desc, y_desc, filter_conv, w_desc,
                                                                      algo, bytes) == CUDNN_STATUS_SUCCESS;
            },
            "backward-filter", what);
        PARALAB_GPU_CHECK(dnn().cudnnSetConvolutionMathType(filter_conv, filter.math));

        this->g = g;
        const size_t cols = static_cast<size_t>(batch * g.out_height() * g.out_width());
        gemm_workspace = (static_cast<size_t>(g.col_rows()) + static_cast<size_t>(out_channels)) * cols *
                         (f64 ? sizeof(double) : sizeof(float));
        gemm_filter = exact && gemm_workspace <= kGemmFilterLimit;
    }

    size_t filter_workspace() const { return gemm_filter ? gemm_workspace : filter.workspace; }

    // dw_acc += dy' col' (see the top of this file), on `s`, in `workspace`.
    template <class T>
    void gemm_weight_grad(const void* x, const void* dy, void* dw_acc, void* workspace, cudaStream_t s) const {
        const int64_t K = out_channels, P = g.out_height() * g.out_width(), NP = batch * P, rows = g.col_rows();
        T* col = static_cast<T*>(workspace);
        T* dyt = col + rows * NP;
        im2col_batch_kernel<T><<<detail::grid_for(rows * NP), detail::kBlock, 0, s>>>(
            rows * NP, batch, g.channels, g.height, g.width, g.kernel, g.stride, g.padding, g.out_height(),
            g.out_width(), static_cast<const T*>(x), col);
        PARALAB_GPU_CHECK_LAUNCH("im2col_batch_kernel");
        batch_major_to_channel_major_kernel<T><<<detail::grid_for(K * NP), detail::kBlock, 0, s>>>(
            K * NP, batch, K, P, static_cast<const T*>(dy), dyt);
        PARALAB_GPU_CHECK_LAUNCH("batch_major_to_channel_major_kernel");
        gemm<T>(false, true, K, rows, NP, T(1), dyt, col, T(1), static_cast<T*>(dw_acc), s, GemmMath::fp32);
    }
};

CudnnConv2dPlan::CudnnConv2dPlan(int device, const cpu::Conv2dGeometry& g, int64_t batch, int64_t out_channels,
                                 bool bias, bool f64, bool tf32) {
    const std::string what = describe_conv(g, batch, out_channels, bias, f64, tf32);
    validate_conv_plan(g, batch, out_channels, what);
    if (!cudnn_available()) {
        const std::string load_error = detail::cudnn_load_error();
        if (!load_error.empty())
            throw std::runtime_error("CudnnConv2dPlan(" + what + "): no cuDNN at run time: " + load_error);
        throw std::runtime_error("CudnnConv2dPlan(" + what +
                                 "): the cuDNN library found at run time has no convolutions "
                                 "(cudnnCnnVersionCheck failed: libcudnn_cnn missing or of another version)");
    }
    auto impl = std::make_unique<Impl>();
    impl->device = device;
    impl->batch = batch;
    impl->out_channels = out_channels;
    impl->plane = g.out_height() * g.out_width();
    impl->bias = bias;
    impl->f64 = f64;
    impl->what = what;
    if (batch > 0) {  // an empty batch has nothing for cuDNN to describe: the calls do nothing
        try {
            DeviceGuard guard(device);
            impl->build(g, tf32 && !f64);
        } catch (const GpuError& e) {
            rethrow_naming(e, what);
        }
    }
    m_impl = std::move(impl);
}

CudnnConv2dPlan::~CudnnConv2dPlan() = default;

int64_t CudnnConv2dPlan::batch() const { return m_impl->batch; }

std::string CudnnConv2dPlan::algorithms() const {
    const Impl& p = *m_impl;
    if (p.batch == 0) return "none (empty batch)";
    return std::string("forward ") + algo_name(p.fwd.algo) + " (" + math_name(p.fwd.math) + "), backward data " +
           algo_name(p.data.algo) + " (" + math_name(p.data.math) + (p.data.deterministic ? "" : ", non-deterministic") +
           "), backward filter " +
           (p.gemm_filter ? std::string("IM2COL_GEMM (cuBLAS, FMA)")
                          : std::string(algo_name(p.filter.algo)) + " (" + math_name(p.filter.math) +
                                (p.filter.deterministic ? "" : ", non-deterministic") + ")");
}

size_t CudnnConv2dPlan::forward_workspace_bytes() const { return m_impl->fwd.workspace; }

size_t CudnnConv2dPlan::backward_workspace_bytes() const {
    return std::max(m_impl->data.workspace, m_impl->filter_workspace());
}

void CudnnConv2dPlan::forward(const void* x, const void* w, const void* b, void* y, void* workspace,
                              void* stream) const {
    Impl& p = *m_impl;
    const std::string where = "CudnnConv2dPlan::forward(" + p.what + ")";
    detail::require(x && w && y, where.c_str(), "x, w and y must not be null");
    detail::require((b != nullptr) == p.bias, where.c_str(),
                    p.bias ? "the plan has a bias: b must not be null" : "the plan has no bias: b must be null");
    detail::require(workspace || p.fwd.workspace == 0, where.c_str(), "the workspace must not be null");
    if (p.batch == 0) return;
    std::lock_guard<std::mutex> lock(p.mutex);
    try {
        DeviceGuard guard(p.device);
        PARALAB_GPU_CHECK(dnn().cudnnSetStream(p.handle, as_stream(stream)));
        PARALAB_GPU_CHECK(dnn().cudnnConvolutionForward(p.handle, p.scalar(1), p.x_desc, x, p.w_desc, w, p.fwd_conv,
                                                  p.fwd.algo, workspace, p.fwd.workspace, p.scalar(0), p.y_desc,
                                                  y));
        if (p.bias)
            PARALAB_GPU_CHECK(dnn().cudnnAddTensor(p.handle, p.scalar(1), p.b_desc, b, p.scalar(1), p.y_desc, y));
    } catch (const GpuError& e) {
        rethrow_naming(e, p.what);
    }
}

void CudnnConv2dPlan::backward(const void* x, const void* dy, const void* w, void* dx, void* dw_acc, void* db_acc,
                               void* workspace, void* stream) const {
    Impl& p = *m_impl;
    const std::string where = "CudnnConv2dPlan::backward(" + p.what + ")";
    detail::require(dy != nullptr, where.c_str(), "dy must not be null");
    detail::require(!dx || w, where.c_str(), "w must not be null when dx is wanted");
    detail::require(!dw_acc || x, where.c_str(), "x must not be null when dw_acc is wanted");
    detail::require(p.bias || !db_acc, where.c_str(), "the plan has no bias: db_acc must be null");
    const size_t need = std::max(dx ? p.data.workspace : 0, dw_acc ? p.filter_workspace() : 0);
    detail::require(workspace || need == 0, where.c_str(), "the workspace must not be null");
    if (p.batch == 0) return;
    std::lock_guard<std::mutex> lock(p.mutex);
    try {
        DeviceGuard guard(p.device);
        const cudaStream_t s = as_stream(stream);
        PARALAB_GPU_CHECK(dnn().cudnnSetStream(p.handle, s));
        // The two convolutions share the workspace: they run one after the other on `s`.
        if (dx)
            PARALAB_GPU_CHECK(dnn().cudnnConvolutionBackwardData(p.handle, p.scalar(1), p.w_desc, w, p.y_desc, dy,
                                                           p.data_conv, p.data.algo, workspace, p.data.workspace,
                                                           p.scalar(0), p.x_desc, dx));
        if (dw_acc && p.gemm_filter)
            p.f64 ? p.gemm_weight_grad<double>(x, dy, dw_acc, workspace, s)
                  : p.gemm_weight_grad<float>(x, dy, dw_acc, workspace, s);
        else if (dw_acc)
            PARALAB_GPU_CHECK(dnn().cudnnConvolutionBackwardFilter(p.handle, p.scalar(1), p.x_desc, x, p.y_desc, dy,
                                                             p.filter_conv, p.filter.algo, workspace,
                                                             p.filter.workspace, p.scalar(1), p.w_desc, dw_acc));
        if (db_acc) {
            const auto blocks = static_cast<unsigned>(p.out_channels);
            if (p.f64)
                conv_bias_grad_kernel<double><<<blocks, kBiasBlock, 0, s>>>(
                    p.batch, p.out_channels, p.plane, static_cast<const double*>(dy), static_cast<double*>(db_acc));
            else
                conv_bias_grad_kernel<float><<<blocks, kBiasBlock, 0, s>>>(
                    p.batch, p.out_channels, p.plane, static_cast<const float*>(dy), static_cast<float*>(db_acc));
            PARALAB_GPU_CHECK_LAUNCH("conv_bias_grad_kernel");
        }
    } catch (const GpuError& e) {
        rethrow_naming(e, p.what);
    }
}

#else  // no cuDNN in this build

bool cudnn_available() { return false; }

struct CudnnConv2dPlan::Impl {};

CudnnConv2dPlan::CudnnConv2dPlan(int, const cpu::Conv2dGeometry& g, int64_t batch, int64_t out_channels, bool bias,
                                 bool f64, bool tf32) {
    const std::string what = describe_conv(g, batch, out_channels, bias, f64, tf32);
    validate_conv_plan(g, batch, out_channels, what);
    throw std::runtime_error("CudnnConv2dPlan(" + what +
                             "): this ParaLab was built without cuDNN (none found, or -DPARALAB_CUDNN=OFF)");
}

CudnnConv2dPlan::~CudnnConv2dPlan() = default;

// A plan cannot be made in this build, so these are never reached through one.
int64_t CudnnConv2dPlan::batch() const { return 0; }
std::string CudnnConv2dPlan::algorithms() const { return "none (built without cuDNN)"; }
size_t CudnnConv2dPlan::forward_workspace_bytes() const { return 0; }
size_t CudnnConv2dPlan::backward_workspace_bytes() const { return 0; }
void CudnnConv2dPlan::forward(const void*, const void*, const void*, void*, void*, void*) const {
    throw std::runtime_error("CudnnConv2dPlan::forward: this ParaLab was built without cuDNN");
}
void CudnnConv2dPlan::backward(const void*, const void*, const void*, void*, void*, void*, void*, void*) const {
    throw std::runtime_error("CudnnConv2dPlan::backward: this ParaLab was built without cuDNN");
}

#endif

}  // namespace paralab::kernels::gpu
