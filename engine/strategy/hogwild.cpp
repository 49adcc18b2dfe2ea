// hogwild: torch.multiprocessing's Hogwild (Recht et al. 2011). One parameter set, on device
// 0, shared by every rank: each rank's replica has its Param.value tensors replaced by rank 0's
// (same storage) and keeps its own gradients and its own optimizer (own momentum or Adam
// moments). Each rank runs its shard of the global batch as a mini-batch of its own — the loss
// averaged over its own rows — and steps the shared values whenever it is done, with no lock
// and no communication at all. What a student sees: no comm spans, fast steps, a noisier loss
// (the updates of one global step are N small-batch steps taken on slightly stale weights).
//
// The deliberate data race: while one rank's optimizer writes the shared values, the others
// read them in forward and backward, and two optimizers may write the same element at once
// (the later store wins; an update can be lost). As in the Hogwild paper this is accepted,
// not prevented: the updates are sparse or small, and the lost or mixed ones act as noise.
// Strictly, concurrent non-atomic float access is undefined behaviour in C++ (ThreadSanitizer
// reports it); on the machines this runs on (x86-64, aarch64) aligned 4-byte float loads and
// stores are single instructions that never tear, so a reader sees either the old or the new
// value of each element, which is all Hogwild assumes. Do not "fix" this with a mutex: the
// point of the strategy is to show what lock-free updates cost and gain.
#include "engine/optim/clip.h"
#include "engine/strategy/replicas.h"
#include "engine/strategy/registry.h"

#include "engine/device/device.h"

namespace paralab::strategy {

namespace {

class Hogwild final : public ReplicaStrategy {
public:
    const char* single_process_only() const override {
        return "its devices update one parameter set in one process's memory";
    }

    Hogwild() : ReplicaStrategy("hogwild") {}

    StepResult step(Rank& rank, const data::Batch& batch, int64_t offset, double lr) override {
        const config::Experiment& e = rank.experiment();
        const int r = rank.index();
        auto& ps = params(r);
        // forward_backward divides by the global batch (the data-parallel convention); a Hogwild
        // update is an SGD step of this rank's own mini-batch, so its gradient is the mean over
        // its own rows: rescale by global / own.
        optim::LossScaler* scaler = m_scalers[static_cast<size_t>(r)].get();
        LocalPass pass = forward_backward(rank, replica(r), batch, offset, {}, {}, scaler ? scaler->scale() : 1.0);
        StepResult res{pass.loss_sum, pass.samples, pass.samples, 0};
        if (pass.samples == 0) return res;  // no rows this step (a small last batch): no update
        // fp16: each rank scales its own loss and skips its own overflowed updates.
        if (scaler && !unscale_gradients(rank, ps, *scaler)) return res;
        if (pass.samples != batch.global_size) {
            const double to_own_mean =
                static_cast<double>(batch.global_size) / static_cast<double>(pass.samples);
            rank.compute("backward", [&] { optim::scale_grads(ps, to_own_mean); });
        }
        if (e.train.clip_norm) res.grad_norm = clip_gradients(rank, ps, *e.train.clip_norm, false);
        // Unlocked write of the shared values (see the top of this file).
        rank.compute("optimizer", [&] { m_optimizers[static_cast<size_t>(r)]->step(ps, lr); });
        return res;
    }

protected:
    void setup_impl(RunContext& ctx, nn::Model& reference) override {
        build_replicas(ctx, reference, false);
        // Rank 0's values are the shared set; every other replica views them. The values those
        // replicas were built with go back to their devices' allocators, and their peaks are
        // reset so that the memory picture shows the one parameter set on device 0 only (nothing
        // else lives on those devices yet).
        const auto& shared = params(0);
        for (int r = 1; r < m_world; ++r) {
            auto& own = params(r);
            for (size_t i = 0; i < own.size(); ++i) own[i]->value = shared[i]->value;
            Device& device = *ctx.devices[static_cast<size_t>(r)];
            if (&device != ctx.devices[0]) device.allocator().reset_peak();
        }
        // Each rank's own optimizer; its state goes where the optimizer puts it, beside the values
        // it updates, so every rank's momentum or moments are accounted on device 0.
        for (int r = 0; r < m_world; ++r) {
            m_optimizers.push_back(optim::make_optimizer(ctx.experiment->optimizer));
            m_scalers.push_back(loss_scaler_for(*ctx.experiment));
        }
    }
    // predict, parameters and buffers: ReplicaStrategy's, on rank 0's replica, whose values are
    // the shared ones (its batchnorm running statistics are rank 0's own).

private:
    std::vector<std::unique_ptr<optim::LossScaler>> m_scalers;  // per rank; null but in fp16
};

// Every rank updates rank 0's parameters in place: on CUDA, only virtual GPUs of one card
// (every rank's kernels can address them).
void check_devices(const config::Experiment& e) {
    const DeviceId first = parse_device_id(e.devices[0]);
    for (size_t i = 1; i < e.devices.size(); ++i) {
        const DeviceId id = parse_device_id(e.devices[i]);
        if (id.kind != DeviceKind::cpu && id.kind == first.kind && id.index != first.index)
            throw ConfigError("devices[" + std::to_string(i) + "]",
                              "hogwild on CUDA runs on virtual GPUs of one card (cuda:" +
                                  std::to_string(first.index) + " listed several times), not on " + e.devices[i]);
    }
}

// A replica per device for its rows; only device 0 holds parameters (the others use its values).
std::vector<DeviceMemoryEstimate> memory(const config::Experiment& e, const ModelCost& m) {
    auto out = blank_estimates(e);
    const int n = static_cast<int>(out.size());
    for (int r = 0; r < n; ++r) {
        whole_replica(out[r], e, m, rows_of(e.data.batch_size, r, n));
        out[r].role = r == 0 ? "holds the shared parameters" : "worker (shared parameters)";
        if (r != 0) out[r].set(MemCategory::parameters, 0);
    }
    return out;
}

StepPicture picture(const config::Experiment& e) {
    StepPicture p;
    p.layout = StepPicture::Layout::hub;
    p.hub_title = "shared parameters";
    p.hub_subtitle = "one set, in " + e.devices[0] + "'s memory";
    p.shared = true;
    p.subtitles.assign(e.devices.size(), "own rows, own steps");
    p.down_label = "read, write (no locks)";
    p.caption = "No communication: every device updates the same values whenever it likes.";
    return p;
}

}  // namespace

StrategyDescriptor hogwild_descriptor() {
    return {
        .name = "hogwild",
        .explanation =
            "Hogwild: one parameter set, on device 0, shared by all. Each device trains on its rows as "
            "a mini-batch of its own and updates the shared values with its own optimizer, without "
            "locks and without any communication. Fast, but not deterministic: updates overwrite each "
            "other and the loss is noisier.",
        .color = "#9467bd",
        .make = [] { return std::unique_ptr<Strategy>(std::make_unique<Hogwild>()); },
        .check_devices = check_devices,
        .memory = memory,
        .picture = picture,
    };
}

}  // namespace paralab::strategy
