#include "engine/strategy/pipeline_executor.h"

#include "engine/nn/moe.h"

#include <algorithm>
#include <string>

#include "engine/optim/clip.h"

namespace paralab::strategy {

namespace {
constexpr int kForwardTag = 0, kBackwardTag = 1;
}  // namespace

const char* const PipelineExecutor::kBackwardInput = "backward_input";
const char* const PipelineExecutor::kBackwardWeight = "backward_weight";

void ModelChunk::share_master() {
    for (size_t c = 1; c < contexts.size(); ++c) {
        const auto own = contexts[c]->parameters();
        PARALAB_CHECK(own.size() == params.size(), "pipeline: the contexts of a chunk differ");
        for (size_t i = 0; i < own.size(); ++i) {
            own[i]->value = params[i]->value;
            own[i]->grad = params[i]->grad;
        }
    }
}

std::vector<ChunkPlace> lay_out_chunks(nn::Model& reference, const std::vector<size_t>& bounds) {
    nn::Sequential& net = reference.net();
    std::vector<size_t> param_start{0}, buffer_start{0};  // per top-level layer
    for (size_t i = 0; i < net.size(); ++i) {
        param_start.push_back(param_start.back() + net.at(i).parameters().size());
        buffer_start.push_back(buffer_start.back() + net.at(i).buffers().size());
    }
    std::vector<ChunkPlace> out(bounds.size() - 1);
    for (size_t g = 0; g < out.size(); ++g) {
        ChunkPlace& ch = out[g];
        ch.first = bounds[g];
        ch.last = bounds[g + 1];
        ch.input = net.at(ch.first).input_shape();
        ch.output = net.at(ch.last - 1).output_shape();
        ch.first_param = param_start[ch.first];
        ch.param_count = param_start[ch.last] - ch.first_param;
        ch.first_buffer = buffer_start[ch.first];
        ch.buffer_count = buffer_start[ch.last] - ch.first_buffer;
    }
    return out;
}

void build_chunk(ModelChunk& ch, const config::Experiment& e, const std::vector<nn::LayerSpec>& layers,
                 Device& device, int contexts, const std::function<std::function<void(nn::Layer&)>()>& preparer) {
    for (int i = 0; i < contexts; ++i) {
        auto model = nn::Model::stage(layers, ch.first, ch.last, ch.input, e.loss, DType::f32, device,
                                      preparer ? preparer() : std::function<void(nn::Layer&)>{});
        model->set_recompute(nn::recompute_from_name(e.train.recompute));
        ch.contexts.push_back(std::move(model));
    }
    nn::Model& master = ch.master();
    ch.params = master.parameters();
    ch.buffers = master.buffers();
    for (size_t i = 0, n = 0; i < master.net().size(); ++i) {
        n += master.net().at(i).parameters().size();
        ch.layer_ends.push_back(n);
    }
    PARALAB_CHECK(ch.params.size() == ch.param_count && ch.buffers.size() == ch.buffer_count,
                  "pipeline: a chunk's parameters do not match the model's");
    ch.share_master();
}

void PipelineExecutor::run_flush(Rank& rank, std::vector<ModelChunk>& chunks, const data::Batch& batch,
                                 int64_t offset, const std::vector<data::ShardRange>& micro, int slots,
                                 StepResult& result, const Hooks& hooks) const {
    const int stage = m_mesh.coord(rank.index(), comm::Axis::pp);
    const int stages = m_mesh.size(comm::Axis::pp);
    const bool split = stages::splits_backward(m_schedule);
    if (split && hooks.backward)
        throw ConfigError("strategy.schedule", "zb_h1 defers the weight gradients past each backward, which this "
                                               "strategy walks layer by layer to reduce each layer's gradients as "
                                               "its backward ends (zero 2 or 3 over dp > 1)");
    int first = 0;  // the part's first micro-batch
    for (const int m : stages::flush_parts(m_schedule, stages, slots)) {
        const std::vector<stages::Op> ops = stages::stage_schedule(m_schedule, stage, stages, m, m_chunks);
        const std::vector<int> in_flight = stages::chunk_in_flight(ops, m_chunks);
        for (int c = 0; c < m_chunks; ++c)
            PARALAB_CHECK(in_flight[size_t(c)] <= static_cast<int>(chunks[size_t(c)].contexts.size()),
                          "pipeline: too few contexts");
        for (const stages::Op& op : ops) {
            ModelChunk& ch = chunks[size_t(op.chunk)];
            nn::Model& c = *ch.contexts[size_t(op.micro % std::max(1, in_flight[size_t(op.chunk)]))];
            const int index = first + op.micro;
            if (index >= static_cast<int>(micro.size())) {
                // A W has no collectives to keep in step.
                if (op.pass == stages::Pass::weight) continue;
                PARALAB_CHECK(static_cast<bool>(hooks.idle_slot), "pipeline: a slot without a micro-batch");
                hooks.idle_slot(op.chunk, op.forward());
                continue;
            }
            const data::ShardRange& mb = micro[size_t(index)];
            switch (op.pass) {
                case stages::Pass::forward:
                    forward(rank, ch, op.chunk, c, batch, offset, index, mb, result);
                    break;
                case stages::Pass::backward:
                    backward(rank, ch, op.chunk, c, index, mb, hooks);
                    break;
                case stages::Pass::weight:
                    weight(rank, op.chunk, c, index);
                    break;
            }
        }
        first += m;
    }
    if (split)
        for (ModelChunk& ch : chunks)
            for (auto& c : ch.contexts)
                PARALAB_CHECK(c->net().queued_weight_grads() == 0, "pipeline: a flush ended with W not run");
}

void PipelineExecutor::forward(Rank& rank, ModelChunk& ch, int chunk, nn::Model& c, const data::Batch& batch,
                               int64_t offset, int index, const data::ShardRange& mb, StepResult& result) const {
    const config::Experiment& e = rank.experiment();
    const RunContext& ctx = rank.context();
    const int k = rank.index(), pp = m_mesh.size(comm::Axis::pp);
    const int g = chunk * pp + m_mesh.coord(k, comm::Axis::pp);
    const bool first = g == 0, last = g == global_chunks() - 1;
    DeviceBatch rows;
    if (first || last) rows = to_device(batch, mb.offset - offset, mb.count, ctx.input, ctx.target, rank.device());
    Tensor x = rows.x;
    if (!first) {
        x = Tensor::empty(ch.input.with_batch(mb.count), DType::f32, rank.device(), MemCategory::activations);
        const std::string phase = stages::chunk_phase("recv_activation", chunk, m_chunks);
        rank.record_comm(named(rank.comm().recv(x.raw(), x.numel(), DType::f32, device_of_chunk(g - 1, k),
                                                message_tag(index, (g - 1) / pp, kForwardTag)),
                               phase.c_str()),
                         /*waiting=*/true);
    }
    // A context other than the master runs on the master's running statistics.
    const bool own_buffers = &c != &ch.master() && !ch.buffers.empty();
    std::vector<Tensor> buffers = own_buffers ? c.buffers() : std::vector<Tensor>{};
    for (size_t i = 0; i < buffers.size(); ++i) buffers[i].copy_from(ch.buffers[i]);
    c.set_random_state(e.seed, static_cast<uint64_t>(rank.step() - 1), mb.offset);
    const int64_t total = batch.global_size;
    // A mixture of experts' auxiliary losses weigh as the loss does: rows / the global batch.
    nn::set_moe_loss_weight(c.net(), 1.0 / static_cast<double>(total));
    const std::string phase = stages::chunk_phase("forward", chunk, m_chunks);
    Tensor out = rank.compute(phase.c_str(), [&] {
        rank.straggle();
        Tensor o = c.forward(x, nn::Mode::train);
        if (last) {
            const double loss = c.loss().forward(o, rows.y, total) * static_cast<double>(total);
            // The tensor ranks of a replica compute the same loss: rank 0 reports it.
            if (m_mesh.coord(k, comm::Axis::tp) == 0) {
                result.loss_sum += loss;
                result.loss_samples += mb.count;
            }
        }
        return o;
    });
    for (size_t i = 0; i < buffers.size(); ++i) ch.buffers[i].copy_from(buffers[i]);
    if (!last) {
        const std::string send = stages::chunk_phase("send_activation", chunk, m_chunks);
        rank.record_comm(named(rank.comm().send(out.raw(), out.numel(), DType::f32, device_of_chunk(g + 1, k),
                                                message_tag(index, chunk, kForwardTag)),
                               send.c_str()));
    }
}

void PipelineExecutor::backward(Rank& rank, ModelChunk& ch, int chunk, nn::Model& c, int index,
                                const data::ShardRange& mb, const Hooks& hooks) const {
    const int k = rank.index(), pp = m_mesh.size(comm::Axis::pp);
    const int g = chunk * pp + m_mesh.coord(k, comm::Axis::pp);
    const bool last = g == global_chunks() - 1;
    Tensor dy;
    if (!last) {
        dy = Tensor::empty(ch.output.with_batch(mb.count), DType::f32, rank.device(), MemCategory::activations);
        const std::string phase = stages::chunk_phase("recv_grad", chunk, m_chunks);
        rank.record_comm(named(rank.comm().recv(dy.raw(), dy.numel(), DType::f32, device_of_chunk(g + 1, k),
                                                message_tag(index, (g + 1) / pp, kBackwardTag)),
                               phase.c_str()),
                         /*waiting=*/true);
    }
    // zb_h1: B, the layers queuing their weight gradients under the micro-batch's index.
    const bool split = stages::splits_backward(m_schedule);
    const std::string phase = stages::chunk_phase(split ? kBackwardInput : "backward", chunk, m_chunks);
    Tensor dx = rank.compute(phase.c_str(), [&] {
        if (last) {
            dy = c.loss().backward();
            if (hooks.scaler) optim::scale_in_place(dy, hooks.scaler->scale());
        }
        nn::set_moe_grad_scale(c.net(), hooks.scaler ? hooks.scaler->scale() : 1.0);
        if (hooks.backward) return hooks.backward(chunk, c, std::move(dy));
        if (split) c.net().defer_weight_grads(index);
        Tensor grad = c.net().backward(dy);
        if (split) c.net().defer_weight_grads(-1);
        dy = Tensor();  // the output gradient is not needed any more (a queued W holds its own)
        return grad;
    });
    if (g > 0) {
        PARALAB_CHECK(dx.defined(), "pipeline: chunk " + std::to_string(g) + " computed no input gradient");
        const std::string send = stages::chunk_phase("send_grad", chunk, m_chunks);
        rank.record_comm(named(rank.comm().send(dx.raw(), dx.numel(), DType::f32, device_of_chunk(g - 1, k),
                                                message_tag(index, chunk, kBackwardTag)),
                               send.c_str()));
    }
}

void PipelineExecutor::weight(Rank& rank, int chunk, nn::Model& c, int index) const {
    const std::string phase = stages::chunk_phase(kBackwardWeight, chunk, m_chunks);
    rank.compute(phase.c_str(), [&] { c.net().run_weight_grads(index); });
}

}  // namespace paralab::strategy
