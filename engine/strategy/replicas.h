// The base of the strategies that keep a whole model on every device (single, data_parallel,
// ddp, hogwild, param_server): one replica and one optimizer per rank, evaluation on device 0's replica, and the
// flat-buffer packing their gradient and parameter collectives share.
#pragma once

#include <memory>
#include <vector>

#include "engine/strategy/strategy.h"

namespace paralab::strategy {

class ReplicaStrategy : public Strategy {
public:
    Tensor predict(const Tensor& x) override;
    std::vector<Tensor> parameters() override;
    std::vector<Tensor> buffers() override;

protected:
    using Strategy::Strategy;

    // Builds a replica per device: rank 0's with the reference's parameters, the others' too
    // unless `broadcast_at_start` (then zero until start_rank broadcasts rank 0's: the real
    // start of a DDP run). Installs SyncBatchNorm when `sync_batchnorm` and world > 1.
    void build_replicas(RunContext& ctx, nn::Model& reference, bool broadcast_at_start);
    // Rank thread: rank 0's parameters and buffers to every rank, one flat broadcast.
    void broadcast_parameters(Rank& rank);

    // A local rank's replica and its parameters (a rank of another process has none).
    nn::Model& replica(int rank) { return *m_replicas[static_cast<size_t>(rank)]; }
    std::vector<nn::Param*>& params(int rank) { return m_params[static_cast<size_t>(rank)]; }
    // The parameters of some local replica: the layout every replica shares.
    const std::vector<nn::Param*>& layout() const { return m_params[static_cast<size_t>(m_layout)]; }
    // SyncBatchNorm on each local replica, reading rank r's handle from slots[r] (sized here;
    // each rank thread sets its own slot in start_rank).
    void install_sync_batchnorm_on_local(std::vector<Rank*>& slots);
    // The parameters each top-level layer owns, by layer index (the same on every replica).
    const std::vector<std::vector<size_t>>& params_of_layer() const { return m_params_of_layer; }

    // Checkpoints of the strategies whose replicas all hold the whole model: the state of
    // `rank`'s replica with `optimizer`'s state (already in the single device's layout) and
    // `scaler`'s (null: none); and the parameters and buffers of `state` into every local replica.
    TrainingState replica_state(int rank, const optim::Optimizer& optimizer, const optim::LossScaler* scaler);
    void load_replicas(const TrainingState& state);

    std::vector<std::unique_ptr<nn::Model>> m_replicas;
    std::vector<std::vector<nn::Param*>> m_params;
    std::vector<std::unique_ptr<optim::Optimizer>> m_optimizers;  // empty where a rank has none

private:
    std::vector<std::vector<size_t>> m_params_of_layer;
    int m_layout = 0;  // a local rank
};

// SyncBatchNorm: every batchnorm of `model` sums its statistics over `group` (null: the ranks of
// `rank`'s communicator), recorded as communication.
void install_sync_batchnorm(Rank*& rank_slot, nn::Model& model, comm::Communicator* group = nullptr);
// Refuses a run whose smallest (micro-)batch leaves a replica of `replicas` without rows for one
// of its `micro_batches`: ConfigError("data.batch_size").
void check_sync_batchnorm_rows(const RunContext& ctx, int replicas, int64_t micro_batches);
// Whether `net` or a layer inside it is a batch norm.
bool has_batchnorm(nn::Layer& net);

// n floats from src to dst in one device's memory: a memcpy on the CPU (queue nullptr), a copy
// ordered on the GPU's queue otherwise (the queue of the tensors the pointers are into).
void copy_floats(float* dst, const float* src, int64_t n, void* queue);

// The gradients of params[first, last) become views of one zeroed flat f32 buffer on `device`,
// laid end to end in order, which is returned; collectives then run in place on it (torch's
// gradient_as_bucket_view). Call before the first step, when every gradient is zero: their own
// tensors are released before the buffer is made, so gradients never take twice their size.
Tensor grads_as_views(const std::vector<nn::Param*>& params, size_t first, size_t last, Device& device);

// Flat packing: params (or their grads) laid end to end in order, f32, in the memory of the
// parameters' device (the flat buffer must be on the same device; on a GPU, ordered on its
// queue).
int64_t total_numel(const std::vector<nn::Param*>& params);
void pack_values(const std::vector<nn::Param*>& params, float* flat);
void unpack_values(const float* flat, const std::vector<nn::Param*>& params);
void pack_grads(const std::vector<nn::Param*>& params, float* flat);
void unpack_grads(const float* flat, const std::vector<nn::Param*>& params);

}  // namespace paralab::strategy
