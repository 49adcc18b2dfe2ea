// Fused optimizer updates: one pass over a parameter, its gradient and its state.
// Semantics are torch.optim's (1.13) for SGD, Adam and AdamW.
#pragma once

#include <cstdint>

namespace paralab::kernels::cpu {

// p, g, buf: [n]. g' = g + wd*p; buf = first ? g' : momentum*buf + g' (no dampening);
// step direction = nesterov ? g' + momentum*buf : buf; p -= lr * direction.
// momentum == 0: plain SGD and `buf` may be null.
template <class T>
void sgd_update(int64_t n, T* p, const T* g, T* buf, double lr, double momentum,
                double weight_decay, bool nesterov, bool first_step);

// p, g, m, v: [n]. decoupled (AdamW): p *= 1 - lr*wd, else g' = g + wd*p (L2);
// m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2; p -= lr * (m/bc1) / (sqrt(v/bc2) + eps),
// with bc1 = 1 - b1^t, bc2 = 1 - b2^t for step t (1-based).
template <class T>
void adam_update(int64_t n, T* p, const T* g, T* m, T* v, double lr, double beta1, double beta2,
                 double eps, double weight_decay, bool decoupled, int64_t step);

}  // namespace paralab::kernels::cpu
