#include "engine/strategy/step_graph.h"

#include <kernels/gpu/graph.h>
#include <kernels/gpu/memory.h>

#include <bit>
#include <cstring>
#include <utility>

#include "engine/device/gpu_graph.h"
#include "engine/nn/embedding.h"
#include "engine/optim/clip.h"
#include "engine/util/error.h"

namespace paralab::strategy {

namespace kg = kernels::gpu;

namespace {

// Eager steps of one shape before it is recorded: the first fills the allocator's cache and
// makes the cuDNN plans and cuBLAS handles; the second frees what the first held past its end
// (the layers' saved tensors), so that recording finds every block it needs in the cache.
constexpr int kWarmupSteps = 2;
// Recordings abandoned for memory (PoolMissError) before the run stays eager.
constexpr int kMaxPoolMisses = 3;

}  // namespace

std::string why_no_step_graph(const config::Experiment& e, nn::Model& model, Device& device) {
    if (!device.is_gpu() || !device.queue()) return "the device is not a GPU";
    if (!gpu::graphs_enabled()) return "CUDA graphs are off (PARALAB_CUDA_GRAPHS=0)";
    if (e.train.grad_accum > 1) return "train.grad_accum splits the step into micro-batches";
    if (model.net().draws_each_step()) return "a layer draws new random numbers each step (dropout)";
    return "";
}

StepGraph::~StepGraph() {
    try {
        release();
    } catch (...) {  // a destructor must not throw; a failing runtime is reported elsewhere
    }
}

void StepGraph::release() {
    if (m_exec) {
        void* exec = std::exchange(m_exec, nullptr);
        kg::graph_exec_destroy(exec);
    }
    if (m_device) std::exchange(m_device, nullptr)->allocator().release_pool();
}

LocalPass StepGraph::run(Rank& rank, nn::Model& model, const data::Batch& batch, int64_t offset,
                         double loss_scale) {
    if (!m_checked) {
        m_checked = true;
        m_why_not = why_no_step_graph(rank.experiment(), model, rank.device());
    }
    const auto eager = [&] { return forward_backward(rank, model, batch, offset, {}, {}, loss_scale); };
    if (!m_why_not.empty() || batch.size == 0) return eager();
    const std::vector<uint64_t> key{static_cast<uint64_t>(batch.size), static_cast<uint64_t>(batch.global_size),
                                    std::bit_cast<uint64_t>(loss_scale)};
    if (key != m_key) {
        // Another batch size next to a recorded graph: a short last batch, eager. A new loss
        // scale (fp16's scaler moved) or the first shape: recorded after its warm-up steps.
        if (m_exec && key[0] != m_key[0]) return eager();
        release();
        m_key = key;
        m_eager_steps = 0;
    }
    if (!m_exec && m_eager_steps < kWarmupSteps) {
        ++m_eager_steps;
        return eager();
    }

    // Stage the batch where the graph reads it.
    const RunContext& ctx = rank.context();
    Device& device = rank.device();
    void* queue = device.queue();
    const int64_t rows = batch.size;
    const Shape x_shape = ctx.input.with_batch(rows);
    if (!m_x.defined() || m_x.shape() != x_shape) {
        m_x = Tensor::empty(x_shape, DType::f32, device, MemCategory::activations);
        m_target = m_ids = Tensor();
    }
    const Shape t_shape = ctx.target.rank() == 0 ? Shape{rows} : ctx.target.with_batch(rows);
    Tensor y = Tensor::empty(t_shape, DType::f32, detached_host_device(), MemCategory::activations);
    std::memcpy(y.raw(), batch.targets.data(), y.nbytes());
    kg::copy_host_to_device_async(m_x.raw(), batch.inputs.data(), m_x.nbytes(), queue);
    if (auto* embedding = dynamic_cast<nn::Embedding*>(&model.net().at(0))) {
        Tensor x = Tensor::empty(x_shape, DType::f32, detached_host_device(), MemCategory::activations);
        std::memcpy(x.raw(), batch.inputs.data(), x.nbytes());
        embedding->stage_ids(x, m_x, m_ids);
    }
    model.loss().stage_target(y, model.output_shape().with_batch(rows), model.dtype(), device, m_target);
    if (!m_exec && !record(rank, model, batch.global_size, loss_scale)) return eager();

    LocalPass pass;
    pass.samples = rows;
    rank.compute("forward+backward (CUDA graph)", [&] {
        rank.straggle();
        kg::graph_launch(m_exec, queue);
    });
    gpu::count_step_graph(false);
    device.allocator().add_replayed_step(m_peak, m_at_peak);
    pass.loss_sum = model.loss().queued_loss() * static_cast<double>(batch.global_size);
    return pass;
}

bool StepGraph::record(Rank& rank, nn::Model& model, int64_t denominator, double loss_scale) {
    Device& device = rank.device();
    void* queue = device.queue();
    Allocator& allocator = device.allocator();
    allocator.begin_pool();
    m_device = &device;
    void* graph = nullptr;
    try {
        graph = gpu::capture_graph(queue, [&] {
            const gpu::RecordingEnclosed enclosed;  // the recurrent layers' loop graphs: part of this one
            model.zero_grad();
            const Tensor out = model.forward(m_x, nn::Mode::train);
            model.loss().queue_forward(out, m_target, denominator);
            const Tensor dy = model.loss().backward();
            if (loss_scale != 1.0) optim::scale_in_place(dy, loss_scale);
            backward_by_layer(model, dy, {}, {});
        });
        m_exec = kg::graph_instantiate(graph);
        kg::graph_destroy(std::exchange(graph, nullptr));
    } catch (const std::exception& ex) {
        if (graph) {
            try {
                kg::graph_destroy(graph);
            } catch (...) {
            }
        }
        allocator.end_pool();
        release();
        // Short of memory the cache could give: eager once more (freeing what the last
        // eager step held), then again. Refused by the runtime: eager from now on.
        if (dynamic_cast<const PoolMissError*>(&ex) && ++m_failed < kMaxPoolMisses) m_eager_steps = kWarmupSteps - 1;
        else m_why_not = std::string("recording the step failed: ") + ex.what();
        return false;
    }
    allocator.end_pool();
    const MemoryStats stats = allocator.stats();
    m_peak = stats.step_peak_total;
    m_at_peak = stats.at_step_peak;
    gpu::count_step_graph(true);
    return true;
}

}  // namespace paralab::strategy
