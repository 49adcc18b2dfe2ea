// data_parallel: torch.nn.DataParallel's semantics. Device 0 is the master: every step it
// replicates its parameters (and buffers) to the other devices, scatters the batch's inputs,
// each device runs forward on its rows, the outputs are gathered on device 0, the loss and its
// gradient are computed there over the whole batch, the output gradients are scattered back,
// each device runs backward, the parameter gradients are reduced onto device 0, and device 0
// alone takes the optimizer step. Device 0 therefore carries the whole batch's outputs, the
// optimizer state and the reduced gradients, and the others wait for it: the picture of why
// DDP replaced it.
//
// Rows are split by shard_of_batch; with grad_accum the global batch is cut into micro-batches
// first, each going through the whole scatter/forward/gather/backward round.
#include "engine/strategy/replicas.h"

#include <kernels/gpu/memory.h>

#include "engine/nn/moe.h"
#include "engine/optim/clip.h"
#include "engine/strategy/registry.h"

namespace paralab::strategy {

namespace {

class DataParallel final : public ReplicaStrategy {
public:
    DataParallel() : ReplicaStrategy("data_parallel") {}

    DataRole data_role(int rank) const override { return {rank == 0, 0, 1}; }

    void start_rank(Rank& rank) override { m_rank_slots[static_cast<size_t>(rank.index())] = &rank; }

    // Device 0 holds the model and the optimizer; the others receive its parameters.
    const char* why_no_checkpoint_impl() const override { return nullptr; }
    TrainingState save_state() override { return replica_state(0, *m_optimizers[0], m_scaler.get()); }
    void load_state(const TrainingState& st) override {
        load_replicas(st);
        m_optimizers[0]->load_state(params(0), st.optimizer_state, st.optimizer_steps);
        if (m_scaler && st.has_scaler) m_scaler->load_state(st.scaler);
    }

    StepResult step(Rank& rank, const data::Batch& batch, int64_t offset, double lr) override {
        (void)offset;  // rank 0 holds the whole global batch
        const config::Experiment& e = rank.experiment();
        const RunContext& ctx = rank.context();
        const int r = rank.index(), world = rank.world();
        comm::Communicator& comm = rank.comm();
        nn::Model& model = replica(r);
        const int64_t B = batch.global_size;
        const int64_t in_numel = ctx.input.numel();
        const int64_t out_numel = model.output_shape().numel();

        // Replicate from device 0.
        broadcast_parameters(rank);
        model.zero_grad();

        StepResult res;
        const int64_t parts = std::min<int64_t>(e.train.grad_accum, B);
        for (int64_t k = 0; k < parts; ++k) {
            const auto mb = data::shard_of_batch(B, static_cast<int>(k), static_cast<int>(parts));
            std::vector<int64_t> in_counts(static_cast<size_t>(world)), out_counts(in_counts.size());
            for (int q = 0; q < world; ++q) {
                const int64_t rows = data::shard_of_batch(mb.count, q, world).count;
                in_counts[static_cast<size_t>(q)] = rows * in_numel;
                out_counts[static_cast<size_t>(q)] = rows * out_numel;
            }
            const auto mine = data::shard_of_batch(mb.count, r, world);

            Tensor x = Tensor::empty(ctx.input.with_batch(mine.count), DType::f32, rank.device(), MemCategory::activations);
            const float* all_inputs = r == 0 ? batch.inputs.data() + mb.offset * in_numel : nullptr;
            Tensor on_gpu;  // a GPU's scatter reads the root's rows from device memory
            if (r == 0 && rank.device().is_gpu()) {
                on_gpu = Tensor::empty(ctx.input.with_batch(mb.count), DType::f32, rank.device(), MemCategory::activations);
                kernels::gpu::copy_host_to_device_async(on_gpu.raw(), all_inputs, on_gpu.nbytes(), on_gpu.queue());
                all_inputs = on_gpu.data<float>();
            }
            rank.record_comm(named(comm.scatter(all_inputs, x.raw(), in_counts, DType::f32, 0), "scatter_inputs"));

            Tensor out;
            if (mine.count > 0) {
                model.set_random_state(e.seed, static_cast<uint64_t>(rank.step() - 1), mb.offset + mine.offset);
                // A mixture of experts' auxiliary losses weigh as the loss does: rows / the batch.
                nn::set_moe_loss_weight(model.net(), 1.0 / static_cast<double>(B));
                nn::set_moe_grad_scale(model.net(), m_scaler ? m_scaler->scale() : 1.0);
                out = rank.compute("forward", [&] {
                    rank.straggle();
                    return model.forward(x, nn::Mode::train);
                });
            }
            Tensor all_out;
            if (r == 0)
                all_out = Tensor::empty(model.output_shape().with_batch(mb.count), DType::f32, rank.device(), MemCategory::activations);
            rank.record_comm(named(comm.gather(mine.count > 0 ? out.raw() : nullptr, r == 0 ? all_out.raw() : nullptr,
                                               out_counts, DType::f32, 0), "gather_outputs"));

            Tensor all_dy;
            if (r == 0) {
                rank.compute("loss", [&] {
                    DeviceBatch db = to_device(batch, mb.offset, mb.count, ctx.input, ctx.target, rank.device());
                    res.loss_sum += model.loss().forward(all_out, db.y, B) * static_cast<double>(B);
                    all_dy = model.loss().backward();
                    if (m_scaler) optim::scale_in_place(all_dy, m_scaler->scale());
                });
                res.loss_samples += mb.count;
            }
            Tensor dy = Tensor::empty(model.output_shape().with_batch(mine.count), DType::f32, rank.device(), MemCategory::activations);
            rank.record_comm(named(comm.scatter(r == 0 ? all_dy.raw() : nullptr, dy.raw(), out_counts, DType::f32, 0),
                                   "scatter_output_grads"));
            if (mine.count > 0) rank.compute("backward", [&] { model.backward(dy); });
            res.samples += mine.count;
        }

        // Gradients onto device 0; device 0 steps.
        const auto& ps = params(r);
        Tensor flat = Tensor::empty(Shape{total_numel(ps)}, DType::f32, rank.device(), MemCategory::communication);
        pack_grads(ps, flat.data<float>());
        rank.record_comm(named(comm.reduce(flat.raw(), flat.numel(), DType::f32, comm::ReduceOp::sum, 0), "reduce_grads"));
        if (r == 0) {
            unpack_grads(flat.data<float>(), ps);
            // fp16: device 0 alone holds the summed gradients and steps.
            if (m_scaler && !unscale_gradients(rank, ps, *m_scaler)) return res;
            if (e.train.clip_norm) res.grad_norm = clip_gradients(rank, ps, *e.train.clip_norm, false);
            rank.compute("optimizer", [&] { m_optimizers[0]->step(ps, lr); });
        }
        return res;
    }

protected:
    void setup_impl(RunContext& ctx, nn::Model& reference) override {
        const config::Experiment& e = *ctx.experiment;
        build_replicas(ctx, reference, true);
        m_optimizers.push_back(optim::make_optimizer(e.optimizer));  // device 0's only
        m_scaler = loss_scaler_for(e);
        m_rank_slots.assign(static_cast<size_t>(m_world), nullptr);
        if (option<bool>(e.strategy, "sync_batchnorm")) install_sync_batchnorm_on_local(m_rank_slots);
    }

private:
    std::vector<Rank*> m_rank_slots;  // each rank's own slot, set by its thread in start_rank
    std::unique_ptr<optim::LossScaler> m_scaler;  // fp16 mixed precision: device 0's
};

}  // namespace

namespace {

// Every device a replica for its rows; device 0 also holds the whole batch's outputs and
// their gradients, the optimizer state and the flat buffer the gradients are reduced in (with
// the gathered outputs); the others hold no optimizer state.
std::vector<DeviceMemoryEstimate> memory(const config::Experiment& e, const ModelCost& m) {
    auto out = blank_estimates(e);
    const int n = static_cast<int>(out.size());
    const int64_t batch = e.data.batch_size, p = m.parameters();
    for (int r = 0; r < n; ++r) {
        const int64_t rows = rows_of(batch, r, n);
        whole_replica(out[r], e, m, rows);
        out[r].set(MemCategory::communication, p);
        if (r == 0) {
            out[r].role = "device 0: gathers, steps";
            out[r].set(MemCategory::activations, m.activations_per_example() * rows + 2 * m.output_numel * batch);
            out[r].set(MemCategory::communication, p + m.output_numel * batch);
        } else {
            out[r].set(MemCategory::optimizer_state, 0);
        }
    }
    return out;
}

StepPicture picture(const config::Experiment& e) {
    StepPicture p;
    p.layout = StepPicture::Layout::hub;
    p.hub_title = e.devices[0] + " · device 0";
    p.hub_subtitle = "loss, gathered outputs, optimizer";
    p.subtitles.assign(e.devices.size(), "replica");
    p.down_label = "replicate, scatter rows";
    p.caption = "↓ parameters and input rows   ↑ outputs, then gradients (reduced on device 0)";
    return p;
}

}  // namespace

StrategyDescriptor data_parallel_descriptor() {
    return {
        .name = "data_parallel",
        .options = {sync_batchnorm_option()},
        .explanation =
            "torch's `nn.DataParallel`: every step device 0 copies its parameters to every device and "
            "scatters the batch's rows. Each device runs forward on its rows; the outputs are gathered "
            "on device 0, which computes the loss and sends the output gradients back. After backward "
            "the gradients are reduced onto device 0, which alone steps the optimizer — watch its "
            "extra memory and the others' idle time.",
        .color = "#ff7f0e",
        .make = [] { return std::unique_ptr<Strategy>(std::make_unique<DataParallel>()); },
        .memory = memory,
        .picture = picture,
    };
}

}  // namespace paralab::strategy
