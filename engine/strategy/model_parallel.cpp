// model_parallel: consecutive top-level layers on different devices, one micro-batch, so that
// each device waits while the others work (DESIGN.md §3). `strategy.split` lists the first
// layer index of each stage after the first (stages.h); without it the stages are balanced by
// parameter count. The machinery is the pipeline's (stages.cpp) with a single micro-batch.
#include "engine/strategy/stages.h"
#include "engine/strategy/strategies.h"

namespace paralab::strategy {

std::unique_ptr<Strategy> make_model_parallel() {
    return stages::make_staged_strategy(/*pipelined=*/false);
}

}  // namespace paralab::strategy
