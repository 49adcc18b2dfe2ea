// pipeline: the stages of model_parallel fed with `strategy.micro_batches` micro-batches in a
// GPipe (every forward, then every backward) or 1F1B (one forward, one backward, after a
// warm-up) schedule, so that the bubble shrinks as micro-batches are added, and 1F1B's
// activation memory stays bounded by the number of stages (DESIGN.md §3). The split, the
// schedules, the contexts that hold micro-batches in flight and grad_accum are described in
// stages.h.
#include "engine/strategy/stages.h"
#include "engine/strategy/strategies.h"

namespace paralab::strategy {

std::unique_ptr<Strategy> make_pipeline() {
    return stages::make_staged_strategy(/*pipelined=*/true);
}

}  // namespace paralab::strategy
