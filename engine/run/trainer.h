// Running an experiment: data, model, optimizer and the training loop, with per-step records
// for whoever watches (the CLI's progress line, the GUI, the run store).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "engine/config/records.h"
#include "engine/nn/model.h"
#include "engine/run/experiment_file.h"
#include "engine/tensor/allocator.h"
#include "engine/tensor/tensor.h"

namespace paralab::run {

// What a run reports while it goes. Called on the rank thread: return quickly.
class RunObserver {
public:
    virtual ~RunObserver();
    virtual void on_start(const config::Experiment& e, int64_t total_steps) { (void)e, (void)total_steps; }
    // The step's spans come just before its record; one record per device per step.
    virtual void on_span(const config::Span& s) { (void)s; }
    virtual void on_step(const config::StepRecord& r) { (void)r; }
    // Once every device has reported step r.step: the step over all devices (device "all",
    // loss the mean over the global batch, samples the global batch, times the slowest
    // device's, memory device 0's). Steps end in order.
    virtual void on_step_end(const config::StepRecord& r) { (void)r; }
    virtual void on_eval(const config::EvalResult& r) { (void)r; }
    virtual void on_finish(const config::RunSummary& s) { (void)s; }
};

struct Checkpointing;  // engine/run/checkpoint.h

struct RunControl {
    std::atomic<bool> stop{false};   // honoured between steps: status "stopped"
    // While set, every device waits before its next step (a step already started finishes, so
    // the devices pause at one step boundary). Stop ends a paused run too.
    std::atomic<bool> pause{false};
    // Checkpoints to write, and a checkpoint to resume from (null: neither). A local run only.
    Checkpointing* checkpoints = nullptr;
    // `paralab run --init`: a safetensors file every parameter starts from (engine/io/weights.h:
    // load_weights), set on the single-device model before the strategy takes it. Empty: none.
    std::string init_weights;
};

// What tests and tools may ask a run to hand back besides its summary.
struct RunArtifacts {
    std::vector<Tensor> parameters;  // trained, in the model's order, host copies
    std::vector<Tensor> buffers;     // batchnorm running statistics, likewise
    std::map<std::string, MemoryStats> memory;  // per device, at the end (peaks by category)
};

// Every check a run makes before training, without training and without allocating the model
// (`paralab validate`): validate(e), the strategy's device count, the data files, and the data
// (the model's input against the examples, its output against the targets and the loss).
// Throws ConfigError naming the JSON path. Checked as a local run: under mpirun the device
// count is the job's.
// Returns the model's input and summary it checked.
struct CheckedModel {
    Shape input;
    nn::ModelSummary model;
};
CheckedModel check_before_training(const config::Experiment& e);

// A run whose ranks are spread over the processes of an MPI job (`mpirun -np N paralab run
// FILE`): every process runs its own devices (its experiment's `devices`), and the world is all
// processes' devices in process order, named "r<process>/<device>" ("r1/cpu:0"). Rank 0's
// process owns the run: its observer receives every rank's records and spans (forwarded in
// batches), it evaluates the trained model (put together from every process's part), and its
// summary is the run's. The other processes' observers get nothing.
//
// Faults end the whole job within a bounded time, after rank 0 has recorded the run as failed
// with a message naming the rank: a rank that fails (a NaN loss, out of memory) tells rank 0;
// a rank that goes silent for `rank_timeout_s` (hung, or dead) is named by rank 0's watchdog;
// a stop request (SIGTERM from mpirun when a rank died) that the ranks cannot honour within
// `stop_grace_s` (they wait for a dead peer) fails the run naming the rank heard from least
// recently. Then MPI_Abort ends every process.
// Thrown, in the processes other than rank 0, when the job's processes agreed not to run
// (rank 0 throws the ConfigError that says why).
class JobRefused : public ConfigError {
public:
    using ConfigError::ConfigError;
};

struct JobOptions {
    double rank_timeout_s = 60;
    double stop_grace_s = 0.5;  // mpirun sends SIGKILL about 1 s after SIGTERM
    // Rank 0, just before the job is aborted: the failed run's summary (the CLI prints it).
    std::function<void(const config::RunSummary&)> on_abort;
};

// Runs `e` to the end, to its step cap, or until `control.stop`, with one rank thread per
// device and the experiment's strategy; with `job`, as one process of an MPI job (above). Problems found before the first step (bad data
// files, a model that does not fit the data, an unsupported device or strategy) throw
// ConfigError; failures during training (a NaN loss, out of memory, on any rank) end the run
// with status "failed" and the reason in `error`.
config::RunSummary run_experiment(const config::Experiment& e, RunObserver* observer, RunControl* control,
                          int compute_threads = 1, RunArtifacts* artifacts = nullptr,
                          const JobOptions* job = nullptr);

}  // namespace paralab::run
