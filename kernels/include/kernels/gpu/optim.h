// Fused optimizer steps on the GPU: the update formulas of kernels/cpu/optim.h (torch.optim
// 1.13's, hyper-parameters rounded to T once on the host, the same expression order), for one
// tensor or for many in one launch (every parameter of a model per step, the way apex's
// multi_tensor_apply does it). The _multi forms take host arrays of `count` device pointers and
// element counts; list k is parameter k with its gradient and state. On the first step of SGD
// with momentum, buf is written, not read. T = float or double; `stream` is an opaque
// cudaStream_t. Results match the CPU to a few ulps (the GPU contracts a*b + c into one FMA).
#pragma once

#include <cstdint>

namespace paralab::kernels::gpu {

// p, g: [n]. p -= lr * (g + wd*p).
template <class T>
void sgd_update(int64_t n, T* p, const T* g, double lr, double weight_decay, void* stream);
template <class T>
void sgd_update_multi(int64_t count, T* const* p, const T* const* g, const int64_t* sizes,
                      double lr, double weight_decay, void* stream);

// p, g, buf: [n]. d = g + wd*p; buf = first_step ? d : momentum*buf + d;
// p -= lr * (nesterov ? d + momentum*buf : buf).
template <class T>
void sgd_momentum_update(int64_t n, T* p, const T* g, T* buf, double lr, double momentum,
                         double weight_decay, bool nesterov, bool first_step, void* stream);
template <class T>
void sgd_momentum_update_multi(int64_t count, T* const* p, const T* const* g, T* const* buf,
                               const int64_t* sizes, double lr, double momentum,
                               double weight_decay, bool nesterov, bool first_step, void* stream);

// p, g, m, v: [n]. Adam with L2 weight decay, step t >= 1: d = g + wd*p; m = b1*m + (1-b1)*d;
// v = b2*v + (1-b2)*d^2; p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
template <class T>
void adam_update(int64_t n, T* p, const T* g, T* m, T* v, double lr, double beta1, double beta2,
                 double eps, double weight_decay, int64_t step, void* stream);
template <class T>
void adam_update_multi(int64_t count, T* const* p, const T* const* g, T* const* m, T* const* v,
                       const int64_t* sizes, double lr, double beta1, double beta2, double eps,
                       double weight_decay, int64_t step, void* stream);

// AdamW: p *= 1 - lr*wd (decoupled, before the moments), then Adam with d = g.
template <class T>
void adamw_update(int64_t n, T* p, const T* g, T* m, T* v, double lr, double beta1, double beta2,
                  double eps, double weight_decay, int64_t step, void* stream);
template <class T>
void adamw_update_multi(int64_t count, T* const* p, const T* const* g, T* const* m, T* const* v,
                        const int64_t* sizes, double lr, double beta1, double beta2, double eps,
                        double weight_decay, int64_t step, void* stream);

}  // namespace paralab::kernels::gpu
