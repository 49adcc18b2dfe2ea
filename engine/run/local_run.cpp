// A run in this process: one rank thread per device of the experiment, collectives between
// threads (or the GPUs' communicators), the strategy's device 0 evaluating.
#include <thread>

#include "engine/comm/gpu.h"
#include "engine/run/training.h"
#include "engine/strategy/registry.h"

namespace paralab::run::detail {

namespace {

// The newest checkpoint of the folder that reads and fits, restored into `strat`; its step.
// Throws ConfigError when the strategy cannot resume or no checkpoint can be used.
int64_t resume_from_checkpoint(const config::Experiment& e, strategy::Strategy& strat, Checkpointing& cp,
                               const TensorNames& names, const std::vector<Shape>& shapes,
                               const std::vector<Shape>& buffer_shapes, int64_t planned_steps) {
    if (const char* why = strat.why_no_checkpoint())
        throw ConfigError("--resume", "a " + e.strategy.type + " run cannot resume: " + why);
    if (checkpoint_files(cp.folder).empty())
        throw ConfigError("--resume", "the run has no checkpoint (none in " + cp.folder + ")");
    const std::optional<Checkpoint> c = newest_checkpoint(cp.folder, e, names, shapes, buffer_shapes, planned_steps, cp.refused);
    if (!c) throw ConfigError("--resume", "none of the run's checkpoints in " + cp.folder + " could be used");
    strat.load_state(c->state);
    cp.resumed_from_step = c->position.step;
    return c->position.step;
}

}  // namespace

config::RunSummary run_local(const config::Experiment& e, RunObserver* observer, RunControl* control,
                             int compute_threads, RunArtifacts* artifacts) {
    config::RunSummary summary;
    summary.name = e.name;
    summary.strategy = e.strategy.type;
    summary.devices = e.devices;

    Prepared p;
    try {
        p = prepare(e, compute_threads, false, control ? &control->stop : nullptr,
                    control ? control->init_weights : std::string());
    } catch (const data::LoadStopped&) {
        // Stopped while the data loaded: a run of no steps, recorded as stopped like any other.
        summary.status = "stopped";
        if (observer) {
            observer->on_start(e, 0);
            observer->on_finish(summary);
        }
        return summary;
    }
    check_straggler(e, e.devices);
    std::vector<Device*> world;
    for (auto& d : p.devices) world.push_back(d.get());

    RunContext ctx = make_context(e, p, world);
    if (control) ctx.stop_requested = &control->stop;
    std::unique_ptr<comm::Group> group = comm::make_device_group(world);  // threads, or the GPUs'
    ctx.group = group.get();
    auto strat = strategy::make_strategy(e);
    summary.parameters = p.reference->parameter_count();
    Checkpointing* checkpoints = control ? control->checkpoints : nullptr;
    const TensorNames names = checkpoint_names(*p.reference);
    std::vector<Shape> shapes, buffer_shapes;
    for (const nn::Param* q : p.reference->parameters()) shapes.push_back(q->value.shape());
    for (const Tensor& b : p.reference->buffers()) buffer_shapes.push_back(b.shape());
    strat->setup(ctx, *p.reference);
    p.reference.reset();  // the strategy holds the model from here
    int64_t first_step = 0;
    if (checkpoints && checkpoints->resume)
        first_step = resume_from_checkpoint(e, *strat, *checkpoints, names, shapes, buffer_shapes, ctx.total_steps);
    p.scratch.reset();

    auto schedule = optim::make_schedule(e.schedule, e.optimizer.lr, ctx.total_steps);
    auto eval_loss = nn::make_loss(e.loss);
    MetricsBus bus(observer, static_cast<int>(world.size()), summary.devices.front());
    Shared sh(e, p.splits, *strat, ctx, bus, control, *eval_loss, *schedule,
              steps_per_epoch(e, ctx.train_size));
    sh.base = summary;
    sh.checkpoints = checkpoints;
    sh.names = names;
    sh.first_step = first_step;
    sh.last_checkpoint = first_step;
    bus.resume_after(first_step);
    if (observer) observer->on_start(e, ctx.total_steps);
    // (The folder may be set by on_start: the store names the run there.)
    if (checkpoints && !checkpoints->folder.empty())
        if (const char* why = strat->why_no_checkpoint()) {
            if (checkpoints->written)
                checkpoints->written("", 0, 0, e.strategy.type + " writes no checkpoints: " + why);
            sh.checkpoints = nullptr;
        }

    ctx.t0 = Clock::now();
    run_local_ranks(sh, static_cast<int>(world.size()));
    close_summary(summary, sh, Clock::now());
    // A stopped run keeps where it got to. (A failed one does not: its state may be
    // half-stepped or diverged; its last checkpoint written before the failure stays.)
    if (summary.status == "stopped" && summary.steps > first_step) sh.write_checkpoint(summary.steps);
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
