// model_parallel: consecutive top-level layers on different devices, one micro-batch, so that
// each device waits while the others work (docs/strategies.md). `strategy.split` lists the first
// layer index of each stage after the first (stages.h); without it the stages are balanced by
// parameter count. The machinery is the pipeline's (stages.cpp) with a single micro-batch.
#include "engine/strategy/stages.h"

namespace paralab::strategy {

StrategyDescriptor model_parallel_descriptor() {
    StrategyDescriptor d;
    d.name = "model_parallel";
    d.options = {split_option()};
    d.explanation =
        "Model parallel: consecutive top-level layers are placed on consecutive devices (balanced "
        "by parameter count unless `split` says where stages begin). Activations travel forward "
        "from stage to stage and their gradients come back. Only one stage works at a time: the "
        "others wait.";
    d.color = "#e377c2";
    d.make = [] { return stages::make_staged_strategy(/*pipelined=*/false); };
    d.check_options = stages::check_stages;
    d.memory = [](const config::Experiment& e, const ModelCost& m) { return stages::stage_memory(e, m, false); };
    d.picture = [](const config::Experiment& e) { return stages::stage_picture(e, false); };
    return d;
}

}  // namespace paralab::strategy
