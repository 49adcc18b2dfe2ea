// Fully connected layer over the last dimension, like torch.nn.Linear: [..., in] -> [..., out].
#pragma once

#include <cstdint>

#include "engine/nn/layer.h"

namespace paralab::nn {

class Linear : public Layer {
public:
    // Throws ConfigError when out < 1.
    Linear(int64_t out, bool bias = true);
    bool runs_on_gpu() const override { return true; }
    // Before build only: the output width (a layer whose width follows its input's).
    void set_out(int64_t out);

protected:
    Shape build_impl(const Shape& input) override;
    void reset_parameters_impl(Rng& rng) override;
    Tensor forward_impl(const Tensor& x, Mode mode) override;
    Tensor backward_impl(const Tensor& dy) override;
    int64_t flops_impl() const override;

private:
    int64_t m_out;
    bool m_has_bias;
    int64_t m_in = 0;
    Param* m_weight = nullptr;  // [out, in]
    Param* m_bias = nullptr;    // [out], null without bias
    Tensor m_x;                 // the last forward's input, released by backward
};

}  // namespace paralab::nn
