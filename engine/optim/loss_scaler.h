// Dynamic loss scaling for fp16 mixed precision (torch.cuda.amp.GradScaler's policy): the loss
// gradient is multiplied by the scale before backward, so that small gradients survive fp16;
// before the optimizer step the gradients are unscaled and checked for inf/NaN on the GPU. A step
// whose gradients overflowed is skipped and the scale halves; after `growth_interval` clean
// steps in a row it doubles. The decision is read back to the host (one small copy), which the
// step's loss read already waits for.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/nn/layer.h"

namespace paralab::optim {

class LossScaler {
public:
    explicit LossScaler(double initial_scale = 65536.0, double growth_factor = 2.0,
                        double backoff_factor = 0.5, int64_t growth_interval = 2000);

    double scale() const { return m_scale; }
    // grads *= 1 / scale. True when every gradient was finite (the step may run); false when
    // one overflowed: the scale backs off and the caller skips the step. The gradients must be
    // on one GPU (f32).
    bool unscale(const std::vector<nn::Param*>& params);
    // The same for one of several ranks that each hold part of the gradients: `agree` gets the
    // device flag (f32 on `device`, nonzero when a gradient here overflowed) before it is read
    // back, and combines it with the other ranks' (an all-reduce max), so that all skip or step
    // together and their scales stay equal. `params` may be empty (a rank without parameters
    // still takes part); they must be on `device`.
    bool unscale(const std::vector<nn::Param*>& params, Device& device,
                 const std::function<void(float* found_inf)>& agree);
    // The policy alone, for gradients checked elsewhere (param_server's workers unscale and
    // check their own; the server decides): an overflow backs off, clean steps grow the scale.
    void update(bool found_inf);
    int64_t skipped_steps() const { return m_skipped; }

    // The policy's position, for checkpoints.
    struct State {
        double scale = 0;
        int64_t clean = 0, skipped = 0;
    };
    State state() const { return {m_scale, m_clean, m_skipped}; }
    void load_state(const State& s) {
        m_scale = s.scale;
        m_clean = s.clean;
        m_skipped = s.skipped;
    }

private:
    double m_scale, m_growth, m_backoff;
    int64_t m_interval, m_clean = 0, m_skipped = 0;
};

// The check alone: grads *= 1 / scale on `device` (f32, one GPU); true when one of them was not
// finite. `agree` as in LossScaler::unscale. No policy: LossScaler::unscale adds it.
bool unscale_checking(const std::vector<nn::Param*>& params, Device& device, double scale,
                      const std::function<void(float* found_inf)>& agree = {});

}  // namespace paralab::optim
