// zero: ZeRO data parallelism (Rajbhandari et al.): stage 1 shards the optimizer state, stage 2
// the gradients too, stage 3 the parameters too (FSDP's schedule). It is hybrid with dp over
// every device (hybrid.h): the parts FlatShard (stages 1 and 2) and ShardedUnits (stage 3) over
// the run's group. docs/strategies.md ("zero") says what each device holds and sends.
#include "engine/strategy/hybrid.h"
#include "engine/strategy/registry.h"

namespace paralab::strategy {

namespace {

// hybrid's options for zero on `world` devices: dp over all of them.
config::StrategyConfig as_hybrid(const config::Experiment& e, int world) {
    config::StrategyConfig h = default_config("hybrid");
    h.options["dp"] = int64_t{world};
    h.options["zero"] = option<int64_t>(e.strategy, "stage");
    for (const char* key : {"prefetch", "reshard_after_forward", "sync_batchnorm"})
        h.options[key] = option<bool>(e.strategy, key);
    return h;
}

StepPicture picture(const config::Experiment& e) {
    const int64_t stage = option<int64_t>(e.strategy, "stage");
    StepPicture p;
    p.layout = StepPicture::Layout::shards;
    if (stage == 3) {
        p.subtitles.assign(e.devices.size(), "owns 1/" + std::to_string(e.devices.size()) + " of everything");
        p.down_label = "all-gather: a layer's parameters, before its forward and its backward";
        p.up_label = "reduce-scatter: a layer's gradients to their owners, after its backward";
        p.note = "Coloured cell: the shard of parameters, gradients and optimizer state a device keeps "
                 "(stage 3); a layer is whole only while it computes.";
        return p;
    }
    p.subtitles.assign(e.devices.size(), stage == 2 ? "own optimizer + grads"
                                                    : "owns 1/" + std::to_string(e.devices.size()));
    p.down_label = "all-gather: every device sends its updated shard to all";
    p.up_label = "reduce-scatter: shard k of the summed gradients goes to device k";
    p.note = std::string("Coloured cell: the shard of optimizer state") + (stage == 2 ? " and gradients" : "") +
             " a device keeps (stage " + std::to_string(stage) + ").";
    return p;
}

}  // namespace

StrategyDescriptor zero_descriptor() {
    return {
        .name = "zero",
        .options = {{.key = "stage", .kind = config::OptionKind::integer, .fallback = int64_t{1}, .min = 1,
                     .max = 3, .label = "ZeRO stage",
                     .help = "1: the optimizer state is sharded; 2: the gradients too; 3: the parameters "
                             "too (each layer gathered only while it computes)."},
                    {.key = "prefetch", .kind = config::OptionKind::boolean, .fallback = true,
                     .label = "Prefetch the next layer",
                     .help = "Stage 3: the next layer's parameters are gathered before the current layer "
                             "computes (two layers whole at once); false: each just before its own use.",
                     .shown_when_key = "stage", .shown_when_value = "3"},
                    {.key = "reshard_after_forward", .kind = config::OptionKind::boolean, .fallback = true,
                     .label = "Free parameters after forward",
                     .help = "Stage 3: a layer's gathered parameters are freed after its forward and "
                             "gathered again for its backward; false: kept until its backward.",
                     .shown_when_key = "stage", .shown_when_value = "3"},
                    sync_batchnorm_option()},
        .explanation =
            "ZeRO: like DDP, but each device keeps the optimizer state of only 1/N of the parameters "
            "and updates only that shard. Gradients are reduce-scattered (each device receives the "
            "sum for its shard) and the updated parameters are all-gathered. Stage 2 shards the "
            "gradients too: each layer's gradients go to their owners as soon as its backward is "
            "done, then are freed. Stage 3 shards the parameters too (FSDP): a layer's parameters "
            "are all-gathered just before its forward and again before its backward, and freed "
            "after each (`reshard_after_forward`); with `prefetch` the next layer's gather is made "
            "before the current layer computes.",
        .color = "#d62728",
        .make = [] { return make_hybrid("zero", as_hybrid, nullptr, ""); },
        .memory = [](const config::Experiment& e, const ModelCost& m) { return hybrid_memory(e, m, as_hybrid); },
        .picture = picture,
        .variant = {{.key = "stage", .text = "stage {}"},
                    {.key = "prefetch", .text_if_false = "no prefetch"},
                    {.key = "reshard_after_forward", .text_if_false = "kept after forward"}},
        .as_hybrid = as_hybrid,
    };
}

}  // namespace paralab::strategy
