// model_parallel: consecutive top-level layers on different devices, one micro-batch, so that
// each device waits while the others work (docs/strategies.md). `strategy.split` lists the first
// layer index of each stage after the first (stages.h); without it the stages are balanced by
// compute (forward FLOPs). The machinery is the pipeline's (stages.cpp) with a single micro-batch.
#include "engine/strategy/stages.h"

namespace paralab::strategy {

StrategyDescriptor model_parallel_descriptor() {
    return {
        .name = "model_parallel",
        .options = {split_option()},
        .explanation =
            "Model parallel: consecutive top-level layers are placed on consecutive devices (balanced "
            "by compute, each layer's forward FLOPs, unless `split` says where stages begin). Activations travel forward "
            "from stage to stage and their gradients come back. Only one stage works at a time: the "
            "others wait.",
        .color = "#e377c2",
        .make = [] { return stages::make_staged_strategy(/*pipelined=*/false); },
        .check_options = stages::check_stages,
        .memory = [](const config::Experiment& e, const ModelCost& m) { return stages::stage_memory(e, m, false); },
        .picture = [](const config::Experiment& e) { return stages::stage_picture(e, false); },
        .pipeline = [](const config::Experiment& e) {
            return PipelineShape{static_cast<int>(e.devices.size()), 1, "one at a time"};
        },
    };
}

}  // namespace paralab::strategy
