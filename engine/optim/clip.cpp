#include "engine/optim/clip.h"

#include <cmath>

namespace paralab::optim {

double grad_sq_norm(const std::vector<nn::Param*>& params) {
    double total = 0;
    for (const nn::Param* p : params) {
        dispatch_float(p->grad.dtype(), [&]<class T>() {
            const T* g = p->grad.data<T>();
            double s = 0;
            for (int64_t i = 0, n = p->grad.numel(); i < n; ++i) s += static_cast<double>(g[i]) * g[i];
            total += s;
        });
    }
    return total;
}

void scale_grads(const std::vector<nn::Param*>& params, double factor) {
    for (const nn::Param* p : params) {
        dispatch_float(p->grad.dtype(), [&]<class T>() {
            T* g = p->grad.data<T>();
            const T f = static_cast<T>(factor);
            for (int64_t i = 0, n = p->grad.numel(); i < n; ++i) g[i] *= f;
        });
    }
}

double clip_factor(double total_norm, double max_norm) {
    if (!std::isfinite(total_norm) || total_norm <= max_norm) return 1.0;
    return max_norm / (total_norm + 1e-6);
}

double global_grad_norm(const std::vector<nn::Param*>& params) {
    return std::sqrt(grad_sq_norm(params));
}

double clip_grad_norm(const std::vector<nn::Param*>& params, double max_norm) {
    const double norm = global_grad_norm(params);
    const double f = clip_factor(norm, max_norm);
    if (f != 1.0) scale_grads(params, f);
    return norm;
}

}  // namespace paralab::optim
