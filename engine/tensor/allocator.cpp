#include "engine/tensor/allocator.h"

#include <algorithm>

#include <cstdlib>
#include <string>

#include "engine/util/error.h"

namespace paralab {

Allocator::~Allocator() = default;

size_t Allocator::round_size(size_t bytes) {
    // Multiples of 64 bytes keep every block aligned for vector loads; exact sizes otherwise,
    // because steady-state steps request exactly the sizes they requested before.
    return bytes == 0 ? 64 : (bytes + 63) / 64 * 64;
}

void* Allocator::allocate(size_t bytes, MemCategory category) {
    const size_t size = round_size(bytes);
    const auto c = static_cast<size_t>(category);
    std::lock_guard lock(m_mutex);
    void* ptr = nullptr;
    const bool recording = m_pool && m_pool_thread == std::this_thread::get_id();
    if (recording) {
        ptr = take_cached(m_pool_free, size);
        if (!ptr) ptr = take_cached(m_cache, size);
        if (!ptr)
            throw PoolMissError(m_name + ": a graph being recorded needs a new block of " + std::to_string(size) +
                                " bytes for " + std::string(mem_category_name(category)) +
                                ", and the system allocator may not be called while recording");
        m_pool_blocks.insert(ptr);
        account_allocation(size, c);
        return ptr;
    }
    ptr = take_cached(m_cache, size);
    if (!ptr) {
        if (m_limit > 0 &&
            m_stats.current_total + m_stats.cached_bytes + static_cast<int64_t>(size) > m_limit) {
            // Give the cache back before declaring the device full.
            for (auto& [sz, p] : m_cache) raw_free(p);
            m_cache.clear();
            m_stats.cached_bytes = 0;
            if (m_stats.current_total + static_cast<int64_t>(size) > m_limit)
                throw OutOfMemoryError(m_name + ": out of memory allocating " +
                                       std::to_string(size) + " bytes for " +
                                       std::string(mem_category_name(category)) + " (" +
                                       std::to_string(m_stats.current_total) + " of " +
                                       std::to_string(m_limit) + " bytes in use)");
        }
        ptr = raw_allocate(size);
        if (!ptr) {
            for (auto& [sz, p] : m_cache) raw_free(p);
            m_cache.clear();
            m_stats.cached_bytes = 0;
            ptr = raw_allocate(size);
        }
        if (!ptr)
            throw OutOfMemoryError(m_name + ": out of memory allocating " + std::to_string(size) +
                                   " bytes for " + std::string(mem_category_name(category)));
        ++m_stats.system_allocs;
    }
    account_allocation(size, c);
    return ptr;
}

void* Allocator::take_cached(std::multimap<size_t, void*>& blocks, size_t size) {
    // The block of this size freed last (deallocate puts it first among its size): it is the
    // most likely still in cache, and a steady step gets the same addresses step after step,
    // which the GPU's recorded graphs (engine/device/gpu_graph.h) are keyed by.
    const auto it = blocks.lower_bound(size);
    if (it == blocks.end() || it->first != size) return nullptr;
    void* ptr = it->second;
    blocks.erase(it);
    m_stats.cached_bytes -= static_cast<int64_t>(size);
    return ptr;
}

void Allocator::account_allocation(size_t size, size_t c) {
    m_stats.current[c] += static_cast<int64_t>(size);
    if (m_stats.current[c] > m_stats.peak[c]) m_stats.peak[c] = m_stats.current[c];
    m_stats.current_total += static_cast<int64_t>(size);
    if (m_stats.current_total > m_stats.peak_total) m_stats.peak_total = m_stats.current_total;
    if (m_stats.current_total > m_stats.step_peak_total) {
        m_stats.step_peak_total = m_stats.current_total;
        m_stats.at_step_peak = m_stats.current;
    }
}

void Allocator::deallocate(void* ptr, size_t bytes, MemCategory category) {
    if (!ptr) return;
    const size_t size = round_size(bytes);
    const auto c = static_cast<size_t>(category);
    std::lock_guard lock(m_mutex);
    m_stats.current[c] -= static_cast<int64_t>(size);
    m_stats.current_total -= static_cast<int64_t>(size);
    m_stats.cached_bytes += static_cast<int64_t>(size);
    if (m_pool && m_pool_blocks.count(ptr)) {
        m_pool_free.emplace_hint(m_pool_free.lower_bound(size), size, ptr);
        return;
    }
    m_cache.emplace_hint(m_cache.lower_bound(size), size, ptr);  // first of its size: reused first
}

void Allocator::begin_pool() {
    std::lock_guard lock(m_mutex);
    if (m_pool) throw Error(m_name + ": a graph pool is already open");
    m_pool = true;
    m_pool_thread = std::this_thread::get_id();
}

void Allocator::end_pool() {
    std::lock_guard lock(m_mutex);
    m_pool_thread = std::thread::id();
}

void Allocator::release_pool() {
    std::lock_guard lock(m_mutex);
    for (auto& [size, p] : m_pool_free) m_cache.emplace_hint(m_cache.lower_bound(size), size, p);
    m_pool_free.clear();
    m_pool_blocks.clear();
    m_pool = false;
    m_pool_thread = std::thread::id();
}

void Allocator::add_replayed_step(int64_t step_peak_total, const std::array<int64_t, kMemCategoryCount>& at_step_peak) {
    std::lock_guard lock(m_mutex);
    if (step_peak_total > m_stats.step_peak_total) {
        m_stats.step_peak_total = step_peak_total;
        m_stats.at_step_peak = at_step_peak;
    }
    if (step_peak_total > m_stats.peak_total) m_stats.peak_total = step_peak_total;
}

MemoryStats Allocator::stats() const {
    std::lock_guard lock(m_mutex);
    return m_stats;
}

void Allocator::reset_peak() {
    std::lock_guard lock(m_mutex);
    m_stats.peak = m_stats.current;
    m_stats.peak_total = m_stats.current_total;
}

void Allocator::begin_step() {
    std::lock_guard lock(m_mutex);
    m_stats.step_peak_total = m_stats.current_total;
    m_stats.at_step_peak = m_stats.current;
}

void Allocator::restore_peak(const MemoryStats& before) {
    std::lock_guard lock(m_mutex);
    MemoryStats& s = m_stats;
    for (size_t c = 0; c < kMemCategoryCount; ++c) s.peak[c] = std::max(before.peak[c], s.current[c]);
    s.peak_total = std::max(before.peak_total, s.current_total);
    if (before.step_peak_total >= s.current_total) {
        s.step_peak_total = before.step_peak_total;
        s.at_step_peak = before.at_step_peak;
    } else {
        s.step_peak_total = s.current_total;
        s.at_step_peak = s.current;
    }
}

void Allocator::release_cached() {
    std::lock_guard lock(m_mutex);
    for (auto& [sz, p] : m_cache) raw_free(p);
    m_cache.clear();
    m_stats.cached_bytes = 0;
}

void Allocator::set_limit(int64_t bytes) {
    std::lock_guard lock(m_mutex);
    m_limit = bytes;
}

void Allocator::release_all() {
    release_pool();
    release_cached();
}

HostAllocator::~HostAllocator() { release_all(); }

void* HostAllocator::raw_allocate(size_t bytes) { return std::aligned_alloc(64, bytes); }

void HostAllocator::raw_free(void* ptr) { std::free(ptr); }

}  // namespace paralab
