#include "engine/optim/optimizer.h"

#include <cmath>
#include <sstream>

#include <kernels/cpu/optim.h>

namespace paralab::optim {

Optimizer::~Optimizer() = default;

void Optimizer::step(const std::vector<nn::Param*>& params, double lr) {
    if (!(lr >= 0) || !std::isfinite(lr))
        throw Error("optimizer step with an invalid learning rate " + std::to_string(lr));
    if (m_state.empty()) {
        for (nn::Param* p : params) {
            std::vector<Tensor> s;
            for (int k = 0; k < state_tensors_per_param(); ++k)
                s.push_back(Tensor::zeros(p->value.shape(), p->value.dtype(), p->value.device(),
                                          MemCategory::optimizer_state));
            m_state.push_back(std::move(s));
        }
    }
    PARALAB_CHECK(m_state.size() == params.size(),
                  "the optimizer was given " + std::to_string(params.size()) +
                      " parameters, but holds state for " + std::to_string(m_state.size()));
    for (size_t i = 0; i < params.size(); ++i) {
        const nn::Param& p = *params[i];
        PARALAB_CHECK(p.grad.defined() && p.grad.shape() == p.value.shape(),
                      "parameter " + p.name + " has no gradient of its shape");
        PARALAB_CHECK(m_state[i].empty() || m_state[i][0].shape() == p.value.shape(),
                      "parameter " + std::to_string(i) + " (" + p.name + ") changed shape");
    }
    ++m_steps;
    step_impl(params, lr);
}

int64_t Optimizer::state_bytes() const {
    int64_t n = 0;
    for (const auto& s : m_state)
        for (const auto& t : s) n += static_cast<int64_t>(t.nbytes());
    return n;
}

void Sgd::step_impl(const std::vector<nn::Param*>& params, double lr) {
    for (size_t i = 0; i < params.size(); ++i) {
        nn::Param& p = *params[i];
        dispatch_float(p.value.dtype(), [&]<class T>() {
            T* buf = m_state[i].empty() ? nullptr : m_state[i][0].data<T>();
            kernels::cpu::sgd_update<T>(p.value.numel(), p.value.data<T>(), p.grad.data<T>(), buf, lr,
                                        m_config.momentum, m_config.weight_decay, m_config.nesterov,
                                        m_steps == 1);
        });
    }
}

void Adam::step_impl(const std::vector<nn::Param*>& params, double lr) {
    const bool decoupled = m_config.type == "adamw";
    for (size_t i = 0; i < params.size(); ++i) {
        nn::Param& p = *params[i];
        dispatch_float(p.value.dtype(), [&]<class T>() {
            kernels::cpu::adam_update<T>(p.value.numel(), p.value.data<T>(), p.grad.data<T>(),
                                         m_state[i][0].data<T>(), m_state[i][1].data<T>(), lr,
                                         m_config.beta1, m_config.beta2, m_config.eps,
                                         m_config.weight_decay, decoupled, m_steps);
        });
    }
}

namespace {

std::string number_text(double v) {
    std::ostringstream s;
    s << v;
    return s.str();
}

void require(bool ok, const std::string& field, const std::string& expected, double got) {
    if (!ok)
        throw ConfigError("optimizer." + field + ": expected " + expected + ", got " + number_text(got));
}

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& c) {
    require(c.lr > 0 && std::isfinite(c.lr), "lr", "a positive number", c.lr);
    require(c.weight_decay >= 0 && std::isfinite(c.weight_decay), "weight_decay",
            "a non-negative number", c.weight_decay);
    if (c.type == "sgd") {
        require(c.momentum >= 0 && c.momentum < 1, "momentum", "a number in [0, 1)", c.momentum);
        if (c.nesterov && c.momentum == 0)
            throw ConfigError("optimizer.nesterov: needs a momentum greater than 0");
        return std::make_unique<Sgd>(c);
    }
    if (c.type == "adam" || c.type == "adamw") {
        require(c.beta1 >= 0 && c.beta1 < 1, "betas[0]", "a number in [0, 1)", c.beta1);
        require(c.beta2 >= 0 && c.beta2 < 1, "betas[1]", "a number in [0, 1)", c.beta2);
        require(c.eps > 0, "eps", "a positive number", c.eps);
        return std::make_unique<Adam>(c);
    }
    throw ConfigError("optimizer.type: unknown optimizer '" + c.type + "'; expected sgd, adam or adamw");
}

}  // namespace paralab::optim
