#include "engine/strategy/replicas.h"

#include "engine/strategy/registry.h"

#include <kernels/gpu/memory.h>

#include <cstring>

#include "engine/nn/norm.h"

namespace paralab::strategy {

namespace {

void for_each_layer(nn::Layer& layer, const std::function<void(nn::Layer&)>& fn) {
    fn(layer);
    for (nn::Layer* child : layer.children()) for_each_layer(*child, fn);
}

}  // namespace

bool has_batchnorm(nn::Layer& net) {
    bool found = false;
    for_each_layer(net, [&](nn::Layer& l) { found |= dynamic_cast<nn::BatchNorm*>(&l) != nullptr; });
    return found;
}

void ReplicaStrategy::build_replicas(RunContext& ctx, nn::Model& reference, bool broadcast_at_start) {
    const config::Experiment& e = *ctx.experiment;
    m_replicas.resize(static_cast<size_t>(m_world));
    m_params.resize(static_cast<size_t>(m_world));
    for (int r = m_world; r-- > 0;) {
        if (!ctx.is_local(r)) continue;  // another process builds it
        Device& device = *ctx.devices[static_cast<size_t>(r)];
        auto& slot = m_replicas[static_cast<size_t>(r)];
        if (r == 0 || !broadcast_at_start)
            slot = make_replica(e, ctx.input, reference, device);
        else
            slot = std::make_unique<nn::Model>(e.layers, ctx.input, e.loss, DType::f32, device);
        slot->set_recompute(nn::recompute_from_name(e.train.recompute));
        m_params[static_cast<size_t>(r)] = slot->parameters();
        m_layout = r;
    }
    // Which parameters each top-level layer owns: parameters() lists them layer by layer.
    nn::Sequential& net = m_replicas[static_cast<size_t>(m_layout)]->net();
    size_t next = 0;
    for (size_t i = 0; i < net.size(); ++i) {
        std::vector<size_t> own;
        for (size_t k = 0; k < net.at(i).parameters().size(); ++k) own.push_back(next++);
        m_params_of_layer.push_back(std::move(own));
    }
    PARALAB_CHECK(next == layout().size(), "parameters not listed layer by layer");

    const StrategyDescriptor* d = find_strategy(e.strategy.type);
    if (d && d->option("sync_batchnorm") && option<bool>(e.strategy, "sync_batchnorm") && has_batchnorm(net))
        check_sync_batchnorm_rows(ctx, m_world, 1);
}

void check_sync_batchnorm_rows(const RunContext& ctx, int replicas, int64_t micro_batches) {
    // SyncBatchNorm is a collective in forward and backward: a device with no rows of some
    // batch would skip it and leave the others waiting. Refuse such runs up front.
    if (replicas < 2) return;
    const config::Experiment& e = *ctx.experiment;
    const int64_t B = e.data.batch_size;
    const int64_t last = ctx.train_size % B == 0 ? B : ctx.train_size % B;
    const int64_t smallest = std::min(B, last) / std::min<int64_t>(e.train.grad_accum, std::min(B, last));
    if (smallest < replicas * micro_batches)
        throw ConfigError("data.batch_size", "with batchnorm synchronised over " + std::to_string(replicas) +
                          " replicas" + (micro_batches > 1 ? " of " + std::to_string(micro_batches) + " micro-batches" : std::string()) +
                          ", every replica needs rows of every " + (micro_batches > 1 ? "micro-batch" : "batch") +
                          ", but the smallest (micro-)batch has " + std::to_string(smallest) +
                          " rows; use a larger batch, fewer devices, or strategy.sync_batchnorm: false");
}

TrainingState ReplicaStrategy::replica_state(int rank, const optim::Optimizer& optimizer,
                                             const optim::LossScaler* scaler) {
    TrainingState st;
    st.parameters = host_copies(params(rank));
    st.buffers = host_copies(replica(rank).buffers());
    st.optimizer_state_names = optimizer.state_names();
    for (const auto& per_param : optimizer.state()) st.optimizer_state.push_back(host_copies(per_param));
    st.optimizer_state.resize(st.parameters.size());  // before the first step: empty lists
    st.optimizer_steps = optimizer.steps_taken();
    if (scaler) {
        st.has_scaler = true;
        st.scaler = scaler->state();
    }
    return st;
}

void ReplicaStrategy::load_replicas(const TrainingState& state) {
    for (int r = 0; r < m_world; ++r) {
        if (!m_replicas[static_cast<size_t>(r)]) continue;
        auto& ps = params(r);
        PARALAB_CHECK(ps.size() == state.parameters.size(), "the checkpoint holds " +
                      std::to_string(state.parameters.size()) + " parameters, the model " + std::to_string(ps.size()));
        for (size_t i = 0; i < ps.size(); ++i) ps[i]->value.copy_from(state.parameters[i]);
        const auto bufs = replica(r).buffers();
        PARALAB_CHECK(bufs.size() == state.buffers.size(), "the checkpoint's buffers do not fit the model");
        for (size_t i = 0; i < bufs.size(); ++i) bufs[i].copy_from(state.buffers[i]);
    }
}

void ReplicaStrategy::broadcast_parameters(Rank& rank) {
    if (rank.world() == 1) return;
    nn::Model& model = replica(rank.index());
    auto ps = model.parameters();
    auto bufs = model.buffers();
    int64_t n = total_numel(ps);
    for (const Tensor& b : bufs) n += b.numel();
    Tensor flat = Tensor::empty(Shape{n}, DType::f32, rank.device(), MemCategory::communication);
    // Parameters then buffers, end to end; views and copy_from work in host and GPU memory.
    std::vector<Tensor> parts;
    for (const nn::Param* p : ps) parts.push_back(p->value);
    parts.insert(parts.end(), bufs.begin(), bufs.end());
    const auto each_part = [&](auto&& fn) {
        int64_t at = 0;
        for (const Tensor& t : parts) {
            fn(flat.view(at, t.shape()), t);
            at += t.numel();
        }
    };
    if (rank.index() == 0) each_part([](const Tensor& slot, const Tensor& t) { slot.copy_from(t); });
    rank.record_comm(rank.comm().broadcast(flat, 0));
    if (rank.index() != 0) each_part([](const Tensor& slot, const Tensor& t) { t.copy_from(slot); });
}

Tensor ReplicaStrategy::predict(const Tensor& x) { return replica(0).forward(x, nn::Mode::eval); }

// Rank 0's replica is the trained model; a process without rank 0 holds none of it.
std::vector<Tensor> ReplicaStrategy::parameters() {
    if (!m_ctx->is_local(0)) return std::vector<Tensor>(layout().size());
    return host_copies(params(0));
}

std::vector<Tensor> ReplicaStrategy::buffers() {
    if (!m_ctx->is_local(0)) return std::vector<Tensor>(replica(m_layout).buffers().size());
    return host_copies(replica(0).buffers());
}

void ReplicaStrategy::install_sync_batchnorm_on_local(std::vector<Rank*>& slots) {
    slots.assign(static_cast<size_t>(m_world), nullptr);
    if (m_world > 1)
        for (int r = 0; r < m_world; ++r)
            if (m_replicas[static_cast<size_t>(r)]) install_sync_batchnorm(slots[static_cast<size_t>(r)], replica(r));
}

void install_sync_batchnorm(Rank*& rank_slot, nn::Model& model, comm::Communicator* group) {
    for_each_layer(model.net(), [&](nn::Layer& layer) {
        auto* bn = dynamic_cast<nn::BatchNorm*>(&layer);
        if (!bn) return;
        // The sums and the count in place: host doubles on the CPU; on a GPU the layer's device
        // array, which the GPU group reduces where it is (ordered after the sums' kernels).
        bn->set_stats_reducer([&rank_slot, group](double* stats, int64_t n) {
            Rank& rank = *rank_slot;
            comm::Communicator& c = group ? *group : rank.comm();
            rank.record_comm(c.all_reduce(stats, n, DType::f64, comm::ReduceOp::sum));
        });
    });
}

int64_t total_numel(const std::vector<nn::Param*>& params) {
    int64_t n = 0;
    for (const nn::Param* p : params) n += p->value.numel();
    return n;
}

void copy_floats(float* dst, const float* src, int64_t n, void* queue) {
    if (n <= 0 || dst == src) return;
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    if (queue) kernels::gpu::copy_device_to_device_async(dst, src, bytes, queue);
    else std::memcpy(dst, src, bytes);
}

Tensor grads_as_views(const std::vector<nn::Param*>& params, size_t first, size_t last, Device& device) {
    std::vector<Shape> shapes;
    int64_t n = 0;
    for (size_t i = first; i < last; ++i) {
        shapes.push_back(params[i]->grad.shape());
        n += shapes.back().numel();
        params[i]->grad = Tensor();
    }
    Tensor flat = Tensor::zeros(Shape{n}, DType::f32, device, MemCategory::gradients);
    int64_t at = 0;
    for (size_t i = first; i < last; ++i) {
        params[i]->grad = flat.view(at, shapes[i - first]);
        at += shapes[i - first].numel();
    }
    return flat;
}

void pack_values(const std::vector<nn::Param*>& params, float* flat) {
    for (const nn::Param* p : params) {
        copy_floats(flat, p->value.data<float>(), p->value.numel(), p->value.queue());
        flat += p->value.numel();
    }
}

void unpack_values(const float* flat, const std::vector<nn::Param*>& params) {
    for (const nn::Param* p : params) {
        copy_floats(p->value.data<float>(), flat, p->value.numel(), p->value.queue());
        flat += p->value.numel();
    }
}

void pack_grads(const std::vector<nn::Param*>& params, float* flat) {
    for (const nn::Param* p : params) {
        copy_floats(flat, p->grad.data<float>(), p->grad.numel(), p->grad.queue());
        flat += p->grad.numel();
    }
}

void unpack_grads(const float* flat, const std::vector<nn::Param*>& params) {
    for (const nn::Param* p : params) {
        copy_floats(p->grad.data<float>(), flat, p->grad.numel(), p->grad.queue());
        flat += p->grad.numel();
    }
}

}  // namespace paralab::strategy
