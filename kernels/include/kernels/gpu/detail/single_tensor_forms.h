// The single-tensor launchers of kernels/gpu/optim.h and loss_scale.h, each the multi-tensor
// launcher on a list of one: written once for the CUDA implementations (kernels/cuda/optim.cu,
// loss_scale.cu) and the host fakes of the tests, which include this after defining the
// multi-tensor forms. Private to those.
#pragma once

#include <kernels/gpu/loss_scale.h>
#include <kernels/gpu/optim.h>

#include <cstdint>

namespace paralab::kernels::gpu {

template <class T>
void sgd_update(int64_t n, T* p, const T* g, double lr, double weight_decay, void* stream) {
    sgd_update_multi<T>(1, &p, &g, &n, lr, weight_decay, stream);
}

template <class T>
void sgd_momentum_update(int64_t n, T* p, const T* g, T* buf, double lr, double momentum,
                         double weight_decay, bool nesterov, bool first_step, void* stream) {
    sgd_momentum_update_multi<T>(1, &p, &g, &buf, &n, lr, momentum, weight_decay, nesterov,
                                 first_step, stream);
}

template <class T>
void adam_update(int64_t n, T* p, const T* g, T* m, T* v, double lr, double beta1, double beta2,
                 double eps, double weight_decay, int64_t step, void* stream) {
    adam_update_multi<T>(1, &p, &g, &m, &v, &n, lr, beta1, beta2, eps, weight_decay, step, stream);
}

template <class T>
void adamw_update(int64_t n, T* p, const T* g, T* m, T* v, double lr, double beta1, double beta2,
                  double eps, double weight_decay, int64_t step, void* stream) {
    adamw_update_multi<T>(1, &p, &g, &m, &v, &n, lr, beta1, beta2, eps, weight_decay, step, stream);
}

// grad: [n]
template <class T>
void non_finite_check_and_unscale(int64_t n, T* grad, float* found_inf, const float* inv_scale,
                                  void* stream) {
    non_finite_check_and_unscale_multi<T>(1, &grad, &n, found_inf, inv_scale, stream);
}

}  // namespace paralab::kernels::gpu
