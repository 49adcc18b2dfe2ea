// What the registry knows of the mesh before anything runs (docs/strategies.md, "hybrid"):
// hybrid's options and their checks (a mesh that does not fit is refused naming the option), its
// memory model (the Strategy tab's, and the planner's with the paralab stack) and its diagram.
// hybrid.cpp runs it.
#include <algorithm>
#include <functional>

#include "engine/comm/device_mesh.h"
#include "engine/strategy/hybrid.h"
#include "engine/strategy/registry.h"
#include "engine/strategy/stages.h"
#include "engine/strategy/tensor_shards.h"

namespace paralab::strategy {

using comm::Axis;
using namespace tensor_shards;

namespace {

// Each attention and transformer_block spec of `layers` (residual bodies included), with its
// JSON path.
void for_each_split_spec(const std::vector<nn::LayerSpec>& layers, const std::string& prefix,
                         const std::function<void(const nn::LayerSpec&, const std::string&)>& fn) {
    for (size_t i = 0; i < layers.size(); ++i) {
        const std::string path = prefix + "[" + std::to_string(i) + "]";
        if (layers[i].type == "attention" || layers[i].type == "transformer_block") fn(layers[i], path);
        if (layers[i].type == "residual") for_each_split_spec(layers[i].layers, path + ".layers", fn);
    }
}

}  // namespace

comm::MeshShape mesh_shape_of(const config::StrategyConfig& s) {
    comm::MeshShape m;
    m.dp = static_cast<int>(option<int64_t>(s, "dp"));
    m.tp = static_cast<int>(option<int64_t>(s, "tp"));
    m.pp = static_cast<int>(option<int64_t>(s, "pp"));
    return m;
}

void check_mesh(const config::Experiment& e, int64_t world) {
    const comm::MeshShape m = mesh_shape_of(e.strategy);
    comm::DeviceMesh::check(m, world);
    const size_t layers = nn::expand_repeats(e.layers).size();
    if (static_cast<size_t>(m.pp) > layers)
        throw ConfigError("strategy.pp", std::to_string(m.pp) + " pipeline stages for a model of " +
                                             std::to_string(layers) +
                                             " top-level layers: each stage holds at least one");
    stages::check_schedule(option<std::string>(e.strategy, "schedule"), option<int64_t>(e.strategy, "interleave"),
                           option<int64_t>(e.strategy, "micro_batches"), m.pp, "strategy.pp");
    stages::check_zero_bubble(option<std::string>(e.strategy, "schedule"), option<int64_t>(e.strategy, "zero"), m.dp,
                              option<int64_t>(e.strategy, "micro_batches"));
    // Each replica's share of the batch is cut into the micro-batches: the largest share holds
    // at least one row for each.
    const int64_t micro_batches = option<int64_t>(e.strategy, "micro_batches");
    const int64_t largest_share = (e.data.batch_size + m.dp - 1) / m.dp;
    if (micro_batches > largest_share)
        throw ConfigError("strategy.micro_batches",
                          std::to_string(micro_batches) + " micro-batches, but " +
                              (m.dp > 1 ? "the largest of dp " + std::to_string(m.dp) + " replicas' shares of " : std::string()) +
                              "data.batch_size " + std::to_string(e.data.batch_size) + " has " +
                              std::to_string(largest_share) + " row" + (largest_share == 1 ? "" : "s") +
                              "; at most " + std::to_string(largest_share));
    stages::check_stage_count(m.pp, layers, "hybrid", stages::chunks_of(e));
    const auto split = option<std::vector<int64_t>>(e.strategy, "split");
    if (!split.empty()) stages::check_split(split, m.pp, layers, stages::chunks_of(e));
    // Sequence parallelism gives each device of a tensor group T/tp positions of every sample.
    if (option<bool>(e.strategy, "sequence_parallel") && m.tp > 1 && e.data.seq_len > 0 &&
        e.data.seq_len % m.tp != 0)
        throw ConfigError("data.seq_len", "sequence_parallel splits the sequence over the tensor group: " +
                                              std::to_string(e.data.seq_len) + " positions do not divide over tp " +
                                              std::to_string(m.tp));
    if (m.tp == 1) return;
    bool any = false;
    for_each_split_spec(e.layers, "model.layers", [&](const nn::LayerSpec& s, const std::string& path) {
        any = true;
        if (s.heads > 0 && s.heads % m.tp != 0)
            throw ConfigError("strategy.tp", "tp " + std::to_string(m.tp) + " does not divide the " +
                                                 std::to_string(s.heads) + " heads of " + path);
        if (s.kv_heads > 0 && s.kv_heads % m.tp != 0)
            throw ConfigError("strategy.tp", "tp " + std::to_string(m.tp) + " does not divide the " +
                                                 std::to_string(s.kv_heads) + " key/value heads of " + path);
        if (s.type == "transformer_block" && s.ffn > 0 && s.ffn % m.tp != 0)
            throw ConfigError("strategy.tp", "tp " + std::to_string(m.tp) + " does not divide the " +
                                                 std::to_string(s.ffn) + " ffn units of " + path);
    });
    if (!any)
        throw ConfigError("strategy.tp",
                          "tp splits attention and transformer_block layers, and this model has "
                          "none; use tp 1");
}

std::vector<size_t> stage_bounds_of(const std::vector<int64_t>& split, const std::vector<int64_t>& flops,
                                    const std::vector<int64_t>& params, int parts) {
    const auto layers = static_cast<int64_t>(flops.size());
    std::vector<int64_t> cuts = split;
    if (cuts.size() != static_cast<size_t>(parts - 1) && parts > 1 && parts <= layers)
        cuts = stages::balanced_split(flops, parts, params);
    std::vector<size_t> bounds{0};
    for (int64_t b : cuts) bounds.push_back(static_cast<size_t>(std::clamp<int64_t>(b, 0, layers)));
    while (static_cast<int>(bounds.size()) < parts) bounds.push_back(static_cast<size_t>(layers));
    bounds.push_back(static_cast<size_t>(layers));
    return bounds;
}

std::vector<size_t> stage_bounds_of(const config::StrategyConfig& s, nn::Sequential& net, int parts) {
    std::vector<int64_t> flops, counts;
    for (size_t i = 0; i < net.size(); ++i) {
        flops.push_back(net.at(i).flops_per_sample());
        counts.push_back(net.at(i).parameter_count());
    }
    return stage_bounds_of(option<std::vector<int64_t>>(s, "split"), flops, counts, parts);
}

namespace {

int zero_of(const config::StrategyConfig& s) { return static_cast<int>(option<int64_t>(s, "zero")); }

void check_hybrid(const config::Experiment& e) {
    check_mesh(e, std::max<int64_t>(1, static_cast<int64_t>(e.devices.size())));
}

// Per device: parameters and gradients of its stage's tensor shard (the replicated layers whole,
// 1/tp of every attention and block); optimizer state for them, 1/dp of it under zero 1 to 3;
// at zero 2 the gradients of its 1/dp shard plus, layer by layer (one micro-batch, no
// grad_accum, no sequence_parallel), its largest top-level layer's, otherwise the whole flat
// gradients of the step; at zero 3 its chunk of each top-level layer (sharded_units.h) plus its
// largest top-level layer whole, for the parameters (gathered) and the gradients alike;
// activations of its stage's layers as its tensor shard holds them (tensor_shards::
// shard_cost, sequence parallelism included) for a micro-batch of
// its replica's rows, times the micro-batches its schedule holds in flight (stages.h), the
// loss's copy of the output on the last stage.
std::vector<DeviceMemoryEstimate> mesh_memory(const config::Experiment& e, const ModelCost& m) {
    auto out = blank_estimates(e);
    comm::MeshShape axes = mesh_shape_of(e.strategy);
    axes.dp = std::max(1, axes.dp);
    axes.tp = std::max(1, axes.tp);
    axes.pp = std::max(1, axes.pp);
    const comm::DeviceMesh mesh(axes);
    const int tp = axes.tp, dp = axes.dp, pp = axes.pp, zero = zero_of(e.strategy);
    const int64_t layers = static_cast<int64_t>(m.layer_parameters.size());
    const bool sequence = tp > 1 && option<bool>(e.strategy, "sequence_parallel");
    ModelCost shard = m;  // one tensor rank's
    shard_the_cost(e, tp, sequence, shard);
    const std::vector<int64_t>& layer_params = shard.layer_parameters;
    // interleaved_1f1b: pp · v chunks, global chunk g on stage g mod pp (one chunk per stage when
    // the options do not fit the model).
    int v = stages::chunks_of(e);
    if (pp < 2 || int64_t{pp} * v > layers) v = 1;
    const int parts = pp * v;
    const std::vector<size_t> bounds =
        m.layer_flops.size() == m.layer_parameters.size()
            ? stage_bounds_of(option<std::vector<int64_t>>(e.strategy, "split"), m.layer_flops, m.layer_parameters, parts)
            : stage_bounds_of({}, std::vector<int64_t>(m.layer_parameters.size(), 1), m.layer_parameters, parts);
    const int64_t micro = std::max<int64_t>(1, option<int64_t>(e.strategy, "micro_batches"));
    const stages::Schedule schedule = v > 1 ? stages::Schedule::interleaved_1f1b
                                      : stages::schedule_of(e) == stages::Schedule::gpipe ? stages::Schedule::gpipe
                                                                                          : stages::Schedule::one_f_one_b;
    // zb_h1 holds a micro-batch's activations until its weight gradients (W), which also read
    // each layer's output gradient from its input-gradient pass (B) on.
    const bool zero_bubble = v == 1 && stages::schedule_of(e) == stages::Schedule::zb_h1;
    const int64_t k = optimizer_state_per_parameter(e.optimizer);
    // zero 2 reduces each layer's gradients as its backward ends when it runs once a step.
    const bool eager = e.train.grad_accum == 1 && micro == 1 && !sequence && e.data.batch_size >= dp;
    const bool prefetch = option<bool>(e.strategy, "prefetch");
    const bool reshard = option<bool>(e.strategy, "reshard_after_forward");
    for (size_t i = 0; i < out.size(); ++i) {
        auto& d = out[i];
        if (static_cast<int>(i) >= mesh.size()) {
            d.role = "outside the mesh of " + std::to_string(mesh.size()) + " devices";
            continue;
        }
        const comm::MeshCoords at = mesh.coords(static_cast<int>(i));
        const int r = at.dp, st = at.pp;
        const int64_t rows = rows_of(e.data.batch_size, r, dp);
        const int64_t m_here = std::clamp<int64_t>(std::min(micro, rows), 1, 1 << 20);
        const int64_t micro_rows = (rows + m_here - 1) / m_here;
        // Per chunk: its micro-batches in flight at most (the largest flush part's schedule).
        const std::vector<int> in_flight =
            v > 1 ? stages::chunk_in_flight(stages::stage_schedule(schedule, st, pp,
                                                                   stages::flush_parts(schedule, pp, static_cast<int>(m_here)).front(), v),
                                            v)
                  : std::vector<int>{stages::contexts_needed(schedule, st, pp, static_cast<int>(m_here))};
        // units: at zero 3 its chunk of each top-level layer's parameters (sharded_units.h);
        // pair: the most two consecutive units of a chunk hold (prefetch)
        int64_t params = 0, acts = 0, transient = 0, largest = 0, units = 0, pair = 0;
        for (int c = 0; c < v; ++c) {
            const size_t g = static_cast<size_t>(c) * static_cast<size_t>(pp) + static_cast<size_t>(st);
            const auto first = static_cast<size_t>(bounds[g]);
            const auto last = static_cast<size_t>(bounds[g + 1]);
            int64_t previous = 0;  // the chunk's last unit so far
            for (size_t l = first; l < last; ++l) {
                params += layer_params[l];
                largest = std::max(largest, layer_params[l]);
                units += data::shard_of_dataset(layer_params[l], r, dp).count;
                if (layer_params[l] == 0) continue;
                pair = std::max(pair, previous + layer_params[l]);
                previous = layer_params[l];
            }
            const ModelCost::Held h = shard.held_of(first, last);
            const int64_t per_micro = h.kept + (static_cast<int>(g) == parts - 1 ? m.output_numel : 0);
            int64_t held = per_micro * in_flight[static_cast<size_t>(c)];
            if (zero_bubble && m.layer_outputs.size() == layer_params.size() &&
                shard.layer_activations.size() == layer_params.size()) {
                // A layer with parameters hands what it kept (its input) and its output gradient
                // to its W at B; a context keeps the other layers' until its next forward.
                int64_t inputs = 0, output_grads = 0;
                for (size_t l = first; l < last; ++l)
                    if (layer_params[l] > 0) {
                        inputs += shard.layer_activations[l];
                        output_grads += m.layer_outputs[l];
                    }
                inputs = std::min(inputs, per_micro);
                int64_t before_b = 0, before_w = 0, most = 0;  // micro-batches past F not B, past B not W
                for (const stages::Op& op : stages::stage_schedule(stages::Schedule::zb_h1, st, pp, static_cast<int>(m_here))) {
                    if (op.pass == stages::Pass::forward) ++before_b;
                    else if (op.pass == stages::Pass::backward) --before_b, ++before_w;
                    else --before_w;
                    most = std::max(most, (before_b + before_w) * inputs + before_w * output_grads);
                }
                held = (per_micro - inputs) * in_flight[static_cast<size_t>(c)] + most;
            }
            acts += held;
            transient = std::max(transient, h.transient);
        }
        d.role = mesh.label(static_cast<int>(i));
        if (pp > 1) {
            d.role += ": layers ";
            for (int c = 0; c < v; ++c) {
                const size_t g = static_cast<size_t>(c) * static_cast<size_t>(pp) + static_cast<size_t>(st);
                if (c > 0) d.role += ", ";
                d.role += std::to_string(bounds[g]) + "–" + std::to_string(std::max(bounds[g] + 1, bounds[g + 1]) - 1);
            }
        }
        const bool sharded = dp > 1;
        const int64_t shard_count = zero >= 3 ? units : data::shard_of_dataset(params, r, dp).count;
        // zero 3: the units gathered at once: every one (kept from forward to backward), two
        // consecutive ones (prefetch) or the largest.
        const int64_t gathered = !reshard ? params : prefetch ? std::max(pair, largest) : largest;
        d.set(MemCategory::parameters, zero >= 3 && sharded ? shard_count + gathered : params);
        d.set(MemCategory::gradients, zero >= 3 && sharded   ? shard_count + largest
                                      : zero >= 2 && sharded ? shard_count + (eager ? largest : params)
                                                             : params);
        d.set(MemCategory::optimizer_state, zero >= 1 && sharded ? k * shard_count : k * params);
        // zero 2 layer by layer: a layer's gradients packed for their owners
        d.set(MemCategory::communication, zero == 2 && sharded && eager ? largest : 0);
        d.set(MemCategory::activations, (acts + transient) * micro_rows);
    }
    return out;
}

StepPicture hybrid_picture(const config::Experiment& e) {
    comm::MeshShape mesh = mesh_shape_of(e.strategy);
    mesh.dp = std::max(1, mesh.dp);
    mesh.tp = std::max(1, mesh.tp);
    mesh.pp = std::max(1, mesh.pp);
    const int zero = zero_of(e.strategy);
    StepPicture p;
    const bool fits = mesh.devices() == static_cast<int64_t>(e.devices.size());
    p.layout = fits ? StepPicture::Layout::mesh : StepPicture::Layout::shards;
    p.mesh = mesh;
    if (fits) {
        const comm::DeviceMesh grid(mesh);
        for (int k = 0; k < grid.size(); ++k) p.subtitles.push_back(grid.label(k));
    }
    p.down_label = "tp group: all-reduce after attention and after the MLP (forward and backward)";
    p.up_label = zero >= 3   ? "dp group: all-gather of a layer's parameters before its forward and its backward, "
                                    "reduce-scatter of its gradients after"
                 : zero == 2 ? "dp group: gradients summed into their owners' shards, all-gather of the parameters"
                 : zero == 1 ? "dp group: reduce-scatter of the gradients, all-gather of the parameters"
                                  : "dp group: all-reduce of the gradients";
    p.caption = mesh.pp > 1
                    ? "Each stage's runs of tp consecutive devices split its blocks; a stage's activations go "
                      "to the same tensor rank of the next stage, micro-batch after micro-batch; devices "
                      "of the same stage and tensor rank sum their gradients."
                    : "Each run of tp consecutive devices is one replica of the tensor-parallel model and "
                      "trains its 1/dp of the batch; devices of the same tensor rank sum their gradients.";
    if (mesh.pp > 1 && stages::chunks_of(e) > 1) {
        p.caption += " Interleaved: each stage holds ";
        p.caption += std::to_string(stages::chunks_of(e));
        p.caption += " chunks of layers, and the activations go around the stages once per chunk.";
    }
    if (zero == 2 && mesh.dp > 1)
        p.caption += " ZeRO-2: each device keeps the optimizer state and the gradients of its 1/dp of "
                     "its part only; a layer's gradients are freed once summed into their owners' shards.";
    if (zero >= 3 && mesh.dp > 1)
        p.caption += " ZeRO-3: each device keeps its 1/dp of its part's parameters, gradients and "
                     "optimizer state; a layer's parameters are whole only while it computes.";
    if (mesh.dp * mesh.tp * mesh.pp != static_cast<int>(e.devices.size()))
        p.note = "dp · tp · pp must be the number of devices (" + std::to_string(e.devices.size()) + ")";
    return p;
}

}  // namespace

std::vector<DeviceMemoryEstimate> hybrid_memory(const config::Experiment& e, const ModelCost& m, HybridPreset preset) {
    if (!preset) return mesh_memory(e, m);
    config::Experiment he = e;
    he.strategy = preset(e, std::max(1, static_cast<int>(e.devices.size())));
    return mesh_memory(he, m);
}

StrategyDescriptor hybrid_descriptor() {
    using config::OptionKind;
    return {
        .name = "hybrid",
        .options =
            {{.key = "dp", .kind = OptionKind::integer, .fallback = int64_t{1}, .min = 1, .max = 1 << 20, .label = "Data parallel",
              .help = "Replicas: groups of tp devices, each training its 1/dp of the global batch; "
                      "dp · tp · pp is the device count."},
             {.key = "tp", .kind = OptionKind::integer, .fallback = int64_t{1}, .min = 1, .max = 1 << 20, .label = "Tensor parallel",
              .help = "Consecutive devices that split every attention and transformer_block (heads and "
                      "ffn must divide by it)."},
             {.key = "pp", .kind = OptionKind::integer, .fallback = int64_t{1}, .min = 1, .max = 1 << 20, .label = "Pipeline stages",
              .help = "Pipeline stages of dp · tp devices each, the top-level layers balanced by forward "
                      "FLOPs."},
             {.key = "zero", .kind = OptionKind::integer, .fallback = int64_t{0}, .min = 0, .max = 3,
              .label = "ZeRO stage",
              .help = "Over the data-parallel group: 0 all-reduces the gradients; 1 shards the optimizer "
                      "state; 2 the gradients too; 3 the parameters too, each layer gathered for its "
                      "forward and backward."},
             {.key = "prefetch", .kind = OptionKind::boolean, .fallback = true, .label = "Prefetch the next layer",
              .help = "zero 3: the next layer's parameters are gathered before the current layer computes "
                      "(two layers whole at once); false: each just before its own use.",
              .shown_when_key = "zero", .shown_when_value = "3"},
             {.key = "reshard_after_forward", .kind = OptionKind::boolean, .fallback = true,
              .label = "Free parameters after forward",
              .help = "zero 3: a layer's gathered parameters are freed after its forward and gathered again "
                      "for its backward; false: kept until its backward.",
              .shown_when_key = "zero", .shown_when_value = "3"},
             [] {
                 config::OptionSpec o = sync_batchnorm_option();
                 o.label = "SyncBatchNorm (statistics over each dp group)";
                 o.help = "Batch-norm layers normalise with the statistics of every replica's rows of a "
                          "micro-batch, summed over the dp group; false: each replica its own rows'.";
                 return o;
             }(),
             {.key = "micro_batches", .kind = OptionKind::integer, .fallback = int64_t{1}, .min = 1,
              .max = 1 << 20, .label = "Micro-batches",
              .help = "Micro-batches per optimizer step per replica, flowing through the pipeline stages."},
             schedule_option("1f1b", "stage", "pp"),
             interleave_option("stage", "pp"),
             [] {
                 config::OptionSpec o = split_option();
                 o.help = "The first top-level layer index of each stage (interleaved: each chunk) after the "
                          "first: pp · interleave − 1 strictly increasing indices in (0, L); absent: balanced "
                          "by compute (each layer's forward FLOPs).";
                 return o;
             }(),
             {.key = "sequence_parallel", .kind = OptionKind::boolean, .fallback = false,
              .label = "Sequence parallelism",
              .help = "Megatron's sequence parallelism in the tensor-parallel groups: inside the blocks, "
                      "layernorms and dropout on 1/tp of the positions, all-gather and reduce-scatter "
                      "along the sequence in place of the all-reduces. data.seq_len must divide by tp."}},
        .explanation =
            "Hybrid: a mesh of `dp` × `tp` (× `pp`) devices. Each `tp` consecutive devices split every "
            "attention and transformer_block as tensor_parallel does, and together are one replica that "
            "trains 1/`dp` of the global batch; the devices of the same tensor rank sum their gradients "
            "(an all-reduce at `zero` 0; at `zero` 1 a reduce-scatter, each updating its 1/`dp` of the "
            "parameters with 1/`dp` of the optimizer state, then an all-gather; at `zero` 2 each keeps "
            "only its 1/`dp` of the gradients too, a layer's summed into their owners' shards as its "
            "backward ends; at `zero` 3 its 1/`dp` of the parameters too, a layer's gathered for each of "
            "its forwards and backwards). With `pp` stages the "
            "layers are split as a pipeline's, each stage `dp` × `tp` devices, `micro_batches` flowing "
            "through them in the `schedule` (interleaved_1f1b: `interleave` chunks of layers per stage, "
            "the activations going around the stages once per chunk). paralab plan predicts every option.",
        .color = "#393b79",
        .min_devices = 1,
        .max_devices = 0,
        .device_rule = "dp · tp · pp devices",
        .make = [] { return make_hybrid("hybrid", nullptr); },
        .check_options = check_hybrid,
        .memory = [](const config::Experiment& e, const ModelCost& m) { return hybrid_memory(e, m); },
        .picture = hybrid_picture,
        .variant = {{.key = "dp", .text = "dp {}"},
                    {.key = "tp", .text = "tp {}"},
                    {.key = "pp", .text = "pp {}"},
                    {.key = "zero", .text = "zero {}"},
                    {.key = "sequence_parallel", .text = "sequence parallel"}},
        .pipeline = [](const config::Experiment& e) {
            const comm::MeshShape mesh = mesh_shape_of(e.strategy);
            return PipelineShape{mesh.pp, static_cast<int>(option<int64_t>(e.strategy, "micro_batches")),
                                 option<std::string>(e.strategy, "schedule"), stages::chunks_of(e),
                                 static_cast<int>(mesh.devices())};
        },
    };
}

}  // namespace paralab::strategy
