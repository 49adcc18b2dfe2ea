// The core that a local run and a run across the processes of an MPI job share
// (trainer.h, run_experiment): what the rank threads share, a rank thread's loop of steps, the
// preparation before the world is placed, and the end of the run. The two runs are
// local_run.cpp and job_run.cpp; each reads from top to bottom on its own. Internal to
// engine/run.
#pragma once

#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "engine/comm/mpi.h"
#include "engine/data/dataset.h"
#include "engine/device/device.h"
#include "engine/nn/model.h"
#include "engine/optim/schedule.h"
#include "engine/run/checkpoint.h"
#include "engine/run/metrics_bus.h"
#include "engine/run/process_run.h"
#include "engine/run/trainer.h"
#include "engine/strategy/strategy.h"

namespace paralab::run::detail {

using Clock = std::chrono::steady_clock;
using strategy::Rank;
using strategy::RunContext;

// Decides, once per step for all ranks, whether the step runs: a stop request ends the run at
// a step boundary that every rank agrees on, so that no rank waits in a collective for a rank
// that has stopped, and every step that any rank started is finished by all.
class StepGate {
public:
    explicit StepGate(RunControl* control) : m_control(control) {}
    bool begin(int64_t step) {
        std::unique_lock lock(m_mutex);
        for (;;) {
            if (m_stop_from == kNever && m_control && m_control->stop.load())
                m_stop_from = std::max(m_max_started + 1, step);
            if (step >= m_stop_from) {
                end_hold_locked();
                return false;
            }
            // Paused: like stop, at a boundary every rank agrees on (steps already started by
            // any rank are finished by all), then wait until resumed or stopped.
            if (!m_control || !m_control->pause.load()) {
                m_pause_from = kNever;
                end_hold_locked();
                break;
            }
            if (m_pause_from == kNever) m_pause_from = std::max(m_max_started + 1, step);
            if (step < m_pause_from) break;
            if (!m_held_since) m_held_since = Clock::now();
            lock.unlock();
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
            lock.lock();
        }
        m_max_started = std::max(m_max_started, step);
        return true;
    }
    bool stopped() const {
        std::lock_guard lock(m_mutex);
        return m_stop_from != kNever;
    }
    RunControl* control() const { return m_control; }

    // The time the run was held paused, once for the run however many ranks waited: from the
    // first rank that waited to the resume (or stop) that the first rank to go on saw. A run
    // across processes, which agrees on pause by itself, reports its waiting here.
    void hold_began() {
        std::lock_guard lock(m_mutex);
        if (!m_held_since) m_held_since = Clock::now();
    }
    void hold_ended() {
        std::lock_guard lock(m_mutex);
        end_hold_locked();
    }
    // Seconds held paused so far (a hold still going on not counted): what wall times exclude.
    double paused_s() const {
        std::lock_guard lock(m_mutex);
        return m_paused_s;
    }

private:
    void end_hold_locked() {
        if (!m_held_since) return;
        m_paused_s += std::chrono::duration<double>(Clock::now() - *m_held_since).count();
        m_held_since.reset();
    }

    static constexpr int64_t kNever = INT64_MAX;
    RunControl* m_control;
    mutable std::mutex m_mutex;
    int64_t m_stop_from = kNever;  // guarded by m_mutex: the first step no rank may start
    int64_t m_pause_from = kNever; // guarded by m_mutex: while paused, the first step that waits
    int64_t m_max_started = 0;     // guarded by m_mutex
    std::optional<Clock::time_point> m_held_since;  // guarded by m_mutex: a hold going on
    double m_paused_s = 0;                          // guarded by m_mutex: holds ended
};

// One pass over the test split on the calling thread, through `predict` (the trained model's
// eval-mode output for a batch on `device`).
config::EvalResult evaluate(const std::function<Tensor(const Tensor&)>& predict, Device& device, nn::Loss& loss,
                            const data::Dataset& test, int64_t batch_size, const RunContext& ctx);

// What the rank threads share besides the strategy's context.
struct Shared {
    Shared(const config::Experiment& e_, const data::DataSplits& splits_, strategy::Strategy& strategy_,
           RunContext& ctx_, MetricsBus& bus_, RunControl* control, nn::Loss& eval_loss_,
           const optim::Schedule& schedule_, int64_t steps_per_epoch_)
        : e(e_), splits(splits_), strategy(strategy_), ctx(ctx_), bus(bus_), gate(control),
          eval_loss(eval_loss_), schedule(schedule_), steps_per_epoch(steps_per_epoch_) {}

    const config::Experiment& e;
    const data::DataSplits& splits;
    strategy::Strategy& strategy;
    RunContext& ctx;
    MetricsBus& bus;
    StepGate gate;
    nn::Loss& eval_loss;
    const optim::Schedule& schedule;
    const int64_t steps_per_epoch;
    std::mutex mutex;
    std::exception_ptr error;          // guarded by mutex: the first failure of any rank...
    std::exception_ptr aborted;        // guarded by mutex: ...or, if none, the first abort seen
    double eval_s = 0;                 // guarded by mutex: evaluation time inside training
    int64_t epochs_started = 0;        // guarded by mutex

    // ---- a run across the processes of an MPI job (null/false otherwise) --------------------
    const JobOptions* job = nullptr;
    comm::MpiGroup* mpi = nullptr;
    job::Sender* sender = nullptr;      // processes other than rank 0
    job::Receiver* receiver = nullptr;  // rank 0
    nn::Model* reference = nullptr;     // rank 0: the model put together for evaluation
    Device* reference_device = nullptr;
    config::RunSummary base;                    // name, strategy, devices, parameters
    std::once_flag job_failed;
    bool stopped_in_job = false;        // guarded by mutex: the ranks agreed to stop
    int first_local = 0;                // this process's first rank

    // ---- checkpoints (checkpoint.h; a local run only) --------------------------------------------
    Checkpointing* checkpoints = nullptr;  // null or no folder: none written
    TensorNames names;                     // the model's tensors' names in a checkpoint
    int64_t first_step = 0;                // steps done before the ranks start (a resume)
    int64_t last_checkpoint = 0;           // guarded by mutex: the step of the last one written
    // Writes the checkpoint after `step` steps; every rank waits (between steps) meanwhile. A
    // failure to write is reported through the Checkpointing, and the run goes on.
    void write_checkpoint(int64_t step);

    bool is_root() const { return !mpi || mpi->rank() == 0; }

    // The model as trained so far, evaluated where the run's owner holds it: device 0's
    // replica or stages in one process; rank 0's put-together model in a job (collective
    // there: every rank thread calls it, between steps).
    config::EvalResult evaluate_now(Rank& rank, int64_t step);
    void publish(std::vector<config::Span> spans, const config::StepRecord& r, double loss_sum, int64_t loss_samples);
    // Rank 0 of a job: records the run as failed, naming `rank`, and ends the job.
    [[noreturn]] void fail_job(int rank, const std::string& reason);
};

// The failure of a run whose evaluation after `step` gave a NaN or infinite test loss.
std::string not_finite_test_loss(double loss, int64_t step);

// A rank thread: its loader, its steps until the end, a stop or a failure, the evaluations
// every train.eval_every steps.
void rank_main(Shared& sh, int index);
// Starts a thread per local rank of `sh` and joins them.
void run_local_ranks(Shared& sh, int world);

// What a run needs before its world is placed: this process's devices, the data, the model's
// input, and the reference model (initialised from the seed on a scratch host device, so that
// every strategy starts from the single device's parameters). Throws ConfigError for what this
// build, these devices or this data cannot run. The data loading asks `stop` (null: never)
// between chunks and throws data::LoadStopped when it is set.
struct Prepared {
    std::vector<std::unique_ptr<Device>> devices;
    data::DataSplits splits;
    Shape input;
    std::unique_ptr<Device> scratch;
    std::unique_ptr<nn::Model> reference;
};
// The checks of the model against the data and this machine, before anything of it is
// allocated: model.input against the examples, the output against the targets and the loss,
// and the predicted memory against the devices' (memory_check.h). A run (prepare) and
// `paralab validate` (check_before_training) both make them. Throws ConfigError naming the path.
CheckedModel check_model(const config::Experiment& e, const data::DataSplits& splits);

// The devices, the data and the single-device model, initialised from the seed, then from
// `init_weights` when given (RunControl::init_weights).
Prepared prepare(const config::Experiment& e, int compute_threads, bool across_processes,
                 const std::atomic<bool>* stop = nullptr, const std::string& init_weights = {});

// The run's context for `world` (one device per rank, null for another process's).
RunContext make_context(const config::Experiment& e, const Prepared& p, std::vector<Device*> world);
// Optimizer steps in an epoch: the global batches of the training split.
int64_t steps_per_epoch(const config::Experiment& e, int64_t train_size);

// The summary as the rank threads left the run: status (failed, stopped, finished), error,
// epochs, steps, the last step's loss, training wall time (evaluations and pauses excluded),
// throughput.
void close_summary(config::RunSummary& s, Shared& sh, Clock::time_point t_end);
// Each local device's memory at the end: peaks into the summary, the whole stats into
// `artifacts` (when given).
void record_memory(config::RunSummary& s, RunArtifacts* artifacts, const std::vector<Device*>& world);
// The pass over the test split after training, on a thread of its own (the calling thread may
// live on, and must keep no OpenMP team: engine/util/own_thread.h), with `device` current.
// A failure makes the run failed.
void evaluate_at_end(config::RunSummary& s, RunObserver* observer, const Shared& sh, int64_t steps,
                     Device& device, const std::function<Tensor(const Tensor&)>& predict);

// The two runs (run_experiment chooses).
config::RunSummary run_local(const config::Experiment& e, RunObserver* observer, RunControl* control,
                             int compute_threads, RunArtifacts* artifacts);
config::RunSummary run_job(const config::Experiment& e, RunObserver* observer, RunControl* control,
                           int compute_threads, RunArtifacts* artifacts, const JobOptions& job);

}  // namespace paralab::run::detail
