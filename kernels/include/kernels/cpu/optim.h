// Fused optimizer updates and the gradient-norm pieces of clipping: one pass over a parameter,
// its gradient and its state. Semantics are torch.optim's (1.13): hyper-parameters arrive in
// double and are rounded to T once, as torch turns a Python float into the tensor's scalar
// type, so an f32 run follows torch's f32 run to a few ulps. All arrays hold n contiguous
// elements; T = float or double. Deterministic: parallel loops split independent elements,
// and the one reduction sums fixed-size blocks in a fixed order whatever the thread count.
#pragma once

#include <cstdint>

namespace paralab::kernels::cpu {

// p, g: [n]. Plain SGD: p -= lr * (g + wd*p).
template <class T>
void sgd_update(int64_t n, T* p, const T* g, double lr, double weight_decay);

// p, g, buf: [n]. SGD with momentum (dampening 0):
//   d = g + wd*p;  buf = first_step ? d : momentum*buf + d;
//   p -= lr * (nesterov ? d + momentum*buf : buf).
// On the first step buf is written, not read (it may hold anything).
template <class T>
void sgd_momentum_update(int64_t n, T* p, const T* g, T* buf, double lr, double momentum,
                         double weight_decay, bool nesterov, bool first_step);

// p, g, m, v: [n]. Adam with L2 weight decay, step t >= 1:
//   d = g + wd*p;  m = b1*m + (1-b1)*d;  v = b2*v + (1-b2)*d^2;
//   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
template <class T>
void adam_update(int64_t n, T* p, const T* g, T* m, T* v, double lr, double beta1, double beta2,
                 double eps, double weight_decay, int64_t step);

// p, g, m, v: [n]. AdamW: p *= 1 - lr*wd (decoupled decay, before the moments), then the
// Adam update above with d = g.
template <class T>
void adamw_update(int64_t n, T* p, const T* g, T* m, T* v, double lr, double beta1, double beta2,
                  double eps, double weight_decay, int64_t step);

// x: [n] -> sum of x[i]^2, accumulated in double (a gradient's contribution to the global norm).
// NaN or inf in x gives a non-finite sum.
template <class T>
double sum_of_squares(int64_t n, const T* x);

// x: [n]. x *= factor (factor rounded to T).
template <class T>
void scale_in_place(int64_t n, T* x, double factor);

}  // namespace paralab::kernels::cpu
