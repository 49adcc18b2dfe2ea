#include "engine/optim/sgd.h"

#include <kernels/cpu/optim.h>
#include <kernels/gpu/optim.h>

#include "engine/optim/gpu_lists.h"

namespace paralab::optim {

Sgd::Sgd(OptimizerConfig config) : Optimizer(std::move(config)) {
    if (m_config.type != "sgd")
        throw ConfigError("optimizer.type: an SGD optimizer made for type '" + m_config.type + "'");
}

std::vector<std::string> Sgd::state_names_impl() const {
    if (m_config.momentum > 0) return {"momentum_buffer"};
    return {};
}

// Every parameter: value, grad and buffer of one shape, updated by one fused pass.
void Sgd::step_impl(const std::vector<nn::Param*>& params, double lr) {
    const OptimizerConfig& c = m_config;
    // torch creates the buffer from the first gradient (buf = d), then accumulates.
    const bool first_step = m_steps == 1;
    if (void* q = gpu_queue(params)) {
        // Every parameter in one launch (the lists are host arrays of device pointers).
        dispatch_float(params.front()->value.dtype(), [&]<class T>() {
            GpuLists<T> l(params, m_state);
            if (c.momentum > 0)
                kernels::gpu::sgd_momentum_update_multi<T>(l.count(), l.p.data(), l.g.data(), l.s0.data(),
                                                           l.sizes.data(), lr, c.momentum, c.weight_decay,
                                                           c.nesterov, first_step, q);
            else
                kernels::gpu::sgd_update_multi<T>(l.count(), l.p.data(), l.g.data(), l.sizes.data(), lr,
                                                  c.weight_decay, q);
        });
        return;
    }
    for (size_t i = 0; i < params.size(); ++i) {
        nn::Param& p = *params[i];
        dispatch_float(p.value.dtype(), [&]<class T>() {
            if (c.momentum > 0)
                kernels::cpu::sgd_momentum_update<T>(p.value.numel(), p.value.data<T>(),
                                                     p.grad.data<T>(), m_state[i][0].data<T>(),
                                                     lr, c.momentum, c.weight_decay, c.nesterov,
                                                     first_step);
            else
                kernels::cpu::sgd_update<T>(p.value.numel(), p.value.data<T>(), p.grad.data<T>(),
                                            lr, c.weight_decay);
        });
    }
}

}  // namespace paralab::optim
