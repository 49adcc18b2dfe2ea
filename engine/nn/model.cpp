#include "engine/nn/model.h"

#include "engine/device/device.h"
#include "engine/nn/factory.h"

namespace paralab::nn {

namespace {

// `copy` names one of a repeated layer's copies ("1 of 4"), empty otherwise: labels tell the
// copies apart (errors name the copy; dropout masks are drawn by label).
std::unique_ptr<Layer> make_labelled(const LayerSpec& spec, const std::string& path, const std::string& copy = {}) {
    std::unique_ptr<Layer> layer;
    try {
        layer = make_layer(spec);
    } catch (const ConfigError& e) {
        throw ConfigError(path, e.what());
    }
    std::string suffix;  // " 1 of 4" for a copy
    if (!copy.empty()) suffix.append(" ").append(copy);
    layer->set_label(path + " (" + spec.type + suffix + ")", path);
    if (spec.type == "residual") {
        auto body = layer->children().front()->children();
        size_t k = 0;
        for (size_t i = 0; i < spec.layers.size(); ++i) {
            const LayerSpec& child = spec.layers[i];
            const std::string child_path = path + ".layers[" + std::to_string(i) + "]";
            for (int64_t c = 0; c < child.repeat && k < body.size(); ++c, ++k) {
                std::string name = child_path + " (" + child.type;
                if (child.repeat > 1) name.append(" ").append(std::to_string(c + 1)).append(" of ").append(std::to_string(child.repeat));
                if (!copy.empty()) name.append(", ").append(copy);
                body[k]->set_label(name + ")", child_path);
            }
        }
    }
    return layer;
}

void collect(Layer& layer, const std::string& path, int depth, std::vector<LayerSummary>& out) {
    LayerSummary row;
    row.path = path;
    row.type = layer.type();
    row.output = layer.output_shape();
    row.parameters = layer.parameter_count();
    row.flops = layer.flops_per_sample();
    row.activations = layer.activations_per_sample();
    row.depth = depth;
    out.push_back(row);
    if (layer.type() == "residual") {
        auto parts = layer.children();
        auto body = parts.front()->children();
        for (size_t i = 0; i < body.size(); ++i)
            collect(*body[i], path + ".layers[" + std::to_string(i) + "]", depth + 1, out);
        if (parts.size() > 1) collect(*parts[1], path + ".projection", depth + 1, out);
    }
}

}  // namespace

Model::Model(const std::vector<LayerSpec>& layers, const Shape& input, const std::string& loss,
             DType dtype, Device& device)
    : Model(layers, 0, layers.size(), input, loss, dtype, device) {}

std::unique_ptr<Model> Model::stage(const std::vector<LayerSpec>& layers, size_t first,
                                    size_t last, const Shape& input, const std::string& loss,
                                    DType dtype, Device& device) {
    PARALAB_CHECK(first < last && last <= layers.size(),
                  "Model::stage: layers [" + std::to_string(first) + ", " +
                      std::to_string(last) + ") of a model of " + std::to_string(layers.size()));
    return std::unique_ptr<Model>(new Model(layers, first, last, input, loss, dtype, device));
}

Model::Model(const std::vector<LayerSpec>& layers, size_t first, size_t last, const Shape& input,
             const std::string& loss, DType dtype, Device& device)
    : m_first(first) {
    if (layers.empty()) throw ConfigError("model.layers", "expected at least one layer");
    std::vector<std::unique_ptr<Layer>> built;
    for (size_t i = first; i < last; ++i) {
        if (layers[i].type == "embedding" && i != 0)
            throw ConfigError("model.layers[" + std::to_string(i) + "]",
                              "an embedding takes token ids and must be the first layer");
        const std::string path = "model.layers[" + std::to_string(i) + "]";
        for (int64_t copy = 0; copy < layers[i].repeat; ++copy) {
            const std::string name = layers[i].repeat > 1 ? std::to_string(copy + 1) + " of " +
                                                                 std::to_string(layers[i].repeat)
                                                           : std::string();
            built.push_back(make_labelled(layers[i], path, name));
            m_spec_of.push_back(i);
        }
    }
    m_net = std::make_unique<Sequential>(std::move(built), "model");
    m_net->set_label("model");
    // The data needs no gradient; a later stage's input is an earlier stage's activation.
    m_net->set_needs_input_grad(first > 0);
    m_net->build(input, dtype, device);
    m_loss = make_loss(loss);
}

ModelSummary summarize(const std::vector<LayerSpec>& layers, const Shape& input, const std::string& loss) {
    Model model(layers, input, loss, DType::f32, meta_device());
    ModelSummary s;
    s.layers = model.summary();
    s.output = model.output_shape();
    s.parameters = model.parameter_count();
    s.flops_per_sample = model.flops_per_sample();
    return s;
}

std::vector<LayerSummary> Model::summary() {
    std::vector<LayerSummary> rows;
    for (size_t i = 0; i < m_net->size(); ++i) {
        const std::string path = "model.layers[" + std::to_string(m_spec_of[i]) + "]";
        if (i > 0 && m_spec_of[i] == m_spec_of[i - 1]) {  // another copy of a repeated layer
            std::vector<LayerSummary> copy;
            collect(m_net->at(i), path, 0, copy);
            for (auto& r : rows) {
                if (r.path != path || r.depth != 0) continue;
                r.output = copy.front().output;
                r.parameters += copy.front().parameters;
                r.flops += copy.front().flops;
                r.activations += copy.front().activations;
                ++r.copies;
            }
            continue;
        }
        collect(m_net->at(i), path, 0, rows);
    }
    return rows;
}

}  // namespace paralab::nn
