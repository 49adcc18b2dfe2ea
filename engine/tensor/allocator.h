// Per-device memory with accounting by category. Freed blocks are cached by size and handed out
// again, so a training step that repeats the previous step's allocations touches no system
// allocator in the steady state (docs/design.md).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <vector>

namespace paralab {

enum class MemCategory : uint8_t {
    parameters,
    gradients,
    optimizer_state,
    activations,
    communication,
    workspace,
};
constexpr size_t kMemCategoryCount = 6;

constexpr std::string_view mem_category_name(MemCategory c) {
    switch (c) {
        case MemCategory::parameters: return "parameters";
        case MemCategory::gradients: return "gradients";
        case MemCategory::optimizer_state: return "optimizer_state";
        case MemCategory::activations: return "activations";
        case MemCategory::communication: return "communication";
        case MemCategory::workspace: return "workspace";
    }
    return "?";
}

struct MemoryStats {
    std::array<int64_t, kMemCategoryCount> current{};  // bytes in live tensors, by category
    std::array<int64_t, kMemCategoryCount> peak{};     // high-water mark of `current`, by category
    int64_t current_total = 0;
    int64_t peak_total = 0;     // high-water mark of the sum (not the sum of the peaks)
    int64_t cached_bytes = 0;   // freed blocks held for reuse
    int64_t system_allocs = 0;  // calls that reached the system allocator
    // The step's high-water mark of current_total since Allocator::begin_step, and the bytes by
    // category at that moment: a training step's memory with its activations, which `current`
    // at the step's end no longer holds (backward freed them).
    int64_t step_peak_total = 0;
    std::array<int64_t, kMemCategoryCount> at_step_peak{};
};

// Thread-safe. Subclasses provide the raw memory (host, CUDA).
class Allocator {
public:
    virtual ~Allocator();

    // Returns at least `bytes` bytes, 64-byte aligned, accounted under `category`.
    // Throws OutOfMemoryError naming the device and the size when memory runs out or the
    // device's limit would be passed.
    void* allocate(size_t bytes, MemCategory category);
    void deallocate(void* ptr, size_t bytes, MemCategory category);

    MemoryStats stats() const;
    void reset_peak();
    // A training step starts: its high-water mark (step_peak_total, at_step_peak) starts again
    // from what is live now. The run's peak (peak_total) is not touched.
    void begin_step();
    // The high-water marks (the run's and the step's) as they were at `before` (or what is live
    // now, when more): what ran since — an evaluation between steps — is not training's memory.
    void restore_peak(const MemoryStats& before);
    // Returns cached blocks to the system.
    void release_cached();
    // 0 = unlimited. A virtual device may be given a budget so that out-of-memory can be taught.
    void set_limit(int64_t bytes);

    // The memory of a recorded GPU graph (engine/strategy/step_graph.h): between begin_pool and
    // end_pool, the calling thread's allocations are served from the pool's freed blocks, else
    // from the cache, and every block so handed out joins the pool. A block of the pool that is
    // freed, then or later, returns to the pool and never to the cache, so nothing else is ever
    // given memory that a replay of the graph writes. While recording, memory the cache cannot
    // give throws PoolMissError (the system allocator may not be called during a capture).
    // release_pool ends the pool: its freed blocks go to the cache, and its live blocks return
    // there when freed. One pool at a time.
    void begin_pool();
    void end_pool();
    void release_pool();
    // Raises the step's high-water mark to a replayed graph's: a replay allocates nothing, but
    // its blocks hold what the recorded step held at its peak.
    void add_replayed_step(int64_t step_peak_total, const std::array<int64_t, kMemCategoryCount>& at_step_peak);

protected:
    explicit Allocator(std::string name) : m_name(std::move(name)) {}
    virtual void* raw_allocate(size_t bytes) = 0;  // nullptr when out of memory
    virtual void raw_free(void* ptr) = 0;
    // Call from the subclass destructor: raw_free is virtual and cannot run from ~Allocator.
    void release_all();

private:
    static size_t round_size(size_t bytes);
    // With m_mutex held: the last-freed block of `size` out of `blocks` (nullptr: none), and the
    // accounting of a block handed out.
    void* take_cached(std::multimap<size_t, void*>& blocks, size_t size);
    void account_allocation(size_t size, size_t category);

    std::string m_name;
    mutable std::mutex m_mutex;
    MemoryStats m_stats;                                 // guarded by m_mutex
    std::multimap<size_t, void*> m_cache;                // guarded by m_mutex; same sizes last-freed first
    // The graph pool (begin_pool), guarded by m_mutex.
    bool m_pool = false;
    std::thread::id m_pool_thread;  // the recording thread; default (no thread) after end_pool
    std::unordered_set<void*> m_pool_blocks;
    std::multimap<size_t, void*> m_pool_free;
    int64_t m_limit = 0;                                 // guarded by m_mutex
};

// Host memory (aligned_alloc).
class HostAllocator final : public Allocator {
public:
    explicit HostAllocator(std::string name) : Allocator(std::move(name)) {}
    ~HostAllocator() override;

protected:
    void* raw_allocate(size_t bytes) override;
    void raw_free(void* ptr) override;
};

}  // namespace paralab
