// Optimizers with torch.optim's semantics (1.13): SGD (sgd.h) and Adam/AdamW (adam.h) behind
// one interface. State (momentum buffers, moments) is allocated on the first step on each
// parameter's device under MemCategory::optimizer_state, so that memory pictures show it;
// a ZeRO strategy gives each device an optimizer over its own subset of the parameters.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/nn/layer.h"

namespace paralab::optim {

// The experiment file's "optimizer" section (the parser fills in per-type defaults, e.g.
// AdamW's weight_decay 0.01).
struct OptimizerConfig {
    std::string type = "sgd";   // sgd | adam | adamw
    double lr = 0.01;
    double momentum = 0.0;      // sgd
    bool nesterov = false;      // sgd
    double weight_decay = 0.0;  // L2 for sgd and adam, decoupled for adamw
    double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // adam, adamw
};

// Throws ConfigError naming the field: "optimizer.lr: expected a positive number, got -1".
void validate_optimizer_config(const OptimizerConfig& config);

class Optimizer {
public:
    virtual ~Optimizer();
    Optimizer(const Optimizer&) = delete;
    Optimizer& operator=(const Optimizer&) = delete;

    // One update of `params` with learning rate `lr` (the schedule's value for this step; the
    // config's lr is only the base). State is kept by position, so every call passes the same
    // parameters in the same order: the same count, shapes and dtypes (f32 or f64), each with
    // a gradient of its shape and dtype. Throws Error before changing anything otherwise.
    void step(const std::vector<nn::Param*>& params, double lr);

    int64_t steps_taken() const { return m_steps; }
    // Bytes of state held (the tensors' sizes, without the allocator's rounding).
    int64_t state_bytes() const;

    // State for checkpoints and tests: one list per parameter, in the order of state_names()
    // (torch's state_dict keys: "momentum_buffer"; "exp_avg", "exp_avg_sq"). Empty lists
    // before the first step, and for SGD without momentum.
    const std::vector<std::vector<Tensor>>& state() const { return m_state; }
    std::vector<std::string> state_names() const { return state_names_impl(); }
    // Restores a checkpoint: copies `state` (as state() returns it; dtype converted) into new
    // tensors on each parameter's device and sets steps_taken. Throws Error when the counts or
    // shapes do not fit `params`.
    void load_state(const std::vector<nn::Param*>& params,
                    const std::vector<std::vector<Tensor>>& state, int64_t steps_taken);

    const OptimizerConfig& config() const { return m_config; }

protected:
    // Validates `config` (ConfigError) so that every optimizer is built from sane values.
    explicit Optimizer(OptimizerConfig config);

    // Called with checked params, m_state allocated (one list per parameter, state_names()
    // long) and m_steps already counting this step (1 on the first).
    virtual void step_impl(const std::vector<nn::Param*>& params, double lr) = 0;
    virtual std::vector<std::string> state_names_impl() const = 0;

    OptimizerConfig m_config;
    int64_t m_steps = 0;
    std::vector<std::vector<Tensor>> m_state;

private:
    void check_params(const std::vector<nn::Param*>& params) const;
    void remember_layout(const std::vector<nn::Param*>& params);

    // The parameters' shapes and dtypes at the first step (or load_state). A ZeRO shard may
    // hold no parameters at all, so an empty list is a layout too.
    bool m_layout_known = false;
    std::vector<Shape> m_shapes;
    std::vector<DType> m_dtypes;
};

// Validates (ConfigError naming the field, including "optimizer.type" for an unknown type)
// and makes the optimizer.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config);

}  // namespace paralab::optim
