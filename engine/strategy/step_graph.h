// The forward and backward of a GPU step (single's, and each rank's of ddp without overlap),
// recorded once as a CUDA graph and replayed (docs/gpu.md, "The step as one CUDA graph"). A
// small model's eager step is a hundred launches of microseconds each with the host waiting
// between phases; replayed, it is one launch, and the GPU runs while the host prepares the next
// batch. The optimizer, fp16 unscaling and clipping stay eager after it (a multi-tensor launch
// or two): their scalars (the learning rate, Adam's step) change every step.
//
// What the graph reads is staged in place before each replay: the batch's inputs into one
// device tensor, the targets in the loss's form into another (nn::Loss::stage_target), token ids
// checked and as integers into a third (nn::Embedding::stage_ids). What it allocates comes from
// a pool of the device's allocator kept for it (Allocator::begin_pool), so that nothing written
// between replays shares its memory. A step is recorded after two eager steps of the same shape
// (the allocator's cache and the cuDNN plans filled); a new batch size or loss scale is recorded
// anew, a short last batch runs eagerly.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/strategy/strategy.h"

namespace paralab::strategy {

class StepGraph {
public:
    StepGraph() = default;
    ~StepGraph();
    StepGraph(const StepGraph&) = delete;
    StepGraph& operator=(const StepGraph&) = delete;

    // forward_backward(rank, model, batch, offset, {}, {}, loss_scale), replayed from a graph
    // where nothing rules it out, else eager. Records the phases "forward" and "backward" when
    // eager, one "forward+backward (CUDA graph)" when replayed.
    LocalPass run(Rank& rank, nn::Model& model, const data::Batch& batch, int64_t offset, double loss_scale);

    // A strategy's reason to keep every step eager (ddp's overlapped buckets, SyncBatchNorm's
    // all-reduce in forward: work a replay would not do), given before the first step.
    void refuse(std::string why) {
        m_why_not = std::move(why);
        m_checked = true;
    }

private:
    void release();
    // Records forward and backward of the staged batch; false (and released) when it failed.
    bool record(Rank& rank, nn::Model& model, int64_t denominator, double loss_scale);

    bool m_checked = false;
    // Why the steps run eagerly ("" while they may replay): the device, the experiment or the
    // model rule it out (why_no_step_graph), the strategy did (refuse), or a recording failed.
    std::string m_why_not;
    std::vector<uint64_t> m_key;  // rows, the loss denominator, the loss scale's bits
    int m_eager_steps = 0;        // eager steps with m_key
    int m_failed = 0;             // recordings abandoned (PoolMissError): eager again, then retried
    void* m_exec = nullptr;       // cudaGraphExec_t
    Device* m_device = nullptr;   // whose allocator holds the pool
    Tensor m_x, m_target;         // the staged batch
    Tensor m_ids;                 // its token ids, when the model starts with an embedding
    int64_t m_peak = 0;           // the recorded step's memory high-water mark
    std::array<int64_t, kMemCategoryCount> m_at_peak{};
};

// Why a step of `e` on `device` cannot be a graph, or "" if it can: the device is no GPU,
// graphs are off (PARALAB_CUDA_GRAPHS=0), grad_accum > 1, or a layer draws random numbers each
// step (dropout: its seed would be recorded with the graph).
std::string why_no_step_graph(const config::Experiment& e, nn::Model& model, Device& device);

}  // namespace paralab::strategy
