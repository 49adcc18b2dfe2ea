#include "engine/strategy/stages.h"

#include <kernels/gpu/memory.h>

#include "engine/device/gpu_values.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "engine/device/device.h"
#include "engine/optim/clip.h"
#include "engine/strategy/registry.h"

namespace paralab::strategy::stages {

// ---- schedules ------------------------------------------------------------------------------

int contexts_needed(Schedule schedule, int stage, int stages, int micro_batches) {
    if (schedule == Schedule::gpipe) return micro_batches;
    return std::max(1, std::min(micro_batches, stages - stage));
}

std::vector<Op> stage_schedule(Schedule schedule, int stage, int stages, int micro_batches) {
    std::vector<Op> ops;
    ops.reserve(static_cast<size_t>(2 * micro_batches));
    if (schedule == Schedule::gpipe) {
        for (int i = 0; i < micro_batches; ++i) ops.push_back({true, i});
        for (int i = micro_batches; i-- > 0;) ops.push_back({false, i});
        return ops;
    }
    // 1F1B: stage s starts p - s - 1 micro-batches ahead of the one it runs backward, so the
    // last stage alternates from the start and the first has the most in flight.
    const int warmup = std::min(stages - stage - 1, micro_batches);
    for (int i = 0; i < warmup; ++i) ops.push_back({true, i});
    for (int i = 0; i + warmup < micro_batches; ++i) {
        ops.push_back({true, i + warmup});
        ops.push_back({false, i});
    }
    for (int i = micro_batches - warmup; i < micro_batches; ++i) ops.push_back({false, i});
    return ops;
}

// ---- splits ---------------------------------------------------------------------------------

std::vector<int64_t> balanced_split(const std::vector<int64_t>& layer_cost, int stages,
                                    const std::vector<int64_t>& params) {
    const std::vector<int64_t>& layer_params = layer_cost;  // the quantity balanced
    const std::vector<int64_t>& free_of = params.size() == layer_cost.size() ? params : layer_cost;
    const int n = static_cast<int>(layer_params.size());
    PARALAB_CHECK(stages >= 1 && stages <= n, "balanced_split: " + std::to_string(stages) +
                                                  " stages for " + std::to_string(n) + " layers");
    std::vector<int64_t> prefix(static_cast<size_t>(n) + 1, 0);
    for (int i = 0; i < n; ++i) prefix[size_t(i) + 1] = prefix[size_t(i)] + layer_params[size_t(i)];
    auto sum = [&](int a, int b) { return prefix[size_t(b)] - prefix[size_t(a)]; };
    constexpr int64_t kInf = std::numeric_limits<int64_t>::max();
    const auto at = [n](int i, int k) { return size_t(i) * size_t(n + 1) + size_t(k); };

    // Pass 1: the least possible largest stage. best[i, k]: layers [i, n) in k stages.
    std::vector<int64_t> best(size_t(n + 1) * size_t(n + 1), kInf);
    best[at(n, 0)] = 0;
    for (int k = 1; k <= stages; ++k)
        for (int i = n - k; i >= 0; --i)
            for (int j = i + 1; j <= n - k + 1; ++j) {
                const int64_t rest = best[at(j, k - 1)];
                if (rest == kInf) continue;
                best[at(i, k)] = std::min(best[at(i, k)], std::max(sum(i, j), rest));
            }
    const int64_t limit = best[at(0, stages)];

    // Pass 2: under that limit, the fewest stages that start with a parameter-free layer.
    std::vector<int64_t> starts(size_t(n + 1) * size_t(n + 1), kInf);
    starts[at(n, 0)] = 0;
    for (int k = 1; k <= stages; ++k)
        for (int i = n - k; i >= 0; --i)
            for (int j = i + 1; j <= n - k + 1 && sum(i, j) <= limit; ++j) {
                const int64_t rest = starts[at(j, k - 1)];
                if (rest == kInf) continue;
                const int64_t free_start = (j < n && free_of[size_t(j)] == 0) ? 1 : 0;
                starts[at(i, k)] = std::min(starts[at(i, k)], rest + free_start);
            }

    // Walk from the front taking the latest boundary that keeps the optimum.
    std::vector<int64_t> split;
    int i = 0;
    for (int k = stages; k > 1; --k) {
        int chosen = -1;
        for (int j = n - k + 1; j > i; --j) {
            if (sum(i, j) > limit || starts[at(j, k - 1)] == kInf) continue;
            const int64_t free_start = free_of[size_t(j)] == 0 ? 1 : 0;
            if (starts[at(j, k - 1)] + free_start == starts[at(i, k)]) {
                chosen = j;
                break;
            }
        }
        PARALAB_CHECK(chosen > i, "balanced_split: no split found");
        split.push_back(chosen);
        i = chosen;
    }
    return split;
}

void check_stage_count(int world, size_t layers, const std::string& strategy_name) {
    if (static_cast<size_t>(world) > layers)
        throw ConfigError("devices", strategy_name + " places at least one top-level layer on each device, but "
                          "there are " + std::to_string(world) + " devices for a model of " +
                          std::to_string(layers) + " layers");
}

void check_split(const std::vector<int64_t>& split, int world, size_t layers) {
    if (split.size() != static_cast<size_t>(world - 1))
        throw ConfigError("strategy.split", "expected " + std::to_string(world - 1) +
                          " layer indices (the first layer of each stage after the first, for " +
                          std::to_string(world) + " devices), got " + std::to_string(split.size()));
    int64_t last = 0;
    for (size_t i = 0; i < split.size(); ++i) {
        const int64_t b = split[i];
        const std::string key = "strategy.split[" + std::to_string(i) + "]";
        if (b <= 0 || b >= static_cast<int64_t>(layers))
            throw ConfigError(key, "expected a layer index from 1 to " + std::to_string(layers - 1) +
                              " (the first layer of a stage after the first), got " + std::to_string(b));
        if (b <= last)
            throw ConfigError(key, "expected indices in increasing order, got " + std::to_string(b) +
                              " after " + std::to_string(last));
        last = b;
    }
}

void check_stages(const config::Experiment& e) {
    const auto split = option<std::vector<int64_t>>(e.strategy, "split");
    const int world = static_cast<int>(e.devices.size());
    // A repeated layer's copies are layers of their own here (nn::expand_repeats).
    const size_t layers = nn::expand_repeats(e.layers).size();
    check_stage_count(world, layers, e.strategy.type);
    if (!split.empty()) check_split(split, world, layers);
}

std::vector<size_t> stage_bounds(const config::Experiment& e, nn::Model& reference, int world,
                                 const std::string& strategy_name) {
    const size_t n = reference.net().size();
    check_stage_count(world, n, strategy_name);
    std::vector<int64_t> split = option<std::vector<int64_t>>(e.strategy, "split");
    if (split.empty() && world > 1) {
        std::vector<int64_t> flops, counts;
        for (size_t i = 0; i < n; ++i) {
            flops.push_back(reference.net().at(i).flops_per_sample());
            counts.push_back(reference.net().at(i).parameter_count());
        }
        split = balanced_split(flops, world, counts);
    }
    check_split(split, world, n);
    std::vector<size_t> bounds{0};
    for (int64_t b : split) bounds.push_back(static_cast<size_t>(b));
    bounds.push_back(n);
    return bounds;
}

// ---- the strategy ---------------------------------------------------------------------------

namespace {

constexpr int kForwardTag = 0, kBackwardTag = 1;
int message_tag(int micro, int direction) {
    return 2 * micro + direction;
}

// Rows [first, first + count) of a host array of rows shaped `row` as a device tensor.
Tensor rows_to_device(const std::vector<float>& data, int64_t first, int64_t count,
                      const Shape& row, Device& device) {
    const Shape shape = row.rank() == 0 ? Shape{count} : row.with_batch(count);
    Tensor t = Tensor::empty(shape, DType::f32, device, MemCategory::activations);
    const int64_t per_row = row.rank() == 0 ? 1 : row.numel();
    PARALAB_CHECK(static_cast<int64_t>(data.size()) >= (first + count) * per_row,
                  "stage: the batch holds fewer rows than the schedule reads");
    if (void* q = t.queue()) kernels::gpu::copy_host_to_device_async(t.raw(), data.data() + first * per_row, t.nbytes(), q);
    else std::memcpy(t.raw(), data.data() + first * per_row, t.nbytes());
    return t;
}

// A stage on its device: the master model (context 0) and the contexts that share its
// parameters and gradients.
struct Stage {
    size_t first = 0, last = 0;  // top-level layers [first, last)
    Shape input, output;         // per example
    std::vector<std::unique_ptr<nn::Model>> contexts;
    std::vector<nn::Param*> params;  // context 0's (every context's values and grads)
    std::vector<Tensor> buffers;     // context 0's
    std::unique_ptr<optim::Optimizer> optimizer;
    std::unique_ptr<optim::LossScaler> scaler;  // fp16: every stage's, kept equal (see step)
    size_t remote_params = 0, remote_buffers = 0;  // a stage of another process: list lengths

    nn::Model& master() { return *contexts.front(); }
};

// Rows of one micro-batch in the global batch.
struct Micro {
    int64_t offset = 0, count = 0;
};

class StagedStrategy final : public Strategy {
public:
    explicit StagedStrategy(bool pipelined)
        : Strategy(pipelined ? "pipeline" : "model_parallel"), m_pipelined(pipelined) {}

    DataRole data_role(int rank) const override {
        // The first stage reads the inputs and the last the targets; the rest get activations.
        return {rank == 0 || rank == m_world - 1, 0, 1};
    }

    StepResult step(Rank& rank, const data::Batch& batch, int64_t offset, double lr) override;
    Tensor predict(const Tensor& x) override;
    std::vector<Tensor> parameters() override;
    std::vector<Tensor> buffers() override;

    // A checkpoint holds the stages' parameters and optimizer states end to end: the single
    // device's lists.
    const char* why_no_checkpoint() const override {
        if (m_ctx && m_ctx->spans_processes()) return "its stages run in several processes";
        return nullptr;
    }
    TrainingState save_state() override;
    void load_state(const TrainingState& state) override;

protected:
    void setup_impl(RunContext& ctx, nn::Model& reference) override;

private:
    // One flush of the schedule over `micro` (rows of the global batch).
    void run_flush(Rank& rank, Stage& st, const data::Batch& batch, int64_t offset,
                   const std::vector<Micro>& micro, StepResult& result);
    void forward(Rank& rank, Stage& st, nn::Model& c, const data::Batch& batch, int64_t offset,
                 int index, const Micro& mb, StepResult& result);
    void backward(Rank& rank, Stage& st, nn::Model& c, int index, const Micro& mb);

    bool m_pipelined;
    int64_t m_micro_batches = 1;
    Schedule m_schedule = Schedule::gpipe;
    std::vector<Stage> m_stages;  // by rank; rank r's thread touches only m_stages[r]
};

void StagedStrategy::setup_impl(RunContext& ctx, nn::Model& reference) {
    const config::Experiment& e = *ctx.experiment;
    const std::vector<size_t> bounds = stage_bounds(e, reference, m_world, name());
    const std::vector<nn::LayerSpec> layers = nn::expand_repeats(e.layers);  // as reference.net()
    if (m_pipelined) {
        m_micro_batches = option<int64_t>(e.strategy, "micro_batches");
        m_schedule = schedule_of(e);
    }
    if (m_micro_batches < 1)
        throw ConfigError("strategy.micro_batches", "expected a positive integer, got " +
                          std::to_string(m_micro_batches));

    auto ref_params = reference.parameters();
    auto ref_buffers = reference.buffers();
    size_t param_at = 0, buffer_at = 0;  // the stage's slice of the reference's lists
    m_stages.resize(static_cast<size_t>(m_world));
    for (int s = 0; s < m_world; ++s) {
        Stage& st = m_stages[size_t(s)];
        st.first = bounds[size_t(s)];
        st.last = bounds[size_t(s) + 1];
        st.input = reference.net().at(st.first).input_shape();
        st.output = reference.net().at(st.last - 1).output_shape();
        if (!ctx.is_local(s)) {
            // Another process holds this stage: only its share of the model's lists is counted.
            for (size_t i = st.first; i < st.last; ++i) {
                st.remote_params += reference.net().at(i).parameters().size();
                st.remote_buffers += reference.net().at(i).buffers().size();
            }
            param_at += st.remote_params;
            buffer_at += st.remote_buffers;
            continue;
        }
        Device& device = *ctx.devices[size_t(s)];
        const int contexts =
            contexts_needed(m_schedule, s, m_world, static_cast<int>(m_micro_batches));
        for (int c = 0; c < contexts; ++c) {
            auto model =
                nn::Model::stage(layers, st.first, st.last, st.input, e.loss, DType::f32, device);
            model->set_recompute(nn::recompute_from_name(e.train.recompute));
            if (c == 0) {
                st.params = model->parameters();
                st.buffers = model->buffers();
                for (nn::Param* p : st.params) {
                    PARALAB_CHECK(param_at < ref_params.size(), "stage: parameter lists differ");
                    p->value.copy_from(ref_params[param_at++]->value);
                }
                for (Tensor& b : st.buffers) {
                    PARALAB_CHECK(buffer_at < ref_buffers.size(), "stage: buffer lists differ");
                    b.copy_from(ref_buffers[buffer_at++]);
                }
            } else {
                // Drop this build's own parameters and gradients for the master's.
                auto own = model->parameters();
                PARALAB_CHECK(own.size() == st.params.size(), "stage: contexts differ");
                for (size_t i = 0; i < own.size(); ++i) {
                    own[i]->value = st.params[i]->value;
                    own[i]->grad = st.params[i]->grad;
                }
            }
            st.contexts.push_back(std::move(model));
        }
        // The contexts' own parameters lived only until replaced: keep them out of the peak,
        // so that the memory picture shows each stage's parameters once.
        if (contexts > 1) device.allocator().reset_peak();
        st.optimizer = optim::make_optimizer(e.optimizer);
        st.scaler = loss_scaler_for(e);
    }
    PARALAB_CHECK(param_at == ref_params.size() && buffer_at == ref_buffers.size(),
                  "stage: the stages do not hold every parameter of the model");
}

TrainingState StagedStrategy::save_state() {
    if (why_no_checkpoint()) return Strategy::save_state();
    TrainingState out;
    out.optimizer_state_names = m_stages.front().optimizer->state_names();
    for (Stage& st : m_stages) {
        for (Tensor& t : host_copies(st.params)) out.parameters.push_back(std::move(t));
        for (Tensor& t : host_copies(st.buffers)) out.buffers.push_back(std::move(t));
        const auto& state = st.optimizer->state();
        for (size_t i = 0; i < st.params.size(); ++i)
            out.optimizer_state.push_back(i < state.size() ? host_copies(state[i]) : std::vector<Tensor>{});
        out.optimizer_steps = std::max(out.optimizer_steps, st.optimizer->steps_taken());
        if (st.scaler) {
            out.has_scaler = true;
            out.scaler = st.scaler->state();  // every stage's is the same
        }
    }
    return out;
}

void StagedStrategy::load_state(const TrainingState& state) {
    if (why_no_checkpoint()) return Strategy::load_state(state);
    size_t p_at = 0, b_at = 0;
    for (Stage& st : m_stages) {
        PARALAB_CHECK(p_at + st.params.size() <= state.parameters.size() &&
                          b_at + st.buffers.size() <= state.buffers.size(),
                      "the checkpoint holds fewer parameters than the stages");
        std::vector<std::vector<Tensor>> mine;
        for (size_t i = 0; i < st.params.size(); ++i, ++p_at) {
            st.params[i]->value.copy_from(state.parameters[p_at]);
            mine.push_back(state.optimizer_state[p_at]);
        }
        for (Tensor& b : st.buffers) b.copy_from(state.buffers[b_at++]);
        st.optimizer->load_state(st.params, mine, state.optimizer_steps);
        if (st.scaler && state.has_scaler) st.scaler->load_state(state.scaler);
    }
    PARALAB_CHECK(p_at == state.parameters.size() && b_at == state.buffers.size(),
                  "the checkpoint holds more parameters than the stages");
}

StepResult StagedStrategy::step(Rank& rank, const data::Batch& batch, int64_t offset, double lr) {
    const config::Experiment& e = rank.experiment();
    Stage& st = m_stages[size_t(rank.index())];
    StepResult result;
    st.master().zero_grad();
    const int64_t total = batch.global_size;
    if (total > 0) {
        const int parts = static_cast<int>(std::min<int64_t>(e.train.grad_accum, total));
        for (int k = 0; k < parts; ++k) {
            const auto part = data::shard_of_batch(total, k, parts);
            const int m = static_cast<int>(std::min<int64_t>(m_micro_batches, part.count));
            std::vector<Micro> micro;
            for (int i = 0; i < m; ++i) {
                const auto r = data::shard_of_batch(part.count, i, m);
                micro.push_back({part.offset + r.offset, r.count});
            }
            run_flush(rank, st, batch, offset, micro, result);
        }
        result.samples = total;
    }
    // fp16: the last stage scaled the loss gradient, so every stage's gradients are scaled;
    // each stage checks its own and all agree, so they skip or step together.
    if (st.scaler && !unscale_gradients(rank, st.params, *st.scaler, true)) return result;
    if (e.train.clip_norm)
        result.grad_norm = clip_gradients(rank, st.params, *e.train.clip_norm, true);
    rank.compute("optimizer", [&] { st.optimizer->step(st.params, lr); });
    return result;
}

void StagedStrategy::run_flush(Rank& rank, Stage& st, const data::Batch& batch, int64_t offset,
                               const std::vector<Micro>& micro, StepResult& result) {
    const int m = static_cast<int>(micro.size());
    const int contexts = contexts_needed(m_schedule, rank.index(), m_world, m);
    PARALAB_CHECK(contexts <= static_cast<int>(st.contexts.size()), "stage: too few contexts");
    for (const Op& op : stage_schedule(m_schedule, rank.index(), m_world, m)) {
        nn::Model& c = *st.contexts[size_t(op.micro % contexts)];
        const Micro& mb = micro[size_t(op.micro)];
        if (op.forward)
            forward(rank, st, c, batch, offset, op.micro, mb, result);
        else
            backward(rank, st, c, op.micro, mb);
    }
}

void StagedStrategy::forward(Rank& rank, Stage& st, nn::Model& c, const data::Batch& batch,
                             int64_t offset, int index, const Micro& mb, StepResult& result) {
    const config::Experiment& e = rank.experiment();
    const RunContext& ctx = rank.context();
    Device& device = rank.device();
    const int s = rank.index();
    const bool last = s == m_world - 1;
    const int64_t local = mb.offset - offset;  // the micro-batch's first row in `batch`

    Tensor x;
    if (s == 0) {
        x = rows_to_device(batch.inputs, local, mb.count, ctx.input, device);
    } else {
        x = Tensor::empty(st.input.with_batch(mb.count), DType::f32, device,
                          MemCategory::activations);
        comm::CommRecord rec = rank.comm().recv(x.raw(), x.numel(), DType::f32, s - 1,
                                                message_tag(index, kForwardTag));
        rec.op = "recv_activation";
        rank.record_comm(rec, /*waiting=*/true);
    }
    Tensor y;
    if (last) y = rows_to_device(batch.targets, local, mb.count, ctx.target, device);

    // A context other than the master runs on the master's running statistics.
    const bool own_buffers = &c != &st.master() && !st.buffers.empty();
    std::vector<Tensor> buffers = own_buffers ? c.buffers() : std::vector<Tensor>{};
    for (size_t i = 0; i < buffers.size(); ++i) buffers[i].copy_from(st.buffers[i]);

    c.set_random_state(e.seed, static_cast<uint64_t>(rank.step() - 1), mb.offset);
    const int64_t total = batch.global_size;
    Tensor out = rank.compute("forward", [&] {
        rank.straggle();
        Tensor o = c.forward(x, nn::Mode::train);
        if (last) {
            result.loss_sum += c.loss().forward(o, y, total) * static_cast<double>(total);
            result.loss_samples += mb.count;
        }
        return o;
    });
    for (size_t i = 0; i < buffers.size(); ++i) st.buffers[i].copy_from(buffers[i]);

    if (!last) {
        comm::CommRecord rec = rank.comm().send(out.raw(), out.numel(), DType::f32, s + 1,
                                                message_tag(index, kForwardTag));
        rec.op = "send_activation";
        rank.record_comm(rec);
    }
}

void StagedStrategy::backward(Rank& rank, Stage& st, nn::Model& c, int index, const Micro& mb) {
    Device& device = rank.device();
    const int s = rank.index();
    const bool last = s == m_world - 1;
    Tensor dy;
    if (!last) {
        dy = Tensor::empty(st.output.with_batch(mb.count), DType::f32, device,
                           MemCategory::activations);
        comm::CommRecord rec = rank.comm().recv(dy.raw(), dy.numel(), DType::f32, s + 1,
                                                message_tag(index, kBackwardTag));
        rec.op = "recv_grad";
        rank.record_comm(rec, /*waiting=*/true);
    }
    Tensor dx = rank.compute("backward", [&] {
        if (last) {
            dy = c.loss().backward();
            if (st.scaler) optim::scale_in_place(dy, st.scaler->scale());
        }
        Tensor g = c.net().backward(dy);
        dy = Tensor();  // the output gradient is not needed any more
        return g;
    });
    if (s > 0) {
        PARALAB_CHECK(dx.defined(), "stage " + std::to_string(s) + ": no input gradient");
        comm::CommRecord rec = rank.comm().send(dx.raw(), dx.numel(), DType::f32, s - 1,
                                                message_tag(index, kBackwardTag));
        rec.op = "send_grad";
        rank.record_comm(rec);
    }
}

// The stages chain on the calling thread (each stage's input copied onto its device when it is
// another: GPUs); every rank is between steps when predict runs, so the masters' last-forward
// state is free to overwrite.
Tensor StagedStrategy::predict(const Tensor& x) {
    Tensor h = x;
    for (Stage& st : m_stages) {
        Device& device = st.master().device();
        h = st.master().forward(gpu::on_device(h, device, MemCategory::activations), nn::Mode::eval);
    }
    return h;
}

// Each stage's share, in the model's order; a stage of another process as empty tensors.
std::vector<Tensor> StagedStrategy::parameters() {
    std::vector<Tensor> out;
    for (Stage& st : m_stages) {
        for (Tensor& t : host_copies(st.params)) out.push_back(std::move(t));
        out.resize(out.size() + st.remote_params);
    }
    return out;
}

std::vector<Tensor> StagedStrategy::buffers() {
    std::vector<Tensor> out;
    for (Stage& st : m_stages) {
        for (Tensor& t : host_copies(st.buffers)) out.push_back(std::move(t));
        out.resize(out.size() + st.remote_buffers);
    }
    return out;
}

}  // namespace

Schedule schedule_of(const config::Experiment& e) {
    return option<std::string>(e.strategy, "schedule") == "1f1b" ? Schedule::one_f_one_b : Schedule::gpipe;
}

std::vector<DeviceMemoryEstimate> stage_memory(const config::Experiment& e, const ModelCost& m, bool pipelined) {
    auto out = blank_estimates(e);
    const int n = static_cast<int>(out.size());
    const int64_t layers = static_cast<int64_t>(m.layer_parameters.size());
    std::vector<int64_t> split = option<std::vector<int64_t>>(e.strategy, "split");
    if (split.size() != static_cast<size_t>(n - 1) && n <= layers)
        split = balanced_split(m.layer_flops, n, m.layer_parameters);
    std::vector<int64_t> bounds{0};
    for (int64_t b : split) bounds.push_back(std::clamp<int64_t>(b, 0, layers));
    while (static_cast<int>(bounds.size()) < n) bounds.push_back(layers);
    bounds.push_back(layers);
    const int micro = pipelined ? static_cast<int>(std::max<int64_t>(1, option<int64_t>(e.strategy, "micro_batches"))) : 1;
    const int64_t micro_rows = (e.data.batch_size + micro - 1) / micro;
    const int64_t k = optimizer_state_per_parameter(e.optimizer);
    for (int r = 0; r < n; ++r) {
        // What the stage's layers keep (the received input is its first layer's to keep; its
        // gradient sent back is among the gradients activations_of counts): what crosses
        // devices is accounted as activations, not communication.
        int64_t params = 0;
        for (int64_t l = bounds[r]; l < bounds[r + 1]; ++l) params += m.layer_parameters[l];
        const int64_t acts = m.activations_of(static_cast<size_t>(bounds[r]), static_cast<size_t>(bounds[r + 1]));
        const int in_flight = pipelined ? contexts_needed(schedule_of(e), r, n, micro) : 1;
        out[r].role = "stage " + std::to_string(r + 1) + ": layers " + std::to_string(bounds[r]) + "–" +
                      std::to_string(std::max<int64_t>(bounds[r], bounds[r + 1] - 1));
        out[r].set(MemCategory::parameters, params);
        out[r].set(MemCategory::gradients, params);
        out[r].set(MemCategory::optimizer_state, k * params);
        out[r].set(MemCategory::activations, acts * micro_rows * in_flight);
    }
    return out;
}

StepPicture stage_picture(const config::Experiment& e, bool pipelined) {
    StepPicture p;
    p.layout = StepPicture::Layout::chain;
    for (size_t i = 0; i < e.devices.size(); ++i) p.subtitles.push_back("stage " + std::to_string(i + 1));
    p.top = "→ activations forward      ← their gradients back";
    p.caption = pipelined ? "The batch is cut into " + std::to_string(option<int64_t>(e.strategy, "micro_batches")) +
                                " micro-batches (" + (schedule_of(e) == Schedule::one_f_one_b ? "1F1B" : "GPipe") +
                                "): stages work on different micro-batches at once; the idle start and end "
                                "are the bubble."
                          : "One batch at a time: while one stage works, the others wait.";
    return p;
}

std::unique_ptr<Strategy> make_staged_strategy(bool pipelined) {
    return std::make_unique<StagedStrategy>(pipelined);
}

}  // namespace paralab::strategy::stages
