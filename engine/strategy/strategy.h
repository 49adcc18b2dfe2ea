// Parallel strategies (docs/strategies.md) behind one interface. A strategy is written as the code
// one rank runs for one optimizer step, plus collectives — the shape of a DDP script. The run
// (engine/run/trainer.cpp) owns the rank threads, the loaders, the stop gate and the records;
// the strategy owns the replicas or stages, the optimizers and the communication.
//
// Lifetime: make_strategy (main thread) -> setup (main thread: builds replicas on the devices
// and loads the initial parameters) -> per rank thread: start_rank, step()*, finish_rank ->
// predict / parameters (any one thread, while no rank steps).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/data/loader.h"
#include "engine/device/device.h"
#include "engine/nn/model.h"
#include "engine/optim/loss_scaler.h"
#include "engine/optim/optimizer.h"
#include "engine/config/experiment.h"
#include "engine/config/records.h"

namespace paralab::strategy {

using Clock = std::chrono::steady_clock;

// What a rank's loader serves it: rows shard_of_batch(B, shard, num_shards) of every global
// batch, or no rows at all (a rank that receives its data from another, or needs none).
struct DataRole {
    bool needs_data = true;
    int shard = 0;
    int num_shards = 1;
};

// One rank's part of one optimizer step.
struct StepResult {
    double loss_sum = 0;       // sum of the per-example losses this rank computed
    int64_t loss_samples = 0;  // examples in loss_sum (0: this rank computes no loss)
    int64_t samples = 0;       // examples this rank ran forward
    double grad_norm = 0;      // before clipping, when clip_norm is set
};

// What the run shares with the strategy; valid from setup until the run ends.
struct RunContext {
    const config::Experiment* experiment = nullptr;
    Shape input;                   // per-example model input
    Shape target;                  // per-example target shape ({} for class ids)
    int64_t train_size = 0;        // examples in the training split
    // One per rank, in rank order; null for a rank that runs in another process (an MPI job:
    // a strategy builds only its local ranks' replicas or stages).
    std::vector<Device*> devices;
    comm::Group* group = nullptr;
    // In an MPI job: a communicator over the processes (rank p = process p), which one thread
    // per process uses between steps (the model put together on rank 0); null otherwise.
    comm::Communicator* processes = nullptr;
    int64_t total_steps = 0;
    Clock::time_point t0;          // spans are seconds since t0
    // Set when the run is asked to stop (null: never): long waits of the strategy's own (the
    // straggler's sleep) end early on it.
    const std::atomic<bool>* stop_requested = nullptr;

    bool is_local(int r) const { return devices[static_cast<size_t>(r)] != nullptr; }
    // True when some rank runs in another process.
    bool spans_processes() const;
};

// The handle a rank thread passes to its strategy: its device, its communicator, and the
// recorder of its timeline. Compute and communication are timed here, so that every strategy
// reports them the same way. Spans may be recorded from a second thread of the rank (DDP's
// communication thread): the span list is locked.
class Rank {
public:
    Rank(int index, const RunContext& ctx);

    int index() const { return m_index; }
    int world() const { return static_cast<int>(m_ctx.devices.size()); }
    Device& device() const { return *m_ctx.devices[static_cast<size_t>(m_index)]; }
    comm::Communicator& comm() const { return m_ctx.group->rank(m_index); }
    const config::Experiment& experiment() const { return *m_ctx.experiment; }
    const RunContext& context() const { return m_ctx; }
    int64_t step() const { return m_step; }  // 1-based step being run

    // Runs fn as a compute phase ("forward", "backward", "optimizer", ...) on this thread.
    // Communication or waiting recorded inside it (SyncBatchNorm's all-reduce in forward,
    // ZeRO-2's reduces in backward) counts as such, not as compute too.
    template <class F>
    decltype(auto) compute(const char* phase, F&& fn) {
        const auto b = Clock::now();
        struct Done {
            Rank& r;
            const char* phase;
            Clock::time_point b;
            double other_ms;  // communication + idle recorded before fn ran
            ~Done() { r.add_compute(phase, b, Clock::now(), r.m_comm_ms + r.m_idle_ms - other_ms); }
        } done{*this, phase, b, m_comm_ms + m_idle_ms};
        // A GPU's kernels are asynchronous: the phase ends when its queued work has finished
        // (a no-op on a CPU device), so that spans hold the kernels' time, not their launches.
        if constexpr (std::is_void_v<std::invoke_result_t<F>>) {
            fn();
            device().finish_queued();
        } else {
            auto result = fn();
            device().finish_queued();
            return result;
        }
    }
    // A communication call made on this thread (its time counts as communication), or, with
    // waiting = true, a call whose time is mostly waiting for a peer (a pipeline's recv), which
    // counts as idle.
    void record_comm(const comm::CommRecord& r, bool waiting = false);
    // A communication call made on another thread of this rank (overlapped with compute).
    void record_async_comm(const comm::CommRecord& r);
    // Time this thread waited for another (its communication thread, a server).
    void record_idle(const char* phase, Clock::time_point b, Clock::time_point e);
    // A recomputation (nn/recompute.h) inside the current compute phase: a "recompute" span on
    // the timeline; its time stays in the compute time of the step.
    void record_recompute(Clock::time_point b, Clock::time_point e);
    // Sleeps strategy.straggler.delay_ms inside the current phase when this rank is the
    // experiment's straggler (with `rotate`, when it is this step's); a stop request (RunContext::stop_requested) ends the sleep early.
    // False when it did.
    bool straggle() const;

    // ---- for the run ------------------------------------------------------------------------
    void begin_step(int64_t step);
    struct StepTimes {
        double compute_ms = 0, comm_ms = 0, idle_ms = 0;
    };
    StepTimes end_step();
    // The spans recorded since begin_step (and async ones that arrived meanwhile).
    std::vector<config::Span> take_spans();
    double seconds_since_t0(Clock::time_point t) const;

private:
    // `inner_ms`: communication and idle time recorded inside the phase, not compute.
    void add_compute(const char* phase, Clock::time_point b, Clock::time_point e, double inner_ms);
    void add_span(const char* phase, double b, double e, int64_t bytes);

    int m_index;
    const RunContext& m_ctx;
    int64_t m_step = 0;
    double m_straggle_ms = 0;
    // A rotating straggler: this rank is slow in the steps s with (s − 1) mod period == offset
    // (period 0: in every step, when m_straggle_ms > 0).
    int64_t m_straggle_period = 0, m_straggle_offset = 0;
    // Times of the current step on the rank thread (ms).
    double m_compute_ms = 0, m_comm_ms = 0, m_idle_ms = 0;
    std::mutex m_mutex;
    double m_async_comm_ms = 0;       // guarded by m_mutex
    std::vector<config::Span> m_spans;   // guarded by m_mutex
};

// The state of training at a step boundary in the single device's layout, whatever the
// strategy: what a checkpoint holds (engine/run/checkpoint.h) and a resume restores.
struct TrainingState {
    std::vector<Tensor> parameters;  // host copies, in the model's order
    std::vector<Tensor> buffers;     // batchnorm running statistics, likewise
    // One list per parameter in the order of optimizer_state_names (optim::Optimizer::state();
    // empty lists before the first step).
    std::vector<std::string> optimizer_state_names;
    std::vector<std::vector<Tensor>> optimizer_state;
    int64_t optimizer_steps = 0;
    bool has_scaler = false;  // fp16 mixed precision: the loss scaler's policy state
    optim::LossScaler::State scaler;
};

class Strategy {
public:
    virtual ~Strategy();
    Strategy(const Strategy&) = delete;
    Strategy& operator=(const Strategy&) = delete;

    const std::string& name() const { return m_name; }

    // Main thread, before any rank starts: builds what the ranks use from `reference` (the
    // model built on a scratch host device and initialised from the seed, which every strategy
    // must start from). Throws ConfigError naming the experiment key when the strategy cannot
    // run this model on these devices.
    void setup(RunContext& ctx, nn::Model& reference);
    virtual DataRole data_role(int rank) const { return {true, rank, m_world}; }

    // Rank thread, once before its first step (after the device is current) and once after
    // its last (also after a failure of another rank: must not block then).
    virtual void start_rank(Rank& rank) { (void)rank; }
    virtual void finish_rank(Rank& rank) { (void)rank; }
    // Rank thread: one optimizer step. `batch` holds this rank's rows (DataRole) of the global
    // batch `batch.global_size`; `offset` is the first row's index in the global batch.
    virtual StepResult step(Rank& rank, const data::Batch& batch, int64_t offset, double lr) = 0;

    // Eval-mode output for x [B, ...input] on device 0 (any one thread, no rank stepping):
    // the model as trained so far. In a run across processes, parameters() and buffers() list
    // only what this process holds of the trained model (the rest as empty tensors), and
    // predict is not called: rank 0's process evaluates a model put together from every
    // process's part (engine/run/process_run.h).
    virtual Tensor predict(const Tensor& x) = 0;
    // The trained parameters in the model's order, as host copies (for the tests of §3).
    virtual std::vector<Tensor> parameters() = 0;
    virtual std::vector<Tensor> buffers() { return {}; }

    // Another rank failed: wake this strategy's own waits (a communication thread, a second
    // communicator) so that every rank thread ends. Any thread; idempotent.
    virtual void abort(const std::string& reason) { (void)reason; }

    // Checkpoints. Why this run cannot save and restore its state exactly (null when it can):
    // a run across processes writes none (every strategy), else the strategy's own reason
    // (why_no_checkpoint_impl); save_state and load_state throw ConfigError with it otherwise.
    const char* why_no_checkpoint() const;
    // Any one thread, while no rank steps (every rank stopped at one step boundary): the full
    // state gathered from the ranks.
    virtual TrainingState save_state();
    // Main thread, after setup and before any start_rank: the state of a checkpoint, spread
    // over the ranks as this strategy lays it out. Throws Error when it does not fit the model.
    virtual void load_state(const TrainingState& state);

protected:
    explicit Strategy(std::string name) : m_name(std::move(name)) {}
    virtual void setup_impl(RunContext& ctx, nn::Model& reference) = 0;
    // Why this strategy cannot have its ranks in several processes (null when it can).
    virtual const char* single_process_only() const { return nullptr; }
    // Why this strategy cannot checkpoint in one process (null when it can).
    virtual const char* why_no_checkpoint_impl() const { return "this strategy does not support checkpoints"; }

    int m_world = 1;
    const RunContext* m_ctx = nullptr;

private:
    std::string m_name;
};

// The registry's factory for experiment.strategy.type (registry.h); throws ConfigError for an
// unknown type.
std::unique_ptr<Strategy> make_strategy(const config::Experiment& e);

// ---- building blocks the strategies share ---------------------------------------------------

// A model of the experiment built on `device` with the parameters of `reference` copied in
// (the reference's buffers too).
std::unique_ptr<nn::Model> make_replica(const config::Experiment& e, const Shape& input,
                                        nn::Model& reference, Device& device);
// The record of a communication call under the name the timeline shows ("reduce_grads").
inline comm::CommRecord named(comm::CommRecord r, const char* op) {
    r.op = op;
    return r;
}

// Copies values param by param (same layout); host memory.
void copy_parameters(const std::vector<nn::Param*>& from, const std::vector<nn::Param*>& to);
// Copies on detached_host_device(), valid after the run and its devices are gone.
std::vector<Tensor> host_copies(const std::vector<nn::Param*>& params);
std::vector<Tensor> host_copies(const std::vector<Tensor>& tensors);

// The start of a checkpoint of a strategy that puts the whole model together (tensor_parallel,
// zero 3, hybrid): `s`'s parameters() and buffers(), `optimizer`'s state names and steps,
// `scaler`'s state (fp16; none when null), and an empty optimizer-state list per parameter.
TrainingState whole_model_state(Strategy& s, const optim::Optimizer& optimizer, const optim::LossScaler* scaler);

// predict for a strategy whose devices hold slices of the model (tensor_parallel, hybrid): the
// whole model built on the host, its parameters and buffers put together from the strategy's
// parameters() and buffers() whenever `steps` has moved since the last time (or after
// invalidate()), and the output returned on device 0.
class WholeOnHost {
public:
    Tensor predict(Strategy& s, const RunContext& ctx, int64_t steps, const Tensor& x);
    void invalidate() { m_at = -1; }

private:
    std::unique_ptr<nn::Model> m_model;
    int64_t m_at = -1;  // `steps` when m_model was last put together
};

// Each rank's host tensors put together on rank 0's process, for a strategy that assembles the
// whole model from its ranks' parts: `mine[r]` lists local rank r's f32 host tensors (none for
// a rank with nothing to give). In one process, `mine` itself. Across processes it is collective
// over ctx.processes (one thread of each process, every rank stopped between steps): rank 0's
// process returns every rank's list, received from the others in order (each list with its
// tensors' shapes), and the others an empty vector once rank 0 has their tensors.
std::vector<std::vector<Tensor>> lists_on_rank0(const RunContext& ctx, std::vector<std::vector<Tensor>> mine);

// Rows [offset, offset + count) of a host batch as device tensors (x: [count, ...input],
// y: [count] class ids or [count, ...target]).
struct DeviceBatch {
    Tensor x, y;
};
DeviceBatch to_device(const data::Batch& b, int64_t offset, int64_t count, const Shape& input,
                      const Shape& target, Device& device);

// Forward + loss + backward of rows [0, batch.size) of `batch` on `model` in grad_accum
// micro-batches, with the loss divided by the global batch, so that gradients summed over all
// ranks are the single-device gradient of the global batch. `global_offset` is the first row's
// index in the global batch (dropout masks follow the global index). Records forward and
// backward spans. `layer_done(i)` is called after top-level layer i's backward in the last
// micro-batch, when layer i's gradients are final (DDP starts its buckets from there);
// `layer_begin(i)` just before it (ZeRO-2 creates layer i's gradients there).
struct LocalPass {
    double loss_sum = 0;
    int64_t samples = 0;
};
// `loss_scale` multiplies the loss gradient before backward (fp16 mixed precision, see
// optim::LossScaler): the parameter gradients come out scaled by it.
LocalPass forward_backward(Rank& rank, nn::Model& model, const data::Batch& batch,
                           int64_t global_offset, const std::function<void(size_t)>& layer_done = {},
                           const std::function<void(size_t)>& layer_begin = {}, double loss_scale = 1.0);

// The model's backward from dy, a top-level layer at a time, so that DDP can start a bucket as
// soon as the layers that fill it are done (layer_begin(i) before layer i, layer_done(i) after).
void backward_by_layer(nn::Model& model, const Tensor& dy, const std::function<void(size_t)>& layer_done,
                       const std::function<void(size_t)>& layer_begin);

// The dynamic loss scaler of fp16 mixed precision (train.precision), one per rank or stage
// that steps; null for fp32 and bf16, which scale nothing.
std::unique_ptr<optim::LossScaler> loss_scaler_for(const config::Experiment& e);

// fp16 mixed precision, before the optimizer: the gradients unscaled and checked on the GPU;
// false when one overflowed (the step is skipped, the scale backs off); timed as the phase
// "unscale". Ranks that see the same reduced gradients (ddp) decide the same alone; ranks that
// each hold a part of them (zero's shards, the stages) pass `over_ranks`: their overflow flags
// are all-reduced ("agree_overflow"), so that every rank skips or steps with the others. Every
// rank of the group must call it then, with or without parameters.
bool unscale_gradients(Rank& rank, const std::vector<nn::Param*>& params, optim::LossScaler& scaler,
                       bool over_ranks = false);

// Collectives on a few host doubles (norms, statistics, speeds) over the rank's group, in
// place: straight on CPU devices; on GPUs, whose communicators read device memory, through a
// device copy and back. all_gather_doubles: `values` holds world * per_rank doubles.
comm::CommRecord all_reduce_doubles(Rank& rank, double* values, int64_t count, comm::ReduceOp op);
comm::CommRecord all_gather_doubles(Rank& rank, double* values, int64_t per_rank);

// Sets train.clip_norm's scaling on `params`, with the squared norm summed over the ranks
// when `sum_over_ranks` (ranks that each hold a part of the gradients). Returns the norm.
double clip_gradients(Rank& rank, const std::vector<nn::Param*>& params, double max_norm,
                      bool sum_over_ranks);

}  // namespace paralab::strategy
