// pipeline: the stages of model_parallel fed with `strategy.micro_batches` micro-batches in a
// GPipe (every forward, then every backward) or 1F1B (one forward, one backward, after a
// warm-up) schedule, so that the bubble shrinks as micro-batches are added, and 1F1B's
// activation memory stays bounded by the number of stages (docs/strategies.md). The split, the
// schedules, the contexts that hold micro-batches in flight and grad_accum are described in
// stages.h.
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
                     .choices = {"gpipe", "1f1b"}, .label = "Schedule",
                     .help = "gpipe: every forward, then every backward; 1f1b: one forward and one "
                             "backward in turn after a warm-up."},
                    split_option()},
        .explanation =
            "Pipeline: the stages of model parallel, with the batch cut into `micro_batches` so that "
            "stages work on different micro-batches at once. GPipe runs all forwards, then all "
            "backwards; 1F1B alternates one forward and one backward after a warm-up. The idle bubble "
            "is (p−1)/(m+p−1) of the step; GPipe holds every micro-batch's activations, 1F1B at most "
            "as many as there are stages.",
        .color = "#17becf",
        .make = [] { return stages::make_staged_strategy(/*pipelined=*/true); },
        .check_options = stages::check_stages,
        .memory = [](const config::Experiment& e, const ModelCost& m) { return stages::stage_memory(e, m, true); },
        .picture = [](const config::Experiment& e) { return stages::stage_picture(e, true); },
        .variant = {{.key = "schedule", .text = "{}"}, {.key = "micro_batches", .text = "{} micro-batches"}},
        .pipeline = [](const config::Experiment& e) {
            return PipelineShape{static_cast<int>(e.devices.size()),
                                 static_cast<int>(option<int64_t>(e.strategy, "micro_batches")),
                                 option<std::string>(e.strategy, "schedule")};
        },
    };
}

}  // namespace paralab::strategy
