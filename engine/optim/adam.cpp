#include "engine/optim/adam.h"

#include <kernels/cpu/optim.h>
#include <kernels/gpu/optim.h>

#include "engine/optim/gpu_lists.h"

namespace paralab::optim {

Adam::Adam(OptimizerConfig config)
    : Optimizer(std::move(config)), m_decoupled(m_config.type == "adamw") {
    if (m_config.type != "adam" && m_config.type != "adamw")
        throw ConfigError("optimizer.type: an Adam optimizer made for type '" + m_config.type + "'");
}

// Every parameter: value, grad, exp_avg and exp_avg_sq of one shape, one fused pass. The bias
// corrections use the optimizer's step count, which is every parameter's (all are updated on
// every step, as in torch when every parameter has a gradient).
void Adam::step_impl(const std::vector<nn::Param*>& params, double lr) {
    const OptimizerConfig& c = m_config;
    if (void* q = gpu_queue(params)) {
        dispatch_float(params.front()->value.dtype(), [&]<class T>() {
            GpuLists<T> l(params, m_state);
            if (m_decoupled)
                kernels::gpu::adamw_update_multi<T>(l.count(), l.p.data(), l.g.data(), l.s0.data(),
                                                    l.s1.data(), l.sizes.data(), lr, c.beta1, c.beta2,
                                                    c.eps, c.weight_decay, m_steps, q);
            else
                kernels::gpu::adam_update_multi<T>(l.count(), l.p.data(), l.g.data(), l.s0.data(),
                                                   l.s1.data(), l.sizes.data(), lr, c.beta1, c.beta2,
                                                   c.eps, c.weight_decay, m_steps, q);
        });
        return;
    }
    for (size_t i = 0; i < params.size(); ++i) {
        nn::Param& p = *params[i];
        dispatch_float(p.value.dtype(), [&]<class T>() {
            T* m = m_state[i][0].data<T>();
            T* v = m_state[i][1].data<T>();
            if (m_decoupled)
                kernels::cpu::adamw_update<T>(p.value.numel(), p.value.data<T>(), p.grad.data<T>(),
                                              m, v, lr, c.beta1, c.beta2, c.eps, c.weight_decay,
                                              m_steps);
            else
                kernels::cpu::adam_update<T>(p.value.numel(), p.value.data<T>(), p.grad.data<T>(),
                                             m, v, lr, c.beta1, c.beta2, c.eps, c.weight_decay,
                                             m_steps);
        });
    }
}

}  // namespace paralab::optim
