// The templated GPU launchers of each op header as X-macro lists, so that the CUDA files
// (kernels/cuda/*.cu) and the CPU-only stub (kernels/stub/gpu_kernels_stub.cpp) instantiate the
// same set from one place: a new launcher is declared in its op header and added to its list
// here, and both builds pick it up. Private to kernels/cuda and kernels/stub: not part of the
// API, and no caller needs it.
//
// Each list is LIST(X, T): X(name, parameter types...) once per launcher, with the element type
// spelt T. Every launcher returns void and has T in its parameters, so `template void
// name(types with T = float);` instantiates it.
#pragma once

#include <cstdint>

// kernels/gpu/elementwise.h
#define PARALAB_GPU_ELEMENTWISE_OPS(X, T)                                      \
    X(relu_forward, int64_t, const T*, T*, void*)                              \
    X(relu_backward, int64_t, const T*, const T*, T*, void*)                   \
    X(gelu_forward, int64_t, const T*, T*, void*)                              \
    X(gelu_backward, int64_t, const T*, const T*, T*, void*)                   \
    X(tanh_forward, int64_t, const T*, T*, void*)                              \
    X(tanh_backward, int64_t, const T*, const T*, T*, void*)                   \
    X(sigmoid_forward, int64_t, const T*, T*, void*)                           \
    X(sigmoid_backward, int64_t, const T*, const T*, T*, void*)                \
    X(bias_broadcast_rows, int64_t, int64_t, const T*, T*, void*)              \
    X(bias_add_rows, int64_t, int64_t, const T*, T*, void*)                    \
    X(column_sums_accumulate, int64_t, int64_t, const T*, T*, void*)           \
    X(multiply_elementwise, int64_t, const T*, const T*, T*, void*)            \
    X(squared_error_sum, int64_t, const T*, const T*, double*, double*, void*) \
    X(squared_error_backward, int64_t, const T*, const T*, T, T*, void*)

// kernels/gpu/embedding.h
#define PARALAB_GPU_EMBEDDING_OPS(X, T)                                   \
    X(gather_rows, int64_t, int64_t, const T*, const int64_t*, T*, void*) \
    X(scatter_add_rows, int64_t, int64_t, int64_t, const T*, const int64_t*, T*, void*)

// kernels/gpu/softmax.h
#define PARALAB_GPU_SOFTMAX_OPS(X, T)                                                           \
    X(softmax_cross_entropy_forward, int64_t, int64_t, const T*, const int64_t*, T*, double*,   \
      double*, void*)                                                                           \
    X(softmax_cross_entropy_backward, int64_t, int64_t, const T*, const int64_t*, T, T*, void*) \
    X(argmax_rows, int64_t, int64_t, const T*, int64_t*, void*)

// kernels/gpu/reduce.h (clip_coefficient is not a template)
#define PARALAB_GPU_REDUCE_OPS(X, T)                                                           \
    X(sum, int64_t, const T*, double*, double*, void*)                                         \
    X(sum_of_squares, int64_t, const T*, double*, double*, void*)                              \
    X(sum_of_squares_multi, int64_t, const T* const*, const int64_t*, double*, double*, void*) \
    X(scale_in_place, int64_t, T*, double, void*)                                              \
    X(scale_in_place_by_device_scalar, int64_t, T*, const double*, void*)

// kernels/gpu/optim.h
#define PARALAB_GPU_OPTIM_OPS(X, T)                                                                \
    X(sgd_update, int64_t, T*, const T*, double, double, void*)                                    \
    X(sgd_update_multi, int64_t, T* const*, const T* const*, const int64_t*, double, double,       \
      void*)                                                                                       \
    X(sgd_momentum_update, int64_t, T*, const T*, T*, double, double, double, bool, bool, void*)   \
    X(sgd_momentum_update_multi, int64_t, T* const*, const T* const*, T* const*, const int64_t*,   \
      double, double, double, bool, bool, void*)                                                   \
    X(adam_update, int64_t, T*, const T*, T*, T*, double, double, double, double, double, int64_t, \
      void*)                                                                                       \
    X(adam_update_multi, int64_t, T* const*, const T* const*, T* const*, T* const*,                \
      const int64_t*, double, double, double, double, double, int64_t, void*)                      \
    X(adamw_update, int64_t, T*, const T*, T*, T*, double, double, double, double, double,         \
      int64_t, void*)                                                                              \
    X(adamw_update_multi, int64_t, T* const*, const T* const*, T* const*, T* const*,               \
      const int64_t*, double, double, double, double, double, int64_t, void*)

// kernels/gpu/dropout.h
#define PARALAB_GPU_DROPOUT_OPS(X, T)                                                \
    X(dropout_forward, int64_t, uint64_t, uint64_t, double, const T*, T*, T*, void*) \
    X(dropout_backward, int64_t, const T*, const T*, T*, void*)

// kernels/gpu/recurrent.h
#define PARALAB_GPU_RECURRENT_OPS(X, T)                                                            \
    X(lstm_cell_forward, int64_t, int64_t, T*, int64_t, const T*, T*, T*, T*, int64_t, void*)      \
    X(lstm_cell_backward, int64_t, int64_t, const T*, int64_t, const T*, const T*, const T*,       \
      int64_t, T*, T*, void*)                                                                      \
    X(gru_cell_forward, int64_t, int64_t, T*, int64_t, const T*, const T*, T*, T*, int64_t, void*) \
    X(gru_cell_backward, int64_t, int64_t, const T*, int64_t, const T*, const T*, const T*, T*,    \
      int64_t, T*, T*, void*)                                                                      \
    X(strided_rows_copy, int64_t, int64_t, const T*, int64_t, T*, int64_t, void*)                  \
    X(recurrent_weight_grad_accumulate, int64_t, int64_t, int64_t, int64_t, const T*, const T*,    \
      T*, void*)

// kernels/gpu/norm.h
#define PARALAB_GPU_NORM_OPS(X, T)                                                                \
    X(layernorm_forward, int64_t, int64_t, double, const T*, const T*, const T*, T*, T*, T*,      \
      void*)                                                                                      \
    X(layernorm_backward, int64_t, int64_t, const T*, const T*, const T*, const T*, const T*, T*, \
      T*, T*, void*)                                                                              \
    X(batchnorm_channel_sums, int64_t, int64_t, int64_t, const T*, double*, double*, void*)      \
    X(batchnorm_normalize, int64_t, int64_t, int64_t, const T*, const T*, const T*, const T*, T*, \
      void*)                                                                                      \
    X(batchnorm_backward_sums, int64_t, int64_t, int64_t, const T*, const T*, const T*, double*,  \
      double*, void*)                                                                             \
    X(batchnorm_backward_input, int64_t, int64_t, int64_t, const T*, const T*, const T*, const T*, \
      const T*, const T*, T*, void*)                                                              \
    X(batchnorm_stats, int64_t, bool, const double*, double, double, const T*, T*, T*, T*, T*,    \
      double*, void*)                                                                             \
    X(batchnorm_param_grads, int64_t, const double*, const double*, T*, T*, void*)                \
    X(batchnorm_backward_coeffs, int64_t, bool, const double*, const double*, const T*, T*, T*,  \
      T*, void*)

// kernels/gpu/pool.h (the geometry is kernels/cpu/pool.h's)
#define PARALAB_GPU_POOL_OPS(X, T)                                                     \
    X(maxpool2d_forward, const cpu::Pool2dGeometry&, const T*, T*, int32_t*, void*)    \
    X(maxpool2d_backward, const cpu::Pool2dGeometry&, const int32_t*, const T*, T*, void*) \
    X(avgpool2d_forward, const cpu::Pool2dGeometry&, const T*, T*, void*)              \
    X(avgpool2d_backward, const cpu::Pool2dGeometry&, const T*, T*, void*)             \
    X(global_avgpool_forward, int64_t, int64_t, const T*, T*, void*)                   \
    X(global_avgpool_backward, int64_t, int64_t, const T*, T*, void*)

// kernels/gpu/loss_scale.h (update_loss_scale is not a template)
#define PARALAB_GPU_LOSS_SCALE_OPS(X, T)                                              \
    X(non_finite_check_and_unscale_multi, int64_t, T* const*, const int64_t*, float*, \
      const float*, void*)                                                            \
    X(non_finite_check_and_unscale, int64_t, T*, float*, const float*, void*)

// kernels/gpu/gemm.h (the ld form; the dense form is inline, gemm_half is not a template)
#define PARALAB_GPU_GEMM_OPS(X, T)                                                                 \
    X(gemm, bool, bool, int64_t, int64_t, int64_t, T, const T*, int64_t, const T*, int64_t, T, T*, \
      int64_t, void*, GemmMath)

// kernels/gpu/attention.h
#define PARALAB_GPU_ATTENTION_OPS(X, T)                                                            \
    X(attention_scores_softmax, int64_t, int64_t, int64_t, int64_t, bool, const T*, T*, void*)     \
    X(attention_apply, int64_t, int64_t, int64_t, int64_t, bool, const T*, const T*, T*, void*)    \
    X(attention_backward_values, int64_t, int64_t, int64_t, int64_t, bool, const T*, const T*,     \
      const T*, T*, T*, void*)                                                                     \
    X(attention_backward_scores, int64_t, int64_t, int64_t, int64_t, bool, const T*, const T*, T*, \
      T*, void*)                                                                                   \
    X(attention_fused_forward, int64_t, int64_t, int64_t, int64_t, bool, const T*, T*, T*, void*)  \
    X(attention_fused_backward, int64_t, int64_t, int64_t, int64_t, bool, const T*, const T*,      \
      const T*, const T*, T*, void*)

// kernels/gpu/rmsnorm.h
#define PARALAB_GPU_RMSNORM_OPS(X, T)                                                          \
    X(rmsnorm_forward, int64_t, int64_t, double, const T*, const T*, const T*, T*, T*, void*) \
    X(rmsnorm_backward, int64_t, int64_t, const T*, const T*, const T*, const T*, T*, T*, T*, void*)

// kernels/gpu/swiglu.h
#define PARALAB_GPU_SWIGLU_OPS(X, T)                    \
    X(swiglu_forward, int64_t, const T*, const T*, T*, void*) \
    X(swiglu_backward, int64_t, const T*, const T*, const T*, T*, T*, void*)

// kernels/gpu/rope.h
#define PARALAB_GPU_ROPE_OPS(X, T)                                                                      \
    X(qkv_expand_rope, int64_t, int64_t, int64_t, int64_t, int64_t, bool, double, const T*, T*, void*) \
    X(qkv_expand_rope_backward, int64_t, int64_t, int64_t, int64_t, int64_t, bool, double, const T*, T*, \
      void*)

// Every list, for the stub.
#define PARALAB_GPU_ALL_OPS(X, T)     \
    PARALAB_GPU_ELEMENTWISE_OPS(X, T) \
    PARALAB_GPU_EMBEDDING_OPS(X, T)   \
    PARALAB_GPU_SOFTMAX_OPS(X, T)     \
    PARALAB_GPU_REDUCE_OPS(X, T)      \
    PARALAB_GPU_OPTIM_OPS(X, T)       \
    PARALAB_GPU_DROPOUT_OPS(X, T)     \
    PARALAB_GPU_RECURRENT_OPS(X, T)   \
    PARALAB_GPU_NORM_OPS(X, T)        \
    PARALAB_GPU_POOL_OPS(X, T)        \
    PARALAB_GPU_LOSS_SCALE_OPS(X, T)  \
    PARALAB_GPU_GEMM_OPS(X, T)        \
    PARALAB_GPU_ATTENTION_OPS(X, T)   \
    PARALAB_GPU_RMSNORM_OPS(X, T)     \
    PARALAB_GPU_SWIGLU_OPS(X, T)      \
    PARALAB_GPU_ROPE_OPS(X, T)

// X for a list: the explicit instantiation of one launcher (T deduced from the parameters).
#define PARALAB_GPU_INSTANTIATE(name, ...) template void name(__VA_ARGS__);

// A list's launchers for float and double, the element types every launcher supports. Used
// inside namespace paralab::kernels::gpu, after the definitions.
#define PARALAB_GPU_INSTANTIATE_FLOAT_TYPES(LIST) \
    LIST(PARALAB_GPU_INSTANTIATE, float)          \
    LIST(PARALAB_GPU_INSTANTIATE, double)
