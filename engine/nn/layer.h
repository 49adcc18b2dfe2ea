// The layer interface. Layers have an explicit forward and backward; a layer keeps what its
// backward needs from the last forward. Public non-virtual entry points check their
// arguments, then call the virtual *_impl, so every layer gets the same checks.
//
// Shapes: a layer is built for a per-sample input shape (no batch extent, e.g. [C, H, W]);
// forward takes [B, ...input] and returns [B, ...output]. The same code runs in f32 (training)
// and f64 (the reference the gradient checks use).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor/tensor.h"
#include "engine/util/rng.h"

namespace paralab {
class Device;
}

namespace paralab::nn {

enum class Mode { train, eval };

struct Param {
    std::string name;  // "weight", "bias", "weight_ih_l0", ...
    Tensor value;      // MemCategory::parameters
    Tensor grad;       // MemCategory::gradients, same shape; backward accumulates (+=) into it
};

class Layer {
public:
    explicit Layer(std::string type) : m_type(std::move(type)), m_label(m_type) {}
    virtual ~Layer();
    Layer(const Layer&) = delete;
    Layer& operator=(const Layer&) = delete;

    const std::string& type() const { return m_type; }
    // How errors name this layer: "model.layers[3] (conv2d)", and the JSON path of its spec
    // ("model.layers[3]"; "" when unknown), which errors carry as data. Set by the owner.
    const std::string& label() const { return m_label; }
    const std::string& path() const { return m_path; }
    void set_label(std::string label, std::string path = {}) {
        m_label = std::move(label);
        m_path = std::move(path);
    }

    // Infers the output shape from the per-sample input shape and creates the parameters
    // (zeroed; call reset_parameters) on `device` in `dtype`. Throws ShapeError naming the
    // layer and both the expected and the actual shape.
    Shape build(const Shape& input, DType dtype, Device& device);
    bool built() const { return m_device != nullptr; }

    // PyTorch's default initialisation for this layer type, drawn from `rng`.
    void reset_parameters(Rng& rng);

    // x: [B, ...input_shape()] -> [B, ...output_shape()].
    Tensor forward(const Tensor& x, Mode mode);
    // dy: [B, ...output_shape()] for the last forward's batch. Accumulates parameter gradients
    // and returns dx: [B, ...input_shape()], or an undefined tensor when the input needs no
    // gradient (needs_input_grad() false, or an input that is not differentiable, such as
    // token ids).
    Tensor backward(const Tensor& dy);

    // Every parameter, children's included, in a fixed order (the order of the model's layers).
    std::vector<Param*> parameters();
    // Non-parameter state that belongs to the model (batchnorm running statistics).
    std::vector<Tensor> buffers();
    void zero_grad();
    // Drops what the last forward kept for backward (its own and its children's), so that a
    // recomputation (nn/recompute.h) holds only a block's input; the next forward keeps it again.
    // Queued weight-gradient work (below) stays.
    void release_saved();

    // Deferred weight gradients (the zero-bubble pipeline's B and W, docs/strategies.md). While a
    // key >= 0 is set, backward is B: a layer that splits its backward (Linear) computes the
    // input gradient and queues its weight-gradient work (W) under the key, keeping the tensors
    // W reads (its input, the output gradient: activations until W runs); a layer that does not
    // split does its whole backward in B. A composite layer defers through its children. -1
    // (the default) turns deferral off. Sets this layer and its children.
    void defer_weight_grads(int64_t key);
    int64_t weight_grad_key() const { return m_weight_key; }
    // Runs the weight-gradient work this layer and its children queued under `key`, each layer's
    // in the order queued, and drops it (nothing queued under `key`: nothing to do). After B and
    // W the gradients are those of the plain backward.
    void run_weight_grads(int64_t key);
    // The pieces of weight-gradient work queued here and in the children, not yet run.
    size_t queued_weight_grads();

    int64_t parameter_count();
    // Forward floating-point operations per sample (a multiply-add counts 2).
    int64_t flops_per_sample() const { return flops_impl(); }
    // Numbers per sample the layer itself keeps from forward to backward (a linear its input,
    // tanh its output, dropout its mask, attention q, k, v and its probabilities; a composite
    // layer its children's): what the memory estimates count as activations. A tensor kept by
    // two layers is the first's only if each says what it keeps itself.
    int64_t activations_per_sample() { return built() ? activations_impl() : 0; }

    const Shape& input_shape() const { return m_input_shape; }
    const Shape& output_shape() const { return m_output_shape; }
    DType dtype() const { return m_dtype; }
    Device& device() const { return *m_device; }

    // The first layer of a model computes no input gradient.
    void set_needs_input_grad(bool needs) { m_needs_input_grad = needs; set_needs_input_grad_impl(needs); }
    bool needs_input_grad() const { return m_needs_input_grad; }

    // Seeds per-step randomness (dropout masks): mask bits are a function of (seed, step, global
    // sample index), so a batch split across devices draws the same masks as on one device.
    void set_random_state(uint64_t seed, uint64_t step, int64_t sample_offset);
    // True when this layer or one of its children draws new random numbers each training step
    // (a dropout of p > 0): a recorded GPU graph would replay one step's draws.
    bool draws_each_step();

    // Children of composite layers (residual, sequential); empty for plain layers.
    virtual std::vector<Layer*> children() { return {}; }

    // True when this layer's forward and backward have GPU kernels: build() on a CUDA device
    // refuses a layer without them, naming it, rather than hand device memory to CPU loops.
    virtual bool runs_on_gpu() const { return false; }

protected:
    virtual Shape build_impl(const Shape& input) = 0;
    virtual void reset_parameters_impl(Rng& rng) { (void)rng; }
    virtual Tensor forward_impl(const Tensor& x, Mode mode) = 0;
    virtual Tensor backward_impl(const Tensor& dy) = 0;
    virtual int64_t flops_impl() const { return 0; }
    // By default the layer keeps its input (linear, convolution, the norms, relu, gelu).
    virtual int64_t activations_impl() { return input_shape().numel(); }
    virtual void set_needs_input_grad_impl(bool needs) { (void)needs; }
    virtual void release_saved_impl() {}
    virtual void set_random_state_impl(uint64_t seed, uint64_t step, int64_t sample_offset) {
        (void)seed, (void)step, (void)sample_offset;
    }
    virtual bool draws_each_step_impl() const { return false; }

    // For backward_impl: `work`, the weight-gradient part of this backward, runs now, or is
    // queued under the key of defer_weight_grads. It must hold what it reads (the layer's saved
    // input is the next forward's by then).
    void weight_grads(std::function<void()> work);

    // For build_impl: a parameter of `shape` (value and zeroed grad) in this layer's dtype.
    Param& add_param(std::string name, const Shape& shape);
    // For build_impl: a buffer (running statistics), zeroed.
    Tensor& add_buffer(const Shape& shape);
    // An activation-category tensor on this layer's device and dtype.
    Tensor new_activation(const Shape& shape) const;
    Tensor new_workspace(const Shape& shape) const;
    // Throws ShapeError "<label>: expects <what>, got <shape>".
    [[noreturn]] void shape_error(const std::string& expected, const Shape& got) const;

    std::deque<Param> m_params;  // own parameters (not children's); references stay valid
    std::vector<Tensor> m_buffers;

private:
    std::string m_type;
    std::string m_label;
    std::string m_path;
    Shape m_input_shape, m_output_shape;
    DType m_dtype = DType::f32;
    Device* m_device = nullptr;
    bool m_needs_input_grad = true;
    int64_t m_last_batch = -1;
    int64_t m_weight_key = -1;  // defer_weight_grads'
    std::deque<std::pair<int64_t, std::function<void()>>> m_weight_work;  // (key, work), oldest first
};

// Fills `t` (on any device) with N(0, 1) draws from `rng`, in element order: drawn on the host
// (into t itself on the CPU), then copied to a GPU's tensor. PyTorch's embedding initialisation.
void fill_standard_normal(const Tensor& t, Rng& rng);

}  // namespace paralab::nn
