// A model's tensors by name, and the model's weights in and out of safetensors files.
//
// Names follow PyTorch's state_dict: "layers.<i>.<param>" for top-level layer i of the whole
// model (a layer with "repeat": N is N layers, each copy with its own index, as
// nn::expand_repeats lays them out), "layers.<i>.layers.<k>.<param>" for layer k of a residual
// block's body or of a transformer block ("layers.<i>.layers.0.layers.1.qkv.weight": the block's
// attention residual, its attention, the query/key/value projection), ".projection." for a
// residual's shape-changing projection, ".qkv." and ".proj." for an attention's two linear maps.
// Buffers take the same prefix: a batchnorm's "running_mean" and "running_var", another
// layer's "buffer<k>". Checkpoints, `paralab export --weights` and `paralab run --init` all
// name tensors here.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "engine/io/safetensors.h"
#include "engine/nn/model.h"
#include "engine/tensor/tensor.h"

namespace paralab::io {

// The names of `model`'s parameters, in the order of model.parameters(), and of its buffers,
// in the order of model.buffers(). A stage of a split model (Model::stage) names its layers by
// their index in the whole model.
std::vector<std::string> parameter_names(nn::Model& model);
std::vector<std::string> buffer_names(nn::Model& model);

// The safetensors dtype of an engine dtype (F32, F64, BF16, F16).
StDType st_dtype_of(DType t);

// Copies entry `e` of `file` into `dst` (any device), converting F32, F64, BF16 and F16 to the
// tensor's dtype (f32 or f64). The caller has checked the shapes. Throws Error naming the
// tensor for another dtype.
void copy_entry(const SafetensorsFile& file, const StEntry& e, const Tensor& dst);

// Writes every parameter and buffer of `model`, host copies in their own dtypes, to `path`
// (write_safetensors: atomic; throws Error "PATH: cause").
void write_weights(const std::string& path, nn::Model& model,
                   const std::map<std::string, std::string>& metadata = {});

// Sets every parameter of `model` from the tensors of the same name in `path` (the model's
// buffers too, those the file holds). The file must be a regular file (SafetensorsFile::read:
// its checksums verified when it has them) holding every parameter, with its shape, and nothing
// that is not one of the model's parameters or buffers; names and shapes are checked before the
// data is read. Every value must be finite (a NaN or an infinity is refused, naming the tensor
// and the element); values are converted (see copy_entry). Throws ConfigError at "--init"
// naming the file, the tensor and both shapes, before any parameter changes.
void load_weights(nn::Model& model, const std::string& path);

}  // namespace paralab::io
