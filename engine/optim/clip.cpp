#include "engine/optim/clip.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <vector>

#include <kernels/cpu/optim.h>
#include <kernels/gpu/reduce.h>

#include "engine/device/gpu_values.h"

namespace paralab::optim {

namespace {

const Tensor& checked_grad(const nn::Param& p) {
    if (!p.grad.defined())
        throw Error("gradient clipping: parameter '" + p.name + "' has no gradient");
    return p.grad;
}

}  // namespace

double grad_sq_norm(const std::vector<nn::Param*>& params) {
    // Parameters are added in order, each one's sum computed in fixed blocks: the same total
    // whatever the thread count.
    double total = 0;
    if (!params.empty() && checked_grad(*params.front()).on_gpu()) {
        // One pass over every gradient on the GPU (the optimizer's check holds them to one
        // device and dtype), the sum read back.
        const Tensor& g0 = params.front()->grad;
        gpu::DeviceDoubles sq = gpu::device_doubles(g0.device(), 1);
        dispatch_float(g0.dtype(), [&]<class T>() {
            std::vector<const T*> xs;
            std::vector<int64_t> sizes;
            for (const nn::Param* p : params) {
                xs.push_back(checked_grad(*p).data<T>());
                sizes.push_back(p->grad.numel());
            }
            kernels::gpu::sum_of_squares_multi<T>(static_cast<int64_t>(xs.size()), xs.data(),
                                                  sizes.data(), sq.result(), sq.scratch(), g0.queue());
        });
        return gpu::read_double(sq.result(), g0.queue());
    }
    for (const nn::Param* p : params) {
        const Tensor& g = checked_grad(*p);
        total += dispatch_float(g.dtype(), [&]<class T>() {
            return kernels::cpu::sum_of_squares<T>(g.numel(), g.data<T>());
        });
    }
    return total;
}

double global_grad_norm(const std::vector<nn::Param*>& params) {
    return std::sqrt(grad_sq_norm(params));
}

void scale_in_place(const Tensor& t, double factor) {
    dispatch_float(t.dtype(), [&]<class T>() {
        if (void* q = t.queue()) kernels::gpu::scale_in_place<T>(t.numel(), t.data<T>(), factor, q);
        else kernels::cpu::scale_in_place<T>(t.numel(), t.data<T>(), factor);
    });
}

void scale_grads(const std::vector<nn::Param*>& params, double factor) {
    for (const nn::Param* p : params) scale_in_place(checked_grad(*p), factor);
}

double clip_coefficient(double total_norm, double max_norm) {
    if (!(max_norm >= 0) || !std::isfinite(max_norm)) {
        std::ostringstream s;
        s << "gradient clipping: max_norm must be a finite number >= 0, got " << max_norm;
        throw Error(s.str());
    }
    if (!std::isfinite(total_norm)) return 1.0;
    return std::min(1.0, max_norm / (total_norm + 1e-6));
}

double clip_grads_with_norm(const std::vector<nn::Param*>& params, double total_norm,
                            double max_norm) {
    const double coef = clip_coefficient(total_norm, max_norm);
    if (coef < 1.0) scale_grads(params, coef);
    return coef;
}

double clip_grad_norm(const std::vector<nn::Param*>& params, double max_norm) {
    const double norm = global_grad_norm(params);
    clip_grads_with_norm(params, norm, max_norm);
    return norm;
}

}  // namespace paralab::optim
