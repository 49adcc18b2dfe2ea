// ZeRO stage 3 over a data-parallel group, with the schedule of torch's FullyShardedDataParallel
// (docs/strategies.md, "zero stage 3"): the one algorithm of `zero` stage 3 and of hybrid's zero 3.
// Each *unit* (a top-level layer with parameters) is laid flat ([n] floats) and cut into one chunk
// per rank of the group (shard_of_dataset(n, q, N)). Between uses a rank holds only its chunk of
// every unit (its shard), the shard's gradient and optimizer state. Per unit:
//   forward:  all-gather the unit's parameters just before its forward; free them after it
//             (reshard_after_forward; otherwise keep them until its backward);
//   backward: all-gather them again (unless kept), make the unit's gradients, run its backward,
//             reduce-scatter the gradients (each rank adds the sum of its chunk to its shard
//             gradient), free gradients and parameters.
// With prefetch the next unit's all-gather is issued before the current unit computes, on a
// second thread of the rank with a communicator of its own, in the order the rank issues them.
// Every rank of the group must make the same calls: one with no rows for a micro-batch runs its
// units without compute (zero gradients).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/data/loader.h"
#include "engine/strategy/strategy.h"

namespace paralab::strategy {

class ShardedUnits {
public:
    static constexpr size_t kNone = SIZE_MAX;

    struct Options {
        bool prefetch = false;
        bool reshard_after_forward = true;
        const char* gather_op = "all_gather_params";     // the spans' names
        const char* scatter_op = "reduce_scatter_grads";
    };

    // `units[u]`: the shapes of unit u's parameters in order; this rank is `index` of `group`.
    ShardedUnits(std::vector<std::vector<Shape>> units, int index, int group, Options options);
    ~ShardedUnits();
    ShardedUnits(const ShardedUnits&) = delete;
    ShardedUnits& operator=(const ShardedUnits&) = delete;

    size_t units() const { return m_units.size(); }
    const std::vector<Shape>& shapes(size_t u) const { return m_units[u].shapes; }
    int64_t numel(size_t u) const { return m_units[u].numel; }
    // Rank q's chunk of unit u (offsets in the unit), and where it lies in q's shard.
    data::ShardRange chunk(size_t u, int q) const { return data::shard_of_dataset(m_units[u].numel, q, m_group); }
    int64_t at(size_t u, int q) const { return m_at[static_cast<size_t>(q)][u]; }
    int64_t shard_numel(int q) const { return m_shard_numel[static_cast<size_t>(q)]; }

    // Rank thread, before the first step. `views[u]`: every list of Params that holds unit u's
    // parameters (one per build of the layer: a replica's, each pipeline context's), whose first
    // list's values are the whole parameters; the shard takes this rank's chunks and every view's
    // values and gradients are dropped. `gather`: the prefetch thread's communicator over the same
    // group (null: a prefetched unit is gathered on the rank thread, before the current one
    // computes).
    void start(Rank& rank, std::vector<std::vector<std::vector<nn::Param*>>> views, comm::Communicator* gather);
    // Rank thread, at the end: the prefetch thread ends. interrupt(), from any thread (another
    // rank failed): a wait for a gather ends, and so does the prefetch thread.
    void stop();
    void interrupt();

    // The shard the optimizer steps (value: this rank's chunks, unit after unit; gradient: their
    // sums).
    nn::Param& shard() { return m_shard; }
    const nn::Param& shard() const { return m_shard; }

    // A unit's use in one micro-batch (kNone: nothing): `group` is the rank's communicator over
    // the data-parallel group; `next`/`previous`: the unit prefetched.
    void before_forward(Rank& rank, comm::Communicator& group, size_t u, size_t next);
    void after_forward(size_t u);
    void before_backward(Rank& rank, comm::Communicator& group, size_t u, size_t previous);
    void after_backward(Rank& rank, comm::Communicator& group, size_t u);

    // Unit u whole on `device`, from every rank's shard (`shards[q]`: rank q's, in its layout).
    Tensor assemble(size_t u, const std::vector<Tensor>& shards, Device& device, MemCategory category) const;
    // Rank q's shard of tensors of the units' shapes (`whole[u][i]`: unit u's i-th), on the host.
    Tensor shard_of(const std::vector<std::vector<Tensor>>& whole, int q) const;

private:
    struct Unit {
        std::vector<Shape> shapes;
        int64_t numel = 0;
    };
    struct Queued {
        size_t unit;
        float* data;
    };
    void gather(Rank& rank, comm::Communicator& group, size_t u);
    void use(Rank& rank, size_t u);
    void release(size_t u);
    void set_values(size_t u, const Tensor& whole);
    void gather_loop(Rank& rank, comm::Communicator& comm);

    std::vector<Unit> m_units;
    int m_index = 0, m_group = 1;
    Options m_options;
    std::vector<std::vector<int64_t>> m_at;  // [rank][unit]: the chunk's offset in the rank's shard
    std::vector<int64_t> m_shard_numel;      // by rank
    std::vector<std::vector<std::vector<nn::Param*>>> m_views;
    nn::Param m_shard;
    std::vector<Tensor> m_gathered;  // by unit: its whole buffer from its gather's issue to its release
    std::vector<Tensor> m_grads;     // by unit: its gradients while its backward runs

    // The prefetch thread: it all-gathers the queued units in order.
    std::thread m_thread;
    std::mutex m_mutex;
    std::condition_variable m_cv;
    std::deque<Queued> m_queue;   // guarded by m_mutex
    std::vector<bool> m_ready;    // guarded by m_mutex: by unit, its gather is done
    std::exception_ptr m_error;   // guarded by m_mutex
    bool m_stop = false;          // guarded by m_mutex
    bool m_threaded = false;
};

}  // namespace paralab::strategy
