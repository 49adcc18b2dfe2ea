#include "engine/nn/model.h"

#include "engine/device/device.h"
#include "engine/nn/attention.h"
#include "engine/nn/checked_count.h"
#include "engine/nn/factory.h"
#include "engine/nn/linear.h"

#include <algorithm>
#include <cstdint>
#include <functional>

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

LayerSummary row_of(Layer& layer, const std::string& path, int depth) {
    LayerSummary row;
    row.path = path;
    row.type = layer.type();
    row.output = layer.output_shape();
    try {
        row.parameters = layer.parameter_count();
        row.flops = layer.flops_per_sample();
        row.activations = layer.activations_per_sample();
    } catch (const ShapeError& err) {  // a count beyond int64, named by its layer
        if (!err.path().empty()) throw;
        throw ShapeError(layer.path().empty() ? path : layer.path(), layer.label() + ": " + err.what());
    }
    row.attention_scores = attention_scores_of(layer);
    row.backward_extra = backward_extra_of(layer);
    row.depth = depth;
    return row;
}

// Adds `copy`'s counts to `row`: a repeated layer is one row for all its copies.
void add_copy(LayerSummary& row, const LayerSummary& copy) {
    row.output = copy.output;
    const auto add = [&row](int64_t& total, int64_t more, const char* what) {
        try {
            total = checked_sum(total, more, what);
        } catch (const ShapeError& err) {
            throw ShapeError(row.path, row.path + ": " + err.what());
        }
    };
    add(row.parameters, copy.parameters, "parameters");
    add(row.flops, copy.flops, "FLOPs");
    add(row.activations, copy.activations, "activations");
    add(row.attention_scores, copy.attention_scores, "attention scores");
    add(row.backward_extra, copy.backward_extra, "backward");
    ++row.copies;
}

void collect(Layer& layer, const std::string& path, int depth, std::vector<LayerSummary>& out) {
    out.push_back(row_of(layer, path, depth));
    if (layer.type() == "residual") {
        auto parts = layer.children();
        auto body = parts.front()->children();
        size_t row_of_previous = 0;
        for (size_t i = 0; i < body.size(); ++i) {
            // The file's path of the body layer (make_labelled): copies of one share it.
            const std::string inner =
                body[i]->path().empty() ? path + ".layers[" + std::to_string(i) + "]" : body[i]->path();
            if (i > 0 && inner == out[row_of_previous].path && out[row_of_previous].depth == depth + 1) {
                add_copy(out[row_of_previous], row_of(*body[i], inner, depth + 1));
                continue;
            }
            row_of_previous = out.size();
            collect(*body[i], inner, depth + 1, out);
        }
        if (parts.size() > 1) collect(*parts[1], path + ".projection", depth + 1, out);
    }
}

}  // namespace

Model::Model(const std::vector<LayerSpec>& layers, const Shape& input, const std::string& loss,
             DType dtype, Device& device, const std::function<void(Layer&)>& prepare)
    : Model(layers, 0, SIZE_MAX, input, loss, dtype, device, prepare) {}

std::unique_ptr<Model> Model::stage(const std::vector<LayerSpec>& layers, size_t first,
                                    size_t last, const Shape& input, const std::string& loss,
                                    DType dtype, Device& device,
                                    const std::function<void(Layer&)>& prepare) {
    PARALAB_CHECK(first < last && last <= layers.size(),
                  "Model::stage: layers [" + std::to_string(first) + ", " +
                      std::to_string(last) + ") of a model of " + std::to_string(layers.size()));
    return std::unique_ptr<Model>(new Model(layers, first, last, input, loss, dtype, device, prepare));
}

Model::Model(const std::vector<LayerSpec>& layers, size_t first, size_t last, const Shape& input,
             const std::string& loss, DType dtype, Device& device,
             const std::function<void(Layer&)>& prepare)
    : m_first(first) {
    if (layers.empty()) throw ConfigError("model.layers", "expected at least one layer");
    std::vector<std::unique_ptr<Layer>> built;
    const std::vector<LayerSpec> expanded = expand_repeats(layers);
    last = std::min(last, expanded.size());
    for (size_t i = first; i < last; ++i) {
        const LayerSpec& spec = expanded[i];
        const auto source = static_cast<size_t>(spec.source);
        if (spec.type == "embedding" && (source != 0 || spec.copy > 0))
            throw ConfigError("model.layers[" + std::to_string(source) + "]",
                              "an embedding takes token ids and must be the first layer");
        const std::string path = "model.layers[" + std::to_string(source) + "]";
        const std::string copy = spec.copies > 1 ? std::to_string(spec.copy + 1) + " of " +
                                                       std::to_string(spec.copies)
                                                 : std::string();
        built.push_back(make_labelled(spec, path, copy));
        if (prepare) prepare(*built.back());
        m_spec_of.push_back(source);
    }
    // tie_embeddings: the output layer reads the embedding's table, so both are in this model.
    if (!built.empty() && expanded[last - 1].tie_embeddings) {
        auto* output = dynamic_cast<Linear*>(built.back().get());
        const std::string path = "model.layers[" + std::to_string(expanded[last - 1].source) + "]";
        if (!output) throw ConfigError(path + ".tie_embeddings", "only a linear layer can share the embedding's table");
        if (first != 0)
            throw ConfigError(path + ".tie_embeddings",
                              "the output layer shares the table of the embedding in model.layers[0], so both "
                              "must be built on one device; this model is split between stages, and they fall "
                              "in different ones");
        if (built.front()->type() != "embedding")
            throw ConfigError(path + ".tie_embeddings", "shares the table of the model's embedding, and "
                                                        "model.layers[0] is not an embedding");
        output->tie_to(*built.front());
    } else if (last < expanded.size() && expanded.back().tie_embeddings && first == 0) {
        const std::string path = "model.layers[" + std::to_string(expanded.back().source) + "]";
        throw ConfigError(path + ".tie_embeddings",
                          "the output layer shares the table of the embedding in model.layers[0], so both must "
                          "be built on one device; this model is split between stages, and they fall in "
                          "different ones");
    }
    m_net = std::make_unique<Sequential>(std::move(built), "model");
    m_net->set_label("model");
    // The data needs no gradient; a later stage's input is an earlier stage's activation.
    m_net->set_needs_input_grad(first > 0);
    m_net->build(input, dtype, device);
    m_loss = make_loss(loss);
}

void Model::set_recompute(Recompute r) {
    m_net->set_recompute_layers(r == Recompute::full);
    const std::function<void(Layer&)> walk = [&](Layer& l) {
        if (auto* a = dynamic_cast<Attention*>(&l)) a->set_recompute_scores(r == Recompute::selective);
        for (Layer* c : l.children()) walk(*c);
    };
    walk(*m_net);
}

std::vector<LayerSpec> expand_repeats(const std::vector<LayerSpec>& layers) {
    std::vector<LayerSpec> out;
    for (size_t i = 0; i < layers.size(); ++i) {
        const LayerSpec& s = layers[i];
        if (s.source >= 0) {  // already a copy
            out.push_back(s);
            continue;
        }
        for (int64_t c = 0; c < s.repeat; ++c) {
            out.push_back(s);
            out.back().repeat = 1;
            out.back().source = static_cast<int64_t>(i);
            out.back().copy = c;
            out.back().copies = s.repeat;
        }
    }
    return out;
}

int64_t backward_extra_of(Layer& layer) {
    int64_t n = 0;
    if (auto* a = dynamic_cast<Attention*>(&layer)) n = a->backward_per_sample();
    for (Layer* c : layer.children()) n = std::max(n, backward_extra_of(*c));
    return n;
}

int64_t attention_scores_of(Layer& layer) {
    int64_t n = 0;
    if (auto* a = dynamic_cast<Attention*>(&layer)) n += a->scores_per_sample();
    for (Layer* c : layer.children()) n += attention_scores_of(*c);
    return n;
}

ModelSummary summarize(const std::vector<LayerSpec>& layers, const Shape& input, const std::string& loss) {
    Model model(layers, input, loss, DType::f32, meta_device());
    ModelSummary s;
    s.layers = model.summary();
    s.output = model.output_shape();
    s.parameters = model.parameter_count();
    // The top-level rows' sum (Model::flops_per_sample's), formed without wrapping.
    for (const auto& row : s.layers)
        if (row.depth == 0) {
            try {
                s.flops_per_sample = checked_sum(s.flops_per_sample, row.flops, "FLOPs");
            } catch (const ShapeError& err) {
                throw ShapeError("model", std::string("the model: ") + err.what());
            }
        }
    return s;
}

std::vector<LayerSummary> Model::summary() {
    std::vector<LayerSummary> rows;
    size_t top = 0;  // the row of the last top-level layer collected
    for (size_t i = 0; i < m_net->size(); ++i) {
        const std::string path = "model.layers[" + std::to_string(m_spec_of[i]) + "]";
        if (i > 0 && m_spec_of[i] == m_spec_of[i - 1]) {  // another copy of a repeated layer
            add_copy(rows[top], row_of(m_net->at(i), path, 0));
            continue;
        }
        top = rows.size();
        collect(m_net->at(i), path, 0, rows);
    }
    return rows;
}

}  // namespace paralab::nn
