// The model section the designer edits (layers, input, loss), the tree paths that address a layer
// in it, and shape inference over it. Plain data and functions: no widgets, testable alone.
#pragma once

#include <QList>
#include <QString>
#include <optional>
#include <string>
#include <vector>

#include "engine/nn/spec.h"
#include "engine/tensor/shape.h"

namespace paralab::ui {

struct DesignedModel {
    std::vector<nn::LayerSpec> layers;
    std::optional<Shape> input;  // model.input; the data set's example shape when absent
    std::string loss = "cross_entropy";
};

// A layer's place in the tree: {3} is model.layers[3], {2, 0} is model.layers[2].layers[0].
using LayerPath = QList<int>;

// "model.layers[2].layers[0]" for {2, 0}.
QString layerPathString(const LayerPath& path);
// The deepest layer in an error's JSON path (ConfigError::path, ShapeError::path):
// "model.layers[2].layers[1]" or "model.layers[3].out" -> {2, 1} or {3}; empty for a path that
// names no layer.
LayerPath layerPathOf(const std::string& jsonPath);

// The list that holds the layer at `path` (the model's, or a residual body) and its index there;
// nullptr when the path does not exist.
std::vector<nn::LayerSpec>* parentList(std::vector<nn::LayerSpec>& layers, const LayerPath& path);
nn::LayerSpec* layerAt(std::vector<nn::LayerSpec>& layers, const LayerPath& path);
const nn::LayerSpec* layerAt(const std::vector<nn::LayerSpec>& layers, const LayerPath& path);

// A layer of the type with the options a person most likely wants first
// (docs/experiment-format.md's required options filled in: linear out 10, conv2d 16 channels 3x3
// padding 1, attention 4 heads, transformer_block 4 heads and ffn 512, ...).
nn::LayerSpec defaultLayer(const std::string& type);
// "out 128", "16 ch, 3x3, pad 1", "4 heads, ffn 512": the options worth reading in the stack,
// short.
QString layerOptionsText(const nn::LayerSpec& spec);
// A row of the stack: the type, "×N" for N copies ("repeat"), then the options:
// "transformer_block ×4  4 heads, ffn 512".
QString layerRowText(const nn::LayerSpec& spec);

// One part of a composite layer the file gives as one line (a transformer_block's layernorm,
// attention, layernorm, linear ffn, gelu, linear D): read-only, for the stack to show.
struct LayerPartInfo {
    std::string type;
    QString options;  // "out 512", "4 heads, causal"
    Shape output;
    int64_t parameters = 0;  // all copies together, like the layer's own row
    int64_t flops = 0;
    int64_t activationBytes = 0;
};

// What shape inference says about one layer (per example). A layer with "repeat": N is one row
// for its N copies: parameters, FLOPs and activations count them all.
struct LayerShapeInfo {
    Shape output;
    int64_t parameters = 0;
    int64_t flops = 0;
    // What the layer holds from forward to backward, x 4 bytes (f32): its output, or its
    // children's outputs for a composite layer, and attention's probabilities.
    int64_t activationBytes = 0;
    int64_t copies = 1;
    std::vector<LayerPartInfo> parts;  // a transformer_block's, in order; empty for other layers
};

struct ShapeReport {
    bool ok = false;
    QString message;      // the engine's error when !ok
    LayerPath errorPath;  // the layer the error names (may be empty)
    std::vector<std::pair<std::string, LayerShapeInfo>> rows;  // by JSON path, "model.layers[0]"
    int64_t parameters = 0;                                    // whole model, when ok
    int64_t flops = 0;
    int64_t activationBytes = 0;
    Shape output;
};

// Builds the model on a scratch CPU device (parameters allocated, not initialised). On an error
// the layers before the failing top-level layer are still reported (a second build of that
// prefix), so the stack shows shapes down to the red row.
ShapeReport inferShapes(const DesignedModel& model, const Shape& input);

}  // namespace paralab::ui
