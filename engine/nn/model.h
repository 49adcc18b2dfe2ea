// A model: the layers of an experiment file as one Sequential, built for a device and dtype,
// plus its loss. Layers are labelled by their JSON path ("model.layers[3] (conv2d)") so that a
// shape error points at the line of the file to change.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/nn/loss.h"
#include "engine/nn/recompute.h"
#include "engine/nn/sequential.h"
#include "engine/nn/spec.h"

namespace paralab::nn {

// One row of `paralab validate`'s table.
struct LayerSummary {
    std::string path;  // "model.layers[3]" or "model.layers[2].layers[0]"
    std::string type;
    Shape output;      // per sample
    int64_t parameters = 0;
    int64_t flops = 0;  // forward, per sample
    int64_t activations = 0;  // numbers per sample held for backward (Layer::activations_per_sample)
    int64_t attention_scores = 0;  // of those, attention probabilities (selective recomputation's)
    int64_t backward_extra = 0;    // per sample, what its backward adds to its gradients (backward_extra_of)
    int depth = 0;      // nesting level (residual bodies are 1 deeper)
    int64_t copies = 1; // a layer with "repeat": N is one row for its N copies (counts summed)
};

// A model's shapes, parameters and FLOPs, read without allocating it.
struct ModelSummary {
    std::vector<LayerSummary> layers;  // every layer, residual bodies nested (depth)
    Shape output;                      // per sample
    int64_t parameters = 0;
    int64_t flops_per_sample = 0;
};

// The layer list with each "repeat": N layer written out as N consecutive copies (repeat 1,
// source = its index in `layers`, copy 0..N-1 of copies N): a model's top-level layers one for
// one, which is how the staged strategies count layers. Idempotent.
std::vector<LayerSpec> expand_repeats(const std::vector<LayerSpec>& layers);

class Model;
// Builds the model on the meta device (engine/device/device.h): every shape and count, no
// parameter memory, so that a model of any size is summarised at once. Throws like Model's
// constructor (ShapeError, ConfigError naming the layer) when it does not build.
ModelSummary summarize(const std::vector<LayerSpec>& layers, const Shape& input, const std::string& loss);

// The attention probabilities per example that `layer` holds for backward (its attentions',
// its children's included): what selective recomputation drops.
int64_t attention_scores_of(Layer& layer);

// The numbers per sample that `layer`'s backward allocates for a moment beyond its output and
// input gradients: the largest of its attentions' q, k, v gradients [T, 3·inner] (0 without).
int64_t backward_extra_of(Layer& layer);

class Model {
public:
    // Builds every layer for per-sample `input` on `device`; throws ShapeError naming the layer
    // and both shapes, ConfigError for bad options. Parameters are zero until reset_parameters.
    // `prepare`, when given, sees each top-level layer (labelled, not yet built): a strategy's
    // settings that change how a layer builds (tensor_parallel's TensorShard).
    Model(const std::vector<LayerSpec>& layers, const Shape& input, const std::string& loss,
          DType dtype, Device& device, const std::function<void(Layer&)>& prepare = {});

    // One stage of a model split across devices (model_parallel, pipeline): the top-level
    // layers [first, last) of `layers`, built for per-sample `input` (the output shape of layer
    // first - 1). Layers keep their labels in the whole model ("model.layers[5] (dropout)"), so
    // errors name the line of the file and dropout draws the whole model's masks. Only the stage
    // with first == 0 computes no input gradient; the loss is the model's (meaningful on the
    // last stage only). Requires first < last <= layers.size(). `prepare` as for the whole
    // model (a hybrid mesh's tensor-parallel stages).
    static std::unique_ptr<Model> stage(const std::vector<LayerSpec>& layers, size_t first,
                                        size_t last, const Shape& input, const std::string& loss,
                                        DType dtype, Device& device,
                                        const std::function<void(Layer&)>& prepare = {});

    void reset_parameters(Rng& rng) { m_net->reset_parameters(rng); }
    // train.recompute (nn/recompute.h): selective sets every attention's, full the model's
    // top-level layers (each keeps only its input; a repeated layer's copies each count).
    void set_recompute(Recompute r);

    // x: [B, ...input] -> [B, ...output]
    // In eval mode nothing is kept for a backward that never comes (an evaluation between steps
    // leaves no tensors behind).
    Tensor forward(const Tensor& x, Mode mode) {
        Tensor y = m_net->forward(x, mode);
        if (mode == Mode::eval) m_net->release_saved();
        return y;
    }
    // Back-propagates d loss / d output through every layer (accumulating parameter gradients).
    void backward(const Tensor& dy) { m_net->backward(dy); }

    std::vector<Param*> parameters() { return m_net->parameters(); }
    std::vector<Tensor> buffers() { return m_net->buffers(); }
    void zero_grad() { m_net->zero_grad(); }
    void set_random_state(uint64_t seed, uint64_t step, int64_t sample_offset) {
        m_net->set_random_state(seed, step, sample_offset);
    }

    Loss& loss() { return *m_loss; }
    Sequential& net() { return *m_net; }
    const Shape& input_shape() const { return m_net->input_shape(); }
    const Shape& output_shape() const { return m_net->output_shape(); }
    int64_t parameter_count() { return m_net->parameter_count(); }
    int64_t flops_per_sample() const { return m_net->flops_per_sample(); }
    DType dtype() const { return m_net->dtype(); }
    Device& device() const { return m_net->device(); }

    std::vector<LayerSummary> summary();
    // The index in the whole model of net().at(0): 0 except for a stage. A layer with
    // "repeat": N is N consecutive layers of net(), all of one index in the file.
    size_t first_layer() const { return m_first; }

private:
    Model(const std::vector<LayerSpec>& layers, size_t first, size_t last, const Shape& input,
          const std::string& loss, DType dtype, Device& device,
          const std::function<void(Layer&)>& prepare = {});

    size_t m_first = 0;
    std::vector<size_t> m_spec_of;  // per layer of m_net: its index in the experiment's layers
    std::unique_ptr<Sequential> m_net;
    std::unique_ptr<Loss> m_loss;
};

}  // namespace paralab::nn
