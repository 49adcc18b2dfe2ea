#include "engine/strategy/registry.h"

#include <algorithm>
#include <numeric>
#include <sstream>
#include <type_traits>

#include "engine/device/device.h"
#include "engine/nn/model.h"
#include "engine/strategy/strategy.h"

namespace paralab::strategy {

// The registry: one line per strategy, in the order the docs and the GUI list them. Each
// `X(name)` is defined in name.cpp as `StrategyDescriptor name_descriptor()`.
#define PARALAB_STRATEGIES(X) \
    X(single)                 \
    X(data_parallel)          \
    X(ddp)                    \
    X(zero)                   \
    X(hogwild)                \
    X(param_server)           \
    X(model_parallel)         \
    X(pipeline)               \
    X(tensor_parallel)        \
    X(hybrid)

#define PARALAB_DECLARE(name) StrategyDescriptor name##_descriptor();
PARALAB_STRATEGIES(PARALAB_DECLARE)
#undef PARALAB_DECLARE

const std::vector<StrategyDescriptor>& registry() {
#define PARALAB_LIST(name) name##_descriptor(),
    static const std::vector<StrategyDescriptor> all{PARALAB_STRATEGIES(PARALAB_LIST)};
#undef PARALAB_LIST
    return all;
}

const StrategyDescriptor* find_strategy(const std::string& name) {
    for (const auto& d : registry())
        if (d.name == name) return &d;
    return nullptr;
}

std::vector<std::string> strategy_names() {
    std::vector<std::string> names;
    for (const auto& d : registry()) names.push_back(d.name);
    return names;
}

bool is_baseline(const std::string& name) {
    const StrategyDescriptor* d = find_strategy(name);
    return d && d->baseline;
}

const StrategyDescriptor& descriptor_of(const config::Experiment& e) {
    const StrategyDescriptor* d = find_strategy(e.strategy.type);
    if (!d) throw ConfigError("strategy.type", "unknown strategy \"" + e.strategy.type + "\"");
    return *d;
}

const config::OptionSpec* StrategyDescriptor::option(const std::string& key) const {
    for (const auto& o : options)
        if (o.key == key) return &o;
    return nullptr;
}

void check_device_count(const StrategyDescriptor& d, int world) {
    const std::string why = d.device_rule.empty() ? "" : " (" + d.device_rule + ")";
    if (d.max_devices == 1 && world != 1)
        throw ConfigError("devices", "the " + d.name + " strategy runs on one device, got " + std::to_string(world) +
                                         why + "; choose a parallel strategy");
    if (d.max_devices > 1 && world > d.max_devices)
        throw ConfigError("devices", "the " + d.name + " strategy runs on at most " + std::to_string(d.max_devices) +
                                         " devices, got " + std::to_string(world) + why);
    if (world < d.min_devices)
        throw ConfigError("devices", "the " + d.name + " strategy needs at least " + std::to_string(d.min_devices) +
                                         " devices, got " + std::to_string(world) + why);
}

config::StrategyConfig default_config(const std::string& type) {
    const StrategyDescriptor* d = find_strategy(type);
    if (!d) throw ConfigError("strategy.type", "unknown strategy \"" + type + "\"");
    config::StrategyConfig s;
    s.type = type;
    for (const auto& o : d->options)
        if (o.kind != config::OptionKind::index_list) s.options[o.key] = o.fallback;
    return s;
}

const config::OptionValue& option_value(const config::StrategyConfig& s, const std::string& key) {
    const StrategyDescriptor* d = find_strategy(s.type);
    const config::OptionSpec* spec = d ? d->option(key) : nullptr;
    PARALAB_CHECK(spec, "strategy " + s.type + " has no option " + key);
    const auto it = s.options.find(key);
    return it != s.options.end() ? it->second : spec->fallback;
}

template <class T>
T option(const config::StrategyConfig& s, const std::string& key) {
    const config::OptionValue& v = option_value(s, key);
    const T* typed = std::get_if<T>(&v);
    PARALAB_CHECK(typed, "strategy option " + key + " read as another type than it holds");
    return *typed;
}

template bool option<bool>(const config::StrategyConfig&, const std::string&);
template int64_t option<int64_t>(const config::StrategyConfig&, const std::string&);
template double option<double>(const config::StrategyConfig&, const std::string&);
template std::string option<std::string>(const config::StrategyConfig&, const std::string&);
template std::vector<int64_t> option<std::vector<int64_t>>(const config::StrategyConfig&,
                                                           const std::string&);

config::OptionSpec sync_batchnorm_option() {
    return {.key = "sync_batchnorm", .kind = config::OptionKind::boolean, .fallback = true,
            .label = "SyncBatchNorm (statistics over all devices)",
            .help = "Batch-norm layers normalise with the statistics of the whole global batch, summed "
                    "over the devices (as on one device); false: each device its own rows'."};
}

config::OptionSpec split_option() {
    return {.key = "split", .kind = config::OptionKind::index_list, .fallback = std::vector<int64_t>{},
            .label = "Stages start at layers",
            .help = "The first top-level layer index of each stage after the first (N − 1 strictly "
                    "increasing indices in (0, L)); absent: balanced by compute (each layer's forward FLOPs)."};
}

config::OptionSpec schedule_option(const std::string& fallback, const std::string& part, const std::string& parts) {
    return {.key = "schedule", .kind = config::OptionKind::choice, .fallback = fallback,
            .choices = {"gpipe", "1f1b", "interleaved_1f1b", "zb_h1"}, .label = "Schedule",
            .help = "gpipe: every forward, then every backward; 1f1b: one forward and one backward in turn after "
                    "a warm-up; interleaved_1f1b: 1f1b over `interleave` model chunks per " + part +
                    " (micro-batches a multiple of " + parts + "); zb_h1: 1f1b with each backward split into the "
                    "input gradient (B) and the weight gradient (W), the W filling the idle cooldown."};
}

config::OptionSpec interleave_option(const std::string& part, const std::string& count) {
    // "stage s holds chunks s, s + pp, ..." / "device d holds chunks d, d + devices, ..."
    const std::string name = part.substr(0, 1);
    return {.key = "interleave", .kind = config::OptionKind::integer, .fallback = int64_t{1}, .min = 1, .max = 1024,
            .label = "Chunks per device",
            .help = "interleaved_1f1b: the layers are cut into " + count + " × interleave chunks and " + part + " " +
                    name + " holds chunks " + name + ", " + name + " + " + count +
                    ", ...; the bubble shrinks by this factor. 1 with the other schedules.",
            .shown_when_key = "schedule", .shown_when_value = "interleaved_1f1b"};
}

std::string variant_label(const config::StrategyConfig& s) {
    const StrategyDescriptor* d = find_strategy(s.type);
    if (!d) return {};
    auto value_of = [&](const config::OptionSpec& spec) -> const config::OptionValue& {
        const auto it = s.options.find(spec.key);
        return it != s.options.end() && it->second.index() == spec.fallback.index() ? it->second : spec.fallback;
    };
    auto text_of = [](const config::OptionValue& v) -> std::string {
        if (const auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
        if (const auto* x = std::get_if<double>(&v)) return format_number(*x);
        if (const auto* t = std::get_if<std::string>(&v)) return *t;
        return {};
    };
    std::string label;
    for (const VariantPart& part : d->variant) {
        const config::OptionSpec* spec = d->option(part.key);
        if (!spec) continue;
        if (!spec->shown_when_key.empty())
            if (const config::OptionSpec* on = d->option(spec->shown_when_key);
                on && text_of(value_of(*on)) != spec->shown_when_value)
                continue;
        const config::OptionValue& v = value_of(*spec);
        std::string text;
        if (const auto* b = std::get_if<bool>(&v)) {
            text = *b ? part.text : part.text_if_false;
        } else {
            text = part.text;
            if (const size_t at = text.find("{}"); at != std::string::npos) text.replace(at, 2, text_of(v));
        }
        if (text.empty()) continue;
        if (!label.empty()) label += " · ";
        label += text;
    }
    return label;
}

std::string format_number(double v) {
    std::ostringstream s;
    s << v;
    return s.str();
}

namespace {

std::string default_text(const config::OptionSpec& o) {
    return std::visit(
        [](const auto& v) -> std::string {
            using T = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<T, bool>) return v ? "`true`" : "`false`";
            else if constexpr (std::is_same_v<T, int64_t>) return std::to_string(v);
            else if constexpr (std::is_same_v<T, double>) return format_number(v);
            else if constexpr (std::is_same_v<T, std::string>) return "`\"" + v + "\"`";
            else return "automatic";
        },
        o.fallback);
}

std::string range_text(const config::OptionSpec& o) {
    switch (o.kind) {
        case config::OptionKind::boolean: return "`true`, `false`";
        case config::OptionKind::integer:
            if (std::isinf(o.max)) return "≥ " + format_number(o.min);
            return format_number(o.min) + "–" + format_number(o.max);
        case config::OptionKind::number: {
            std::string lo = (o.min_inclusive ? "≥ " : "> ") + format_number(o.min);
            return std::isinf(o.max) ? lo : lo + ", ≤ " + format_number(o.max);
        }
        case config::OptionKind::choice: {
            std::string out;
            for (const auto& c : o.choices) out += (out.empty() ? "" : ", ") + ("`\"" + c + "\"`");
            return out;
        }
        case config::OptionKind::index_list: return "layer indices ≥ 0";
    }
    return "";
}

}  // namespace

std::string options_markdown() {
    std::string md = "| `strategy.type` | option | type | default | allowed | meaning |\n"
                     "|---|---|---|---|---|---|\n";
    for (const auto& d : registry()) {
        if (d.options.empty()) md += "| `" + d.name + "` | — | | | | no options |\n";
        for (const auto& o : d.options)
            md += "| `" + d.name + "` | `" + o.key + "` | " + config::option_kind_name(o.kind) + " | " +
                  default_text(o) + (o.unit.empty() ? "" : " " + o.unit) + " | " + range_text(o) + " | " +
                  o.help + " |\n";
    }
    return md;
}

// ---- memory ---------------------------------------------------------------------------------

int64_t DeviceMemoryEstimate::total() const {
    return std::accumulate(bytes.begin(), bytes.end(), int64_t{0});
}

int64_t ModelCost::parameters() const {
    return std::accumulate(layer_parameters.begin(), layer_parameters.end(), int64_t{0});
}

int64_t ModelCost::activations_per_example() const {
    // The loss keeps a copy of the output too (cross-entropy's softmax, mse's target).
    return activations_of(0, layer_activations.size()) + output_numel;
}

int64_t ModelCost::activations_of(size_t first, size_t last) const {
    const Held h = held_of(first, last);
    return h.kept + h.transient;
}

ModelCost::Held ModelCost::held_of(size_t first, size_t last) const {
    last = std::min(last, layer_activations.size());
    // in_flight: what one layer adds while its backward runs (its recomputed activations);
    // gradients: a layer's output gradient and its input gradient, alive during its backward.
    int64_t held = 0, in_flight = 0, gradients = 0;
    for (size_t l = first; l < last; ++l) {
        switch (recompute) {
            case nn::Recompute::none: held += layer_activations[l]; break;
            case nn::Recompute::selective:
                held += layer_activations[l] - layer_scores[l];
                in_flight = std::max(in_flight, layer_scores[l]);
                break;
            case nn::Recompute::full:
                // Each layer keeps its input; the last layer of a model or stage is not
                // recomputed and keeps what it keeps.
                held += l + 1 == last ? layer_activations[l] : (l == 0 ? input_numel : layer_outputs[l - 1]);
                in_flight = std::max(in_flight, layer_activations[l]);
                break;
        }
        gradients = std::max(gradients, 2 * layer_outputs[l] + (l < layer_backward.size() ? layer_backward[l] : 0));
    }
    return {held, in_flight + gradients};
}

int optimizer_state_per_parameter(const optim::OptimizerConfig& o) {
    if (o.type == "adam" || o.type == "adamw") return 2;
    return o.momentum > 0 ? 1 : 0;
}

int64_t rows_of(int64_t batch, int r, int shards) {
    if (shards <= 0) return 0;
    return batch / shards + (r < batch % shards ? 1 : 0);
}

ModelCost model_cost(const config::Experiment& e, const Shape& input) {
    const nn::ModelSummary model = nn::summarize(e.layers, input, e.loss);
    ModelCost cost;
    cost.recompute = nn::recompute_from_name(e.train.recompute);
    cost.input = input;
    cost.input_numel = input.numel();
    cost.output_numel = model.output.numel();
    for (const auto& row : model.layers) {
        if (row.depth != 0) continue;  // a residual's body is counted in its row
        // A repeated layer's row is its copies, each a layer of its own (nn::expand_repeats).
        for (int64_t c = 0; c < row.copies; ++c) {
            cost.layer_parameters.push_back(row.parameters / row.copies);
            cost.layer_flops.push_back(row.flops / row.copies);
            cost.layer_outputs.push_back(row.output.numel());
            cost.layer_activations.push_back(row.activations / row.copies);
            cost.layer_scores.push_back(row.attention_scores / row.copies);
            cost.layer_backward.push_back(row.backward_extra / row.copies);
        }
    }
    return cost;
}

std::vector<DeviceMemoryEstimate> blank_estimates(const config::Experiment& e) {
    const size_t n = std::max<size_t>(1, e.devices.size());
    std::vector<DeviceMemoryEstimate> out(n);
    for (size_t r = 0; r < n; ++r)
        out[r].device = r < e.devices.size() ? e.devices[r] : "cpu:" + std::to_string(r);
    return out;
}

void whole_replica(DeviceMemoryEstimate& d, const config::Experiment& e, const ModelCost& m,
                   int64_t rows) {
    const int64_t p = m.parameters();
    d.set(MemCategory::parameters, p);
    d.set(MemCategory::gradients, p);
    d.set(MemCategory::optimizer_state, optimizer_state_per_parameter(e.optimizer) * p);
    d.set(MemCategory::activations, m.activations_per_example() * rows);
}

std::vector<DeviceMemoryEstimate> estimate_memory(const config::Experiment& e, const ModelCost& m) {
    const StrategyDescriptor* d = find_strategy(e.strategy.type);
    if (!d || e.devices.size() <= 1 || !d->memory) {
        auto out = blank_estimates(e);
        for (auto& device : out) {
            whole_replica(device, e, m, e.data.batch_size);
        }
        return out;
    }
    return d->memory(e, m);
}

StepPicture step_picture(const config::Experiment& e) {
    const StrategyDescriptor* d = find_strategy(e.strategy.type);
    if (d && d->picture && e.devices.size() > 1) return d->picture(e);
    StepPicture p;
    p.layout = StepPicture::Layout::one;
    p.subtitles = {"forward → backward → step"};
    p.caption = "One device does everything: nothing moves between devices.";
    if (e.devices.size() > 1)  // what Start would refuse (check_device_count), said before it
        p.note = "single runs on one device: choose a parallel strategy for " + std::to_string(e.devices.size()) +
                 " devices";
    return p;
}

}  // namespace paralab::strategy
