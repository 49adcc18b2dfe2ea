// Adam and AdamW as torch.optim.Adam / AdamW (1.13, amsgrad off). Adam's weight decay is L2
// (added to the gradient, so it passes through the moments); AdamW's is decoupled
// (p *= 1 - lr*wd before the update). State per parameter: "exp_avg", "exp_avg_sq".
#pragma once

#include "engine/optim/optimizer.h"

namespace paralab::optim {

class Adam final : public Optimizer {
public:
    // config.type must be "adam" or "adamw"; throws ConfigError for values out of range.
    explicit Adam(OptimizerConfig config);

    // True for AdamW.
    bool decoupled_weight_decay() const { return m_decoupled; }

protected:
    void step_impl(const std::vector<nn::Param*>& params, double lr) override;
    std::vector<std::string> state_names_impl() const override { return {"exp_avg", "exp_avg_sq"}; }

private:
    bool m_decoupled;
};

}  // namespace paralab::optim
