// A run in this process: one rank thread per device of the experiment, collectives between
// threads (or the GPUs' communicators), the strategy's device 0 evaluating.
#include <thread>

#include "engine/comm/gpu.h"
#include "engine/run/training.h"
#include "engine/strategy/registry.h"

namespace paralab::run::detail {

config::RunSummary run_local(const config::Experiment& e, RunObserver* observer, RunControl* control,
                             int compute_threads, RunArtifacts* artifacts) {
    config::RunSummary summary;
    summary.name = e.name;
    summary.strategy = e.strategy.type;
    summary.devices = e.devices;

    Prepared p = prepare(e, compute_threads, false);
    check_straggler(e, e.devices);
    std::vector<Device*> world;
    for (auto& d : p.devices) world.push_back(d.get());

    RunContext ctx = make_context(e, p, world);
    if (control) ctx.stop_requested = &control->stop;
    std::unique_ptr<comm::Group> group = comm::make_device_group(world);  // threads, or the GPUs'
    ctx.group = group.get();
    auto strat = strategy::make_strategy(e);
    summary.parameters = p.reference->parameter_count();
    strat->setup(ctx, *p.reference);
    p.reference.reset();  // the strategy holds the model from here
    p.scratch.reset();

    auto schedule = optim::make_schedule(e.schedule, e.optimizer.lr, ctx.total_steps);
    auto eval_loss = nn::make_loss(e.loss);
    MetricsBus bus(observer, static_cast<int>(world.size()), summary.devices.front());
    Shared sh(e, p.splits, *strat, ctx, bus, control, *eval_loss, *schedule,
              steps_per_epoch(e, ctx.train_size));
    sh.base = summary;
    if (observer) observer->on_start(e, ctx.total_steps);

    ctx.t0 = Clock::now();
    run_local_ranks(sh, static_cast<int>(world.size()));
    close_summary(summary, sh, Clock::now());
    // Memory as training left it: the evaluation below runs on device 0 and would add its own
    // activations to that device's peak only.
    record_memory(summary, artifacts, world);
    evaluate_at_end(summary, observer, sh, summary.steps, *world[0],
                    [&](const Tensor& x) { return strat->predict(x); });
    if (artifacts) {
        artifacts->parameters = strat->parameters();
        artifacts->buffers = strat->buffers();
    }
    if (observer) observer->on_finish(summary);
    return summary;
}

}  // namespace paralab::run::detail
