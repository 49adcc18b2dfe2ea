// A host stand-in for every GPU kernel launcher (kernels/gpu/{elementwise, embedding, softmax,
// reduce, optim, dropout, recurrent, norm, pool, loss_scale, gemm, attention, cast, conv}.h),
// linked with fake_gpu_runtime.cpp into the fake-GPU tests (tests/CMakeLists.txt,
// paralab_fake_gpu_test) in place of the GPU backend: in a CPU-only build of
// kernels/stub/gpu_kernels_stub.cpp and conv_stub.cpp (it defines every symbol of each: a stub
// object pulled in for one missing symbol would clash with the others); a CUDA build's tests do
// not link the CUDA backend.
// Each launcher checks its arguments on the calling thread, as the CUDA launchers do before
// they queue anything, then queues the work on the fake stream (fake::submit): it runs later,
// on the stream's worker thread, against "device" memory that is host memory. So a result read
// before its stream was waited for, a buffer freed or reused while a stream still reads it, or
// a host array of pointers that changes after the call, shows here as it would on a GPU.
//
// The arithmetic is the CPU kernels' (kernels/cpu) where a twin with the same arguments
// exists, a host loop after the CUDA source (kernels/cuda/*.cu) otherwise: dropout's draw, the
// loss scaler, the casts, the half GEMM, the reductions to device doubles. Everything is
// deterministic: each worker thread runs the CPU kernels on one thread. The casts round to
// nearest even, as __float2bfloat16_rn and __float2half_rn, and gemm_half multiplies the
// rounded half values with fp32 accumulation, so the half path differs from fp32 as on a GPU.
// The convolution plan (cudnn_available() is true) is the CPU's im2col + GEMM, with its column
// buffer in the caller's workspace.
#include <kernels/cpu/attention.h>
#include <kernels/cpu/conv.h>
#include <kernels/cpu/elementwise.h>
#include <kernels/cpu/gemm.h>
#include <kernels/cpu/norm.h>
#include <kernels/cpu/optim.h>
#include <kernels/cpu/pool.h>
#include <kernels/cpu/recurrent.h>
#include <kernels/cpu/rmsnorm.h>
#include <kernels/cpu/rope.h>
#include <kernels/cpu/softmax.h>
#include <kernels/cpu/swiglu.h>
#include <kernels/cpu/threads.h>
#include <kernels/gpu/attention.h>
#include <kernels/gpu/cast.h>
#include <kernels/gpu/conv.h>
#include <kernels/gpu/detail/launch_checks.h>
#include <kernels/gpu/detail/op_lists.h>
#include <kernels/gpu/detail/single_tensor_forms.h>
#include <kernels/gpu/dropout.h>
#include <kernels/gpu/elementwise.h>
#include <kernels/gpu/embedding.h>
#include <kernels/gpu/gemm.h>
#include <kernels/gpu/loss_scale.h>
#include <kernels/gpu/norm.h>
#include <kernels/gpu/optim.h>
#include <kernels/gpu/pool.h>
#include <kernels/gpu/recurrent.h>
#include <kernels/gpu/reduce.h>
#include <kernels/gpu/rmsnorm.h>
#include <kernels/gpu/rope.h>
#include <kernels/gpu/softmax.h>
#include <kernels/gpu/stream.h>
#include <kernels/gpu/swiglu.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "fake_gpu.h"

namespace paralab::kernels::gpu {

namespace {

// The CUDA launchers' own argument checks (std::invalid_argument naming the launcher), so
// that the fakes refuse what they refuse.
using detail::check_attention_sizes;
using detail::check_fused_attention_sizes;
using detail::check_batchnorm_sizes;
using detail::check_cell_sizes;
using detail::check_gemm_shape;
using detail::check_pool_geometry;
using detail::check_rope_sizes;
using detail::require;
using detail::require_tensor_sizes;

// Queues `op` on `stream`. A stream's worker thread runs the CPU kernels on one thread: the
// results do not depend on a thread count, and the stream threads do not each start an OpenMP
// team on this machine's few cores. (The null stream runs `op` on the calling thread, whose
// thread count is its owner's business.)
template <class Op>
void launch(void* stream, Op op) {
    if (stream == nullptr) return fake::submit(nullptr, std::move(op));
    fake::submit(stream, [op = std::move(op)] {
        thread_local const bool single = (cpu::set_num_threads(1), true);
        (void)single;
        op();
    });
}

// A host array of `count` entries copied now: a CUDA launch packs its host arrays of device
// pointers and sizes into the kernel's arguments before it returns.
template <class P>
std::vector<P> copied(const P* list, int64_t count) {
    return std::vector<P>(list, list + count);
}

// The sum of term(i) for i in [begin, end) as a GPU block adds them: kLanes threads each add
// every kLanes-th term in order, then the lane sums are added pairwise (kernels/cuda/launch.cuh's
// block_sum is a tree too). Far more accurate than one running sum over millions of terms.
constexpr int64_t kLanes = 256;

template <class Term>
double lane_sum(int64_t begin, int64_t end, Term term) {
    double lanes[kLanes] = {};
    for (int64_t i = begin; i < end; ++i) lanes[(i - begin) % kLanes] += term(i);
    for (int64_t width = kLanes / 2; width > 0; width /= 2)
        for (int64_t k = 0; k < width; ++k) lanes[k] += lanes[k + width];
    return lanes[0];
}

// *result = sum over i < n of term(i), in double, in kernels/cuda/reduce.cuh's two passes:
// block b of a grid fixed by n adds the terms b*kLanes + t + k*grid*kLanes into scratch[b],
// then one block adds the partials. Two reductions sharing a scratch at once (on two streams)
// garble each other here as on a GPU.
template <class Term>
void reduce_to_device(int64_t n, Term term, double* result, double* scratch) {
    const int64_t grid =
        std::clamp<int64_t>((n + 4 * kLanes - 1) / (4 * kLanes), 1, kReduceScratch);
    for (int64_t b = 0; b < grid; ++b) {
        double lanes[kLanes] = {};
        for (int64_t t = 0; t < kLanes; ++t)
            for (int64_t i = b * kLanes + t; i < n; i += grid * kLanes) lanes[t] += term(i);
        for (int64_t width = kLanes / 2; width > 0; width /= 2)
            for (int64_t k = 0; k < width; ++k) lanes[k] += lanes[k + width];
        scratch[b] = lanes[0];
    }
    *result = lane_sum(0, grid, [=](int64_t b) { return scratch[b]; });
}

}  // namespace

// ---- elementwise.h -------------------------------------------------------------------------

// The activations: the CPU's loops (the CUDA functors are the same expressions).
#define PARALAB_FAKE_MAP(name)                             \
    template <class T>                                     \
    void name(int64_t n, const T* x, T* y, void* stream) { \
        require(n >= 0, #name, "negative size");           \
        launch(stream, [=] { cpu::name<T>(n, x, y); });    \
    }
#define PARALAB_FAKE_ZIP(name)                                         \
    template <class T>                                                 \
    void name(int64_t n, const T* a, const T* b, T* y, void* stream) { \
        require(n >= 0, #name, "negative size");                       \
        launch(stream, [=] { cpu::name<T>(n, a, b, y); });             \
    }
PARALAB_FAKE_MAP(relu_forward)
PARALAB_FAKE_ZIP(relu_backward)
PARALAB_FAKE_MAP(gelu_forward)
PARALAB_FAKE_ZIP(gelu_backward)
PARALAB_FAKE_MAP(tanh_forward)
PARALAB_FAKE_ZIP(tanh_backward)
PARALAB_FAKE_MAP(sigmoid_forward)
PARALAB_FAKE_ZIP(sigmoid_backward)
PARALAB_FAKE_ZIP(multiply_elementwise)
#undef PARALAB_FAKE_MAP
#undef PARALAB_FAKE_ZIP

template <class T>
void bias_broadcast_rows(int64_t rows, int64_t cols, const T* bias, T* y, void* stream) {
    require(rows >= 0 && cols >= 0, "bias_broadcast_rows", "negative size");
    launch(stream, [=] { cpu::bias_broadcast_rows<T>(rows, cols, bias, y); });
}
template <class T>
void bias_add_rows(int64_t rows, int64_t cols, const T* bias, T* y, void* stream) {
    require(rows >= 0 && cols >= 0, "bias_add_rows", "negative size");
    launch(stream, [=] { cpu::bias_add_rows<T>(rows, cols, bias, y); });
}
// As kernels/cuda/column_sums.cuh: each column summed in double, then added to sums in T.
template <class T>
void column_sums_accumulate(int64_t rows, int64_t cols, const T* x, T* sums, void* stream) {
    require(rows >= 0 && cols >= 0, "column_sums_accumulate", "negative size");
    launch(stream, [=] {
        if (rows == 0) return;
        std::vector<double> acc(static_cast<size_t>(cols), 0.0);
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < cols; ++c) acc[c] += static_cast<double>(x[r * cols + c]);
        for (int64_t c = 0; c < cols; ++c) sums[c] += static_cast<T>(acc[c]);
    });
}

template <class T>
void squared_error_sum(int64_t n, const T* pred, const T* target, double* sum, double* scratch,
                       void* stream) {
    require(n >= 0, "squared_error_sum", "negative size");
    launch(stream, [=] {
        reduce_to_device(
            n,
            [=](int64_t i) {
                const double d = static_cast<double>(pred[i]) - static_cast<double>(target[i]);
                return d * d;
            },
            sum, scratch);
    });
}
template <class T>
void squared_error_backward(int64_t n, const T* pred, const T* target, T scale, T* dpred,
                            void* stream) {
    require(n >= 0, "squared_error_backward", "negative size");
    launch(stream, [=] { cpu::squared_error_backward<T>(n, pred, target, scale, dpred); });
}

// ---- embedding.h -----------------------------------------------------------------------------

template <class T>
void gather_rows(int64_t n, int64_t cols, const T* table, const int64_t* index, T* out,
                 void* stream) {
    require(n >= 0 && cols >= 0, "gather_rows", "negative size");
    launch(stream, [=] { cpu::gather_rows<T>(n, cols, table, index, out); });
}
template <class T>
void scatter_add_rows(int64_t n, int64_t rows, int64_t cols, const T* src, const int64_t* index, T* table,
                      void* stream) {
    require(n >= 0 && rows >= 0 && cols >= 0, "scatter_add_rows", "negative size");
    launch(stream, [=] { cpu::scatter_add_rows<T>(n, cols, src, index, table); });
}

// ---- softmax.h -------------------------------------------------------------------------------

// The CPU's forward one row at a time, for each row's loss; *loss_sum adds them in row order.
template <class T>
void softmax_cross_entropy_forward(int64_t rows, int64_t classes, const T* logits,
                                   const int64_t* targets, T* probs, double* row_loss,
                                   double* loss_sum, void* stream) {
    require(rows >= 0 && rows <= INT32_MAX, "softmax_cross_entropy_forward", "rows out of range");
    require(classes > 0, "softmax_cross_entropy_forward", "classes must be positive");
    launch(stream, [=] {
        double total = 0;
        for (int64_t r = 0; r < rows; ++r) {
            row_loss[r] = cpu::softmax_cross_entropy_forward<T>(1, classes, logits + r * classes,
                                                                targets + r, probs + r * classes);
            total += row_loss[r];
        }
        *loss_sum = total;
    });
}
template <class T>
void softmax_cross_entropy_backward(int64_t rows, int64_t classes, const T* probs,
                                    const int64_t* targets, T scale, T* dlogits, void* stream) {
    require(rows >= 0 && classes > 0, "softmax_cross_entropy_backward", "bad size");
    launch(stream, [=] {
        cpu::softmax_cross_entropy_backward<T>(rows, classes, probs, targets, scale, dlogits);
    });
}
template <class T>
void argmax_rows(int64_t rows, int64_t cols, const T* x, int64_t* out, void* stream) {
    require(rows >= 0 && rows <= INT32_MAX, "argmax_rows", "rows out of range");
    require(cols > 0, "argmax_rows", "cols must be positive");
    launch(stream, [=] { cpu::argmax_rows<T>(rows, cols, x, out); });
}

// ---- reduce.h --------------------------------------------------------------------------------

template <class T>
void sum(int64_t n, const T* x, double* result, double* scratch, void* stream) {
    require(n >= 0, "sum", "negative size");
    launch(stream, [=] {
        reduce_to_device(
            n, [=](int64_t i) { return static_cast<double>(x[i]); }, result, scratch);
    });
}
template <class T>
void sum_of_squares(int64_t n, const T* x, double* result, double* scratch, void* stream) {
    require(n >= 0, "sum_of_squares", "negative size");
    launch(stream, [=] {
        reduce_to_device(
            n,
            [=](int64_t i) {
                const double v = static_cast<double>(x[i]);
                return v * v;
            },
            result, scratch);
    });
}
// Each tensor cut into chunks of at least 4096 elements, few enough for the scratch (as
// kernels/cuda/reduce.cu cuts groups of tensors); each chunk's lane sum is a partial in
// scratch, and the groups' sums are added in order.
template <class T>
void sum_of_squares_multi(int64_t count, const T* const* xs, const int64_t* sizes, double* result,
                          double* scratch, void* stream) {
    require_tensor_sizes("sum_of_squares_multi", count, sizes);
    launch(stream, [=, xs = copied(xs, count), sizes = copied(sizes, count)] {
        constexpr int64_t kGroup = kReduceScratch / 4, kMinChunk = 4096;
        double total = 0;
        int64_t g0 = 0;
        do {
            const int64_t g1 = std::min(count, g0 + kGroup);
            int64_t elements = 0;
            for (int64_t k = g0; k < g1; ++k) elements += sizes[k];
            const int64_t room = kReduceScratch - (g1 - g0);
            const int64_t chunk = std::max(kMinChunk, (elements + room - 1) / room);
            int64_t parts = 0;
            for (int64_t k = g0; k < g1; ++k) {
                const T* x = xs[k];
                for (int64_t begin = 0; begin < sizes[k]; begin += chunk)
                    scratch[parts++] =
                        lane_sum(begin, std::min(sizes[k], begin + chunk), [=](int64_t i) {
                            const double v = static_cast<double>(x[i]);
                            return v * v;
                        });
            }
            total += lane_sum(0, parts, [=](int64_t p) { return scratch[p]; });
            g0 = g1;
        } while (g0 < count);
        *result = total;
    });
}

void clip_coefficient(const double* sq_norm, double max_norm, double* coef, void* stream) {
    require(max_norm >= 0 && std::isfinite(max_norm), "clip_coefficient",
            "max_norm must be a finite number >= 0");
    launch(stream, [=] {
        const double norm = std::sqrt(*sq_norm);
        *coef = std::isfinite(norm) ? std::fmin(1.0, max_norm / (norm + 1e-6)) : 1.0;
    });
}

template <class T>
void scale_in_place(int64_t n, T* x, double factor, void* stream) {
    require(n >= 0, "scale_in_place", "negative size");
    launch(stream, [=] { cpu::scale_in_place<T>(n, x, factor); });
}
// The factor is read when the work runs: it is a device scalar computed by earlier work.
template <class T>
void scale_in_place_by_device_scalar(int64_t n, T* x, const double* factor, void* stream) {
    require(n >= 0, "scale_in_place_by_device_scalar", "negative size");
    launch(stream, [=] {
        const T f = static_cast<T>(*factor);
        for (int64_t i = 0; i < n; ++i) x[i] *= f;
    });
}

// ---- optim.h: the CPU's updates, tensor by tensor ----------------------------------------------

template <class T>
void sgd_update_multi(int64_t count, T* const* p, const T* const* g, const int64_t* sizes,
                      double lr, double weight_decay, void* stream) {
    require_tensor_sizes("sgd_update", count, sizes);
    launch(stream, [=, p = copied(p, count), g = copied(g, count), sizes = copied(sizes, count)] {
        for (int64_t k = 0; k < count; ++k)
            cpu::sgd_update<T>(sizes[k], p[k], g[k], lr, weight_decay);
    });
}
template <class T>
void sgd_momentum_update_multi(int64_t count, T* const* p, const T* const* g, T* const* buf,
                               const int64_t* sizes, double lr, double momentum,
                               double weight_decay, bool nesterov, bool first_step, void* stream) {
    require_tensor_sizes("sgd_momentum_update", count, sizes);
    launch(stream, [=, p = copied(p, count), g = copied(g, count), buf = copied(buf, count),
                    sizes = copied(sizes, count)] {
        for (int64_t k = 0; k < count; ++k)
            cpu::sgd_momentum_update<T>(sizes[k], p[k], g[k], buf[k], lr, momentum, weight_decay,
                                        nesterov, first_step);
    });
}
template <class T>
void adam_update_multi(int64_t count, T* const* p, const T* const* g, T* const* m, T* const* v,
                       const int64_t* sizes, double lr, double beta1, double beta2, double eps,
                       double weight_decay, int64_t step, void* stream) {
    require(step >= 1, "adam_update", "step must be >= 1");
    require_tensor_sizes("adam_update", count, sizes);
    launch(stream, [=, p = copied(p, count), g = copied(g, count), m = copied(m, count),
                    v = copied(v, count), sizes = copied(sizes, count)] {
        for (int64_t k = 0; k < count; ++k)
            cpu::adam_update<T>(sizes[k], p[k], g[k], m[k], v[k], lr, beta1, beta2, eps,
                                weight_decay, step);
    });
}
template <class T>
void adamw_update_multi(int64_t count, T* const* p, const T* const* g, T* const* m, T* const* v,
                        const int64_t* sizes, double lr, double beta1, double beta2, double eps,
                        double weight_decay, int64_t step, void* stream) {
    require(step >= 1, "adam_update", "step must be >= 1");
    require_tensor_sizes("adamw_update", count, sizes);
    launch(stream, [=, p = copied(p, count), g = copied(g, count), m = copied(m, count),
                    v = copied(v, count), sizes = copied(sizes, count)] {
        for (int64_t k = 0; k < count; ++k)
            cpu::adamw_update<T>(sizes[k], p[k], g[k], m[k], v[k], lr, beta1, beta2, eps,
                                 weight_decay, step);
    });
}

// The single-tensor forms: kernels/gpu/detail/single_tensor_forms.h.

// ---- dropout.h: kernels/cuda/dropout_draw.cuh's draw -------------------------------------------

namespace {
// engine/util/rng.h's splitmix64.
uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
// Element `counter` is kept when hash_uniform(key, counter) = k * 2^-53 >= p, i.e. when the
// integer k >= ceil(p * 2^53) (both sides exact).
bool dropout_keeps(uint64_t key, uint64_t counter, uint64_t threshold) {
    return (splitmix64(key ^ splitmix64(counter)) >> 11) >= threshold;
}
}  // namespace

template <class T>
void dropout_forward(int64_t n, uint64_t key, uint64_t first, double p, const T* x, T* mask, T* y,
                     void* stream) {
    require(n >= 0, "dropout_forward", "negative size");
    require(p >= 0.0 && p < 1.0, "dropout_forward", "p must be in [0, 1)");
    const T scale = static_cast<T>(1.0 / (1.0 - p));
    const auto threshold = static_cast<uint64_t>(std::ceil(std::ldexp(p, 53)));
    launch(stream, [=] {
        for (int64_t i = 0; i < n; ++i) {
            const T m =
                dropout_keeps(key, first + static_cast<uint64_t>(i), threshold) ? scale : T(0);
            mask[i] = m;
            y[i] = x[i] * m;
        }
    });
}
template <class T>
void dropout_backward(int64_t n, const T* dy, const T* mask, T* dx, void* stream) {
    require(n >= 0, "dropout_backward", "negative size");
    launch(stream, [=] { cpu::multiply_elementwise<T>(n, dy, mask, dx); });
}

// ---- recurrent.h: the CPU's cells ---------------------------------------------------------------

template <class T>
void lstm_cell_forward(int64_t batch, int64_t hidden, T* gates, int64_t ld_gates, const T* c_prev,
                       T* c, T* tanh_c, T* h, int64_t ld_state, void* stream) {
    check_cell_sizes("lstm_cell_forward", batch, hidden, ld_gates, 4, ld_state);
    launch(stream, [=] {
        cpu::lstm_cell_forward<T>(batch, hidden, gates, ld_gates, c_prev, c, tanh_c, h, ld_state);
    });
}
template <class T>
void lstm_cell_backward(int64_t batch, int64_t hidden, const T* gates, int64_t ld_gates,
                        const T* c_prev, const T* tanh_c, const T* dh, int64_t ld_state, T* dc,
                        T* dgates, void* stream) {
    check_cell_sizes("lstm_cell_backward", batch, hidden, ld_gates, 4, ld_state);
    launch(stream, [=] {
        cpu::lstm_cell_backward<T>(batch, hidden, gates, ld_gates, c_prev, tanh_c, dh, ld_state, dc,
                                   dgates);
    });
}
template <class T>
void gru_cell_forward(int64_t batch, int64_t hidden, T* gates, int64_t ld_gates, const T* hh,
                      const T* h_prev, T* hn, T* h, int64_t ld_state, void* stream) {
    check_cell_sizes("gru_cell_forward", batch, hidden, ld_gates, 3, ld_state);
    launch(stream, [=] {
        cpu::gru_cell_forward<T>(batch, hidden, gates, ld_gates, hh, h_prev, hn, h, ld_state);
    });
}
template <class T>
void gru_cell_backward(int64_t batch, int64_t hidden, const T* gates, int64_t ld_gates, const T* hn,
                       const T* h_prev, const T* dh, T* dh_prev, int64_t ld_state, T* dgates_ih,
                       T* dgates_hh, void* stream) {
    check_cell_sizes("gru_cell_backward", batch, hidden, ld_gates, 3, ld_state);
    launch(stream, [=] {
        cpu::gru_cell_backward<T>(batch, hidden, gates, ld_gates, hn, h_prev, dh, dh_prev, ld_state,
                                  dgates_ih, dgates_hh);
    });
}
template <class T>
void strided_rows_copy(int64_t rows, int64_t cols, const T* src, int64_t ld_src, T* dst,
                       int64_t ld_dst, void* stream) {
    require(rows >= 0 && cols >= 0, "strided_rows_copy", "negative size");
    require(ld_src >= cols && ld_dst >= cols, "strided_rows_copy",
            "a leading dimension is below cols");
    launch(stream, [=] { cpu::strided_rows_copy<T>(rows, cols, src, ld_src, dst, ld_dst); });
}
template <class T>
void recurrent_weight_grad_accumulate(int64_t batch, int64_t steps, int64_t gate_cols,
                                      int64_t hidden, const T* dgates, const T* h, T* dw,
                                      void* stream) {
    require(batch >= 0 && steps >= 0 && gate_cols >= 0 && hidden >= 0,
            "recurrent_weight_grad_accumulate", "negative size");
    launch(stream, [=] {
        cpu::recurrent_weight_grad_accumulate<T>(batch, steps, gate_cols, hidden, dgates, h, dw);
    });
}

// ---- norm.h: the CPU's batch and layer norm
// -------------------------------------------------------

template <class T>
void batchnorm_channel_sums(int64_t N, int64_t C, int64_t S, const T* x, double* sum, double* sumsq,
                            void* stream) {
    check_batchnorm_sizes(N, C, S, "batchnorm_channel_sums");
    launch(stream, [=] { cpu::batchnorm_channel_sums<T>(N, C, S, x, sum, sumsq); });
}
template <class T>
void batchnorm_normalize(int64_t N, int64_t C, int64_t S, const T* x, const T* mean, const T* scale,
                         const T* shift, T* y, void* stream) {
    check_batchnorm_sizes(N, C, S, "batchnorm_normalize");
    launch(stream, [=] { cpu::batchnorm_normalize<T>(N, C, S, x, mean, scale, shift, y); });
}
template <class T>
void batchnorm_backward_sums(int64_t N, int64_t C, int64_t S, const T* x, const T* dy,
                             const T* mean, double* sum_dy, double* sum_dy_xmu, void* stream) {
    check_batchnorm_sizes(N, C, S, "batchnorm_backward_sums");
    launch(stream,
           [=] { cpu::batchnorm_backward_sums<T>(N, C, S, x, dy, mean, sum_dy, sum_dy_xmu); });
}
template <class T>
void batchnorm_backward_input(int64_t N, int64_t C, int64_t S, const T* x, const T* dy,
                              const T* mean, const T* scale, const T* mean_dy, const T* k, T* dx,
                              void* stream) {
    check_batchnorm_sizes(N, C, S, "batchnorm_backward_input");
    launch(stream,
           [=] { cpu::batchnorm_backward_input<T>(N, C, S, x, dy, mean, scale, mean_dy, k, dx); });
}
// The per-channel formulas (their list is apart from PARALAB_GPU_ALL_OPS, as their stub is).
template <class T>
void batchnorm_stats(int64_t C, bool train, const double* stats, double eps, double momentum,
                     const T* gamma, T* running_mean, T* running_var, T* mean_out, T* scale,
                     double* invstd_out, void* stream) {
    check_batchnorm_sizes(0, C, 0, "batchnorm_stats");
    launch(stream, [=] {
        cpu::batchnorm_stats<T>(C, train, stats, eps, momentum, gamma, running_mean, running_var,
                                mean_out, scale, invstd_out);
    });
}
template <class T>
void batchnorm_param_grads(int64_t C, const double* sums, const double* invstd, T* dgamma, T* dbeta,
                           void* stream) {
    check_batchnorm_sizes(0, C, 0, "batchnorm_param_grads");
    launch(stream, [=] { cpu::batchnorm_param_grads<T>(C, sums, invstd, dgamma, dbeta); });
}
template <class T>
void batchnorm_backward_coeffs(int64_t C, bool train, const double* sums, const double* invstd,
                               const T* gamma, T* scale, T* mean_dy, T* k, void* stream) {
    check_batchnorm_sizes(0, C, 0, "batchnorm_backward_coeffs");
    launch(stream, [=] {
        cpu::batchnorm_backward_coeffs<T>(C, train, sums, invstd, gamma, scale, mean_dy, k);
    });
}

template <class T>
void layernorm_forward(int64_t rows, int64_t D, double eps, const T* x, const T* gamma,
                       const T* beta, T* y, T* mean, T* rstd, void* stream) {
    require(rows >= 0 && rows <= INT32_MAX, "layernorm_forward", "rows out of range");
    require(D > 0, "layernorm_forward", "D must be positive");
    launch(stream, [=] { cpu::layernorm_forward<T>(rows, D, eps, x, gamma, beta, y, mean, rstd); });
}
template <class T>
void layernorm_backward(int64_t rows, int64_t D, const T* x, const T* dy, const T* gamma,
                        const T* mean, const T* rstd, T* dx, T* dgamma, T* dbeta, void* stream) {
    require(rows >= 0 && rows <= INT32_MAX, "layernorm_backward", "rows out of range");
    require(D > 0, "layernorm_backward", "D must be positive");
    launch(stream, [=] {
        cpu::layernorm_backward<T>(rows, D, x, dy, gamma, mean, rstd, dx, dgamma, dbeta);
    });
}

// ---- pool.h: the CPU's pooling ------------------------------------------------------------------

// The geometry is copied into the queued work (the caller's may be a temporary).
template <class T>
void maxpool2d_forward(const cpu::Pool2dGeometry& g, const T* x, T* y, int32_t* argmax,
                       void* stream) {
    check_pool_geometry(g, "maxpool2d_forward");
    launch(stream, [=, g = g] { cpu::maxpool2d_forward<T>(g, x, y, argmax); });
}
template <class T>
void maxpool2d_backward(const cpu::Pool2dGeometry& g, const int32_t* argmax, const T* dy, T* dx,
                        void* stream) {
    check_pool_geometry(g, "maxpool2d_backward");
    launch(stream, [=, g = g] { cpu::maxpool2d_backward<T>(g, argmax, dy, dx); });
}
template <class T>
void avgpool2d_forward(const cpu::Pool2dGeometry& g, const T* x, T* y, void* stream) {
    check_pool_geometry(g, "avgpool2d_forward");
    launch(stream, [=, g = g] { cpu::avgpool2d_forward<T>(g, x, y); });
}
template <class T>
void avgpool2d_backward(const cpu::Pool2dGeometry& g, const T* dy, T* dx, void* stream) {
    check_pool_geometry(g, "avgpool2d_backward");
    launch(stream, [=, g = g] { cpu::avgpool2d_backward<T>(g, dy, dx); });
}
template <class T>
void global_avgpool_forward(int64_t planes, int64_t plane_size, const T* x, T* y, void* stream) {
    require(planes >= 0 && planes <= INT32_MAX, "global_avgpool_forward", "planes out of range");
    require(plane_size >= 1, "global_avgpool_forward", "plane_size must be >= 1");
    launch(stream, [=] { cpu::global_avgpool_forward<T>(planes, plane_size, x, y); });
}
template <class T>
void global_avgpool_backward(int64_t planes, int64_t plane_size, const T* dy, T* dx, void* stream) {
    require(planes >= 0, "global_avgpool_backward", "planes must be >= 0");
    require(plane_size >= 1, "global_avgpool_backward", "plane_size must be >= 1");
    launch(stream, [=] { cpu::global_avgpool_backward<T>(planes, plane_size, dy, dx); });
}

// ---- loss_scale.h: kernels/cuda/loss_scale.cu's loops ------------------------------------------

template <class T>
void non_finite_check_and_unscale_multi(int64_t count, T* const* grads, const int64_t* sizes,
                                        float* found_inf, const float* inv_scale, void* stream) {
    require_tensor_sizes("non_finite_check_and_unscale", count, sizes);
    launch(stream, [=, grads = copied(grads, count), sizes = copied(sizes, count)] {
        const float inv = *inv_scale;
        bool bad = false;
        for (int64_t k = 0; k < count; ++k)
            for (int64_t i = 0; i < sizes[k]; ++i) {
                const T v = grads[k][i];
                bad |= !std::isfinite(v);
                grads[k][i] = inv == 1.0f ? v : static_cast<T>(v * inv);
            }
        if (bad) *found_inf = 1.0f;
    });
}

void update_loss_scale(float* scale, int32_t* growth_tracker, const float* found_inf,
                       double growth_factor, double backoff_factor, int32_t growth_interval,
                       void* stream) {
    require(growth_factor > 1.0, "update_loss_scale", "growth_factor must be > 1");
    require(backoff_factor > 0.0 && backoff_factor < 1.0, "update_loss_scale",
            "backoff_factor must be in (0, 1)");
    require(growth_interval >= 1, "update_loss_scale", "growth_interval must be >= 1");
    launch(stream, [=] {
        if (*found_inf != 0.0f) {
            *scale = static_cast<float>(*scale * backoff_factor);
            *growth_tracker = 0;
            return;
        }
        const int32_t successful = *growth_tracker + 1;
        if (successful == growth_interval) {
            const float grown = static_cast<float>(*scale * growth_factor);
            if (std::isfinite(grown)) *scale = grown;
            *growth_tracker = 0;
        } else {
            *growth_tracker = successful;
        }
    });
}

// ---- cast.h: round to nearest even, as cuda_bf16.h / cuda_fp16.h
// ---------------------------------

namespace {
uint32_t bits_of(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}
float float_of(uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

// __float2bfloat16_rn: NaN becomes the canonical 0x7fff.
uint16_t to_bf16(float f) {
    const uint32_t u = bits_of(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
    return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
float from_bf16(uint16_t h) {
    return float_of(static_cast<uint32_t>(h) << 16);
}

// __float2half_rn: NaN becomes 0x7fff, |f| >= 65520 becomes inf, subnormal halves round too.
uint16_t to_f16(float f) {
    const uint32_t u = bits_of(f);
    const auto sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
    const uint32_t x = u & 0x7fffffffu;
    if (x > 0x7f800000u) return 0x7fff;
    if (x >= 0x477ff000u) return sign | 0x7c00u;  // inf, or rounds to it
    if (x < 0x33000000u) return sign;             // below 2^-25: rounds to 0
    const uint32_t exp = x >> 23;
    if (exp < 113) {  // a subnormal half: m * 2^-24, m = mant / 2^(126 - exp)
        const uint32_t mant = (x & 0x7fffffu) | 0x800000u;
        const uint32_t shift = 126 - exp;
        uint32_t m = mant >> shift;
        const uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (m & 1u))) ++m;  // 1024 carries into the smallest normal
        return static_cast<uint16_t>(sign | m);
    }
    uint32_t h = ((exp - 112) << 10) | ((x >> 13) & 0x3ffu);
    const uint32_t rem = x & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry moves to the exponent
    return static_cast<uint16_t>(sign | h);
}
float from_f16(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        const float v = std::ldexp(static_cast<float>(m), -24);
        return sign ? -v : v;
    }
    if (e == 31) return float_of(sign | 0x7f800000u | (m << 13));
    return float_of(sign | ((e + 112) << 23) | (m << 13));
}

template <class In, class Out, class Op>
void launch_cast(const char* name, int64_t n, const In* x, Out* y, void* stream, Op op) {
    require(n >= 0, name, "negative size");
    launch(stream, [=] {
        for (int64_t i = 0; i < n; ++i) y[i] = op(x[i]);
    });
}
}  // namespace

void cast_f32_to_bf16(int64_t n, const float* x, uint16_t* y, void* stream) {
    launch_cast("cast_f32_to_bf16", n, x, y, stream, to_bf16);
}
void cast_bf16_to_f32(int64_t n, const uint16_t* x, float* y, void* stream) {
    launch_cast("cast_bf16_to_f32", n, x, y, stream, from_bf16);
}
void cast_f32_to_f16(int64_t n, const float* x, uint16_t* y, void* stream) {
    launch_cast("cast_f32_to_f16", n, x, y, stream, to_f16);
}
void cast_f16_to_f32(int64_t n, const uint16_t* x, float* y, void* stream) {
    launch_cast("cast_f16_to_f32", n, x, y, stream, from_f16);
}

// ---- gemm.h: the CPU's GEMM
// ----------------------------------------------------------------------

namespace {

// The streams (per current device) that ran a GEMM: cuBLAS would hold a handle for each until
// release_gemm_handles. Guarded by g_handles_mutex.
std::mutex g_handles_mutex;
std::set<std::pair<int, void*>> g_handles;

void note_handle(void* stream) {
    std::lock_guard lock(g_handles_mutex);
    g_handles.emplace(current_device(), stream);
}

// A stored operand (`rows` rows of `cols` values, `ld` apart) as dense floats, each value
// through `value` (a half decoded, an fp32 value rounded to TF32).
template <class In, class Value>
std::vector<float> dense_floats(const In* x, int64_t rows, int64_t cols, int64_t ld, Value value) {
    std::vector<float> out(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = value(x[r * ld + c]);
    return out;
}

// TF32: 10 mantissa bits, rounded to nearest even (inf and NaN kept).
float to_tf32(float f) {
    const uint32_t u = bits_of(f);
    if ((u & 0x7f800000u) == 0x7f800000u) return f;
    return float_of((u + 0xfffu + ((u >> 13) & 1u)) & 0xffffe000u);
}
}  // namespace

// T = double, or float with fp32 math: the CPU's GEMM. Float with tf32 math: the operands
// rounded to TF32 first, fp32 accumulation.
template <class T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc, void* stream,
          GemmMath math) {
    check_gemm_shape("gemm", trans_a, trans_b, M, N, K, lda, ldb, ldc);
    if (M == 0 || N == 0) return;
    note_handle(stream);
    if constexpr (std::is_same_v<T, float>) {
        if (math == GemmMath::tf32) {
            return launch(stream, [=] {
                const int64_t ar = trans_a ? K : M, ac = trans_a ? M : K;
                const int64_t br = trans_b ? N : K, bc = trans_b ? K : N;
                const auto a = dense_floats(A, ar, ac, lda, to_tf32);
                const auto b = dense_floats(B, br, bc, ldb, to_tf32);
                cpu::gemm<float>(trans_a, trans_b, M, N, K, alpha, a.data(), ac, b.data(), bc, beta,
                                 C, ldc);
            });
        }
    }
    launch(stream,
           [=] { cpu::gemm<T>(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc); });
}

// The half values decoded (exactly) to fp32 and multiplied with fp32 accumulation, as tensor
// cores do with CUBLAS_COMPUTE_32F.
void gemm_half(HalfType type, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
               float alpha, const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb,
               float beta, float* C, int64_t ldc, void* stream) {
    check_gemm_shape("gemm_half", trans_a, trans_b, M, N, K, lda, ldb, ldc);
    if (M == 0 || N == 0) return;
    note_handle(stream);
    launch(stream, [=] {
        float (*decode)(uint16_t) = type == HalfType::bf16 ? from_bf16 : from_f16;
        const int64_t ar = trans_a ? K : M, ac = trans_a ? M : K;
        const int64_t br = trans_b ? N : K, bc = trans_b ? K : N;
        const auto a = dense_floats(A, ar, ac, lda, decode);
        const auto b = dense_floats(B, br, bc, ldb, decode);
        cpu::gemm<float>(trans_a, trans_b, M, N, K, alpha, a.data(), std::max<int64_t>(ac, 1),
                         b.data(), std::max<int64_t>(bc, 1), beta, C, ldc);
    });
}

int release_gemm_handles(void* stream) {
    std::lock_guard lock(g_handles_mutex);
    int released = 0;
    for (auto it = g_handles.begin(); it != g_handles.end();) {
        if (it->second == stream) {
            it = g_handles.erase(it);
            ++released;
        } else {
            ++it;
        }
    }
    return released;
}

// ---- attention.h: the CPU's passes
// --------------------------------------------------------------

// Each pass is cuBLAS GEMMs on the stream's handle (noted as gemm notes it) around row kernels.
template <class T>
void attention_scores_softmax(int64_t B, int64_t T_, int64_t H, int64_t Dh, bool causal,
                              const T* qkv, T* probs, void* stream) {
    check_attention_sizes("attention_scores_softmax", B, T_, H, Dh);
    if (B == 0 || T_ == 0 || H == 0) return;
    note_handle(stream);
    launch(stream, [=] { cpu::attention_scores_softmax<T>(B, T_, H, Dh, causal, qkv, probs); });
}
template <class T>
void attention_apply(int64_t B, int64_t T_, int64_t H, int64_t Dh, bool causal, const T* probs,
                     const T* qkv, T* out, void* stream) {
    check_attention_sizes("attention_apply", B, T_, H, Dh);
    if (B == 0 || T_ == 0 || H == 0) return;
    note_handle(stream);
    launch(stream, [=] { cpu::attention_apply<T>(B, T_, H, Dh, causal, probs, qkv, out); });
}
template <class T>
void attention_backward_values(int64_t B, int64_t T_, int64_t H, int64_t Dh, bool causal,
                               const T* probs, const T* qkv, const T* dout, T* dprobs, T* dqkv,
                               void* stream) {
    check_attention_sizes("attention_backward_values", B, T_, H, Dh);
    if (B == 0 || T_ == 0 || H == 0) return;
    note_handle(stream);
    launch(stream, [=] {
        cpu::attention_backward_values<T>(B, T_, H, Dh, causal, probs, qkv, dout, dprobs, dqkv);
    });
}
template <class T>
void attention_backward_scores(int64_t B, int64_t T_, int64_t H, int64_t Dh, bool causal,
                               const T* probs, const T* qkv, T* dprobs, T* dqkv, void* stream) {
    check_attention_sizes("attention_backward_scores", B, T_, H, Dh);
    if (B == 0 || T_ == 0 || H == 0) return;
    note_handle(stream);
    launch(stream, [=] {
        cpu::attention_backward_scores<T>(B, T_, H, Dh, causal, probs, qkv, dprobs, dqkv);
    });
}

template <class T>
void attention_fused_forward(int64_t B, int64_t T_, int64_t H, int64_t Dh, bool causal, const T* qkv,
                             T* out, T* lse, void* stream) {
    check_fused_attention_sizes("attention_fused_forward", B, T_, H, Dh);
    if (B == 0 || T_ == 0 || H == 0) return;
    launch(stream, [=] { cpu::attention_fused_forward<T>(B, T_, H, Dh, causal, qkv, out, lse); });
}
template <class T>
void attention_fused_backward(int64_t B, int64_t T_, int64_t H, int64_t Dh, bool causal, const T* qkv,
                              const T* out, const T* dout, const T* lse, T* dqkv, void* stream) {
    check_fused_attention_sizes("attention_fused_backward", B, T_, H, Dh);
    if (B == 0 || T_ == 0 || H == 0) return;
    launch(stream, [=] { cpu::attention_fused_backward<T>(B, T_, H, Dh, causal, qkv, out, dout, lse, dqkv); });
}

// ---- rmsnorm.h, swiglu.h, rope.h: the CPU's kernels -----------------------------------------------

template <class T>
void rmsnorm_forward(int64_t rows, int64_t D, double eps, const T* x, const T* gamma, const T* beta, T* y,
                     T* rstd, void* stream) {
    require(rows >= 0 && rows <= INT32_MAX, "rmsnorm_forward", "rows out of range");
    require(D > 0, "rmsnorm_forward", "D must be positive");
    launch(stream, [=] { cpu::rmsnorm_forward<T>(rows, D, eps, x, gamma, beta, y, rstd); });
}
template <class T>
void rmsnorm_backward(int64_t rows, int64_t D, const T* x, const T* dy, const T* gamma, const T* rstd, T* dx,
                      T* dgamma, T* dbeta, void* stream) {
    require(rows >= 0 && rows <= INT32_MAX, "rmsnorm_backward", "rows out of range");
    require(D > 0, "rmsnorm_backward", "D must be positive");
    launch(stream, [=] { cpu::rmsnorm_backward<T>(rows, D, x, dy, gamma, rstd, dx, dgamma, dbeta); });
}

template <class T>
void swiglu_forward(int64_t n, const T* gate, const T* up, T* h, void* stream) {
    require(n >= 0, "swiglu_forward", "negative size");
    launch(stream, [=] { cpu::swiglu_forward<T>(n, gate, up, h); });
}
template <class T>
void swiglu_backward(int64_t n, const T* gate, const T* up, const T* dh, T* dgate, T* dup, void* stream) {
    require(n >= 0, "swiglu_backward", "negative size");
    launch(stream, [=] { cpu::swiglu_backward<T>(n, gate, up, dh, dgate, dup); });
}

template <class T>
void qkv_expand_rope(int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t Dh, bool rope, double theta,
                     const T* compact, T* full, void* stream) {
    check_rope_sizes("qkv_expand_rope", B, T_, H, KV, Dh, rope);
    launch(stream, [=] { cpu::qkv_expand_rope<T>(B, T_, H, KV, Dh, rope, theta, compact, full); });
}
template <class T>
void qkv_expand_rope_backward(int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t Dh, bool rope, double theta,
                              const T* dfull, T* dcompact, void* stream) {
    check_rope_sizes("qkv_expand_rope_backward", B, T_, H, KV, Dh, rope);
    launch(stream, [=] { cpu::qkv_expand_rope_backward<T>(B, T_, H, KV, Dh, rope, theta, dfull, dcompact); });
}

PARALAB_GPU_INSTANTIATE_FLOAT_TYPES(PARALAB_GPU_ALL_OPS)

// ---- conv.h: the CPU's im2col + GEMM convolution
// ---------------------------------------------------

bool cudnn_available() {
    return true;
}

namespace {

// A plan: what the queued work needs, copied into it, since a plan may be destroyed once its
// calls have returned, as a cuDNN plan may (its kernels are queued with their arguments).
struct FakeConv {
    int device = 0;
    cpu::Conv2dGeometry g;
    int64_t batch = 0, out_channels = 0;
    bool bias = false, f64 = false;
    std::string what;

    size_t element() const { return f64 ? sizeof(double) : sizeof(float); }
    // The column buffer of one sample (none for a pointwise convolution, which reads x, or for
    // an empty batch).
    size_t col_bytes() const {
        return batch == 0 || g.is_pointwise()
                   ? 0
                   : static_cast<size_t>(g.col_rows() * g.col_cols()) * element();
    }
};

}  // namespace

struct CudnnConv2dPlan::Impl : FakeConv {};

namespace {

// y = conv(x, w) + b per sample, as the CPU's Conv2d::forward_im2col: the bias broadcast, then
// the GEMM with beta = 1.
template <class T>
void conv_forward(const FakeConv& p, const T* x, const T* w, const T* b, T* y, T* col) {
    const cpu::Conv2dGeometry& g = p.g;
    const int64_t K = p.out_channels, rows = g.col_rows(), plane = g.col_cols();
    const int64_t in_size = g.channels * g.height * g.width, out_size = K * plane;
    for (int64_t n = 0; n < p.batch; ++n) {
        const T* xb = x + n * in_size;
        T* yb = y + n * out_size;
        const T* cb = xb;
        if (!g.is_pointwise()) {
            cpu::im2col<T>(g, xb, col);
            cb = col;
        }
        T beta = T(0);
        if (b) {
            cpu::channel_broadcast<T>(K, plane, b, yb);
            beta = T(1);
        }
        cpu::gemm<T>(false, false, K, plane, rows, T(1), w, cb, beta, yb);
    }
}

// dw_acc += dy_n col_n^T and dx_n = col2im(W^T dy_n) per sample, as the CPU's
// Conv2d::backward_im2col (col is rebuilt from x, then reused for dcol); db_acc as
// kernels/cuda/conv.cu's bias kernel: each channel summed in double, added once.
template <class T>
void conv_backward(const FakeConv& p, const T* x, const T* dy, const T* w, T* dx, T* dw, T* db,
                   T* col) {
    const cpu::Conv2dGeometry& g = p.g;
    const int64_t K = p.out_channels, rows = g.col_rows(), plane = g.col_cols();
    const int64_t in_size = g.channels * g.height * g.width, out_size = K * plane;
    for (int64_t n = 0; n < p.batch; ++n) {
        const T* gb = dy + n * out_size;
        if (dw) {
            const T* xb = x + n * in_size;
            const T* cb = xb;
            if (!g.is_pointwise()) {
                cpu::im2col<T>(g, xb, col);
                cb = col;
            }
            cpu::gemm<T>(false, true, K, rows, plane, T(1), gb, cb, T(1), dw);
        }
        if (dx) {
            T* dxb = dx + n * in_size;
            if (g.is_pointwise()) {
                cpu::gemm<T>(true, false, rows, plane, K, T(1), w, gb, T(0), dxb);
            } else {
                cpu::gemm<T>(true, false, rows, plane, K, T(1), w, gb, T(0), col);
                cpu::col2im<T>(g, col, dxb);
            }
        }
    }
    if (db)
        for (int64_t k = 0; k < K; ++k) {
            double s = 0;
            for (int64_t n = 0; n < p.batch; ++n) {
                const T* row = dy + (n * K + k) * plane;
                for (int64_t i = 0; i < plane; ++i) s += static_cast<double>(row[i]);
            }
            db[k] = static_cast<T>(static_cast<double>(db[k]) + s);
        }
}

}  // namespace

CudnnConv2dPlan::CudnnConv2dPlan(int device, const cpu::Conv2dGeometry& g, int64_t batch,
                                 int64_t out_channels, bool bias, bool f64, bool tf32) {
    const std::string what = detail::describe_conv(g, batch, out_channels, bias, f64, tf32);
    detail::validate_conv_plan(g, batch, out_channels, what);
    auto impl = std::make_unique<Impl>();
    impl->device = device;
    impl->g = g;
    impl->batch = batch;
    impl->out_channels = out_channels;
    impl->bias = bias;
    impl->f64 = f64;
    impl->what = what;
    m_impl = std::move(impl);
}

CudnnConv2dPlan::~CudnnConv2dPlan() = default;

int64_t CudnnConv2dPlan::batch() const {
    return m_impl->batch;
}

std::string CudnnConv2dPlan::algorithms() const {
    if (m_impl->batch == 0) return "none (empty batch)";
    return "forward HOST_IM2COL_GEMM (fake GPU), backward data HOST_GEMM_COL2IM (fake GPU), "
           "backward filter "
           "HOST_IM2COL_GEMM (fake GPU)";
}

size_t CudnnConv2dPlan::forward_workspace_bytes() const {
    return m_impl->col_bytes();
}
size_t CudnnConv2dPlan::backward_workspace_bytes() const {
    return m_impl->col_bytes();
}

void CudnnConv2dPlan::forward(const void* x, const void* w, const void* b, void* y, void* workspace,
                              void* stream) const {
    const FakeConv& p = *m_impl;
    const std::string where = "CudnnConv2dPlan::forward(" + p.what + ")";
    require(x && w && y, where.c_str(), "x, w and y must not be null");
    require((b != nullptr) == p.bias, where.c_str(),
            p.bias ? "the plan has a bias: b must not be null"
                   : "the plan has no bias: b must be null");
    require(workspace || p.col_bytes() == 0, where.c_str(), "the workspace must not be null");
    if (p.batch == 0) return;
    launch(stream, [p, x, w, b, y, workspace] {
        if (p.f64)
            conv_forward<double>(p, static_cast<const double*>(x), static_cast<const double*>(w),
                                 static_cast<const double*>(b), static_cast<double*>(y),
                                 static_cast<double*>(workspace));
        else
            conv_forward<float>(p, static_cast<const float*>(x), static_cast<const float*>(w),
                                static_cast<const float*>(b), static_cast<float*>(y),
                                static_cast<float*>(workspace));
    });
}

void CudnnConv2dPlan::backward(const void* x, const void* dy, const void* w, void* dx, void* dw_acc,
                               void* db_acc, void* workspace, void* stream) const {
    const FakeConv& p = *m_impl;
    const std::string where = "CudnnConv2dPlan::backward(" + p.what + ")";
    require(dy != nullptr, where.c_str(), "dy must not be null");
    require(!dx || w, where.c_str(), "w must not be null when dx is wanted");
    require(!dw_acc || x, where.c_str(), "x must not be null when dw_acc is wanted");
    require(p.bias || !db_acc, where.c_str(), "the plan has no bias: db_acc must be null");
    require(workspace || p.col_bytes() == 0 || (!dx && !dw_acc), where.c_str(),
            "the workspace must not be null");
    if (p.batch == 0) return;
    launch(stream, [p, x, dy, w, dx, dw_acc, db_acc, workspace] {
        if (p.f64)
            conv_backward<double>(p, static_cast<const double*>(x), static_cast<const double*>(dy),
                                  static_cast<const double*>(w), static_cast<double*>(dx),
                                  static_cast<double*>(dw_acc), static_cast<double*>(db_acc),
                                  static_cast<double*>(workspace));
        else
            conv_backward<float>(p, static_cast<const float*>(x), static_cast<const float*>(dy),
                                 static_cast<const float*>(w), static_cast<float*>(dx),
                                 static_cast<float*>(dw_acc), static_cast<float*>(db_acc),
                                 static_cast<float*>(workspace));
    });
}

}  // namespace paralab::kernels::gpu
