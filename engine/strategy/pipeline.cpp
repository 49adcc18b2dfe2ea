// pipeline: the stages of model_parallel fed with `strategy.micro_batches` micro-batches in a
// GPipe, 1F1B, interleaved 1F1B or zero-bubble (zb_h1) schedule (docs/strategies.md). It is hybrid with pp over every
// device (hybrid.h); the schedules and the split are stages.h's.
#include "engine/strategy/hybrid.h"
#include "engine/strategy/stages.h"

namespace paralab::strategy {

namespace {

// hybrid's options for pipeline on `world` devices: a stage on each.
config::StrategyConfig as_hybrid(const config::Experiment& e, int world) {
    config::StrategyConfig h = default_config("hybrid");
    h.options["pp"] = int64_t{world};
    for (const char* key : {"micro_batches", "interleave"}) h.options[key] = option<int64_t>(e.strategy, key);
    h.options["schedule"] = option<std::string>(e.strategy, "schedule");
    h.options["split"] = option<std::vector<int64_t>>(e.strategy, "split");
    return h;
}

}  // namespace

StrategyDescriptor pipeline_descriptor() {
    using config::OptionKind;
    return {
        .name = "pipeline",
        .options = {{.key = "micro_batches", .kind = OptionKind::integer, .fallback = int64_t{4}, .min = 1,
                     .label = "Micro-batches",
                     .help = "The global batch is cut into this many micro-batches, which flow through "
                             "the stages one after another."},
                    schedule_option("gpipe", "device", "the devices"),
                    interleave_option("device", "devices"),
                    split_option()},
        .explanation =
            "Pipeline: the stages of model parallel, with the batch cut into `micro_batches` so that "
            "stages work on different micro-batches at once. GPipe runs all forwards, then all "
            "backwards; 1F1B alternates one forward and one backward after a warm-up. The idle bubble "
            "is (p−1)/(m+p−1) of the step; GPipe holds every micro-batch's activations, 1F1B at most "
            "as many as there are stages. interleaved_1f1b cuts the layers into p · `interleave` chunks, "
            "device d holding chunks d, d + p, ..., so that the activations go around the devices "
            "`interleave` times and the bubble shrinks to (p−1)/(v·m) of the ideal step, for v times "
            "the messages. zb_h1 (zero bubble, Qi et al. 2023) splits each backward into B, the input "
            "gradient the stage before waits for, and W, the weight gradient nobody waits for: W passes "
            "fill what would be 1F1B's cooldown, and the bubble falls to about a third, for the same "
            "micro-batches in flight.",
        .color = "#17becf",
        .make = [] {
            return make_hybrid("pipeline", as_hybrid, [](const config::Experiment& e, int) { stages::check_stages(e); });
        },
        .check_options = stages::check_stages,
        .memory = [](const config::Experiment& e, const ModelCost& m) { return hybrid_memory(e, m, as_hybrid); },
        .picture = [](const config::Experiment& e) { return stages::stage_picture(e, true); },
        .variant = {{.key = "schedule", .text = "{}"},
                    {.key = "interleave", .text = "{} chunks"},
                    {.key = "micro_batches", .text = "{} micro-batches"}},
        .pipeline = [](const config::Experiment& e) {
            return PipelineShape{static_cast<int>(e.devices.size()),
                                 static_cast<int>(option<int64_t>(e.strategy, "micro_batches")),
                                 option<std::string>(e.strategy, "schedule"), stages::chunks_of(e)};
        },
        .as_hybrid = as_hybrid,
    };
}

}  // namespace paralab::strategy
