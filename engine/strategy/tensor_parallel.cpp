// tensor_parallel: Megatron-LM's splitting of every attention and transformer_block over all
// devices (Shoeybi et al. 2019; docs/strategies.md). Every device runs the whole global batch.
//
// Device r of N holds heads [r H/N, (r+1) H/N) of each attention: the rows of qkv's weight
// [3D, D] that make those heads' q, k and v (three row ranges, one in each D-block) and the
// matching columns of proj's weight [D, D/N]; in a block, also rows [r f/N, (r+1) f/N) of the
// MLP's first linear and those columns of its second. The layers do the splitting
// (nn::TensorShard, nn::LinearShard); this file gives them the collectives and the slices.
//
//   forward:  x (whole) -> qkv shard -> this device's heads -> proj shard = a partial sum
//             -> all-reduce, + bias -> y (whole); the MLP alike: 2 all-reduces per block
//   backward: the conjugates: the input gradient leaving each column-parallel linear is a
//             partial sum -> all-reduce: 2 per block
// Each all-reduce moves B·T·D numbers. Every other layer (embeddings, layernorms, the head,
// the row-parallel biases) is replicated: it sees the same whole inputs and gradients on every
// device, so its gradients are identical everywhere and need no reduction.
//
// sequence_parallel (Korthikanti et al. 2022, section 4.2.2): inside the split layers, what
// lies outside the split linears (layernorms, dropout, residual adds) holds this device's T/N
// positions of every sample. Before each column-parallel linear an all-gather along the
// sequence, after each row-parallel one a reduce-scatter along the sequence in place of the
// all-reduce; backward the conjugates (reduce-scatter of the input gradient of each column-
// parallel linear, all-gather of the output gradient of each row-parallel one): 2 all-gathers
// and 2 reduce-scatters of B·T·D numbers per block in forward, the same in backward. A run of
// consecutive split layers passes the split sequence on: its first keeps its positions of the
// whole input (no communication; in backward an all-gather of its input gradient), its last
// all-gathers its output (in backward keeps its positions of the gradient). The layers outside
// the split layers are unchanged. The split layers' layernorms and row-parallel biases stay
// whole but see 1/N of the positions: their gradients are all-reduced over the devices before
// the optimizer ("tp_sequence_grads"), as Megatron does.
//
// Every device starts from slices of `reference` and steps its own shards with its own
// optimizer (element-wise, so the shards' steps are the single device's); parameters() puts
// the shards together in the single device's order, and predict() runs that whole model on
// the host. A checkpoint holds that whole model and its whole optimizer state, put together
// the same way; a resume cuts them again.
//
// Across the processes of an MPI job each process builds only its own devices' shards, and the
// collectives above run over the job's group. parameters() is then collective over the
// processes (one thread each, as the job calls it between steps): every process sends its
// devices' slices to rank 0's process, which puts the whole model together there and offers it
// to the job's gather; the others offer nothing. Checkpoints stay in one process.
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>

#include "engine/device/gpu_values.h"
#include "engine/nn/attention.h"
#include "engine/optim/clip.h"
#include "engine/strategy/registry.h"
#include "engine/strategy/strategy.h"
#include "engine/strategy/tensor_shards.h"

namespace paralab::strategy {

namespace {

// ---- the model's layers, as the experiment file lists them -----------------------------------

// Each attention and transformer_block spec of `layers` (residual bodies included), with its
// JSON path.
void for_each_split_spec(const std::vector<nn::LayerSpec>& layers, const std::string& prefix,
                         const std::function<void(const nn::LayerSpec&, const std::string&)>& fn) {
    for (size_t i = 0; i < layers.size(); ++i) {
        const std::string path = prefix + "[" + std::to_string(i) + "]";
        if (layers[i].type == "attention" || layers[i].type == "transformer_block")
            fn(layers[i], path);
        if (layers[i].type == "residual")
            for_each_split_spec(layers[i].layers, path + ".layers", fn);
    }
}

int world_of(const config::Experiment& e) {
    return std::max<int>(1, static_cast<int>(e.devices.size()));
}

// The checks of the registry for `n` devices (a job's world, whose processes each list only
// their own devices in e.devices).
void check_split(const config::Experiment& e, int n) {
    // Sequence parallelism gives every device T/N positions of each sample.
    if (option<bool>(e.strategy, "sequence_parallel") && n > 1 && e.data.seq_len > 0 &&
        e.data.seq_len % n != 0)
        throw ConfigError("data.seq_len",
                          "sequence_parallel splits the sequence over the devices: " +
                              std::to_string(e.data.seq_len) + " positions do not divide over " +
                              std::to_string(n) + " devices");
    bool any = false;
    for_each_split_spec(
        e.layers, "model.layers", [&](const nn::LayerSpec& s, const std::string& path) {
            any = true;
            if (s.heads > 0 && s.heads % n != 0)
                throw ConfigError(path + ".heads", std::to_string(s.heads) +
                                                       " heads do not divide over " +
                                                       std::to_string(n) + " devices");
            if (s.type == "transformer_block" && s.ffn > 0 && s.ffn % n != 0)
                throw ConfigError(path + ".ffn", std::to_string(s.ffn) +
                                                     " ffn units do not divide over " +
                                                     std::to_string(n) + " devices");
        });
    if (!any)
        throw ConfigError("model.layers",
                          "tensor_parallel splits attention and transformer_block layers, and "
                          "this model has none; use ddp or pipeline for it");
}

void check_tensor_parallel(const config::Experiment& e) { check_split(e, world_of(e)); }

using namespace tensor_shards;

// ---- the strategy -----------------------------------------------------------------------------

class TensorParallel final : public Strategy {
public:
    TensorParallel() : Strategy("tensor_parallel") {}

    // Every device runs the whole global batch.
    DataRole data_role(int rank) const override {
        (void)rank;
        return {true, 0, 1};
    }

    void start_rank(Rank& rank) override { m_rank_of[static_cast<size_t>(rank.index())] = &rank; }

    StepResult step(Rank& rank, const data::Batch& batch, int64_t offset, double lr) override {
        const config::Experiment& e = rank.experiment();
        const size_t r = static_cast<size_t>(rank.index());
        auto& params = m_params[r];
        optim::LossScaler* scaler = m_scalers[r].get();
        const LocalPass pass = forward_backward(rank, *m_models[r], batch, offset, {}, {},
                                                scaler ? scaler->scale() : 1.0);
        if (!m_sequence_partial[r].empty()) sum_sequence_partial(rank, rank.comm(), m_sequence_partial[r]);
        // Every device computes the same loss: device 0 reports it.
        StepResult res{r == 0 ? pass.loss_sum : 0.0, r == 0 ? pass.samples : 0, pass.samples, 0};
        // fp16: the shards' overflow flags are agreed, so that every device skips or steps.
        if (scaler && !unscale_gradients(rank, params, *scaler, true)) return res;
        if (e.train.clip_norm) res.grad_norm = clip(rank, *e.train.clip_norm);
        rank.compute("optimizer", [&] { m_optimizers[r]->step(params, lr); });
        if (r == 0) ++m_steps;
        return res;
    }

    // The whole model on the host, put together from the shards when they have changed.
    Tensor predict(const Tensor& x) override { return m_whole.predict(*this, *m_ctx, m_steps.load(), x); }

    // The whole model's parameters in the single device's order: each put together from the
    // devices' slices (a replicated one from device 0). Across processes, on rank 0's process
    // (the others list empty tensors: they hold no whole parameter).
    std::vector<Tensor> parameters() override {
        std::vector<std::vector<Tensor>> shards = shards_on_rank0();
        if (shards.empty()) return std::vector<Tensor>(m_shapes.size());
        std::vector<Tensor> out;
        for (size_t i = 0; i < m_cuts.size(); ++i) {
            std::vector<const Tensor*> of_i;
            for (const auto& shard : shards) of_i.push_back(&shard[i]);
            out.push_back(join_shards(m_shapes[i], m_cuts[i], of_i));
        }
        return out;
    }

    // The same on every device: rank 0's process offers them.
    std::vector<Tensor> buffers() override {
        if (!m_ctx->is_local(0)) return std::vector<Tensor>(m_models[m_first_local]->buffers().size());
        return host_copies(m_models[0]->buffers());
    }

    // A checkpoint holds the single device's layout: the whole parameters (parameters()) and
    // each parameter's whole optimizer state, put together from the devices' slices as the
    // parameters are (element-wise optimizers: a slice's state is the whole state's slice); a
    // replicated parameter's state is device 0's, the same on every device. A resume cuts them
    // again.
    const char* why_no_checkpoint_impl() const override { return nullptr; }

    TrainingState save_state() override {
        if (why_no_checkpoint()) return Strategy::save_state();
        const optim::Optimizer& opt0 = *m_optimizers[0];
        TrainingState st = whole_model_state(*this, opt0, m_scalers[0].get());
        if (opt0.state().empty()) return st;  // before the first step
        std::vector<std::vector<std::vector<Tensor>>> shards;  // [rank][parameter][state]
        for (const auto& opt : m_optimizers) {
            std::vector<std::vector<Tensor>> of_rank;
            for (const auto& per_param : opt->state()) of_rank.push_back(host_copies(per_param));
            shards.push_back(std::move(of_rank));
        }
        for (size_t i = 0; i < m_shapes.size(); ++i)
            for (size_t j = 0; j < st.optimizer_state_names.size(); ++j) {
                std::vector<const Tensor*> of_i;
                for (const auto& shard : shards) of_i.push_back(&shard[i][j]);
                st.optimizer_state[i].push_back(join_shards(m_shapes[i], m_cuts[i], of_i));
            }
        return st;
    }

    // Each device's slices of the checkpoint's parameters and optimizer state, cut as setup
    // cuts the reference's. Everything is checked before anything changes, so that a checkpoint
    // that does not fit leaves the shards as they were.
    void load_state(const TrainingState& st) override {
        if (why_no_checkpoint()) return Strategy::load_state(st);
        const size_t n = m_shapes.size();
        const size_t per_param = m_optimizers[0]->state_names().size();
        WholeCheckpoint checkpoint = read_whole_checkpoint(st, m_shapes, m_models[0]->buffers(), per_param);
        const bool stepped = checkpoint.stepped;
        std::vector<Tensor>& values = checkpoint.values;
        std::vector<std::vector<Tensor>>& state = checkpoint.state;
        for (size_t r = 0; r < m_models.size(); ++r) {
            const int rank = static_cast<int>(r);
            const auto& params = m_params[r];
            for (size_t i = 0; i < n; ++i)
                params[i]->value.copy_from(slice_of(values[i], params[i]->value.shape(), m_cuts[i], rank, m_world));
            const auto bufs = m_models[r]->buffers();
            for (size_t i = 0; i < bufs.size(); ++i) bufs[i].copy_from(st.buffers[i]);
            // Before the first step an optimizer with state has none yet: the fresh one is it.
            if (stepped || per_param == 0) {
                std::vector<std::vector<Tensor>> mine(n);
                for (size_t i = 0; i < n; ++i)
                    for (const Tensor& t : state[i])
                        mine[i].push_back(slice_of(t, params[i]->value.shape(), m_cuts[i], rank, m_world));
                m_optimizers[r]->load_state(params, mine, st.optimizer_steps);
            }
            if (m_scalers[r] && st.has_scaler) m_scalers[r]->load_state(st.scaler);
        }
    }

protected:
    void setup_impl(RunContext& ctx, nn::Model& reference) override {
        const config::Experiment& e = *ctx.experiment;
        check_split(e, m_world);
        const size_t world = static_cast<size_t>(m_world);
        m_rank_of.assign(world, nullptr);
        m_models.resize(world);
        m_params.resize(world);
        m_sliced.resize(world);
        m_replicated.resize(world);
        m_sequence_partial.resize(world);
        m_optimizers.resize(world);
        m_scalers.resize(world);
        m_first_local = 0;
        while (!ctx.is_local(m_first_local)) ++m_first_local;
        const auto ref_params = reference.parameters();
        const auto ref_buffers = reference.buffers();
        for (const nn::Param* p : ref_params) m_shapes.push_back(p->value.shape());
        const bool sequence = option<bool>(e.strategy, "sequence_parallel") && m_world > 1;
        for (int r = 0; r < m_world; ++r) {
            if (!ctx.is_local(r)) continue;  // another process builds it
            Device& device = *ctx.devices[static_cast<size_t>(r)];
            nn::TensorShard shard{r, m_world, {}};
            if (m_world > 1) shard.all_reduce = [this, r](const Tensor& t) { all_reduce(r, t); };
            if (sequence) {
                shard.all_gather = [this, r](const Tensor& t) { sequence_all_gather(r, t); };
                shard.reduce_scatter = [this, r](const Tensor& t) {
                    sequence_reduce_scatter(r, t);
                };
            }
            auto model =
                std::make_unique<nn::Model>(e.layers, ctx.input, e.loss, DType::f32, device,
                                            shard_preparer(e.layers, 0, SIZE_MAX, shard));
            model->set_recompute(nn::recompute_from_name(e.train.recompute));
            auto params = model->parameters();
            if (r == m_first_local) collect_cuts(model->net(), m_cuts);
            PARALAB_CHECK(params.size() == ref_params.size() && m_cuts.size() == params.size(),
                          "tensor_parallel: the shard's parameters do not match the model's");
            // This device's slices of the reference.
            for (size_t i = 0; i < params.size(); ++i)
                params[i]->value.copy_from(slice_of(ref_params[i]->value, params[i]->value.shape(),
                                                    m_cuts[i], r, m_world));
            const auto bufs = model->buffers();
            for (size_t i = 0; i < bufs.size(); ++i) bufs[i].copy_from(ref_buffers[i]);
            // Which of this device's parameters are slices (their squares add over devices).
            std::vector<nn::Param*> sliced, whole;
            for (size_t i = 0; i < params.size(); ++i)
                (m_cuts[i].kind == Cut::Kind::whole ? whole : sliced).push_back(params[i]);
            const size_t at = static_cast<size_t>(r);
            m_sequence_partial[at] = sequence_partial_parameters(model->net());
            m_sliced[at] = std::move(sliced);
            m_replicated[at] = std::move(whole);
            m_params[at] = std::move(params);
            m_models[at] = std::move(model);
            m_optimizers[at] = optim::make_optimizer(e.optimizer);
            m_scalers[at] = loss_scaler_for(e);
        }
    }

private:
    // Host copies of every rank's parameters ([rank][parameter], the shards), where the whole
    // model is put together: in one process, all of them; across processes, on rank 0's
    // process, received from the others (lists_on_rank0), and nothing on the others.
    std::vector<std::vector<Tensor>> shards_on_rank0() {
        std::vector<std::vector<Tensor>> shards(static_cast<size_t>(m_world));
        for (size_t r = 0; r < shards.size(); ++r)
            if (m_ctx->is_local(static_cast<int>(r))) shards[r] = host_copies(m_params[r]);
        return lists_on_rank0(*m_ctx, std::move(shards));
    }

    // Rank r's in-place sum of `t` over the devices, on its timeline.
    void all_reduce(int r, const Tensor& t) {
        Rank& rank = *m_rank_of[static_cast<size_t>(r)];
        rank.record_comm(named(rank.comm().all_reduce(t, comm::ReduceOp::sum), "tp_all_reduce"));
    }

    // sequence_parallel's collectives along the sequence, in place over `t` (N equal chunks).
    void sequence_all_gather(int r, const Tensor& t) {
        Rank& rank = *m_rank_of[static_cast<size_t>(r)];
        rank.record_comm(
            named(rank.comm().all_gather(t.raw(), t.numel(), t.dtype()), "tp_all_gather"));
    }
    void sequence_reduce_scatter(int r, const Tensor& t) {
        Rank& rank = *m_rank_of[static_cast<size_t>(r)];
        rank.record_comm(
            named(rank.comm().reduce_scatter(t.raw(), t.numel(), t.dtype(), comm::ReduceOp::sum),
                  "tp_reduce_scatter"));
    }

    // train.clip_norm: the slices' squares summed over the devices, plus the replicated
    // parameters' once (the same on every device).
    double clip(Rank& rank, double max_norm) {
        const size_t r = static_cast<size_t>(rank.index());
        double sliced = rank.compute("clip", [&] { return optim::grad_sq_norm(m_sliced[r]); });
        if (m_world > 1)
            rank.record_comm(
                named(all_reduce_doubles(rank, &sliced, 1, comm::ReduceOp::sum), "tp_clip_norm"));
        const double norm = std::sqrt(
            sliced + rank.compute("clip", [&] { return optim::grad_sq_norm(m_replicated[r]); }));
        rank.compute("clip", [&] { optim::clip_grads_with_norm(m_params[r], norm, max_norm); });
        return norm;
    }

    std::vector<std::unique_ptr<nn::Model>> m_models;  // by rank: its shard of the model
    std::vector<std::vector<nn::Param*>> m_params, m_sliced, m_replicated;
    // By rank: the whole parameters sequence_parallel feeds 1/N of the positions (none without).
    std::vector<std::vector<nn::Param*>> m_sequence_partial;
    std::vector<std::unique_ptr<optim::Optimizer>> m_optimizers;
    std::vector<std::unique_ptr<optim::LossScaler>> m_scalers;  // fp16 mixed precision
    std::vector<Rank*> m_rank_of;        // each rank thread sets its own in start_rank
    // By rank, the members above are null or empty for a rank of another process.
    int m_first_local = 0;               // this process's first rank
    std::vector<Cut> m_cuts;             // by parameter of the whole model
    std::vector<Shape> m_shapes;         // the whole model's parameter shapes
    std::atomic<int64_t> m_steps{0};     // steps device 0 has taken
    WholeOnHost m_whole;                 // predict's model on the host
};

// ---- the registry's memory model and picture --------------------------------------------------

// Each device: the replicated layers whole, 1/N of every attention's and block's sliced
// parameters (their gradients and optimizer state alike), and the whole batch's activations as
// its shard of each layer holds them (tensor_shards::shard_cost: 1/N of the heads' q, k,
// v, probabilities and outputs and of the MLP's hidden units; with sequence_parallel, also 1/N
// of the positions of what a split layer keeps outside its split linears).
std::vector<DeviceMemoryEstimate> tensor_parallel_memory(const config::Experiment& e,
                                                         const ModelCost& m) {
    auto out = blank_estimates(e);
    const int64_t n = static_cast<int64_t>(out.size());
    const bool sequence = n > 1 && option<bool>(e.strategy, "sequence_parallel");
    ModelCost shard = m;
    shard_the_cost(e, static_cast<int>(n), sequence, shard);
    const int64_t params = shard.parameters();
    const int64_t k = optimizer_state_per_parameter(e.optimizer);
    for (int64_t r = 0; r < n; ++r) {
        auto& d = out[static_cast<size_t>(r)];
        d.role = "shard " + std::to_string(r + 1) + " of " + std::to_string(n);
        d.set(MemCategory::parameters, params);
        d.set(MemCategory::gradients, params);
        d.set(MemCategory::optimizer_state, k * params);
        d.set(MemCategory::activations, shard.activations_per_example() * e.data.batch_size);
    }
    return out;
}

StepPicture tensor_parallel_picture(const config::Experiment& e) {
    const int64_t n = static_cast<int64_t>(e.devices.size());
    int64_t heads = 0;
    for_each_split_spec(e.layers, "model.layers", [&](const nn::LayerSpec& s, const std::string&) {
        if (heads == 0) heads = s.heads;
    });
    StepPicture p;
    p.layout = StepPicture::Layout::shards;
    for (int64_t r = 0; r < n; ++r) {
        if (heads > 0 && heads % n == 0)
            p.subtitles.push_back(heads / n == 1 ? "head " + std::to_string(r)
                                                 : "heads " + std::to_string(r * heads / n) + "–" +
                                                       std::to_string((r + 1) * heads / n - 1));
        else
            p.subtitles.push_back("1/" + std::to_string(n) + " of each block");
    }
    const bool sequence = n > 1 && option<bool>(e.strategy, "sequence_parallel");
    if (sequence) {
        p.down_label = "forward: all-gather before attention and the MLP, reduce-scatter after";
        p.up_label = "backward: reduce-scatter and all-gather, the conjugates";
        p.caption =
            "Every device runs the whole batch through its share of each block's heads and MLP; "
            "inside the blocks, layernorms and dropout hold 1/N of the positions.";
    } else {
        p.down_label = "forward: all-reduce after attention and after the MLP";
        p.up_label = "backward: all-reduce of the gradient entering each";
        p.caption =
            "Every device runs the whole batch through its share of each block's heads and MLP; "
            "embeddings, layernorms and the head are whole on every device.";
    }
    if (heads == 0)
        p.note = "this model has no attention or transformer_block to split";
    else if (heads % n != 0)
        p.note =
            std::to_string(heads) + " heads do not divide over " + std::to_string(n) + " devices";
    else if (sequence)
        p.note =
            "4 all-gathers and 4 reduce-scatters of batch × seq_len × width numbers per block "
            "per step";
    else
        p.note = "4 all-reduces of batch × seq_len × width numbers per block per step";
    return p;
}

}  // namespace

StrategyDescriptor tensor_parallel_descriptor() {
    using config::OptionKind;
    return {
        .name = "tensor_parallel",
        .options =
            {{.key = "sequence_parallel",
              .kind = OptionKind::boolean,
              .fallback = false,
              .label = "Sequence parallelism",
              .help =
                  "Megatron's sequence parallelism: inside the blocks, layernorms and dropout "
                  "on 1/N of the positions, all-gather and reduce-scatter along the sequence in "
                  "place of the all-reduces. data.seq_len must divide by the device count."}},
        .explanation =
            "Tensor parallel (Megatron-LM): every attention and transformer_block is split over "
            "all "
            "devices. Each device holds 1/N of the heads (its slice of the qkv and output "
            "projections) and 1/N of the MLP, and runs the whole batch through them; one "
            "all-reduce "
            "after attention and one after the MLP put the outputs together, and two more in "
            "backward the input gradients. Embeddings, layernorms and the head are replicated. "
            "Heads and ffn must divide by the device count. With sequence parallelism the "
            "blocks' layernorms and dropout hold 1/N of the positions, and all-gathers and "
            "reduce-scatters along the sequence replace the all-reduces.",
        .color = "#bcbd22",
        .make = [] { return std::unique_ptr<Strategy>(std::make_unique<TensorParallel>()); },
        .check_options = check_tensor_parallel,
        .memory = tensor_parallel_memory,
        .picture = tensor_parallel_picture,
        .variant = {{.key = "sequence_parallel", .text = "sequence parallel"}},
    };
}

}  // namespace paralab::strategy
