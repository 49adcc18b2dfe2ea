// model_parallel: consecutive top-level layers on different devices, one micro-batch, so that
// each device waits while the others work (docs/strategies.md). `strategy.split` lists the first
// layer index of each stage after the first (stages.h); without it the stages are balanced by
// compute (forward FLOPs). It is hybrid with pp over every device and one micro-batch (hybrid.h).
#include "engine/strategy/hybrid.h"
#include "engine/strategy/stages.h"

namespace paralab::strategy {

namespace {

// hybrid's options for model_parallel on `world` devices: a stage on each, one micro-batch.
config::StrategyConfig as_hybrid(const config::Experiment& e, int world) {
    config::StrategyConfig h = default_config("hybrid");
    h.options["pp"] = int64_t{world};
    h.options["schedule"] = std::string("gpipe");
    h.options["split"] = option<std::vector<int64_t>>(e.strategy, "split");
    return h;
}

}  // namespace

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
        .make = [] {
            return make_hybrid("model_parallel", as_hybrid, [](const config::Experiment& e, int) { stages::check_stages(e); });
        },
        .check_options = stages::check_stages,
        .memory = [](const config::Experiment& e, const ModelCost& m) { return hybrid_memory(e, m, as_hybrid); },
        .picture = [](const config::Experiment& e) { return stages::stage_picture(e, false); },
        .pipeline = [](const config::Experiment& e) {
            return PipelineShape{static_cast<int>(e.devices.size()), 1, "one at a time"};
        },
        .as_hybrid = as_hybrid,
    };
}

}  // namespace paralab::strategy
