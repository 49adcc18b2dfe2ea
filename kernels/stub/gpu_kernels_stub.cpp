// The CPU-only build's GPU kernel launchers (kernels/gpu/*.h): the same symbols, each throwing
// "built without the CUDA backend", so that code calling them links and fails with the reason.
#include <kernels/gpu/cast.h>
#include <kernels/gpu/dropout.h>
#include <kernels/gpu/elementwise.h>
#include <kernels/gpu/embedding.h>
#include <kernels/gpu/gemm.h>
#include <kernels/gpu/loss_scale.h>
#include <kernels/gpu/norm.h>
#include <kernels/gpu/optim.h>
#include <kernels/gpu/recurrent.h>
#include <kernels/gpu/reduce.h>
#include <kernels/gpu/softmax.h>

#include <stdexcept>
#include <string>

namespace paralab::kernels::gpu {

namespace {
[[noreturn]] void built_without_cuda(const char* kernel) {
    throw std::runtime_error(std::string(kernel) +
                             ": this ParaLab was built without the CUDA backend (no GPU kernels)");
}
}  // namespace

// Every launcher: a template whose body throws, instantiated for float and double below.
#define PARALAB_NO_CUDA(name, ...) \
    template <class T>             \
    void name(__VA_ARGS__) {       \
        built_without_cuda(#name); \
    }

// elementwise.h
PARALAB_NO_CUDA(relu_forward, int64_t, const T*, T*, void*)
PARALAB_NO_CUDA(relu_backward, int64_t, const T*, const T*, T*, void*)
PARALAB_NO_CUDA(gelu_forward, int64_t, const T*, T*, void*)
PARALAB_NO_CUDA(gelu_backward, int64_t, const T*, const T*, T*, void*)
PARALAB_NO_CUDA(tanh_forward, int64_t, const T*, T*, void*)
PARALAB_NO_CUDA(tanh_backward, int64_t, const T*, const T*, T*, void*)
PARALAB_NO_CUDA(sigmoid_forward, int64_t, const T*, T*, void*)
PARALAB_NO_CUDA(sigmoid_backward, int64_t, const T*, const T*, T*, void*)
PARALAB_NO_CUDA(bias_broadcast_rows, int64_t, int64_t, const T*, T*, void*)
PARALAB_NO_CUDA(bias_add_rows, int64_t, int64_t, const T*, T*, void*)
PARALAB_NO_CUDA(column_sums_accumulate, int64_t, int64_t, const T*, T*, void*)
PARALAB_NO_CUDA(multiply_elementwise, int64_t, const T*, const T*, T*, void*)
PARALAB_NO_CUDA(squared_error_sum, int64_t, const T*, const T*, double*, double*, void*)
PARALAB_NO_CUDA(squared_error_backward, int64_t, const T*, const T*, T, T*, void*)
// embedding.h
PARALAB_NO_CUDA(gather_rows, int64_t, int64_t, const T*, const int64_t*, T*, void*)
PARALAB_NO_CUDA(scatter_add_rows, int64_t, int64_t, const T*, const int64_t*, T*, void*)
// softmax.h
PARALAB_NO_CUDA(softmax_cross_entropy_forward, int64_t, int64_t, const T*, const int64_t*, T*,
                double*, double*, void*)
PARALAB_NO_CUDA(softmax_cross_entropy_backward, int64_t, int64_t, const T*, const int64_t*, T, T*,
                void*)
PARALAB_NO_CUDA(argmax_rows, int64_t, int64_t, const T*, int64_t*, void*)
// reduce.h
PARALAB_NO_CUDA(sum, int64_t, const T*, double*, double*, void*)
PARALAB_NO_CUDA(sum_of_squares, int64_t, const T*, double*, double*, void*)
PARALAB_NO_CUDA(sum_of_squares_multi, int64_t, const T* const*, const int64_t*, double*, double*,
                void*)
PARALAB_NO_CUDA(scale_in_place, int64_t, T*, double, void*)
PARALAB_NO_CUDA(scale_in_place_by_device_scalar, int64_t, T*, const double*, void*)
// optim.h
PARALAB_NO_CUDA(sgd_update, int64_t, T*, const T*, double, double, void*)
PARALAB_NO_CUDA(sgd_update_multi, int64_t, T* const*, const T* const*, const int64_t*, double,
                double, void*)
PARALAB_NO_CUDA(sgd_momentum_update, int64_t, T*, const T*, T*, double, double, double, bool, bool,
                void*)
PARALAB_NO_CUDA(sgd_momentum_update_multi, int64_t, T* const*, const T* const*, T* const*,
                const int64_t*, double, double, double, bool, bool, void*)
PARALAB_NO_CUDA(adam_update, int64_t, T*, const T*, T*, T*, double, double, double, double, double,
                int64_t, void*)
PARALAB_NO_CUDA(adam_update_multi, int64_t, T* const*, const T* const*, T* const*, T* const*,
                const int64_t*, double, double, double, double, double, int64_t, void*)
PARALAB_NO_CUDA(adamw_update, int64_t, T*, const T*, T*, T*, double, double, double, double, double,
                int64_t, void*)
PARALAB_NO_CUDA(adamw_update_multi, int64_t, T* const*, const T* const*, T* const*, T* const*,
                const int64_t*, double, double, double, double, double, int64_t, void*)
// dropout.h
PARALAB_NO_CUDA(dropout_forward, int64_t, uint64_t, uint64_t, double, const T*, T*, T*, void*)
PARALAB_NO_CUDA(dropout_backward, int64_t, const T*, const T*, T*, void*)
// recurrent.h
PARALAB_NO_CUDA(lstm_cell_forward, int64_t, int64_t, T*, int64_t, const T*, T*, T*, T*, int64_t,
                void*)
PARALAB_NO_CUDA(lstm_cell_backward, int64_t, int64_t, const T*, int64_t, const T*, const T*,
                const T*, int64_t, T*, T*, void*)
PARALAB_NO_CUDA(gru_cell_forward, int64_t, int64_t, T*, int64_t, const T*, const T*, T*, T*,
                int64_t, void*)
PARALAB_NO_CUDA(gru_cell_backward, int64_t, int64_t, const T*, int64_t, const T*, const T*,
                const T*, T*, int64_t, T*, T*, void*)
PARALAB_NO_CUDA(strided_rows_copy, int64_t, int64_t, const T*, int64_t, T*, int64_t, void*)
PARALAB_NO_CUDA(recurrent_weight_grad_accumulate, int64_t, int64_t, int64_t, int64_t, const T*,
                const T*, T*, void*)
// norm.h
PARALAB_NO_CUDA(layernorm_forward, int64_t, int64_t, double, const T*, const T*, const T*, T*, T*,
                T*, void*)
PARALAB_NO_CUDA(layernorm_backward, int64_t, int64_t, const T*, const T*, const T*, const T*,
                const T*, T*, T*, T*, void*)
// loss_scale.h
PARALAB_NO_CUDA(non_finite_check_and_unscale_multi, int64_t, T* const*, const int64_t*, float*,
                const float*, void*)
PARALAB_NO_CUDA(non_finite_check_and_unscale, int64_t, T*, float*, const float*, void*)
// gemm.h
PARALAB_NO_CUDA(gemm, bool, bool, int64_t, int64_t, int64_t, T, const T*, int64_t, const T*,
                int64_t, T, T*, int64_t, void*, GemmMath)
#undef PARALAB_NO_CUDA

#define PARALAB_INSTANTIATE_NO_CUDA(T)                                                             \
    template void relu_forward<T>(int64_t, const T*, T*, void*);                                   \
    template void relu_backward<T>(int64_t, const T*, const T*, T*, void*);                        \
    template void gelu_forward<T>(int64_t, const T*, T*, void*);                                   \
    template void gelu_backward<T>(int64_t, const T*, const T*, T*, void*);                        \
    template void tanh_forward<T>(int64_t, const T*, T*, void*);                                   \
    template void tanh_backward<T>(int64_t, const T*, const T*, T*, void*);                        \
    template void sigmoid_forward<T>(int64_t, const T*, T*, void*);                                \
    template void sigmoid_backward<T>(int64_t, const T*, const T*, T*, void*);                     \
    template void bias_broadcast_rows<T>(int64_t, int64_t, const T*, T*, void*);                   \
    template void bias_add_rows<T>(int64_t, int64_t, const T*, T*, void*);                         \
    template void column_sums_accumulate<T>(int64_t, int64_t, const T*, T*, void*);                \
    template void multiply_elementwise<T>(int64_t, const T*, const T*, T*, void*);                 \
    template void squared_error_sum<T>(int64_t, const T*, const T*, double*, double*, void*);      \
    template void squared_error_backward<T>(int64_t, const T*, const T*, T, T*, void*);            \
    template void gather_rows<T>(int64_t, int64_t, const T*, const int64_t*, T*, void*);           \
    template void scatter_add_rows<T>(int64_t, int64_t, const T*, const int64_t*, T*, void*);      \
    template void softmax_cross_entropy_forward<T>(int64_t, int64_t, const T*, const int64_t*, T*, \
                                                   double*, double*, void*);                       \
    template void softmax_cross_entropy_backward<T>(int64_t, int64_t, const T*, const int64_t*, T, \
                                                    T*, void*);                                    \
    template void argmax_rows<T>(int64_t, int64_t, const T*, int64_t*, void*);                     \
    template void sum<T>(int64_t, const T*, double*, double*, void*);                              \
    template void sum_of_squares<T>(int64_t, const T*, double*, double*, void*);                   \
    template void sum_of_squares_multi<T>(int64_t, const T* const*, const int64_t*, double*,       \
                                          double*, void*);                                         \
    template void scale_in_place<T>(int64_t, T*, double, void*);                                   \
    template void scale_in_place_by_device_scalar<T>(int64_t, T*, const double*, void*);           \
    template void sgd_update<T>(int64_t, T*, const T*, double, double, void*);                     \
    template void sgd_update_multi<T>(int64_t, T* const*, const T* const*, const int64_t*, double, \
                                      double, void*);                                              \
    template void sgd_momentum_update<T>(int64_t, T*, const T*, T*, double, double, double, bool,  \
                                         bool, void*);                                             \
    template void sgd_momentum_update_multi<T>(int64_t, T* const*, const T* const*, T* const*,     \
                                               const int64_t*, double, double, double, bool, bool, \
                                               void*);                                             \
    template void adam_update<T>(int64_t, T*, const T*, T*, T*, double, double, double, double,    \
                                 double, int64_t, void*);                                          \
    template void adam_update_multi<T>(int64_t, T* const*, const T* const*, T* const*, T* const*,  \
                                       const int64_t*, double, double, double, double, double,     \
                                       int64_t, void*);                                            \
    template void adamw_update<T>(int64_t, T*, const T*, T*, T*, double, double, double, double,   \
                                  double, int64_t, void*);                                         \
    template void adamw_update_multi<T>(int64_t, T* const*, const T* const*, T* const*, T* const*, \
                                        const int64_t*, double, double, double, double, double,    \
                                        int64_t, void*);                                           \
    template void dropout_forward<T>(int64_t, uint64_t, uint64_t, double, const T*, T*, T*,        \
                                     void*);                                                       \
    template void dropout_backward<T>(int64_t, const T*, const T*, T*, void*);                     \
    template void lstm_cell_forward<T>(int64_t, int64_t, T*, int64_t, const T*, T*, T*, T*,        \
                                       int64_t, void*);                                            \
    template void lstm_cell_backward<T>(int64_t, int64_t, const T*, int64_t, const T*, const T*,   \
                                        const T*, int64_t, T*, T*, void*);                         \
    template void gru_cell_forward<T>(int64_t, int64_t, T*, int64_t, const T*, const T*, T*, T*,   \
                                      int64_t, void*);                                             \
    template void gru_cell_backward<T>(int64_t, int64_t, const T*, int64_t, const T*, const T*,    \
                                       const T*, T*, int64_t, T*, T*, void*);                      \
    template void strided_rows_copy<T>(int64_t, int64_t, const T*, int64_t, T*, int64_t, void*);   \
    template void recurrent_weight_grad_accumulate<T>(int64_t, int64_t, int64_t, int64_t,          \
                                                      const T*, const T*, T*, void*);              \
    template void layernorm_forward<T>(int64_t, int64_t, double, const T*, const T*, const T*, T*, \
                                       T*, T*, void*);                                             \
    template void layernorm_backward<T>(int64_t, int64_t, const T*, const T*, const T*, const T*,  \
                                        const T*, T*, T*, T*, void*);                              \
    template void non_finite_check_and_unscale_multi<T>(int64_t, T* const*, const int64_t*,        \
                                                        float*, const float*, void*);              \
    template void non_finite_check_and_unscale<T>(int64_t, T*, float*, const float*, void*);       \
    template void gemm<T>(bool, bool, int64_t, int64_t, int64_t, T, const T*, int64_t, const T*,   \
                          int64_t, T, T*, int64_t, void*, GemmMath);
PARALAB_INSTANTIATE_NO_CUDA(float)
PARALAB_INSTANTIATE_NO_CUDA(double)
#undef PARALAB_INSTANTIATE_NO_CUDA

// The launchers that are not templates.
void clip_coefficient(const double*, double, double*, void*) { built_without_cuda("clip_coefficient"); }
void cast_f32_to_bf16(int64_t, const float*, uint16_t*, void*) { built_without_cuda("cast_f32_to_bf16"); }
void cast_bf16_to_f32(int64_t, const uint16_t*, float*, void*) { built_without_cuda("cast_bf16_to_f32"); }
void cast_f32_to_f16(int64_t, const float*, uint16_t*, void*) { built_without_cuda("cast_f32_to_f16"); }
void cast_f16_to_f32(int64_t, const uint16_t*, float*, void*) { built_without_cuda("cast_f16_to_f32"); }
void update_loss_scale(float*, int32_t*, const float*, double, double, int32_t, void*) {
    built_without_cuda("update_loss_scale");
}
void gemm_half(HalfType, bool, bool, int64_t, int64_t, int64_t, float, const uint16_t*, int64_t,
               const uint16_t*, int64_t, float, float*, int64_t, void*) {
    built_without_cuda("gemm_half");
}
// Nothing was made, so nothing to release: 0 handles, as the CUDA build answers for a stream
// that never ran a GEMM.
int release_gemm_handles(void*) { return 0; }

}  // namespace paralab::kernels::gpu
