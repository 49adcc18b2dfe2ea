// The one pipeline executor (docs/strategies.md, "Pipelines"): a device runs its schedule's
// actions (stages::stage_schedule: forward, backward or, under zb_h1, the weight pass W of a
// micro-batch through one of its model chunks) in order, receiving each chunk's input from the
// device of the chunk before and its output gradient from the device of the chunk after.
// pipeline, model_parallel and hybrid run their stages through it; the mesh's pp axis says which
// device holds which chunk.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "engine/comm/device_mesh.h"
#include "engine/data/loader.h"
#include "engine/strategy/stages.h"
#include "engine/strategy/strategy.h"

namespace paralab::strategy {

// One model chunk of a device: the top-level layers [first, last) as `contexts` builds that share
// the master's (context 0's) parameters and gradients, each holding one micro-batch in flight
// (stages.h). Global chunk g runs on stage g mod pp as its local chunk g div pp.
//
// Where a chunk lies in the model: its layers, shapes, parameters and buffers.
struct ChunkPlace {
    size_t first = 0, last = 0;
    Shape input, output;                        // per example
    size_t first_param = 0, param_count = 0;    // its parameters in the whole model's list
    size_t first_buffer = 0, buffer_count = 0;  // its buffers in the whole model's list
};

struct ModelChunk : ChunkPlace {
    ModelChunk() = default;
    explicit ModelChunk(const ChunkPlace& place) : ChunkPlace(place) {}

    // The builds and the lists below exist on a device of this process only.
    std::vector<std::unique_ptr<nn::Model>> contexts;
    std::vector<nn::Param*> params;  // the master's
    std::vector<Tensor> buffers;     // the master's
    // The master's top-level layer i holds params [layer_ends[i − 1], layer_ends[i]).
    std::vector<size_t> layer_ends;

    nn::Model& master() { return *contexts.front(); }
    // Points every other context's parameters and gradients at the master's.
    void share_master();
};

// The global chunks of `reference` cut at `bounds` ([0, b1, ..., L]): their layers, shapes and
// places in the model's parameter and buffer lists, nothing built.
std::vector<ChunkPlace> lay_out_chunks(nn::Model& reference, const std::vector<size_t>& bounds);

// Builds `contexts` builds of `ch` on `device` (nn::Model::stage, each with a preparer of its own
// from `preparer` when given: tensor_shards::shard_preparer; the experiment's recomputation),
// fills the master's lists and points the others at them.
void build_chunk(ModelChunk& ch, const config::Experiment& e, const std::vector<nn::LayerSpec>& layers,
                 Device& device, int contexts,
                 const std::function<std::function<void(nn::Layer&)>()>& preparer = {});

class PipelineExecutor {
public:
    // What a strategy adds to a flush.
    struct Hooks {
        // fp16: the loss gradient's scale on the last chunk (null: none).
        const optim::LossScaler* scaler = nullptr;
        // The backward of one context from its output gradient (on the last chunk, the loss's),
        // returning its input gradient; empty: the context's net().backward.
        std::function<Tensor(int chunk, nn::Model& context, Tensor dy)> backward;
        // A slot of the schedule this device has no micro-batch for (hybrid at ZeRO 3: a replica
        // with fewer rows keeps its dp group's collectives in step).
        std::function<void(int chunk, bool forward)> idle_slot;
    };

    PipelineExecutor() = default;
    // `chunks` model chunks per stage (interleaved_1f1b); the stages are the mesh's pp axis.
    PipelineExecutor(const comm::DeviceMesh& mesh, stages::Schedule schedule, int chunks)
        : m_mesh(mesh), m_schedule(schedule), m_chunks(chunks) {}

    // One flush of `slots` micro-batch slots over `chunks` (this device's, by local index): the
    // first micro.size() of them run the rows `micro` of the global batch (`batch` holds this
    // device's rows from row `offset`), the rest call hooks.idle_slot (a W of such a slot runs
    // nothing). Records the spans "forward", "backward", "send_activation", "recv_grad", ...
    // (with " chunk c" when interleaved). The loss of the last chunk goes into `result` on tensor
    // rank 0.
    //
    // zb_h1: a backward is B, recorded as "backward_input" (kBackwardInput): the context's layers
    // queue their weight-gradient work under the micro-batch's index in the flush
    // (nn::Layer::defer_weight_grads); the schedule's W of that micro-batch, recorded as
    // "backward_weight" (kBackwardWeight), runs it in the same context (micro-batch i's, i mod
    // its contexts). Every W has run when the flush returns. hooks.backward (a strategy's
    // layer-by-layer backward) cannot wait for W: ConfigError at "strategy.schedule".
    void run_flush(Rank& rank, std::vector<ModelChunk>& chunks, const data::Batch& batch, int64_t offset,
                   const std::vector<data::ShardRange>& micro, int slots, StepResult& result,
                   const Hooks& hooks) const;

    static const char* const kBackwardInput;   // "backward_input"
    static const char* const kBackwardWeight;  // "backward_weight"

    // The highest message tag a flush of `micro_batches` uses, plus one.
    int tags_used(int64_t micro_batches) const { return static_cast<int>(2 * micro_batches * m_chunks); }

private:
    void forward(Rank& rank, ModelChunk& ch, int chunk, nn::Model& c, const data::Batch& batch, int64_t offset,
                 int index, const data::ShardRange& mb, StepResult& result) const;
    void backward(Rank& rank, ModelChunk& ch, int chunk, nn::Model& c, int index, const data::ShardRange& mb,
                  const Hooks& hooks) const;
    void weight(Rank& rank, int chunk, nn::Model& c, int index) const;
    int global_chunks() const { return m_mesh.size(comm::Axis::pp) * m_chunks; }
    // The device that runs global chunk g for `rank`'s other coordinates.
    int device_of_chunk(int g, int rank) const {
        return m_mesh.with(rank, comm::Axis::pp, g % m_mesh.size(comm::Axis::pp));
    }
    // The tag of micro-batch `index`'s message sent by local chunk `chunk`.
    int message_tag(int index, int chunk, int direction) const { return 2 * (index * m_chunks + chunk) + direction; }

    comm::DeviceMesh m_mesh;
    stages::Schedule m_schedule = stages::Schedule::gpipe;
    int m_chunks = 1;
};

}  // namespace paralab::strategy
