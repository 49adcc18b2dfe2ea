#include "engine/strategy/strategy.h"

#include "engine/nn/moe.h"

#include <kernels/gpu/memory.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include "engine/device/gpu_values.h"
#include "engine/optim/clip.h"
#include "engine/strategy/registry.h"

namespace paralab::strategy {

// ---- Rank -----------------------------------------------------------------------------------

Rank::Rank(int index, const RunContext& ctx) : m_index(index), m_ctx(ctx) {
    const auto& s = ctx.experiment->strategy;
    if (s.straggler_device.empty()) return;
    if (!s.straggler_rotate) {
        if (s.straggler_device == device().name()) m_straggle_ms = s.straggler_delay_ms;
        return;
    }
    const auto& names = ctx.experiment->devices;
    const auto first = std::find(names.begin(), names.end(), s.straggler_device);
    const auto mine = std::find(names.begin(), names.end(), device().name());
    if (first == names.end() || mine == names.end()) return;
    const auto n = static_cast<int64_t>(names.size());
    m_straggle_ms = s.straggler_delay_ms;
    m_straggle_period = n;
    m_straggle_offset = ((mine - names.begin()) - (first - names.begin()) + n) % n;
}

double Rank::seconds_since_t0(Clock::time_point t) const {
    return std::chrono::duration<double>(t - m_ctx.t0).count();
}

void Rank::add_span(const char* phase, double b, double e, int64_t bytes) {
    config::Span s;
    s.step = m_step;
    s.device = device().name();
    s.phase = phase;
    s.t_begin = b;
    s.t_end = e;
    s.bytes = bytes;
    std::lock_guard lock(m_mutex);
    m_spans.push_back(std::move(s));
}

void Rank::add_compute(const char* phase, Clock::time_point b, Clock::time_point e, double inner_ms) {
    m_compute_ms += std::max(0.0, std::chrono::duration<double, std::milli>(e - b).count() - inner_ms);
    add_span(phase, seconds_since_t0(b), seconds_since_t0(e), 0);
}

namespace {
// CommRecord times are seconds on the steady clock's own epoch.
double steady_seconds(Clock::time_point t) {
    return std::chrono::duration<double>(t.time_since_epoch()).count();
}
}  // namespace

void Rank::record_comm(const comm::CommRecord& r, bool waiting) {
    const double ms = (r.t_end - r.t_begin) * 1e3;
    (waiting ? m_idle_ms : m_comm_ms) += ms;
    const double base = steady_seconds(m_ctx.t0);
    add_span(r.op, r.t_begin - base, r.t_end - base, r.bytes);
}

void Rank::record_async_comm(const comm::CommRecord& r) {
    const double base = steady_seconds(m_ctx.t0);
    add_span(r.op, r.t_begin - base, r.t_end - base, r.bytes);
    std::lock_guard lock(m_mutex);
    m_async_comm_ms += (r.t_end - r.t_begin) * 1e3;
}

void Rank::record_idle(const char* phase, Clock::time_point b, Clock::time_point e) {
    m_idle_ms += std::chrono::duration<double, std::milli>(e - b).count();
    add_span(phase, seconds_since_t0(b), seconds_since_t0(e), 0);
}

void Rank::record_recompute(Clock::time_point b, Clock::time_point e) {
    add_span("recompute", seconds_since_t0(b), seconds_since_t0(e), 0);
}

bool Rank::straggle() const {
    if (m_straggle_ms <= 0) return true;
    if (m_straggle_period > 0 && (m_step - 1) % m_straggle_period != m_straggle_offset) return true;
    // In slices of at most 20 ms, so that a stop request ends the sleep promptly.
    const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double, std::milli>(m_straggle_ms));
    for (auto now = Clock::now(); now < end; now = Clock::now()) {
        if (m_ctx.stop_requested && m_ctx.stop_requested->load()) return false;
        std::this_thread::sleep_for(std::min<Clock::duration>(end - now, std::chrono::milliseconds(20)));
    }
    return true;
}

void Rank::begin_step(int64_t step) {
    m_step = step;
    m_compute_ms = m_comm_ms = m_idle_ms = 0;
}

Rank::StepTimes Rank::end_step() {
    StepTimes t{m_compute_ms, m_comm_ms, m_idle_ms};
    std::lock_guard lock(m_mutex);
    t.comm_ms += m_async_comm_ms;
    m_async_comm_ms = 0;
    return t;
}

std::vector<config::Span> Rank::take_spans() {
    std::lock_guard lock(m_mutex);
    std::vector<config::Span> out;
    out.swap(m_spans);
    return out;
}

// ---- Strategy -------------------------------------------------------------------------------

Strategy::~Strategy() = default;

bool RunContext::spans_processes() const {
    for (const Device* d : devices)
        if (!d) return true;
    return false;
}

void Strategy::setup(RunContext& ctx, nn::Model& reference) {
    m_ctx = &ctx;
    m_world = static_cast<int>(ctx.devices.size());
    if (ctx.spans_processes())
        if (const char* why = single_process_only())
            throw ConfigError("strategy.type", m_name + " runs in one process (" + why +
                              "); run it without mpirun, or use ddp, zero, data_parallel, "
                              "model_parallel, pipeline, tensor_parallel or hybrid across processes");
    if (const StrategyDescriptor* d = find_strategy(m_name)) check_device_count(*d, m_world);
    setup_impl(ctx, reference);
}

const char* Strategy::why_no_checkpoint() const {
    if (m_ctx && m_ctx->spans_processes()) return "its ranks run in several processes";
    return why_no_checkpoint_impl();
}

TrainingState Strategy::save_state() {
    throw ConfigError("strategy.type", m_name + " cannot write checkpoints: " + why_no_checkpoint());
}

void Strategy::load_state(const TrainingState& state) {
    (void)state;
    throw ConfigError("strategy.type", m_name + " cannot resume from a checkpoint: " + why_no_checkpoint());
}

std::unique_ptr<Strategy> make_strategy(const config::Experiment& e) {
    return descriptor_of(e).make();
}

// ---- building blocks ------------------------------------------------------------------------

void copy_parameters(const std::vector<nn::Param*>& from, const std::vector<nn::Param*>& to) {
    PARALAB_CHECK(from.size() == to.size(), "parameter lists of different lengths");
    for (size_t i = 0; i < from.size(); ++i) to[i]->value.copy_from(from[i]->value);
}

std::unique_ptr<nn::Model> make_replica(const config::Experiment& e, const Shape& input,
                                        nn::Model& reference, Device& device) {
    auto model = std::make_unique<nn::Model>(e.layers, input, e.loss, DType::f32, device);
    model->set_recompute(nn::recompute_from_name(e.train.recompute));
    copy_parameters(reference.parameters(), model->parameters());
    auto from = reference.buffers();
    auto to = model->buffers();
    for (size_t i = 0; i < from.size(); ++i) to[i].copy_from(from[i]);
    return model;
}

std::vector<Tensor> host_copies(const std::vector<Tensor>& tensors) {
    std::vector<Tensor> out;
    out.reserve(tensors.size());
    for (const Tensor& t : tensors) {
        Tensor c = Tensor::empty(t.shape(), t.dtype(), detached_host_device(), MemCategory::workspace);
        c.copy_from(t);
        out.push_back(std::move(c));
    }
    return out;
}

std::vector<Tensor> host_copies(const std::vector<nn::Param*>& params) {
    std::vector<Tensor> values;
    values.reserve(params.size());
    for (const nn::Param* p : params) values.push_back(p->value);
    return host_copies(values);
}

TrainingState whole_model_state(Strategy& s, const optim::Optimizer& optimizer, const optim::LossScaler* scaler) {
    TrainingState st;
    st.parameters = s.parameters();
    st.buffers = s.buffers();
    st.optimizer_state_names = optimizer.state_names();
    st.optimizer_steps = optimizer.steps_taken();
    if (scaler) {
        st.has_scaler = true;
        st.scaler = scaler->state();
    }
    st.optimizer_state.assign(st.parameters.size(), {});
    return st;
}

// Tags on the processes' communicator: apart from the job's gather (engine/run/process_run.cpp).
constexpr int kListCountTag = 30041, kListHeaderTag = 30042, kListTensorTag = 30043;

std::vector<std::vector<Tensor>> lists_on_rank0(const RunContext& ctx, std::vector<std::vector<Tensor>> mine) {
    const size_t world = ctx.devices.size();
    PARALAB_CHECK(mine.size() == world, "lists_on_rank0: one list per rank");
    if (!ctx.spans_processes()) return mine;
    PARALAB_CHECK(ctx.processes != nullptr, "lists_on_rank0: a run across processes without their communicator");
    comm::Communicator& comm = *ctx.processes;
    // A list's header: its rank, its length, and each tensor's rank and dimensions.
    if (comm.rank() != 0) {
        double lists = 0;
        for (size_t r = 0; r < world; ++r) lists += mine[r].empty() ? 0 : 1;
        comm.send(&lists, 1, DType::f64, 0, kListCountTag);
        for (size_t r = 0; r < world; ++r) {
            if (mine[r].empty()) continue;
            PARALAB_CHECK(ctx.is_local(static_cast<int>(r)), "lists_on_rank0: a list of another process's rank");
            std::vector<double> header{static_cast<double>(r), static_cast<double>(mine[r].size())};
            for (const Tensor& t : mine[r]) {
                PARALAB_CHECK(t.dtype() == DType::f32, "lists_on_rank0: f32 tensors only");
                header.push_back(static_cast<double>(t.shape().rank()));
                for (int64_t d : t.shape().dims()) header.push_back(static_cast<double>(d));
            }
            const double length = static_cast<double>(header.size());
            comm.send(&length, 1, DType::f64, 0, kListHeaderTag);
            comm.send(header.data(), static_cast<int64_t>(header.size()), DType::f64, 0, kListHeaderTag);
            for (const Tensor& t : mine[r]) comm.send(t.raw(), t.numel(), DType::f32, 0, kListTensorTag);
        }
        comm.barrier();  // the messages' copies are freed once rank 0 has them
        return {};
    }
    for (int p = 1; p < comm.world(); ++p) {
        double lists = 0;
        comm.recv(&lists, 1, DType::f64, p, kListCountTag);
        for (int64_t l = 0; l < static_cast<int64_t>(lists); ++l) {
            double length = 0;
            comm.recv(&length, 1, DType::f64, p, kListHeaderTag);
            std::vector<double> header(static_cast<size_t>(length));
            comm.recv(header.data(), static_cast<int64_t>(header.size()), DType::f64, p, kListHeaderTag);
            const auto r = static_cast<size_t>(header.at(0));
            PARALAB_CHECK(r < world && mine[r].empty(),
                          "lists_on_rank0: rank " + std::to_string(r) + "'s list came from two processes");
            size_t at = 2;
            for (int64_t i = 0; i < static_cast<int64_t>(header.at(1)); ++i) {
                std::vector<int64_t> dims(static_cast<size_t>(header.at(at++)));
                for (int64_t& d : dims) d = static_cast<int64_t>(header.at(at++));
                Tensor t = Tensor::empty(Shape(std::move(dims)), DType::f32, detached_host_device(),
                                         MemCategory::communication);
                comm.recv(t.raw(), t.numel(), DType::f32, p, kListTensorTag);
                mine[r].push_back(std::move(t));
            }
        }
    }
    comm.barrier();
    return mine;
}

// dst's bytes from host memory, into a GPU ordered on its queue (the runtime stages pageable
// memory before returning, so `src` may change afterwards).
static void copy_in(const Tensor& dst, const float* src) {
    if (void* q = dst.queue()) kernels::gpu::copy_host_to_device_async(dst.raw(), src, dst.nbytes(), q);
    else std::memcpy(dst.raw(), src, dst.nbytes());
}

Tensor WholeOnHost::predict(Strategy& s, const RunContext& ctx, int64_t steps, const Tensor& x) {
    const config::Experiment& e = *ctx.experiment;
    Device& host = detached_host_device();
    if (!m_model) m_model = std::make_unique<nn::Model>(e.layers, ctx.input, e.loss, DType::f32, host);
    if (m_at != steps) {
        const std::vector<Tensor> values = s.parameters();
        const auto to = m_model->parameters();
        for (size_t i = 0; i < to.size(); ++i) to[i]->value.copy_from(values[i]);
        const std::vector<Tensor> from = s.buffers();
        const auto bufs = m_model->buffers();
        for (size_t i = 0; i < bufs.size(); ++i) bufs[i].copy_from(from[i]);
        m_at = steps;
    }
    const Tensor out = m_model->forward(gpu::on_device(x, host, MemCategory::activations), nn::Mode::eval);
    return gpu::on_device(out, *ctx.devices[0], MemCategory::activations);
}

DeviceBatch to_device(const data::Batch& b, int64_t offset, int64_t count, const Shape& input,
                      const Shape& target, Device& device) {
    DeviceBatch out;
    out.x = Tensor::empty(input.with_batch(count), DType::f32, device, MemCategory::activations);
    const int64_t in_numel = input.numel();
    copy_in(out.x, b.inputs.data() + offset * in_numel);
    const Shape t = target.rank() == 0 ? Shape{count} : target.with_batch(count);
    const int64_t t_numel = target.rank() == 0 ? 1 : target.numel();
    // Class ids stay on the host next to a GPU: the loss validates them there and uploads them
    // as integers (a float copy on the GPU would only travel back).
    Device& target_device = device.is_gpu() && target.rank() == 0 ? detached_host_device() : device;
    out.y = Tensor::empty(t, DType::f32, target_device, MemCategory::activations);
    copy_in(out.y, b.targets.data() + offset * t_numel);
    return out;
}

void backward_by_layer(nn::Model& model, const Tensor& dy,
                              const std::function<void(size_t)>& layer_done,
                              const std::function<void(size_t)>& layer_begin) {
    nn::Sequential& net = model.net();
    Tensor g = dy;
    for (size_t i = net.size(); i-- > 0;) {
        if (layer_begin) layer_begin(i);
        net.recompute_before_backward(i);
        g = net.at(i).backward(g);
        if (layer_done) layer_done(i);
        if (!g.defined()) {
            for (size_t j = i; j-- > 0;) {  // layers before an embedding: none by construction
                if (layer_begin) layer_begin(j);
                if (layer_done) layer_done(j);
            }
            break;
        }
    }
}

LocalPass forward_backward(Rank& rank, nn::Model& model, const data::Batch& batch,
                           int64_t global_offset, const std::function<void(size_t)>& layer_done,
                           const std::function<void(size_t)>& layer_begin, double loss_scale) {
    const config::Experiment& e = rank.experiment();
    const RunContext& ctx = rank.context();
    LocalPass pass;
    model.zero_grad();
    if (batch.size == 0) {  // a shard of a small last batch: no rows, zero gradients
        for (size_t i = model.net().size(); i-- > 0;) {
            if (layer_begin) layer_begin(i);
            if (layer_done) layer_done(i);
        }
        return pass;
    }
    const int64_t parts = std::min<int64_t>(e.train.grad_accum, batch.size);
    for (int64_t k = 0; k < parts; ++k) {
        const auto shard = data::shard_of_batch(batch.size, static_cast<int>(k), static_cast<int>(parts));
        DeviceBatch db = to_device(batch, shard.offset, shard.count, ctx.input, ctx.target, rank.device());
        model.set_random_state(e.seed, static_cast<uint64_t>(rank.step() - 1), global_offset + shard.offset);
        // A mixture of experts' auxiliary losses weigh as the loss does: rows / the global batch.
        nn::set_moe_loss_weight(model.net(), 1.0 / static_cast<double>(batch.global_size));
        nn::set_moe_grad_scale(model.net(), loss_scale);
        Tensor out = rank.compute("forward", [&] {
            rank.straggle();
            Tensor o = model.forward(db.x, nn::Mode::train);
            pass.loss_sum += model.loss().forward(o, db.y, batch.global_size) * static_cast<double>(batch.global_size);
            return o;
        });
        rank.compute("backward", [&] {
            Tensor dy = model.loss().backward();
            if (loss_scale != 1.0) optim::scale_in_place(dy, loss_scale);
            if (k + 1 == parts) backward_by_layer(model, dy, layer_done, layer_begin);
            else model.backward(dy);
        });
    }
    pass.samples = batch.size;
    return pass;
}

std::unique_ptr<optim::LossScaler> loss_scaler_for(const config::Experiment& e) {
    return e.train.precision == "fp16" ? std::make_unique<optim::LossScaler>() : nullptr;
}

namespace {

// `collective` on `count` host doubles at `values`, through device memory on a GPU.
comm::CommRecord on_host_doubles(Rank& rank, double* values, int64_t count,
                                 const std::function<comm::CommRecord(void*)>& collective) {
    if (!rank.device().is_gpu()) return collective(values);
    const Tensor d = gpu::upload(values, count, DType::f64, rank.device());
    comm::CommRecord rec = collective(d.raw());
    const std::vector<double> back = gpu::read_doubles(d.data<double>(), count, d.queue());
    std::copy(back.begin(), back.end(), values);
    return rec;
}

}  // namespace

comm::CommRecord all_reduce_doubles(Rank& rank, double* values, int64_t count, comm::ReduceOp op) {
    return on_host_doubles(rank, values, count,
                           [&](void* p) { return rank.comm().all_reduce(p, count, DType::f64, op); });
}

comm::CommRecord all_gather_doubles(Rank& rank, double* values, int64_t per_rank) {
    const int64_t count = per_rank * rank.world();
    return on_host_doubles(rank, values, count,
                           [&](void* p) { return rank.comm().all_gather(p, count, DType::f64); });
}

bool unscale_gradients(Rank& rank, const std::vector<nn::Param*>& params, optim::LossScaler& scaler,
                       bool over_ranks) {
    return rank.compute("unscale", [&] {
        if (!over_ranks || rank.world() == 1) return scaler.unscale(params, rank.device(), {});
        return scaler.unscale(params, rank.device(), [&](float* found_inf) {
            rank.record_comm(named(rank.comm().all_reduce(found_inf, 1, DType::f32, comm::ReduceOp::max),
                                   "agree_overflow"));
        });
    });
}

double clip_gradients(Rank& rank, const std::vector<nn::Param*>& params, double max_norm,
                      bool sum_over_ranks) {
    double sq = rank.compute("clip", [&] { return optim::grad_sq_norm(params); });
    if (sum_over_ranks && rank.world() > 1)
        rank.record_comm(all_reduce_doubles(rank, &sq, 1, comm::ReduceOp::sum));
    const double norm = std::sqrt(sq);
    rank.compute("clip", [&] { optim::clip_grads_with_norm(params, norm, max_norm); });
    return norm;
}

}  // namespace paralab::strategy
