#include "engine/data/loader.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "engine/data/text.h"
#include "engine/util/error.h"
#include "engine/util/rng.h"

namespace paralab::data {
namespace {

ShardRange split_evenly(int64_t total, int rank, int world, const char* what) {
    PARALAB_CHECK(world >= 1 && rank >= 0 && rank < world, std::string(what) + ": rank " +
                                                               std::to_string(rank) + " of " +
                                                               std::to_string(world) + " replicas");
    PARALAB_CHECK(total >= 0, std::string(what) + ": negative size " + std::to_string(total));
    const int64_t base = total / world, extra = total % world;
    return ShardRange{rank * base + std::min<int64_t>(rank, extra), base + (rank < extra ? 1 : 0)};
}

int64_t count_batches(int64_t size, int64_t batch, bool drop_last) {
    return drop_last ? size / batch : (size + batch - 1) / batch;
}

const DataLoader::Options& checked(const DataLoader::Options& o) {
    if (o.batch_size <= 0)
        throw ConfigError("DataLoader: batch size must be positive, got " +
                          std::to_string(o.batch_size));
    PARALAB_CHECK(o.workers >= 0, "DataLoader: negative worker count");
    PARALAB_CHECK(
        o.num_shards >= 1 && o.shard >= 0 && o.shard < o.num_shards,
        "DataLoader: shard " + std::to_string(o.shard) + " of " + std::to_string(o.num_shards));
    return o;
}

}  // namespace

ShardRange shard_of_batch(int64_t batch, int rank, int world) {
    return split_evenly(batch, rank, world, "shard_of_batch");
}

ShardRange shard_of_dataset(int64_t size, int rank, int world) {
    return split_evenly(size, rank, world, "shard_of_dataset");
}

DataLoader::DataLoader(const Dataset& dataset, Options options)
    : m_dataset(dataset),
      m_options(checked(options)),
      m_batches(count_batches(dataset.size(), options.batch_size, options.drop_last)),
      m_window(std::max<int64_t>({1, options.prefetch, options.workers})) {
    m_workers.reserve(static_cast<size_t>(m_options.workers));
    for (int i = 0; i < m_options.workers; ++i) m_workers.emplace_back([this] { worker_loop(); });
}

DataLoader::~DataLoader() {
    {
        std::lock_guard lock(m_mutex);
        m_stop = true;
    }
    m_work_cv.notify_all();
    for (auto& t : m_workers) t.join();
}

void DataLoader::start_epoch(int64_t epoch) {
    // A text set needs no order: its windows are drawn per (seed, epoch, index) in assemble.
    auto order = std::make_shared<std::vector<int64_t>>(
        static_cast<size_t>(m_dataset.is_text() ? 0 : m_dataset.size()));
    std::iota(order->begin(), order->end(), int64_t{0});
    if (m_options.shuffle && !m_dataset.is_text()) {
        // Seeded by (seed, epoch) alone, so every shard and every worker count agrees.
        Rng rng(splitmix64(m_options.seed) + static_cast<uint64_t>(epoch));
        for (int64_t i = static_cast<int64_t>(order->size()) - 1; i > 0; --i)
            std::swap((*order)[i], (*order)[rng.below(static_cast<uint64_t>(i + 1))]);
    }
    m_order = std::move(order);
    m_epoch = epoch;
    m_next = 0;
    m_started = true;
    if (m_workers.empty()) return;
    {
        std::lock_guard lock(m_mutex);
        ++m_generation;
        m_shared_order = m_order;
        m_shared_epoch = epoch;
        m_next_to_claim = 0;
        m_delivered = 0;
        m_ready.clear();
        m_error = nullptr;
        m_active = true;
    }
    m_work_cv.notify_all();
}

bool DataLoader::next(Batch& out) {
    if (!m_started) start_epoch(0);
    if (m_next >= m_batches) return false;
    if (m_workers.empty()) {
        assemble(*m_order, m_epoch, m_next, out);
        ++m_next;
        return true;
    }
    std::unique_lock lock(m_mutex);
    m_ready_cv.wait(lock, [&] { return m_error != nullptr || m_ready.count(m_next) != 0; });
    if (m_error) std::rethrow_exception(m_error);
    auto it = m_ready.find(m_next);
    // The consumer's previous batch becomes a worker's buffer: no allocation per batch.
    if (out.inputs.capacity() > 0 && static_cast<int64_t>(m_spare.size()) < m_window)
        m_spare.push_back(std::move(out));
    out = std::move(it->second);
    m_ready.erase(it);
    m_delivered = ++m_next;
    lock.unlock();
    m_work_cv.notify_all();  // the window moved: one more batch may be claimed
    return true;
}

void DataLoader::worker_loop() {
    std::unique_lock lock(m_mutex);
    for (;;) {
        m_work_cv.wait(lock, [&] {
            return m_stop || (m_active && m_next_to_claim < m_batches &&
                              m_next_to_claim < m_delivered + m_window);
        });
        if (m_stop) return;
        const int64_t index = m_next_to_claim++;
        const uint64_t generation = m_generation;
        const Order order = m_shared_order;  // keeps the epoch's order alive while in use
        const int64_t epoch = m_shared_epoch;
        Batch batch;
        if (!m_spare.empty()) {
            batch = std::move(m_spare.back());
            m_spare.pop_back();
        }
        lock.unlock();
        std::exception_ptr error;
        try {
            assemble(*order, epoch, index, batch);
        } catch (...) {
            error = std::current_exception();
        }
        lock.lock();
        // A batch of an epoch that start_epoch has since replaced is dropped.
        if (generation != m_generation) continue;
        if (error) {
            if (!m_error) m_error = error;
        } else {
            m_ready.emplace(index, std::move(batch));
        }
        m_ready_cv.notify_all();
    }
}

// order: the epoch's permutation; fills rows [index * B, ...) of it, this shard's part. A text
// row is the window of example begin + r: token ids x = bytes [o, o + T), y = [o + 1, o + T + 1).
void DataLoader::assemble(const std::vector<int64_t>& order, int64_t epoch, int64_t index,
                          Batch& out) const {
    const int64_t total = m_dataset.size();
    const int64_t begin = index * m_options.batch_size;
    const int64_t global = std::min(m_options.batch_size, total - begin);
    const ShardRange shard = shard_of_batch(global, m_options.shard, m_options.num_shards);
    const int64_t in = m_dataset.sample_numel(), tn = m_dataset.target_numel();
    out.size = shard.count;
    out.global_size = global;
    out.index_in_epoch = index;
    out.epoch = epoch;
    out.inputs.resize(static_cast<size_t>(shard.count * in));
    out.targets.resize(static_cast<size_t>(shard.count * tn));
    out.sample_ids.resize(static_cast<size_t>(shard.count));
    if (m_dataset.is_text()) {
        const uint8_t* bytes = m_dataset.text->data();
        const int64_t t = m_dataset.window;
        for (int64_t r = 0; r < shard.count; ++r) {
            const int64_t id = begin + shard.offset + r;
            const int64_t o = text_window_offset(m_dataset, m_options.seed, epoch, id);
            out.sample_ids[r] = id;
            std::copy_n(bytes + o, t, out.inputs.data() + r * t);
            std::copy_n(bytes + o + 1, t, out.targets.data() + r * t);
        }
        return;
    }
    const float* inputs = m_dataset.inputs.data();
    const float* targets = m_dataset.targets.data();
    for (int64_t r = 0; r < shard.count; ++r) {
        const int64_t id = order[static_cast<size_t>(begin + shard.offset + r)];
        out.sample_ids[r] = id;
        std::copy_n(inputs + id * in, in, out.inputs.data() + r * in);
        std::copy_n(targets + id * tn, tn, out.targets.data() + r * tn);
    }
}

}  // namespace paralab::data
