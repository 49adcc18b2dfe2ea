// single: one device, the baseline every other strategy is held to (docs/strategies.md).
#include "engine/strategy/registry.h"
#include "engine/strategy/replicas.h"
#include "engine/strategy/step_graph.h"

namespace paralab::strategy {

namespace {

class Single final : public ReplicaStrategy {
public:
    Single() : ReplicaStrategy("single") {}

    const char* why_no_checkpoint_impl() const override { return nullptr; }
    TrainingState save_state() override { return replica_state(0, *m_optimizers[0], m_scaler.get()); }
    void load_state(const TrainingState& st) override {
        load_replicas(st);
        m_optimizers[0]->load_state(params(0), st.optimizer_state, st.optimizer_steps);
        if (m_scaler && st.has_scaler) m_scaler->load_state(st.scaler);
    }

protected:
    void setup_impl(RunContext& ctx, nn::Model& reference) override {
        build_replicas(ctx, reference, false);
        m_optimizers.push_back(optim::make_optimizer(ctx.experiment->optimizer));
        m_scaler = loss_scaler_for(*ctx.experiment);
    }

private:
    std::unique_ptr<optim::LossScaler> m_scaler;  // fp16 mixed precision
    StepGraph m_graph;  // on a GPU: forward and backward replayed as one CUDA graph

    StepResult step(Rank& rank, const data::Batch& batch, int64_t offset, double lr) override {
        const config::Experiment& e = rank.experiment();
        nn::Model& model = replica(0);
        LocalPass pass = m_graph.run(rank, model, batch, offset, m_scaler ? m_scaler->scale() : 1.0);
        StepResult r{pass.loss_sum, pass.samples, pass.samples, 0};
        if (m_scaler && !unscale_gradients(rank, params(0), *m_scaler)) return r;  // overflow: no step
        if (e.train.clip_norm) r.grad_norm = clip_gradients(rank, params(0), *e.train.clip_norm, false);
        rank.compute("optimizer", [&] { m_optimizers[0]->step(params(0), lr); });
        return r;
    }
};

}  // namespace

StrategyDescriptor single_descriptor() {
    return {
        .name = "single",
        .explanation = "One device runs forward, backward and the optimizer step on the whole batch. It is "
                       "the baseline: every other strategy is compared with it, and the deterministic ones "
                       "must end with its parameters.",
        .color = "#1f77b4",
        .baseline = true,
        .max_devices = 1,
        .make = [] { return std::unique_ptr<Strategy>(std::make_unique<Single>()); },
    };
}

}  // namespace paralab::strategy
