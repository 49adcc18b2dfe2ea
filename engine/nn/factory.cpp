#include "engine/nn/factory.h"

#include "engine/nn/activation.h"
#include "engine/nn/attention.h"
#include "engine/nn/conv2d.h"
#include "engine/nn/dropout.h"
#include "engine/nn/embedding.h"
#include "engine/nn/linear.h"
#include "engine/nn/norm.h"
#include "engine/nn/pool.h"
#include "engine/nn/recurrent.h"
#include "engine/nn/sequential.h"

namespace paralab::nn {

const std::vector<std::string>& layer_types() {
    static const std::vector<std::string> types{
        "linear",  "conv2d", "maxpool2d", "avgpool2d", "global_avgpool", "batchnorm",
        "layernorm", "dropout", "relu",   "gelu",      "tanh",           "sigmoid",
        "flatten", "embedding", "lstm",   "gru",       "residual",  "position_embedding",
        "attention", "transformer_block", "rmsnorm"};
    return types;
}

namespace {

int64_t positive(int64_t v, const char* what, const std::string& type) {
    if (v <= 0)
        throw ConfigError(type + "." + what + ": expected a positive integer, got " +
                          std::to_string(v));
    return v;
}

}  // namespace

std::unique_ptr<Layer> make_layer(const LayerSpec& s) {
    const std::string& t = s.type;
    if (t == "linear") return std::make_unique<Linear>(positive(s.out, "out", t), s.bias);
    if (t == "conv2d") {
        if (s.padding < 0)
            throw ConfigError("conv2d.padding: expected a non-negative integer, got " +
                              std::to_string(s.padding));
        return std::make_unique<Conv2d>(positive(s.out_channels, "out_channels", t),
                                        positive(s.kernel, "kernel", t),
                                        s.stride == 0 ? 1 : positive(s.stride, "stride", t),
                                        s.padding, s.bias);
    }
    if (t == "maxpool2d")
        return std::make_unique<MaxPool2d>(positive(s.kernel == 0 ? 2 : s.kernel, "kernel", t),
                                           s.stride == 0 ? 0 : positive(s.stride, "stride", t));
    if (t == "avgpool2d")
        return std::make_unique<AvgPool2d>(positive(s.kernel == 0 ? 2 : s.kernel, "kernel", t),
                                           s.stride == 0 ? 0 : positive(s.stride, "stride", t));
    if (t == "global_avgpool") return std::make_unique<GlobalAvgPool>();
    if (t == "batchnorm") return std::make_unique<BatchNorm>(s.eps, s.momentum);
    if (t == "layernorm") return std::make_unique<LayerNorm>(s.eps);
    if (t == "rmsnorm") return std::make_unique<RMSNorm>(s.eps, s.bias);
    if (t == "dropout") return std::make_unique<Dropout>(s.p);
    if (t == "relu") return std::make_unique<Activation>(ActivationKind::relu);
    if (t == "gelu") return std::make_unique<Activation>(ActivationKind::gelu);
    if (t == "tanh") return std::make_unique<Activation>(ActivationKind::tanh);
    if (t == "sigmoid") return std::make_unique<Activation>(ActivationKind::sigmoid);
    if (t == "flatten") return std::make_unique<Flatten>();
    if (t == "embedding")
        return std::make_unique<Embedding>(positive(s.vocab, "vocab", t), positive(s.dim, "dim", t));
    if (t == "lstm")
        return std::make_unique<LSTM>(positive(s.hidden, "hidden", t),
                                      positive(s.num_layers, "num_layers", t), s.return_sequence);
    if (t == "gru")
        return std::make_unique<GRU>(positive(s.hidden, "hidden", t),
                                     positive(s.num_layers, "num_layers", t), s.return_sequence);
    if (t == "position_embedding") return std::make_unique<PositionEmbedding>();
    if (t == "attention" || t == "transformer_block") {
        if (s.position != "none" && s.position != "rope")
            throw ConfigError("position", "expected \"none\" or \"rope\", got \"" + s.position + "\"");
        if (!s.attention_kernel.empty() && s.attention_kernel != "fused" && s.attention_kernel != "materialized")
            throw ConfigError("kernel", "expected \"fused\" or \"materialized\", got \"" + s.attention_kernel + "\"");
        const AttentionKernel kernel = s.attention_kernel == "fused"          ? AttentionKernel::fused
                                       : s.attention_kernel == "materialized" ? AttentionKernel::materialized
                                                                              : AttentionKernel::automatic;
        const AttentionOptions a{positive(s.heads, "heads", t), s.kv_heads, s.causal, s.dropout,
                                 s.position == "rope", s.rope_theta, s.bias, kernel};
        if (t == "attention") return std::make_unique<Attention>(a);
        if (s.norm != "layernorm" && s.norm != "rmsnorm")
            throw ConfigError("norm", "expected \"layernorm\" or \"rmsnorm\", got \"" + s.norm + "\"");
        if (s.mlp != "gelu" && s.mlp != "swiglu" && s.mlp != "moe")
            throw ConfigError("mlp", "expected \"gelu\", \"swiglu\" or \"moe\", got \"" + s.mlp + "\"");
        if (s.mlp == "moe") {
            BlockOptions b{0, s.norm == "rmsnorm", false, true};
            b.experts = MoEOptions{s.experts, s.top_k, s.expert_ffn, s.shared_experts, s.capacity_factor, s.aux_loss,
                                   s.router_z_loss};
            return std::make_unique<TransformerBlock>(a, b);
        }
        return std::make_unique<TransformerBlock>(a, BlockOptions{positive(s.ffn, "ffn", t), s.norm == "rmsnorm",
                                                                  s.mlp == "swiglu"});
    }
    if (t == "residual") {
        if (s.layers.empty()) throw ConfigError("residual.layers: expected at least one layer");
        std::vector<std::unique_ptr<Layer>> body;
        for (const auto& child : s.layers)
            for (int64_t copy = 0; copy < child.repeat; ++copy) body.push_back(make_layer(child));
        return std::make_unique<Residual>(std::move(body));
    }
    std::string allowed;
    for (const auto& name : layer_types()) allowed += (allowed.empty() ? "" : ", ") + name;
    throw ConfigError("unknown layer type '" + t + "': expected one of " + allowed);
}

}  // namespace paralab::nn
