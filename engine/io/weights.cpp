#include "engine/io/weights.h"

#include <cmath>
#include <cstring>
#include <optional>
#include <set>

#include "engine/device/device.h"
#include "engine/nn/attention.h"
#include "engine/nn/moe.h"
#include "engine/nn/sequential.h"
#include "engine/nn/swiglu.h"
#include "engine/util/error.h"

namespace paralab::io {

namespace {

std::string shape_text(const std::vector<int64_t>& dims) {
    std::string s = "[";
    for (size_t i = 0; i < dims.size(); ++i) {
        if (i) s += ", ";
        s += std::to_string(dims[i]);
    }
    return s + "]";
}

struct Names {
    std::vector<std::string> parameters, buffers;
};

// Appends the names of `layer`'s parameters and buffers in the order Layer::parameters() and
// Layer::buffers() list them: the layer's own first, then each child's.
void name_layer(nn::Layer& layer, const std::string& prefix, Names& out) {
    const std::vector<nn::Layer*> children = layer.children();
    size_t child_params = 0, child_buffers = 0;
    for (nn::Layer* c : children) {
        child_params += c->parameters().size();
        child_buffers += c->buffers().size();
    }
    const std::vector<nn::Param*> params = layer.parameters();
    const size_t own_buffers = layer.buffers().size() - child_buffers;
    for (size_t k = 0; k + child_params < params.size(); ++k) out.parameters.push_back(prefix + params[k]->name);
    for (size_t k = 0; k < own_buffers; ++k) {
        if (layer.type() == "batchnorm" && own_buffers == 2)
            out.buffers.push_back(prefix + (k == 0 ? "running_mean" : "running_var"));
        else
            out.buffers.push_back(prefix + "buffer" + std::to_string(k));
    }

    if (dynamic_cast<nn::Residual*>(&layer)) {
        // children: the body (a Sequential, transparent: its layers are the block's), then the
        // projection when the body changes the shape.
        nn::Layer& body = *children.at(0);
        const std::vector<nn::Layer*> inner = body.children();
        for (size_t k = 0; k < inner.size(); ++k)
            name_layer(*inner[k], prefix + "layers." + std::to_string(k) + ".", out);
        if (children.size() > 1) name_layer(*children[1], prefix + "projection.", out);
        return;
    }
    if (dynamic_cast<nn::Sequential*>(&layer)) {
        for (size_t k = 0; k < children.size(); ++k)
            name_layer(*children[k], prefix + "layers." + std::to_string(k) + ".", out);
        return;
    }
    if (dynamic_cast<nn::Attention*>(&layer)) {
        // Children: qkv, its dropout (when any), proj, its dropout: the two with parameters.
        const char* names[] = {"qkv.", "proj."};
        size_t linear = 0;
        for (nn::Layer* c : children) {
            if (c->parameters().empty()) continue;
            PARALAB_CHECK(linear < 2, "an attention layer with more than two parametrised children");
            name_layer(*c, prefix + names[linear++], out);
        }
        return;
    }
    if (dynamic_cast<nn::SwiGLU*>(&layer)) {  // Hugging Face's LlamaMLP names
        const char* names[] = {"gate.", "up.", "down."};
        for (size_t k = 0; k < children.size(); ++k) name_layer(*children[k], prefix + names[k], out);
        return;
    }
    if (auto* moe = dynamic_cast<nn::MoE*>(&layer)) {  // router, experts.<e>, shared.<s>
        const std::vector<std::string> names = moe->child_names();
        for (size_t k = 0; k < children.size(); ++k) name_layer(*children[k], prefix + names[k] + ".", out);
        return;
    }
    for (size_t k = 0; k < children.size(); ++k) name_layer(*children[k], prefix + std::to_string(k) + ".", out);
}

Names model_names(nn::Model& model) {
    Names names;
    nn::Sequential& net = model.net();
    for (size_t i = 0; i < net.size(); ++i)
        name_layer(net.at(i), "layers." + std::to_string(model.first_layer() + i) + ".", names);
    PARALAB_CHECK(names.parameters.size() == model.parameters().size() &&
                      names.buffers.size() == model.buffers().size(),
                  "parameter or buffer names do not match the model's lists");
    return names;
}

float half_to_float(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000) << 16;
    const int exponent = (h >> 10) & 0x1f;
    const uint32_t mantissa = h & 0x3ff;
    float magnitude;
    if (exponent == 0) magnitude = std::ldexp(float(mantissa), -24);  // zero and subnormals
    else if (exponent == 31) magnitude = mantissa ? NAN : INFINITY;
    else magnitude = std::ldexp(float(mantissa | 0x400), exponent - 25);
    return sign ? -magnitude : magnitude;
}

float bfloat16_to_float(uint16_t b) {
    const uint32_t bits = uint32_t(b) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

}  // namespace

std::vector<std::string> parameter_names(nn::Model& model) { return model_names(model).parameters; }
std::vector<std::string> buffer_names(nn::Model& model) { return model_names(model).buffers; }

StDType st_dtype_of(DType t) {
    switch (t) {
        case DType::f32: return StDType::F32;
        case DType::f64: return StDType::F64;
        case DType::bf16: return StDType::BF16;
        case DType::f16: return StDType::F16;
    }
    throw Error("no safetensors dtype for " + std::string(dtype_name(t)));
}

void copy_entry(const SafetensorsFile& file, const StEntry& e, const Tensor& dst) {
    if (dst.dtype() != DType::f32 && dst.dtype() != DType::f64)
        throw Error("tensor \"" + e.name + "\": cannot load into a " + std::string(dtype_name(dst.dtype())) +
                    " tensor (f32 and f64 only)");
    const auto n = static_cast<size_t>(dst.numel());
    const std::byte* src = file.data(e);
    PARALAB_CHECK(e.bytes == n * st_dtype_size(e.dtype), "copy_entry: shapes differ");
    const Shape shape = dst.shape();
    Device& host = detached_host_device();
    if (e.dtype == StDType::F64) {
        Tensor t = Tensor::empty(shape, DType::f64, host, MemCategory::parameters);
        std::memcpy(t.raw(), src, e.bytes);
        dst.copy_from(t);
        return;
    }
    Tensor t = Tensor::empty(shape, DType::f32, host, MemCategory::parameters);
    float* out = t.data<float>();
    switch (e.dtype) {
        case StDType::F32: std::memcpy(out, src, e.bytes); break;
        case StDType::BF16:
        case StDType::F16:
            for (size_t i = 0; i < n; ++i) {
                uint16_t bits;
                std::memcpy(&bits, src + 2 * i, 2);
                out[i] = e.dtype == StDType::BF16 ? bfloat16_to_float(bits) : half_to_float(bits);
            }
            break;
        default:
            throw Error("tensor \"" + e.name + "\" holds " + std::string(st_dtype_name(e.dtype)) +
                        ", not floating-point numbers (F32, F64, BF16 or F16)");
    }
    dst.copy_from(t);
}

void write_weights(const std::string& path, nn::Model& model, const std::map<std::string, std::string>& metadata) {
    const Names names = model_names(model);
    std::vector<Tensor> tensors;
    for (nn::Param* p : model.parameters()) tensors.push_back(p->value);
    for (const Tensor& b : model.buffers()) tensors.push_back(b);
    std::vector<StTensor> out;
    std::vector<Tensor> host_copies;  // GPU tensors copied out; kept alive until written
    for (size_t i = 0; i < tensors.size(); ++i) {
        Tensor t = tensors[i];
        if (t.on_gpu()) {
            host_copies.push_back(Tensor::empty(t.shape(), t.dtype(), detached_host_device(), MemCategory::parameters));
            host_copies.back().copy_from(t);
            t = host_copies.back();
        }
        const std::string& name = i < names.parameters.size() ? names.parameters[i]
                                                               : names.buffers[i - names.parameters.size()];
        out.push_back({name, st_dtype_of(t.dtype()), t.shape().dims(), t.raw(), t.nbytes()});
    }
    write_safetensors(path, out, metadata);
}

namespace {

// The position of the first NaN or infinity of entry `e` (a floating-point dtype), if any.
std::optional<size_t> first_non_finite(const SafetensorsFile& file, const StEntry& e, double& value) {
    const std::byte* src = file.data(e);
    const size_t n = e.bytes / st_dtype_size(e.dtype);
    for (size_t i = 0; i < n; ++i) {
        double v;
        switch (e.dtype) {
            case StDType::F64: std::memcpy(&v, src + 8 * i, 8); break;
            case StDType::F32: {
                float f;
                std::memcpy(&f, src + 4 * i, 4);
                v = f;
                break;
            }
            case StDType::BF16:
            case StDType::F16: {
                uint16_t bits;
                std::memcpy(&bits, src + 2 * i, 2);
                v = e.dtype == StDType::BF16 ? bfloat16_to_float(bits) : half_to_float(bits);
                break;
            }
            default: return std::nullopt;
        }
        if (!std::isfinite(v)) {
            value = v;
            return i;
        }
    }
    return std::nullopt;
}

}  // namespace

void load_weights(nn::Model& model, const std::string& path) {
    const Names names = model_names(model);
    std::vector<Tensor> tensors;
    for (nn::Param* p : model.parameters()) tensors.push_back(p->value);
    for (const Tensor& b : model.buffers()) tensors.push_back(b);
    auto fail = [&](const std::string& cause) { return ConfigError("--init", path + ": " + cause); };
    auto name_of = [&](size_t i) -> const std::string& {
        return i < names.parameters.size() ? names.parameters[i] : names.buffers[i - names.parameters.size()];
    };

    // Everything checked first: a refused file changes no parameter. The names, shapes and
    // dtypes are checked on the header, before the file's data is read.
    auto check_header = [&](const SafetensorsFile& file) {
        std::set<std::string> known;
        for (size_t i = 0; i < tensors.size(); ++i) {
            const bool is_param = i < names.parameters.size();
            const std::string& name = name_of(i);
            known.insert(name);
            const std::vector<int64_t> want = tensors[i].shape().dims();
            const StEntry* e = file.find(name);
            if (!e) {
                if (!is_param) continue;  // buffers are optional: a model starts with fresh statistics
                throw fail("no tensor \"" + name + "\" (the model's parameter of shape " + shape_text(want) + ")");
            }
            if (e->shape != want)
                throw fail("tensor \"" + name + "\" has shape " + shape_text(e->shape) +
                           " in the file, the model's is " + shape_text(want));
            if (e->dtype != StDType::F32 && e->dtype != StDType::F64 && e->dtype != StDType::BF16 &&
                e->dtype != StDType::F16)
                throw fail("tensor \"" + name + "\" holds " + std::string(st_dtype_name(e->dtype)) +
                           ", not floating-point numbers (F32, F64, BF16 or F16)");
        }
        for (const StEntry& e : file.entries())
            if (!known.count(e.name))
                throw fail("tensor \"" + e.name + "\" " + shape_text(e.shape) +
                           " is not a parameter of this model (its first is \"" +
                           (names.parameters.empty() ? std::string() : names.parameters.front()) + "\")");
    };
    SafetensorsFile file;
    try {
        file = SafetensorsFile::read(path, check_header);
    } catch (const ConfigError&) {
        throw;
    } catch (const Error& err) {
        throw ConfigError("--init", err.what());
    }
    std::vector<const StEntry*> entries(tensors.size(), nullptr);
    for (size_t i = 0; i < tensors.size(); ++i) {
        entries[i] = file.find(name_of(i));
        if (!entries[i]) continue;
        double value = 0;
        if (const auto at = first_non_finite(file, *entries[i], value))
            throw fail("tensor \"" + name_of(i) + "\" holds " + (std::isnan(value) ? "NaN" : value > 0 ? "+inf" : "-inf") +
                       " at element " + std::to_string(*at) + "; weights to start from must be finite");
    }
    for (size_t i = 0; i < tensors.size(); ++i)
        if (entries[i]) copy_entry(file, *entries[i], tensors[i]);
}

}  // namespace paralab::io
