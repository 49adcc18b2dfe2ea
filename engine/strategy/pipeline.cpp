// pipeline: the stages of model_parallel fed with `strategy.micro_batches` micro-batches in a
// GPipe (every forward, then every backward), 1F1B (one forward, one backward, after a
// warm-up) or interleaved 1F1B (`strategy.interleave` model chunks per device) schedule, so
// that the bubble shrinks as micro-batches (and chunks) are added, and 1F1B's activation memory
// stays bounded by the number of stages (docs/strategies.md). The split, the schedules, the
// contexts that hold micro-batches in flight and grad_accum are described in stages.h.
#include "engine/strategy/stages.h"

namespace paralab::strategy {

StrategyDescriptor pipeline_descriptor() {
    using config::OptionKind;
    return {
        .name = "pipeline",
        .options = {{.key = "micro_batches", .kind = OptionKind::integer, .fallback = int64_t{4}, .min = 1,
                     .label = "Micro-batches",
                     .help = "The global batch is cut into this many micro-batches, which flow through "
                             "the stages one after another."},
                    {.key = "schedule", .kind = OptionKind::choice, .fallback = std::string("gpipe"),
                     .choices = {"gpipe", "1f1b", "interleaved_1f1b"}, .label = "Schedule",
                     .help = "gpipe: every forward, then every backward; 1f1b: one forward and one "
                             "backward in turn after a warm-up; interleaved_1f1b: 1f1b over `interleave` "
                             "model chunks per device (micro-batches a multiple of the devices)."},
                    {.key = "interleave", .kind = OptionKind::integer, .fallback = int64_t{1}, .min = 1,
                     .max = 1024, .label = "Chunks per device",
                     .help = "interleaved_1f1b: the layers are cut into devices × interleave chunks and "
                             "device d holds chunks d, d + devices, ...; the bubble shrinks by this "
                             "factor. 1 with the other schedules.",
                     .shown_when_key = "schedule", .shown_when_value = "interleaved_1f1b"},
                    split_option()},
        .explanation =
            "Pipeline: the stages of model parallel, with the batch cut into `micro_batches` so that "
            "stages work on different micro-batches at once. GPipe runs all forwards, then all "
            "backwards; 1F1B alternates one forward and one backward after a warm-up. The idle bubble "
            "is (p−1)/(m+p−1) of the step; GPipe holds every micro-batch's activations, 1F1B at most "
            "as many as there are stages. interleaved_1f1b cuts the layers into p · `interleave` chunks, "
            "device d holding chunks d, d + p, ..., so that the activations go around the devices "
            "`interleave` times and the bubble shrinks to (p−1)/(v·m) of the ideal step, for v times "
            "the messages.",
        .color = "#17becf",
        .make = [] { return stages::make_staged_strategy(/*pipelined=*/true); },
        .check_options = stages::check_stages,
        .memory = [](const config::Experiment& e, const ModelCost& m) { return stages::stage_memory(e, m, true); },
        .picture = [](const config::Experiment& e) { return stages::stage_picture(e, true); },
        .variant = {{.key = "schedule", .text = "{}"},
                    {.key = "interleave", .text = "{} chunks"},
                    {.key = "micro_batches", .text = "{} micro-batches"}},
        .pipeline = [](const config::Experiment& e) {
            return PipelineShape{static_cast<int>(e.devices.size()),
                                 static_cast<int>(option<int64_t>(e.strategy, "micro_batches")),
                                 option<std::string>(e.strategy, "schedule"), stages::chunks_of(e)};
        },
    };
}

}  // namespace paralab::strategy
