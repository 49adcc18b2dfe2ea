// Optimizers: SGD (momentum, Nesterov, weight decay), Adam, AdamW — torch.optim's semantics.
// State (momentum buffers, moments) lives on the parameter's device under
// MemCategory::optimizer_state, so that memory pictures show it (ZeRO shards exactly this).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/nn/layer.h"

namespace paralab::optim {

struct OptimizerConfig {
    std::string type = "sgd";  // sgd | adam | adamw
    double lr = 0.01;
    double momentum = 0.0;     // sgd
    bool nesterov = false;     // sgd
    double weight_decay = 0.0; // L2 for sgd and adam, decoupled for adamw
    double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // adam, adamw
};

class Optimizer {
public:
    explicit Optimizer(OptimizerConfig config) : m_config(std::move(config)) {}
    virtual ~Optimizer();

    // One update of `params` with learning rate `lr` (the schedule's value for this step).
    // The same parameters, in the same order, on every call: state is kept per position.
    void step(const std::vector<nn::Param*>& params, double lr);

    int64_t steps_taken() const { return m_steps; }
    int64_t state_bytes() const;
    // One list of state tensors per parameter (empty before the first step).
    const std::vector<std::vector<Tensor>>& state() const { return m_state; }
    const OptimizerConfig& config() const { return m_config; }

protected:
    // m_steps is already the 1-based number of this step; m_state has one entry per param.
    virtual void step_impl(const std::vector<nn::Param*>& params, double lr) = 0;
    // State tensors for a parameter, allocated (zeroed) on its device on the first step.
    virtual int state_tensors_per_param() const = 0;

    OptimizerConfig m_config;
    int64_t m_steps = 0;
    std::vector<std::vector<Tensor>> m_state;
};

class Sgd final : public Optimizer {
public:
    using Optimizer::Optimizer;

protected:
    void step_impl(const std::vector<nn::Param*>& params, double lr) override;
    int state_tensors_per_param() const override { return m_config.momentum > 0 ? 1 : 0; }
};

// Adam with L2 weight decay, or AdamW (decoupled) when config.type == "adamw".
class Adam final : public Optimizer {
public:
    using Optimizer::Optimizer;

protected:
    void step_impl(const std::vector<nn::Param*>& params, double lr) override;
    int state_tensors_per_param() const override { return 2; }
};

// Validates (ConfigError naming the field, e.g. "optimizer.lr: expected a positive number,
// got -1") and makes the optimizer.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config);

}  // namespace paralab::optim
