#include "engine/run/experiment_file.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include "engine/device/device.h"
#include "engine/nn/factory.h"
#include "engine/run/json_reader.h"
#include "engine/strategy/registry.h"

namespace paralab::run {

using nlohmann::json;

namespace {

// The largest extent a file may give a layer, an input or a batch: 2^31. Products of extents
// (a layer's parameters, a batch's activations) are checked for overflow where they are formed
// (Shape::numel), with the layer's path.
constexpr int64_t kMaxExtent = int64_t{1} << 31;
// A run's devices: each is a rank thread (and a CUDA context on a GPU).
constexpr size_t kMaxDevices = 1024;
// Dimensions of model.input (an example).
constexpr size_t kMaxInputRank = 8;
// A strategy's integer option whose declaration gives no maximum: at most 2^31 - 1.
constexpr int64_t kMaxOptionInteger = INT32_MAX;
// Layers in all, a repeated layer's copies and residual bodies counted: each is built (on the meta
// device for a summary) one by one.
constexpr int64_t kMaxLayers = 100000;
// The longest text kept from a name or a path; no device name is longer than this either.
constexpr size_t kMaxName = 256;
constexpr size_t kMaxPath = 4096;

// A string value no longer than `max` characters.
std::string bounded_string(JsonObjectReader& r, const std::string& key, const std::string& fallback, size_t max) {
    std::string v = r.string(key, fallback);
    if (v.size() > max)
        r.fail(key, "expected at most " + std::to_string(max) + " characters, got " + std::to_string(v.size()) +
                        " (" + describe_json(json(v)) + ")");
    return v;
}

// The data set registry's names (engine/data/dataset.h), in the order messages list them.
const std::vector<std::string>& kDatasets = data::dataset_names();

std::vector<int64_t> int_list(const json& v, const std::string& path, int64_t min, int64_t max = INT64_MAX) {
    if (!v.is_array()) throw ConfigError(path, "expected an array of integers, got " + describe_json(v));
    std::vector<int64_t> out;
    for (size_t i = 0; i < v.size(); ++i) {
        const json& e = v[i];
        if (!e.is_number_integer() || (e.is_number_unsigned() && e.get<uint64_t>() > uint64_t(INT64_MAX)) ||
            e.get<int64_t>() < min || e.get<int64_t>() > max)
            throw ConfigError(path + "[" + std::to_string(i) + "]",
                              std::string("expected ") +
                                  (max != INT64_MAX ? "an integer from " + std::to_string(min) + " to " + std::to_string(max)
                                   : min == 1       ? "a positive integer"
                                                    : "a non-negative integer") +
                                  ", got " + describe_json(e));
        out.push_back(e.get<int64_t>());
    }
    return out;
}

data::DataConfig parse_data(const json& j) {
    JsonObjectReader r(j, "data");
    data::DataConfig d;
    auto dataset = r.required_choice("dataset", kDatasets);
    if (!dataset) {
        std::string names;
        for (const auto& n : kDatasets) names += (names.empty() ? "" : ", ") + n;
        r.fail("dataset", "missing; expected one of " + names);
    }
    d.dataset = *dataset;
    d.path = bounded_string(r, "path", "", kMaxPath);
    if ((d.dataset == "mnist" || d.dataset == "csv") && d.path.empty())
        r.fail("path", "missing; the " + d.dataset + " data set needs a path");
    d.train_limit = r.integer("train_limit", 0, 0, INT64_MAX);
    d.test_limit = r.integer("test_limit", 0, 0, INT64_MAX);
    d.batch_size = r.integer("batch_size", 32, 1, kMaxExtent);
    d.workers = static_cast<int>(r.integer("workers", 0, 0, 64));
    d.shuffle = r.boolean("shuffle", true);
    std::vector<std::string> also{"path", "label_column", "samples", "classes", "noise",
                                  "seq_len", "features", "test_fraction", "val_fraction",
                                  "tokenizer"};
    const bool synthetic = d.dataset == "spirals" || d.dataset == "blobs" ||
                           d.dataset == "sine" || d.dataset == "seqclass";
    if (synthetic) {
        d.samples = r.integer("samples", 0, 2, INT64_MAX);
        d.noise = r.number("noise", -1.0, 0.0, INFINITY);
        d.test_fraction = r.number("test_fraction", 0.2, 0.0, 0.9);
    }
    if (d.dataset == "spirals" || d.dataset == "blobs" || d.dataset == "seqclass")
        d.classes = r.integer("classes", 0, 2, 1000);
    if (d.dataset == "sine" || d.dataset == "seqclass") d.seq_len = r.integer("seq_len", 0, 1, 100000);
    if (d.dataset == "seqclass" || d.dataset == "blobs") d.features = r.integer("features", 0, 1, 100000);
    if (d.dataset == "csv") {
        d.label_column = r.string("label_column", "");
        d.test_fraction = r.number("test_fraction", 0.2, 0.0, 0.9);
    }
    if (d.dataset == "text") {
        const auto seq_len = r.integer("seq_len", 1, kMaxExtent);
        if (!seq_len)
            r.fail("seq_len", "missing; the text data set needs seq_len, the context length T of its "
                              "examples (model.input is [T])");
        d.seq_len = *seq_len;
        d.val_fraction = r.number("val_fraction", 0.1, 0.0, 1.0, false);
        if (d.val_fraction >= 1.0)
            r.fail("val_fraction",
                   "expected a number in (0, 1), got " + describe_json(r.raw("val_fraction")));
        d.tokenizer = r.choice("tokenizer", "byte", {"byte"});
    }
    r.finish(also, "the " + d.dataset + " data set");
    return d;
}

// Residual blocks nest at most this deep (a deeper file would exhaust the stack of every
// recursive walk of the model).
constexpr int kMaxNesting = 64;

// A transformer_block's mixture-of-experts options (`mlp: "moe"`, nn/moe.h).
constexpr const char* kMoeKeys[] = {"experts",         "top_k",    "expert_ffn",   "shared_experts",
                                    "capacity_factor", "aux_loss", "router_z_loss"};

void parse_moe_options(JsonObjectReader& r, nn::LayerSpec& s) {
    const auto experts = r.integer("experts", 1, kMaxExtent);
    if (!experts) r.fail("experts", "missing; \"mlp\": \"moe\" needs the number of experts, a positive integer");
    s.experts = *experts;
    const auto expert_ffn = r.integer("expert_ffn", 1, kMaxExtent);
    if (!expert_ffn)
        r.fail("expert_ffn", "missing; \"mlp\": \"moe\" needs each expert's hidden width, a positive integer");
    s.expert_ffn = *expert_ffn;
    s.top_k = r.integer("top_k", 2, 1, kMaxExtent);
    if (s.top_k > s.experts)
        r.fail("top_k", "expected at most experts = " + std::to_string(s.experts) +
                            " (each token goes to top_k different experts), got " + std::to_string(s.top_k));
    s.shared_experts = r.integer("shared_experts", 0, 0, kMaxExtent);
    // null (or absent): dropless.
    constexpr double kAny = std::numeric_limits<double>::infinity();
    const auto capacity = r.number("capacity_factor", 0.0, kAny, false);
    s.capacity_factor = capacity ? *capacity : 0.0;
    s.aux_loss = r.number("aux_loss", 0.01, 0.0, kAny);
    s.router_z_loss = r.number("router_z_loss", 0.0, 0.0, kAny);
}

nn::LayerSpec parse_layer(const json& j, const std::string& path, int depth = 0) {
    if (depth > kMaxNesting)
        throw ConfigError(path, "residual blocks nested more than " + std::to_string(kMaxNesting) + " deep");
    JsonObjectReader r(j, path);
    nn::LayerSpec s;
    auto type = r.required_choice("type", nn::layer_types());
    if (!type) r.fail("type", "missing; every layer needs a type");
    s.type = *type;
    const std::string& t = s.type;
    if (t == "linear") {
        auto out = r.integer("out", 1, kMaxExtent);
        if (!out) r.fail("out", "missing; expected a positive integer");
        s.out = *out;
        s.bias = r.boolean("bias", true);
        s.tie_embeddings = r.boolean("tie_embeddings", false);
        if (s.tie_embeddings && depth > 0)
            r.fail("tie_embeddings", "only the model's last layer, its output layer, can share the embedding's table");
    } else if (t == "conv2d") {
        auto oc = r.integer("out_channels", 1, kMaxExtent);
        if (!oc) r.fail("out_channels", "missing; expected a positive integer");
        s.out_channels = *oc;
        auto k = r.integer("kernel", 1, kMaxExtent);
        if (!k) r.fail("kernel", "missing; expected a positive integer");
        s.kernel = *k;
        s.stride = r.integer("stride", 1, 1, kMaxExtent);
        s.padding = r.integer("padding", 0, 0, kMaxExtent);
        s.bias = r.boolean("bias", true);
    } else if (t == "maxpool2d" || t == "avgpool2d") {
        s.kernel = r.integer("kernel", 2, 1, kMaxExtent);
        s.stride = r.integer("stride", 0, 1, kMaxExtent);
    } else if (t == "batchnorm") {
        s.eps = r.number("eps", 1e-5, 0.0, 1.0, false);
        s.momentum = r.number("momentum", 0.1, 0.0, 1.0);
    } else if (t == "layernorm") {
        s.eps = r.number("eps", 1e-5, 0.0, 1.0, false);
    } else if (t == "rmsnorm") {
        s.eps = r.number("eps", 1e-5, 0.0, 1.0, false);
        s.bias = r.boolean("bias", false);
    } else if (t == "dropout") {
        s.p = r.number("p", 0.5, 0.0, 1.0);
        if (s.p >= 1.0) r.fail("p", "expected a number in [0, 1), got " + json(s.p).dump());
    } else if (t == "embedding") {
        auto vocab = r.integer("vocab", 1, kMaxExtent);
        if (!vocab) r.fail("vocab", "missing; expected a positive integer");
        auto dim = r.integer("dim", 1, kMaxExtent);
        if (!dim) r.fail("dim", "missing; expected a positive integer");
        s.vocab = *vocab;
        s.dim = *dim;
    } else if (t == "lstm" || t == "gru") {
        auto hidden = r.integer("hidden", 1, kMaxExtent);
        if (!hidden) r.fail("hidden", "missing; expected a positive integer");
        s.hidden = *hidden;
        s.num_layers = r.integer("num_layers", 1, 1, 64);
        s.return_sequence = r.choice("return", "last", {"last", "sequence"}) == "sequence";
    } else if (t == "attention" || t == "transformer_block") {
        auto heads = r.integer("heads", 1, kMaxExtent);
        if (!heads) r.fail("heads", "missing; expected a positive integer");
        s.heads = *heads;
        if (t == "transformer_block") {
            s.mlp = r.choice("mlp", "gelu", {"gelu", "swiglu", "moe"});
            if (s.mlp == "moe") parse_moe_options(r, s);
            else for (const char* key : kMoeKeys)
                if (r.has(key)) r.fail(key, "is an option of a mixture of experts: it needs \"mlp\": \"moe\"");
            auto ffn = r.integer("ffn", 1, kMaxExtent);
            if (!ffn && s.mlp != "moe")
                r.fail("ffn", "missing; expected a positive integer (usually 4 times the width)");
            if (ffn && s.mlp == "moe")
                r.fail("ffn", "is not used by \"mlp\": \"moe\" (each expert's width is expert_ffn); remove it");
            s.ffn = ffn ? *ffn : 0;
        }
        s.causal = r.boolean("causal", true);
        s.dropout = r.number("dropout", 0.0, 0.0, 1.0);
        if (s.dropout >= 1.0) r.fail("dropout", "expected a number in [0, 1), got " + json(s.dropout).dump());
        // Absent: 0, as many as heads (so that a file or the window that changes heads keeps it so).
        const auto kv_heads = r.integer("kv_heads", 1, kMaxExtent);
        s.kv_heads = kv_heads ? *kv_heads : 0;
        if (s.kv_heads != 0 && s.heads % s.kv_heads != 0)
            r.fail("kv_heads", "expected a divisor of heads = " + std::to_string(s.heads) +
                                   " (each key/value head serves heads / kv_heads query heads), got " +
                                   std::to_string(s.kv_heads));
        s.position = r.choice("position", "none", {"none", "rope"});
        s.rope_theta = r.number("rope_theta", 10000.0, 0.0, 1e12, false);
        if (r.has("rope_theta") && s.position != "rope")
            r.fail("rope_theta", "is the base of rotary positions: it needs \"position\": \"rope\"");
        s.bias = r.boolean("bias", true);
        if (r.has("kernel")) {
            s.attention_kernel = r.choice("kernel", "fused", {"fused", "materialized"});
            if (s.attention_kernel == "fused" && s.dropout > 0)
                r.fail("kernel", "\"fused\" keeps no attention probabilities, so it cannot drop them out "
                                 "(dropout = " + json(s.dropout).dump() + "); use \"materialized\" or dropout 0");
        }
        if (t == "transformer_block") {
            s.norm = r.choice("norm", "layernorm", {"layernorm", "rmsnorm"});
        }
    } else if (t == "residual") {
        const json& body = r.raw("layers");
        if (!body.is_array() || body.empty())
            r.fail("layers", "expected a non-empty array of layers, got " + describe_json(body));
        for (size_t i = 0; i < body.size(); ++i)
            s.layers.push_back(parse_layer(body[i], r.path_of("layers") + "[" + std::to_string(i) + "]", depth + 1));
    }
    if (r.has("repeat")) {
        const json& n = r.raw("repeat");
        if (!n.is_number_integer() || n.get<int64_t>() < 1 || n.get<int64_t>() > 100000)
            r.fail("repeat", "expected a positive integer (the number of copies, each with its own "
                             "parameters), got " + describe_json(n));
        s.repeat = n.get<int64_t>();
    } else {
        r.raw("repeat");
    }
    r.finish({"out", "bias", "out_channels", "kernel", "stride", "padding", "eps", "momentum", "p",
              "vocab", "dim", "hidden", "num_layers", "return", "layers", "heads", "ffn", "causal",
              "dropout", "repeat", "kv_heads", "position", "rope_theta", "norm", "mlp", "tie_embeddings",
              "experts", "top_k", "expert_ffn", "shared_experts", "capacity_factor", "aux_loss", "router_z_loss"},
             "a " + t + " layer");
    return s;
}

// The layers `s` builds: its copies, each with its body; at most kMaxLayers + 1 (saturated).
int64_t built_layers(const nn::LayerSpec& s) {
    int64_t one = 1;
    for (const auto& c : s.layers) one = std::min(one + built_layers(c), kMaxLayers + 1);
    return std::min(one * s.repeat, kMaxLayers + 1);  // both factors at most 100001: no overflow
}

// `tie_embeddings` (docs/experiment-format.md): the model's last layer, one copy, its `out` the
// vocabulary of the embedding that is its first layer.
void check_tied_output(const std::vector<nn::LayerSpec>& layers) {
    for (size_t i = 0; i < layers.size(); ++i) {
        const nn::LayerSpec& s = layers[i];
        if (!s.tie_embeddings) continue;
        const std::string path = "model.layers[" + std::to_string(i) + "]";
        if (i + 1 != layers.size() || s.repeat != 1)
            throw ConfigError(path + ".tie_embeddings",
                              "only the model's last layer, its output layer, can share the embedding's table");
        if (layers.front().type != "embedding")
            throw ConfigError(path + ".tie_embeddings",
                              "shares the table of the model's embedding, and model.layers[0] is a " +
                                  layers.front().type + ", not an embedding");
        if (s.out != layers.front().vocab)
            throw ConfigError(path + ".out", "expected " + std::to_string(layers.front().vocab) +
                                                 ", the vocabulary of model.layers[0] (the embedding whose table "
                                                 "this layer shares: tie_embeddings), got " + std::to_string(s.out));
    }
}

// One option of the strategy as its descriptor declares it.
config::OptionValue parse_option(JsonObjectReader& r, const config::OptionSpec& o) {
    using config::OptionKind;
    switch (o.kind) {
        case OptionKind::boolean: return r.boolean(o.key, std::get<bool>(o.fallback));
        case OptionKind::integer:
            // An option without a declared bound (micro_batches, ...) is a count the strategies
            // keep in an int.
            return r.integer(o.key, std::get<int64_t>(o.fallback), static_cast<int64_t>(o.min),
                             std::isinf(o.max) ? kMaxOptionInteger : static_cast<int64_t>(o.max));
        case OptionKind::number:
            return r.number(o.key, std::get<double>(o.fallback), o.min, o.max, o.min_inclusive);
        case OptionKind::choice: return r.choice(o.key, std::get<std::string>(o.fallback), o.choices);
        case OptionKind::index_list: return int_list(r.raw(o.key), r.path_of(o.key), 0);
    }
    return {};
}

config::StrategyConfig parse_strategy(const json& j) {
    JsonObjectReader r(j, "strategy");
    config::StrategyConfig s;
    s.type = r.choice("type", "single", strategy::strategy_names());
    for (const auto& o : strategy::find_strategy(s.type)->options) {
        if (o.kind == config::OptionKind::index_list && !r.has(o.key)) {
            r.raw(o.key);  // absent: automatic
            continue;
        }
        s.options[o.key] = parse_option(r, o);
    }
    if (r.has("straggler")) {
        JsonObjectReader st(r.raw("straggler"), r.path_of("straggler"));
        s.straggler_device = st.string("device", "");
        if (s.straggler_device.empty()) st.fail("device", "missing; expected a device such as \"cpu:1\"");
        if (s.straggler_device.size() > kMaxName)
            st.fail("device", "expected a device such as \"cpu:1\", got " + describe_json(st.raw("device")));
        try {
            // "cpu:1", or in an MPI job a device of another process: "r2/cpu:0".
            const std::string& d = s.straggler_device;
            const size_t slash = d.find('/');
            if (slash != std::string::npos &&
                (slash < 2 || d[0] != 'r' || d.find_first_not_of("0123456789", 1) != slash))
                throw ConfigError("expected a device such as \"cpu:1\", or \"r2/cpu:0\" for process 2's "
                                  "device in an MPI job, got \"" + d + "\"");
            parse_device_id(slash == std::string::npos ? d : d.substr(slash + 1));
        } catch (const ConfigError& e) {
            st.fail("device", e.what());
        }
        // A minute a step is already a crawl; the delay sleeps in slices that a stop ends.
        s.straggler_delay_ms = st.number("delay_ms", 0.0, 0.0, 60000.0);
        s.straggler_rotate = st.boolean("rotate", false);
        st.finish();
    } else {
        r.raw("straggler");
    }
    std::vector<std::string> others{"straggler"};
    for (const auto& other : strategy::registry())
        for (const auto& o : other.options) others.push_back(o.key);
    r.finish(others, "the " + s.type + " strategy");
    return s;
}

optim::OptimizerConfig parse_optimizer(const json& j) {
    JsonObjectReader r(j, "optimizer");
    optim::OptimizerConfig o;
    o.type = r.choice("type", "sgd", {"sgd", "adam", "adamw"});
    o.lr = r.number("lr", o.type == "sgd" ? 0.01 : 0.001, 0.0, INFINITY, false);
    o.weight_decay = r.number("weight_decay", o.type == "adamw" ? 0.01 : 0.0, 0.0, INFINITY);
    if (o.type == "sgd") {
        o.momentum = r.number("momentum", 0.0, 0.0, 1.0);
        if (o.momentum >= 1.0) r.fail("momentum", "expected a number in [0, 1), got " + json(o.momentum).dump());
        o.nesterov = r.boolean("nesterov", false);
        if (o.nesterov && o.momentum == 0.0)
            r.fail("nesterov", "needs a momentum greater than 0");
    } else {
        if (r.has("betas")) {
            const json& b = r.raw("betas");
            if (!b.is_array() || b.size() != 2 || !b[0].is_number() || !b[1].is_number() ||
                b[0].get<double>() < 0 || b[0].get<double>() >= 1 || b[1].get<double>() < 0 ||
                b[1].get<double>() >= 1)
                r.fail("betas", "expected two numbers in [0, 1), got " + describe_json(b));
            o.beta1 = b[0].get<double>();
            o.beta2 = b[1].get<double>();
        } else {
            r.raw("betas");
        }
        o.eps = r.number("eps", 1e-8, 0.0, 1.0, false);
    }
    r.finish({"momentum", "nesterov", "betas", "eps"}, "the " + o.type + " optimizer");
    return o;
}

optim::ScheduleConfig parse_schedule(const json& j) {
    JsonObjectReader r(j, "schedule");
    optim::ScheduleConfig s;
    s.type = r.choice("type", "constant", {"constant", "step", "cosine"});
    if (s.type == "step") {
        s.step_size = r.integer("step_size", 1, 1, INT64_MAX);
        s.gamma = r.number("gamma", 0.1, 0.0, INFINITY, false);
    } else if (s.type == "cosine") {
        s.warmup_steps = r.integer("warmup_steps", 0, 0, INT64_MAX);
    }
    r.finish({"step_size", "gamma", "warmup_steps"}, "the " + s.type + " schedule");
    return s;
}

config::TrainConfig parse_train(const json& j) {
    JsonObjectReader r(j, "train");
    config::TrainConfig t;
    t.epochs = r.integer("epochs", 1, 1, INT64_MAX);
    t.max_steps = r.integer("max_steps", 1);
    t.grad_accum = r.integer("grad_accum", 1, 1, INT64_MAX);
    t.clip_norm = r.number("clip_norm", 0.0, INFINITY, false);
    t.precision = r.choice("precision", "fp32", {"fp32", "bf16", "fp16"});
    t.eval_every = r.integer("eval_every", 0, 0, INT64_MAX);
    t.checkpoint_every = r.integer("checkpoint_every", 0, 0, INT64_MAX);
    t.recompute = r.choice("recompute", "none", {"none", "selective", "full"});
    t.max_steps_per_s = r.number("max_steps_per_s", 0.0, 0.0, 1000.0);
    r.finish();
    return t;
}

}  // namespace

config::Experiment parse_experiment(const json& j) {
    JsonObjectReader r(j, "");
    config::Experiment e;
    const json& version = r.raw("paralab");
    if (version.is_null())
        throw ConfigError("paralab", "missing; an experiment file starts with \"paralab\": 1 "
                          "(the file-format version)");
    if (!version.is_number_integer() || version.get<int64_t>() < 1)
        throw ConfigError("paralab", "expected the file-format version 1, got " + describe_json(version));
    if (version.get<int64_t>() > config::kExperimentFormat)
        throw ConfigError("paralab", "this file has format version " + version.dump() +
                          ", newer than this ParaLab reads (" + std::to_string(config::kExperimentFormat) +
                          "); update ParaLab to open it");
    e.format = static_cast<int>(version.get<int64_t>());
    e.name = bounded_string(r, "name", "experiment", kMaxName);
    e.seed = static_cast<uint64_t>(r.integer("seed", 0, 0, INT64_MAX));

    if (!r.has("data")) throw ConfigError("data", "missing; an experiment needs a data section");
    e.data = parse_data(r.raw("data"));

    if (!r.has("model")) throw ConfigError("model", "missing; an experiment needs a model section");
    {
        JsonObjectReader m(r.raw("model"), "model");
        if (m.has("input")) {
            auto dims = int_list(m.raw("input"), "model.input", 1, kMaxExtent);
            if (dims.empty()) m.fail("input", "expected a non-empty array of positive integers");
            // No layer takes more than [C, H, W] or [T, F] per example.
            if (dims.size() > kMaxInputRank)
                m.fail("input", "expected at most " + std::to_string(kMaxInputRank) + " dimensions, got " +
                                    std::to_string(dims.size()));
            e.input = Shape(dims);
        } else {
            m.raw("input");
        }
        const json& layers = m.raw("layers");
        if (!layers.is_array() || layers.empty())
            m.fail("layers", "expected a non-empty array of layers, got " + describe_json(layers));
        int64_t built = 0;
        for (size_t i = 0; i < layers.size(); ++i) {
            const std::string path = "model.layers[" + std::to_string(i) + "]";
            e.layers.push_back(parse_layer(layers[i], path));
            built += built_layers(e.layers.back());
            if (built > kMaxLayers)
                throw ConfigError(path, "the model passes " + std::to_string(kMaxLayers) +
                                            " layers in all (each copy of a repeated layer and each layer of a "
                                            "residual body counted)");
        }
        check_tied_output(e.layers);
        e.loss = m.choice("loss", "cross_entropy", {"cross_entropy", "mse"});
        m.finish();
    }

    if (r.has("devices")) {
        const json& d = r.raw("devices");
        if (!d.is_array() || d.empty())
            throw ConfigError("devices", "expected a non-empty array such as [\"cpu:0\", \"cpu:1\"], got " +
                              describe_json(d));
        if (d.size() > kMaxDevices)
            throw ConfigError("devices", "expected at most " + std::to_string(kMaxDevices) + " devices, got " +
                              std::to_string(d.size()));
        e.devices.clear();
        for (size_t i = 0; i < d.size(); ++i) {
            const std::string path = "devices[" + std::to_string(i) + "]";
            if (!d[i].is_string() || d[i].get_ref<const std::string&>().size() > kMaxName)
                throw ConfigError(path, "expected a device name such as \"cpu:0\", got " + describe_json(d[i]));
            try {
                e.devices.push_back(parse_device_id(d[i].get<std::string>()).to_string());
            } catch (const ConfigError& err) {
                throw ConfigError(path, err.what());
            }
        }
    } else {
        r.raw("devices");
    }

    e.strategy = r.has("strategy") ? parse_strategy(r.raw("strategy")) : (r.raw("strategy"), config::StrategyConfig{});
    e.optimizer = r.has("optimizer") ? parse_optimizer(r.raw("optimizer")) : (r.raw("optimizer"), optim::OptimizerConfig{});
    e.schedule = r.has("schedule") ? parse_schedule(r.raw("schedule")) : (r.raw("schedule"), optim::ScheduleConfig{});
    e.train = r.has("train") ? parse_train(r.raw("train")) : (r.raw("train"), config::TrainConfig{});
    r.finish();
    return e;
}

void check_device_list(const config::Experiment& e) {
    bool any_cpu = false, any_gpu = false;
    for (size_t i = 0; i < e.devices.size(); ++i) {
        const std::string path = "devices[" + std::to_string(i) + "]";
        const DeviceId id = parse_device_id(e.devices[i]);
        if (id.kind == DeviceKind::cpu) {
            any_cpu = true;
            for (size_t j = 0; j < i; ++j)
                if (e.devices[j] == e.devices[i])
                    throw ConfigError(path, e.devices[i] + " is listed twice (devices[" + std::to_string(j) +
                                                "]); virtual CPU devices are cpu:0, cpu:1, ...");
            continue;
        }
        any_gpu = true;
        if (!cuda_backend_built())
            throw ConfigError(path, e.devices[i] + " is a GPU, and this build has no CUDA backend; use cpu:" +
                                        std::to_string(i));
    }
    if (any_cpu && any_gpu)
        throw ConfigError("devices", "CPU and CUDA devices cannot be mixed in one run; list only cpu:K "
                                     "or only cuda:N");
    if (e.train.precision != "fp32" && any_cpu)
        throw ConfigError("train.precision", e.train.precision +
                                                 " mixed precision needs CUDA devices; CPU devices train in fp32");
}

void check_straggler(const config::Experiment& e, const std::vector<std::string>& names) {
    if (!e.strategy.straggler_device.empty() &&
        std::find(names.begin(), names.end(), e.strategy.straggler_device) == names.end())
        throw ConfigError("strategy.straggler.device", e.strategy.straggler_device +
                          " is not one of the run's devices" +
                          (names.empty() || names.front().find('/') == std::string::npos ? std::string()
                                                                                       : " (" + names.front() + ", ...)"));
}

std::vector<config::Issue> validate(const config::Experiment& e) {
    try {
        parse_experiment(to_json(e));
        // A straggler of this process's devices must be one of them ("r2/cpu:0", another
        // process's, is checked when the job's processes agree on the world).
        if (e.strategy.straggler_device.find('/') == std::string::npos) check_straggler(e, e.devices);
        const strategy::StrategyDescriptor& d = strategy::descriptor_of(e);
        if (d.check_devices) d.check_devices(e);
        if (d.check_options) d.check_options(e);
    } catch (const ConfigError& err) {
        return {config::Issue{err.path(), err.reason()}};
    }
    return {};
}

Shape model_input_shape(const config::Experiment& e) {
    if (e.input) return *e.input;
    // Text examples are [seq_len] token ids: known without reading the corpus.
    if (e.data.dataset == "text" && e.data.seq_len > 0) return Shape{e.data.seq_len};
    data::DataConfig probe = e.data;
    probe.train_limit = probe.test_limit = 1;
    return Shape(data::load_data(probe, e.seed).train.sample_shape);
}

config::Experiment load_experiment(const std::string& path) {
    const json j = read_json_file(path, "experiment file");
    try {
        return parse_experiment(j);
    } catch (const ConfigError& err) {
        throw ConfigError(path + ": " + err.what());
    }
}

namespace {

json layer_to_json(const nn::LayerSpec& s) {
    json j{{"type", s.type}};
    const std::string& t = s.type;
    if (t == "linear") {
        j["out"] = s.out, j["bias"] = s.bias;
        if (s.tie_embeddings) j["tie_embeddings"] = true;
    }
    if (t == "conv2d") {
        j["out_channels"] = s.out_channels;
        j["kernel"] = s.kernel;
        j["stride"] = s.stride == 0 ? 1 : s.stride;
        j["padding"] = s.padding;
        j["bias"] = s.bias;
    }
    if (t == "maxpool2d" || t == "avgpool2d") {
        j["kernel"] = s.kernel;
        if (s.stride) j["stride"] = s.stride;
    }
    if (t == "batchnorm") j["eps"] = s.eps, j["momentum"] = s.momentum;
    if (t == "layernorm") j["eps"] = s.eps;
    if (t == "rmsnorm") j["eps"] = s.eps, j["bias"] = s.bias;
    if (t == "dropout") j["p"] = s.p;
    if (t == "embedding") j["vocab"] = s.vocab, j["dim"] = s.dim;
    if (t == "lstm" || t == "gru") {
        j["hidden"] = s.hidden;
        j["num_layers"] = s.num_layers;
        j["return"] = s.return_sequence ? "sequence" : "last";
    }
    if (t == "attention" || t == "transformer_block") {
        j["heads"] = s.heads;
        if (t == "transformer_block" && s.mlp != "moe") j["ffn"] = s.ffn;
        j["causal"] = s.causal;
        j["dropout"] = s.dropout;
        // Today's GPT block writes as before; the newer options only where they differ.
        if (s.kv_heads != 0 && s.kv_heads != s.heads) j["kv_heads"] = s.kv_heads;
        if (s.position != "none") j["position"] = s.position, j["rope_theta"] = s.rope_theta;
        if (!s.bias) j["bias"] = false;
        if (!s.attention_kernel.empty()) j["kernel"] = s.attention_kernel;
        if (t == "transformer_block" && s.norm != "layernorm") j["norm"] = s.norm;
        if (t == "transformer_block" && s.mlp != "gelu") j["mlp"] = s.mlp;
        if (t == "transformer_block" && s.mlp == "moe") {
            j["experts"] = s.experts;
            j["top_k"] = s.top_k;
            j["expert_ffn"] = s.expert_ffn;
            j["shared_experts"] = s.shared_experts;
            j["capacity_factor"] = s.capacity_factor > 0 ? json(s.capacity_factor) : json(nullptr);
            j["aux_loss"] = s.aux_loss;
            j["router_z_loss"] = s.router_z_loss;
        }
    }
    if (t == "residual") {
        j["layers"] = json::array();
        for (const auto& c : s.layers) j["layers"].push_back(layer_to_json(c));
    }
    if (s.repeat != 1) j["repeat"] = s.repeat;
    return j;
}

}  // namespace

json to_json(const config::Experiment& e) {
    json j;
    j["paralab"] = e.format;
    j["name"] = e.name;
    j["seed"] = e.seed;
    const auto& d = e.data;
    json data{{"dataset", d.dataset}, {"train_limit", d.train_limit}, {"test_limit", d.test_limit},
              {"batch_size", d.batch_size}, {"workers", d.workers}, {"shuffle", d.shuffle}};
    if (!d.path.empty()) data["path"] = d.path;
    const bool synthetic = d.dataset == "spirals" || d.dataset == "blobs" || d.dataset == "sine" ||
                           d.dataset == "seqclass";
    if (synthetic) {
        if (d.samples) data["samples"] = d.samples;
        if (d.noise >= 0) data["noise"] = d.noise;
        data["test_fraction"] = d.test_fraction;
    }
    if (d.classes) data["classes"] = d.classes;
    if (d.seq_len) data["seq_len"] = d.seq_len;
    if (d.features) data["features"] = d.features;
    if (d.dataset == "csv") {
        if (!d.label_column.empty()) data["label_column"] = d.label_column;
        data["test_fraction"] = d.test_fraction;
    }
    if (d.dataset == "text") data["val_fraction"] = d.val_fraction, data["tokenizer"] = d.tokenizer;
    j["data"] = data;
    json model;
    if (e.input) model["input"] = e.input->dims();
    model["layers"] = json::array();
    for (const auto& l : e.layers) model["layers"].push_back(layer_to_json(l));
    model["loss"] = e.loss;
    j["model"] = model;
    j["devices"] = e.devices;
    const auto& s = e.strategy;
    json st{{"type", s.type}};
    for (const auto& [key, value] : s.options) st[key] = std::visit([](const auto& v) { return json(v); }, value);
    if (!s.straggler_device.empty()) {
        st["straggler"] = {{"device", s.straggler_device}, {"delay_ms", s.straggler_delay_ms}};
        if (s.straggler_rotate) st["straggler"]["rotate"] = true;
    }
    j["strategy"] = st;
    const auto& o = e.optimizer;
    json opt{{"type", o.type}, {"lr", o.lr}, {"weight_decay", o.weight_decay}};
    if (o.type == "sgd") opt["momentum"] = o.momentum, opt["nesterov"] = o.nesterov;
    else opt["betas"] = {o.beta1, o.beta2}, opt["eps"] = o.eps;
    j["optimizer"] = opt;
    const auto& sc = e.schedule;
    json sch{{"type", sc.type}};
    if (sc.type == "step") sch["step_size"] = sc.step_size, sch["gamma"] = sc.gamma;
    if (sc.type == "cosine") sch["warmup_steps"] = sc.warmup_steps;
    j["schedule"] = sch;
    const auto& t = e.train;
    j["train"] = {{"epochs", t.epochs},
                  {"max_steps", t.max_steps ? json(*t.max_steps) : json(nullptr)},
                  {"grad_accum", t.grad_accum},
                  {"clip_norm", t.clip_norm ? json(*t.clip_norm) : json(nullptr)},
                  {"precision", t.precision},
                  {"eval_every", t.eval_every},
                  {"checkpoint_every", t.checkpoint_every},
                  {"recompute", t.recompute}};
    if (t.max_steps_per_s > 0) j["train"]["max_steps_per_s"] = t.max_steps_per_s;
    return j;
}

}  // namespace paralab::run
