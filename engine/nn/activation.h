// Elementwise activations: relu, gelu (the exact erf form, PyTorch's default), tanh, sigmoid.
// Any input shape; the output has the input's shape.
#pragma once

#include <string>

#include "engine/nn/layer.h"

namespace paralab::nn {

enum class ActivationKind { relu, gelu, tanh, sigmoid };

// "relu", "gelu", "tanh", "sigmoid": the layer type and the experiment file's name.
std::string activation_name(ActivationKind kind);

class Activation : public Layer {
public:
    explicit Activation(ActivationKind kind);
    bool runs_on_gpu() const override { return true; }
    ActivationKind kind() const { return m_kind; }

protected:
    Shape build_impl(const Shape& input) override;
    Tensor forward_impl(const Tensor& x, Mode mode) override;
    Tensor backward_impl(const Tensor& dy) override;
    int64_t flops_impl() const override;
    void release_saved_impl() override { m_saved = Tensor(); }
    int64_t activations_impl() override { return output_shape().numel(); }  // input or output: one size

private:
    // relu and gelu differentiate from their input, tanh and sigmoid from their output
    // (cheaper, and the output is already there).
    bool saves_output() const;

    ActivationKind m_kind;
    Tensor m_saved;  // the last forward's input or output, released by backward
};

}  // namespace paralab::nn
