// Composite layers: Sequential (a chain), Residual (input + body(input), with a projection when
// the body changes the shape), and Flatten.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "engine/nn/layer.h"

namespace paralab::nn {

class Sequential : public Layer {
public:
    explicit Sequential(std::vector<std::unique_ptr<Layer>> layers, std::string type = "sequential");

    size_t size() const { return m_layers.size(); }
    Layer& at(size_t i) { return *m_layers[i]; }
    std::vector<Layer*> children() override;
    // Full recomputation (nn/recompute.h): in training, each layer but the last keeps only its
    // input from forward to backward, and runs its forward again just before its backward.
    void set_recompute_layers(bool on) { m_recompute = on; }
    // With recomputation on, runs layer i's forward again from its kept input (once; a no-op
    // otherwise). Backward calls it before each layer's backward; so must a caller that walks
    // the layers' backward itself.
    void recompute_before_backward(size_t i);
    // Called with a layer's index just before and just after its forward (not a recomputation's;
    // `after` once what it keeps is settled): a strategy that holds a layer's parameters only
    // while they are used (zero stage 3) gathers and frees them here. Empty: none.
    void set_forward_hooks(std::function<void(size_t)> before, std::function<void(size_t)> after) {
        m_before_forward = std::move(before);
        m_after_forward = std::move(after);
    }
    bool runs_on_gpu() const override { return true; }

protected:
    Shape build_impl(const Shape& input) override;
    void reset_parameters_impl(Rng& rng) override;
    Tensor forward_impl(const Tensor& x, Mode mode) override;
    Tensor backward_impl(const Tensor& dy) override;
    int64_t flops_impl() const override;
    int64_t activations_impl() override;
    void set_needs_input_grad_impl(bool needs) override;

private:
    std::vector<std::unique_ptr<Layer>> m_layers;
    bool m_recompute = false;
    Mode m_mode = Mode::train;
    std::vector<Tensor> m_inputs;  // with m_recompute: each layer's input from the last forward
    std::function<void(size_t)> m_before_forward, m_after_forward;
};

// y = x + body(x) when body keeps the shape; y = projection(x) + body(x) otherwise, where the
// projection is a 1x1 convolution (stride from the spatial ratio, no bias, as in ResNet) for
// [C, H, W] inputs and a linear map of the last dimension for everything else.
class Residual : public Layer {
public:
    explicit Residual(std::vector<std::unique_ptr<Layer>> body);
    bool has_projection() const { return m_projection != nullptr; }
    std::vector<Layer*> children() override;
    // The sum has GPU kernels; the body's layers and the projection are checked as they build.
    bool runs_on_gpu() const override { return true; }

protected:
    Shape build_impl(const Shape& input) override;
    void reset_parameters_impl(Rng& rng) override;
    Tensor forward_impl(const Tensor& x, Mode mode) override;
    Tensor backward_impl(const Tensor& dy) override;
    int64_t flops_impl() const override;
    int64_t activations_impl() override;
    void set_needs_input_grad_impl(bool needs) override;

private:
    std::unique_ptr<Sequential> m_body;
    std::unique_ptr<Layer> m_projection;
};

// [d0, d1, ...] -> [d0 * d1 * ...]; shares storage with its input.
class Flatten : public Layer {
public:
    Flatten() : Layer("flatten") {}
    bool runs_on_gpu() const override { return true; }

protected:
    int64_t activations_impl() override { return 0; }  // a view of its input
    Shape build_impl(const Shape& input) override;
    Tensor forward_impl(const Tensor& x, Mode mode) override;
    Tensor backward_impl(const Tensor& dy) override;
};

}  // namespace paralab::nn
