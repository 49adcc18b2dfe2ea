#include <kernels/cpu/optim.h>

#include <cmath>

namespace paralab::kernels::cpu {

template <class T>
void sgd_update(int64_t n, T* p, const T* g, T* buf, double lr, double momentum,
                double weight_decay, bool nesterov, bool first_step) {
    const T wd = static_cast<T>(weight_decay), mu = static_cast<T>(momentum), a = static_cast<T>(lr);
    if (momentum == 0.0) {
        for (int64_t i = 0; i < n; ++i) p[i] -= a * (g[i] + wd * p[i]);
        return;
    }
    for (int64_t i = 0; i < n; ++i) {
        const T gi = g[i] + wd * p[i];
        const T b = first_step ? gi : mu * buf[i] + gi;
        buf[i] = b;
        p[i] -= a * (nesterov ? gi + mu * b : b);
    }
}

template <class T>
void adam_update(int64_t n, T* p, const T* g, T* m, T* v, double lr, double beta1, double beta2,
                 double eps, double weight_decay, bool decoupled, int64_t step) {
    const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(step));
    const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(step));
    // torch: p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
    const T step_size = static_cast<T>(lr / bc1);
    const T inv_sqrt_bc2 = static_cast<T>(1.0 / std::sqrt(bc2));
    const T b1 = static_cast<T>(beta1), b2 = static_cast<T>(beta2), e = static_cast<T>(eps);
    const T wd = static_cast<T>(weight_decay);
    const T decay = static_cast<T>(1.0 - lr * weight_decay);
    for (int64_t i = 0; i < n; ++i) {
        T gi = g[i];
        if (decoupled) p[i] *= decay;
        else gi += wd * p[i];
        m[i] = b1 * m[i] + (T(1) - b1) * gi;
        v[i] = b2 * v[i] + (T(1) - b2) * gi * gi;
        p[i] -= step_size * m[i] / (std::sqrt(v[i]) * inv_sqrt_bc2 + e);
    }
}

#define PARALAB_INSTANTIATE(T)                                                                 \
    template void sgd_update<T>(int64_t, T*, const T*, T*, double, double, double, bool, bool); \
    template void adam_update<T>(int64_t, T*, const T*, T*, T*, double, double, double, double, \
                                 double, bool, int64_t);
PARALAB_INSTANTIATE(float)
PARALAB_INSTANTIATE(double)
#undef PARALAB_INSTANTIATE

}  // namespace paralab::kernels::cpu
