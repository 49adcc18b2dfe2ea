// Checkpoints (docs/design.md, "Checkpoints and resume"): the state of a run at a step
// boundary, one safetensors file per checkpoint, from which `paralab run --resume` continues the
// run bit for bit.
//
// A file holds the parameters by name ("layers.3.weight", the single device's layout whatever
// the strategy; engine/io/weights.h names them), the buffers, the optimizer state
// ("optim.<param>.<state name>", torch's state_dict names), and a "__metadata__" entry "paralab"
// holding JSON: the format, the experiment's identity, the step, the loader's position, the random
// streams, the schedule's and the loss scaler's position and the strategy. Files live beside the
// run store, in
// `<store folder>/checkpoints/<store file>/run-<id>/step-<N>.safetensors`; the newest
// kCheckpointsKept stay.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/config/experiment.h"
#include "engine/nn/model.h"
#include "engine/strategy/strategy.h"

namespace paralab::run {

constexpr int kCheckpointFormat = 1;
constexpr int kCheckpointsKept = 3;

// The hash that ties a checkpoint to its experiment: FNV-1a (64 bits, hex) of the canonical JSON
// of to_json(e) (keys sorted) without "name" and "notes". Not a security measure: it refuses a
// checkpoint of another experiment, not a forged one.
std::string experiment_identity(const config::Experiment& e);

// `<folder of store_path>/checkpoints/<store file name>/run-<run_id>`: the store's name keeps the
// runs of two stores in one folder apart.
std::string checkpoint_folder(const std::string& store_path, int64_t run_id);
// Removes the checkpoint files in `folder` (a new run's: any there were left by an earlier
// store of the same name, whose run ids this one reuses).
void remove_checkpoints(const std::string& folder);

// The names of `model`'s parameters and buffers in a checkpoint, in the model's order: those
// of engine/io/weights.h ("layers.3.weight"), which `paralab export --weights` writes too.
struct TensorNames {
    std::vector<std::string> parameters, buffers;
};
TensorNames checkpoint_names(nn::Model& model);

// Where a checkpoint stands: `step` optimizer steps done; the next step is batch `batch_index`
// of epoch `epoch` (batch_index == steps per epoch: the epoch has ended).
struct CheckpointPosition {
    int64_t step = 0;
    int64_t epoch = 0;
    int64_t batch_index = 0;
};

struct Checkpoint {
    std::string path;
    CheckpointPosition position;
    nlohmann::json metadata;
    strategy::TrainingState state;
};

// Writes `state` at `position` into `folder` (created when missing) as step-<N>.safetensors
// (atomically), then removes all but the newest kCheckpointsKept checkpoints there. Returns the
// path. Throws Error naming the file and the cause.
std::string write_checkpoint(const std::string& folder, const config::Experiment& e,
                             const TensorNames& names, const CheckpointPosition& position,
                             const strategy::TrainingState& state);

// Reads a checkpoint of `e` whose tensors must fit `names` and `shapes` (the model's parameter
// shapes, in order), taken at a step of a run of `planned_steps` steps. Throws Error "PATH:
// cause" for a file that does not read (or fails its checksums), another format, another
// experiment (identity), counters out of range or inconsistent (the step beyond planned_steps,
// the step's copies in the metadata differing, more optimizer steps than steps), or tensors that
// do not fit; everything but the checksum of the data is checked before the data is read.
Checkpoint read_checkpoint(const std::string& path, const config::Experiment& e,
                           const TensorNames& names, const std::vector<Shape>& shapes,
                           const std::vector<Shape>& buffer_shapes, int64_t planned_steps);

// The checkpoint files in `folder`, newest (highest step) first.
std::vector<std::string> checkpoint_files(const std::string& folder);

// The newest checkpoint of `folder` that reads and fits (read_checkpoint); each one refused is
// reported through `refused` (path, reason: "PATH: cause") and the one before it tried. nullopt
// when none is left.
std::optional<Checkpoint> newest_checkpoint(
    const std::string& folder, const config::Experiment& e, const TensorNames& names,
    const std::vector<Shape>& shapes, const std::vector<Shape>& buffer_shapes, int64_t planned_steps,
    const std::function<void(const std::string&, const std::string&)>& refused);

// What a run does with checkpoints (RunControl::checkpoints).
struct Checkpointing {
    std::string folder;  // where they are written; empty: none written
    // Resume: the newest checkpoint of this folder that reads and fits is restored before the
    // first step, and the run goes on from it. Each checkpoint refused (corrupt, another
    // experiment's) is reported through `refused` with the reason, and the previous one tried.
    bool resume = false;
    std::function<void(const std::string& path, const std::string& reason)> refused;
    // After each checkpoint written: its path, step and the seconds writing took (gather and
    // file); a failure to write is reported with an empty path and the reason as `error`. Called
    // on a rank thread or the run's thread.
    std::function<void(const std::string& path, int64_t step, double seconds,
                       const std::string& error)>
        written;
    // Set by the run when it resumed: the checkpoint's step (0: it started from the beginning).
    int64_t resumed_from_step = 0;
};

// Once the store has given a new run its id (a run observer's on_start, after the recorder's):
// its checkpoints go to checkpoint_folder(store_path, run_id), emptied of any an earlier store of
// the same name left there. Nothing for a resumed run (its folder is set) or without an id.
void point_checkpoints(Checkpointing& cp, const std::string& store_path, int64_t run_id);

}  // namespace paralab::run
