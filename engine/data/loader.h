// DataLoader: iterates a Dataset in batches, shuffled per epoch, optionally assembled by
// worker threads ahead of the consumer; and the rule that shards a batch or a data set over
// data-parallel replicas.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/data/dataset.h"

namespace paralab::data {

// Rows [offset, offset + count) of a batch or data set that one replica takes.
struct ShardRange {
    int64_t offset = 0, count = 0;
};

// The split of a global batch of `batch` examples over `world` replicas: replica r gets
// count = batch / world, the first batch % world replicas one more, in rank order; the
// ranges tile [0, batch). B = 10, N = 3 -> {0, 4}, {4, 3}, {7, 3}.
ShardRange shard_of_batch(int64_t batch, int rank, int world);

// Evaluation sharding by the same rule over a whole data set: every example is counted
// exactly once (no padding to equal shards, unlike torch's DistributedSampler, whose
// duplicated examples skew the test accuracy).
ShardRange shard_of_dataset(int64_t size, int rank, int world);

struct Batch {
    int64_t size = 0;            // examples in this batch (this shard's rows when sharded)
    int64_t global_size = 0;     // examples in the global batch (== size when not sharded)
    int64_t index_in_epoch = 0;  // 0 .. batches_per_epoch() - 1
    int64_t epoch = 0;
    std::vector<float> inputs;        // [size, ...sample_shape]
    std::vector<float> targets;       // [size, ...target_shape] (class ids as floats)
    std::vector<int64_t> sample_ids;  // [size]: each row's index in the dataset (text: epoch)
};

class DataLoader {
public:
    struct Options {
        int64_t batch_size = 32;  // the global batch
        bool shuffle = true;
        uint64_t seed = 0;
        // 0: next() assembles on the calling thread. N > 0: N threads assemble batches
        // ahead; at most max(prefetch, workers) batches are ready or in progress at a time.
        int workers = 0;
        int prefetch = 2;
        bool drop_last = false;  // drop a last, partial batch
        // Data-parallel sharding: this loader serves replica `shard`'s rows (shard_of_batch)
        // of every global batch. All shards of one seed see the same global batches; a
        // shard of a small last batch may get 0 rows.
        int shard = 0;
        int num_shards = 1;
    };

    // `dataset` must outlive the loader.
    DataLoader(const Dataset& dataset, Options options);
    ~DataLoader();  // stops the workers promptly (each finishes at most the batch in hand)
    DataLoader(const DataLoader&) = delete;
    DataLoader& operator=(const DataLoader&) = delete;

    // Starts (or restarts) an epoch: the order is a permutation drawn from (seed, epoch),
    // the same on every shard; without shuffle the dataset order. A text set's windows
    // follow its own rule (text_window_offset), whatever `shuffle`. Batches of a previous
    // epoch not yet taken are dropped. next() without a start_epoch starts epoch 0.
    void start_epoch(int64_t epoch);

    // The next batch of the epoch, in order, whatever the number of workers; false at the
    // end of the epoch (until the next start_epoch). With workers it waits for the batch.
    // A worker's exception is rethrown here.
    bool next(Batch& out);

    int64_t batches_per_epoch() const { return m_batches; }
    const Dataset& dataset() const { return m_dataset; }
    const Options& options() const { return m_options; }

private:
    using Order = std::shared_ptr<const std::vector<int64_t>>;

    void assemble(const std::vector<int64_t>& order, int64_t epoch, int64_t index,
                  Batch& out) const;
    void worker_loop();

    const Dataset& m_dataset;
    const Options m_options;
    const int64_t m_batches;
    const int64_t m_window;  // batches assembled ahead of the consumer

    // The consumer's view (the calling thread only).
    bool m_started = false;
    int64_t m_epoch = 0;
    int64_t m_next = 0;  // the next batch index next() returns
    Order m_order;

    std::mutex m_mutex;
    std::condition_variable m_work_cv;   // workers wait here for a batch to claim
    std::condition_variable m_ready_cv;  // next() waits here for its batch
    uint64_t m_generation = 0;           // guarded by m_mutex; bumped by start_epoch
    Order m_shared_order;                // guarded by m_mutex
    int64_t m_shared_epoch = 0;          // guarded by m_mutex
    int64_t m_next_to_claim = 0;         // guarded by m_mutex
    int64_t m_delivered = 0;             // guarded by m_mutex: batches next() has returned
    std::map<int64_t, Batch> m_ready;    // guarded by m_mutex: finished, by index
    std::vector<Batch> m_spare;          // guarded by m_mutex: delivered buffers to reuse
    std::exception_ptr m_error;          // guarded by m_mutex
    bool m_active = false;               // guarded by m_mutex: an epoch is running
    bool m_stop = false;                 // guarded by m_mutex
    std::vector<std::thread> m_workers;
};

}  // namespace paralab::data
