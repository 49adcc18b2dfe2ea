// Layers from their specs (docs/experiment-format.md, model.layers[]).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/nn/layer.h"
#include "engine/nn/spec.h"

namespace paralab::nn {

// Every type the experiment file accepts, in the order docs/experiment-format.md lists them.
const std::vector<std::string>& layer_types();

// Throws ConfigError for an unknown type or a bad option (negative size, p outside [0,1)).
std::unique_ptr<Layer> make_layer(const LayerSpec& spec);

}  // namespace paralab::nn
