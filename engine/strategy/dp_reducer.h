// The one data-parallel reducer (docs/strategies.md, "zero" and "hybrid"): each device's
// gradients summed over its data-parallel group, and its optimizer step, at ZeRO 0 to 3 —
// 0 all-reduces the gradients; 1 reduce-scatters them into flat shards (flat_shard.h), steps a
// shard and all-gathers the parameters; 2 keeps only the shard's gradients, a layer's reduced to
// their owners as its backward ends when a chunk runs one backward a step; 3 keeps only the
// shard of the parameters too, one unit (a top-level layer with parameters) gathered for each
// forward and backward (sharded_units.h). hybrid and its presets (zero, pipeline,
// tensor_parallel, model_parallel) reduce through it over the mesh's dp groups.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/comm/device_mesh.h"
#include "engine/comm/sub_groups.h"
#include "engine/optim/optimizer.h"
#include "engine/strategy/flat_shard.h"
#include "engine/strategy/pipeline_executor.h"
#include "engine/strategy/sharded_units.h"

namespace paralab::strategy {

// One device's part of a mesh: its model chunks (local chunk c is global chunk c·pp + stage) and
// its parameters (its tensor shard's) laid end to end, chunk after chunk.
struct DevicePart {
    std::vector<ModelChunk> chunks;
    std::vector<nn::Param*> params;   // every chunk's, chunk after chunk
    std::vector<size_t> param_index;  // each one's index in the whole model's list
    std::vector<int64_t> offsets;     // each one's offset in the flat parameters
    std::vector<Shape> shapes;        // each one's shape
    // sequence_parallel: the whole parameters whose gradients hold this device's positions
    // only (tensor_shards::sequence_partial_parameters of each chunk)
    std::vector<nn::Param*> sequence_partial;
    // zero 3: by local chunk, by top-level layer: its unit (kNone: no parameters), and the
    // chunk's unit after it and before it (kNone: none)
    std::vector<std::vector<size_t>> unit_of, unit_after, unit_before;

    int64_t numel() const { return offsets.empty() ? 0 : offsets.back() + shapes.back().numel(); }
    // The first of local chunk c's parameters in `params`.
    size_t chunk_offset(size_t c) const;
};

class DpReducer {
public:
    struct Options {
        int zero = 0;
        bool prefetch = true, reshard_after_forward = true;  // zero 3
        // The collectives' names: `op_prefix` + "all_reduce_grads", "reduce_scatter_grads", ...
        std::string op_prefix;
        int tag = 0;  // the dp groups' tag across processes (comm::SubGroups)
    };

    // Lays the reducer out over the run's devices: `parts` (every device's layout; the chunks
    // built on this process's devices), `dp_groups` the mesh's dp communicators, one optimizer
    // per local device; `reference` the whole model (its top-level layers' parameters).
    void setup(const Options& o, const comm::DeviceMesh& mesh, RunContext& ctx, std::vector<DevicePart>& parts,
               comm::SubGroups& dp_groups, const optim::OptimizerConfig& optimizer, nn::Sequential& reference);
    // Rank thread, before the first step: the flat shards (zero 1, 2), the units (zero 3), a
    // resumed run's optimizer state.
    void start_rank(Rank& rank);
    void finish_rank(Rank& rank);
    void abort(const std::string& reason);

    bool sharded() const { return m_zero >= 1 && m_dp > 1; }
    bool grads_sharded() const { return m_zero >= 2 && m_dp > 1; }
    bool params_sharded() const { return m_zero >= 3 && m_dp > 1; }

    // Before a step's flushes: the gradients zeroed (or made), and whether each chunk's backward
    // goes layer by layer (`one_backward`: each chunk runs one backward this step, the same on
    // every device of the dp group).
    void begin_step(Rank& rank, bool one_backward);
    // The pipeline executor's hooks for the reducer: a backward layer by layer (zero 2 in one
    // backward, zero 3) and the slots a replica has no rows for (zero 3). `sum_partial` sums a
    // layer's sequence-parallel partial gradients over the tensor group (zero 3).
    void add_hooks(Rank& rank, PipelineExecutor::Hooks& hooks,
                   std::function<void(Rank&, const std::vector<nn::Param*>&)> sum_partial);
    // After the flushes: the gradients summed over the dp group (into the shards at zero 1, 2).
    void reduce(Rank& rank);
    // The optimizer step over the stepped parameters (the shard at zero 1 to 3): fp16
    // unscaling (false: skipped for an overflow), train.clip_norm (`counted(l)`: whether local
    // parameter l's squares count on this rank; the norm goes to `grad_norm`), then the
    // parameters all-gathered (zero 1, 2).
    bool step(Rank& rank, double lr, optim::LossScaler* scaler, const std::optional<double>& clip_norm,
              const std::function<bool(size_t)>& counted, double& grad_norm);

    optim::Optimizer& optimizer(int k) { return *m_optimizers[static_cast<size_t>(k)]; }
    // The optimizer's state tensors per parameter (Adam's 2).
    size_t state_per_parameter() const { return m_state_names; }
    // Host copies of the values of devices with dp coordinate 0 ([rank][local parameter]; empty
    // for the others) on rank 0's process (elsewhere an empty vector), zero 3's put together
    // from their groups' shards.
    std::vector<std::vector<Tensor>> replica_values() const;
    // Device k's optimizer state as host f32 copies, [local parameter][state], each of its
    // parameter's shape (zero 1 to 3: the dp group's shards laid together and cut).
    std::vector<std::vector<Tensor>> local_state(int k) const;
    // A checkpoint's optimizer state for device k ([local parameter][state], its parameters'
    // shapes), taken at `steps`: loaded now, or (zero 1 to 3) its shard's, in start_rank.
    void load_state(int k, const std::vector<std::vector<Tensor>>& state, int64_t steps);

private:
    struct RankState {
        Tensor grads;  // dp > 1, [T]: the gradients are views of it (zero 2: during a step only)
        // zero 1 to 3: the flat parameters (zero 3: setup only) and the shard the optimizer steps;
        // its gradient a view of `grads` at zero 1, its own at zero 2 and 3
        FlatShard flat;
        data::ShardRange owned;  // the flat range whose gradient norm (and, at zero 1 to 3, update) is this rank's
        bool eager = false;      // zero 2 and 3, this step: each layer's gradients reduced as its backward ends
        bool released = false;   // zero 3: the values are the shard only (start_rank has run)
    };
    enum class Op { reduce_scatter_grads, all_reduce_grads, all_gather_params, reduce_grads_to_owner };
    const char* op(Op o) const { return m_ops[static_cast<size_t>(o)].c_str(); }
    int data_rank(int k) const { return m_mesh.coord(k, comm::Axis::dp); }
    nn::Param& shard_param(int k);
    comm::Communicator& group(int k) const { return m_groups->of(k); }

    std::vector<std::vector<Tensor>> by_unit(int k, std::vector<Tensor> tensors) const;
    static std::vector<Tensor> units_whole(const ShardedUnits& units, const std::vector<Tensor>& shards);
    void gather_without_compute(Rank& rank, size_t c, bool forward);
    void make_layer_grads(DevicePart& part, size_t chunk, nn::Model& c, size_t layer);
    void reduce_layer_to_owners(Rank& rank, size_t chunk, nn::Model& c, size_t layer);
    Tensor backward_by_layer(Rank& rank, size_t local, nn::Model& c, Tensor grad,
                             const std::function<void(Rank&, const std::vector<nn::Param*>&)>& sum_partial);
    double clip(Rank& rank, const std::function<bool(size_t)>& counted, const std::vector<nn::Param*>& stepped,
                double max_norm);

    comm::DeviceMesh m_mesh;
    RunContext* m_ctx = nullptr;
    int m_zero = 0, m_dp = 1, m_world = 1;
    size_t m_state_names = 0;
    std::array<std::string, 4> m_ops;
    std::vector<DevicePart>* m_parts = nullptr;
    comm::SubGroups* m_groups = nullptr;
    // zero 3 with prefetch: the prefetch threads' dp groups, over a group of their own
    std::unique_ptr<comm::Group> m_gather_world;
    std::unique_ptr<comm::SubGroups> m_gather;
    std::vector<std::unique_ptr<ShardedUnits>> m_units;  // zero 3, by rank (started on its own thread)
    std::vector<std::unique_ptr<optim::Optimizer>> m_optimizers;
    std::vector<RankState> m_state;  // by rank; each touched by its own thread
    std::vector<Rank*> m_rank_of;    // each rank thread sets its own in start_rank
    // zero 1 to 3, a checkpoint to resume from: each device's range of the flat optimizer state
    // ([state]), loaded into its shard in start_rank; the optimizer's steps (-1: none).
    std::vector<std::vector<Tensor>> m_loaded;
    int64_t m_loaded_steps = -1;
};

}  // namespace paralab::strategy
