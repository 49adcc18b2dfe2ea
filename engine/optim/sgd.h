// SGD as torch.optim.SGD (1.13) with dampening 0: optional L2 weight decay, momentum and
// Nesterov momentum. State: one "momentum_buffer" per parameter when momentum > 0, none
// otherwise.
#pragma once

#include "engine/optim/optimizer.h"

namespace paralab::optim {

class Sgd final : public Optimizer {
public:
    // config.type must be "sgd"; throws ConfigError for values out of range.
    explicit Sgd(OptimizerConfig config);

protected:
    void step_impl(const std::vector<nn::Param*>& params, double lr) override;
    std::vector<std::string> state_names_impl() const override;
};

}  // namespace paralab::optim
