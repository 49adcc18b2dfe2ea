// tensor_parallel: Megatron-LM's splitting of every attention and transformer_block over all
// devices (Shoeybi et al. 2019), with Megatron's sequence parallelism as an option. It is hybrid
// with tp over every device (hybrid.h): one replica, every device running the whole global
// batch through its shards. docs/strategies.md ("tensor_parallel") says what each device holds
// and sends.
#include <functional>

#include "engine/strategy/hybrid.h"
#include "engine/strategy/registry.h"
#include "engine/strategy/strategy.h"
#include "engine/strategy/tensor_shards.h"

namespace paralab::strategy {

namespace {

// ---- the model's layers, as the experiment file lists them -----------------------------------

// Each attention and transformer_block spec of `layers` (residual bodies included), with its
// JSON path.
void for_each_split_spec(const std::vector<nn::LayerSpec>& layers, const std::string& prefix,
                         const std::function<void(const nn::LayerSpec&, const std::string&)>& fn) {
    for (size_t i = 0; i < layers.size(); ++i) {
        const std::string path = prefix + "[" + std::to_string(i) + "]";
        if (layers[i].type == "attention" || layers[i].type == "transformer_block")
            fn(layers[i], path);
        if (layers[i].type == "residual")
            for_each_split_spec(layers[i].layers, path + ".layers", fn);
    }
}

int world_of(const config::Experiment& e) {
    return std::max<int>(1, static_cast<int>(e.devices.size()));
}

// The checks of the registry for `n` devices (a job's world, whose processes each list only
// their own devices in e.devices).
void check_split(const config::Experiment& e, int n) {
    // Sequence parallelism gives every device T/N positions of each sample.
    if (option<bool>(e.strategy, "sequence_parallel") && n > 1 && e.data.seq_len > 0 &&
        e.data.seq_len % n != 0)
        throw ConfigError("data.seq_len",
                          "sequence_parallel splits the sequence over the devices: " +
                              std::to_string(e.data.seq_len) + " positions do not divide over " +
                              std::to_string(n) + " devices");
    bool any = false;
    for_each_split_spec(
        e.layers, "model.layers", [&](const nn::LayerSpec& s, const std::string& path) {
            any = true;
            if (s.heads > 0 && s.heads % n != 0)
                throw ConfigError(path + ".heads", std::to_string(s.heads) +
                                                       " heads do not divide over " +
                                                       std::to_string(n) + " devices");
            if (s.kv_heads > 0 && s.kv_heads % n != 0)
                throw ConfigError(path + ".kv_heads", std::to_string(s.kv_heads) +
                                                          " kv_heads do not divide over " +
                                                          std::to_string(n) + " devices");
            if (s.type == "transformer_block" && s.ffn > 0 && s.ffn % n != 0)
                throw ConfigError(path + ".ffn", std::to_string(s.ffn) +
                                                     " ffn units do not divide over " +
                                                     std::to_string(n) + " devices");
        });
    if (!any)
        throw ConfigError("model.layers",
                          "tensor_parallel splits attention and transformer_block layers, and "
                          "this model has none; use ddp or pipeline for it");
}

void check_tensor_parallel(const config::Experiment& e) { check_split(e, world_of(e)); }

// ---- the registry's memory model and picture --------------------------------------------------

// hybrid's options for tensor_parallel on `world` devices: tp over all of them.
config::StrategyConfig as_hybrid(const config::Experiment& e, int world) {
    config::StrategyConfig h = default_config("hybrid");
    h.options["tp"] = int64_t{world};
    h.options["sequence_parallel"] = option<bool>(e.strategy, "sequence_parallel");
    return h;
}

// hybrid's model, each device named by its shard.
std::vector<DeviceMemoryEstimate> tensor_parallel_memory(const config::Experiment& e, const ModelCost& m) {
    auto out = hybrid_memory(e, m, as_hybrid);
    for (size_t r = 0; r < out.size(); ++r)
        out[r].role = "shard " + std::to_string(r + 1) + " of " + std::to_string(out.size());
    return out;
}

StepPicture tensor_parallel_picture(const config::Experiment& e) {
    const int64_t n = static_cast<int64_t>(e.devices.size());
    int64_t heads = 0;
    for_each_split_spec(e.layers, "model.layers", [&](const nn::LayerSpec& s, const std::string&) {
        if (heads == 0) heads = s.heads;
    });
    StepPicture p;
    p.layout = StepPicture::Layout::shards;
    for (int64_t r = 0; r < n; ++r) {
        if (heads > 0 && heads % n == 0)
            p.subtitles.push_back(heads / n == 1 ? "head " + std::to_string(r)
                                                 : "heads " + std::to_string(r * heads / n) + "–" +
                                                       std::to_string((r + 1) * heads / n - 1));
        else
            p.subtitles.push_back("1/" + std::to_string(n) + " of each block");
    }
    const bool sequence = n > 1 && option<bool>(e.strategy, "sequence_parallel");
    if (sequence) {
        p.down_label = "forward: all-gather before attention and the MLP, reduce-scatter after";
        p.up_label = "backward: reduce-scatter and all-gather, the conjugates";
        p.caption =
            "Every device runs the whole batch through its share of each block's heads and MLP; "
            "inside the blocks, layernorms and dropout hold 1/N of the positions.";
    } else {
        p.down_label = "forward: all-reduce after attention and after the MLP";
        p.up_label = "backward: all-reduce of the gradient entering each";
        p.caption =
            "Every device runs the whole batch through its share of each block's heads and MLP; "
            "embeddings, layernorms and the head are whole on every device.";
    }
    if (heads == 0)
        p.note = "this model has no attention or transformer_block to split";
    else if (heads % n != 0)
        p.note =
            std::to_string(heads) + " heads do not divide over " + std::to_string(n) + " devices";
    else if (sequence)
        p.note =
            "4 all-gathers and 4 reduce-scatters of batch × seq_len × width numbers per block "
            "per step";
    else
        p.note = "4 all-reduces of batch × seq_len × width numbers per block per step";
    return p;
}

}  // namespace

StrategyDescriptor tensor_parallel_descriptor() {
    using config::OptionKind;
    return {
        .name = "tensor_parallel",
        .options =
            {{.key = "sequence_parallel",
              .kind = OptionKind::boolean,
              .fallback = false,
              .label = "Sequence parallelism",
              .help =
                  "Megatron's sequence parallelism: inside the blocks, layernorms and dropout "
                  "on 1/N of the positions, all-gather and reduce-scatter along the sequence in "
                  "place of the all-reduces. data.seq_len must divide by the device count."}},
        .explanation =
            "Tensor parallel (Megatron-LM): every attention and transformer_block is split over "
            "all "
            "devices. Each device holds 1/N of the heads (its slice of the qkv and output "
            "projections) and 1/N of the MLP, and runs the whole batch through them; one "
            "all-reduce "
            "after attention and one after the MLP put the outputs together, and two more in "
            "backward the input gradients. Embeddings, layernorms and the head are replicated. "
            "Heads and ffn must divide by the device count. With sequence parallelism the "
            "blocks' layernorms and dropout hold 1/N of the positions, and all-gathers and "
            "reduce-scatters along the sequence replace the all-reduces.",
        .color = "#bcbd22",
        .make = [] { return make_hybrid("tensor_parallel", as_hybrid, check_split); },
        .check_options = check_tensor_parallel,
        .memory = tensor_parallel_memory,
        .picture = tensor_parallel_picture,
        .variant = {{.key = "sequence_parallel", .text = "sequence parallel"}},
        .as_hybrid = as_hybrid,
    };
}

}  // namespace paralab::strategy
