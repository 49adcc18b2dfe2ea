// The protocol of the communicators whose ranks are threads of one process that read each
// other's buffers: LocalGroup (local.cpp, host memory) and CudaLocalGroup (cuda_local.cpp, device
// memory). local.cpp's opening comment explains it; this is the one implementation of its
// pieces: the abort flag, one progress counter and published pointer per rank, a rank's ticks
// and waits, and the ring's schedule and host arithmetic (which the message ring of
// sub_groups.cpp follows too, so that its sums are the local ring's). Private to engine/comm.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "engine/comm/communicator.h"

namespace paralab::comm::detail {

// Set once by abort(); every wait of the group polls it or is woken by it.
class AbortFlag {
public:
    // True for the first caller only (the first reason wins).
    bool set(const std::string& reason) {
        std::lock_guard lock(m_mutex);
        if (m_aborted.load(std::memory_order_relaxed)) return false;
        m_reason = reason;
        m_aborted.store(true, std::memory_order_release);
        return true;
    }
    bool is_set() const { return m_aborted.load(std::memory_order_acquire); }
    // Throws CommAborted("communicator aborted: <reason>") once set.
    void check() const {
        if (!is_set()) return;
        std::string reason;
        {
            std::lock_guard lock(m_mutex);
            reason = m_reason;
        }
        throw CommAborted("communicator aborted: " + reason);
    }

private:
    std::atomic<bool> m_aborted{false};
    mutable std::mutex m_mutex;
    std::string m_reason;  // guarded by m_mutex; set once, before m_aborted
};

inline int wrap(int r, int n) {
    return ((r % n) + n) % n;
}

// The ring's schedule (local.cpp, "Ring"): the chunk rank r of n reduces in reduce-scatter step
// k, and the one it copies in all-gather step k. shift is 0 for an all-reduce, 1 for a
// reduce-scatter or an all-gather alone.
inline int ring_reduced_chunk(int r, int n, int k, int shift) {
    return wrap(r - k - 1 - shift, n);
}
inline int ring_gathered_chunk(int r, int n, int k, int shift) {
    return wrap(r - k - shift, n);
}

// Host arithmetic of the reductions: dst[i] = src[i] (op) dst[i], where src holds the partial
// result of the ranks before this one (average sums; the finished sum is divided once).
template <class T>
void combine(T* __restrict dst, const T* __restrict src, int64_t n, ReduceOp op) {
    if (op == ReduceOp::max) {
        for (int64_t i = 0; i < n; ++i) dst[i] = dst[i] < src[i] ? src[i] : dst[i];
    } else {
        for (int64_t i = 0; i < n; ++i) dst[i] = src[i] + dst[i];
    }
}
template <class T>
void divide(T* data, int64_t n, int world) {
    const T w = static_cast<T>(world);
    for (int64_t i = 0; i < n; ++i) data[i] /= w;
}

// The rank-order offset of rank r's rows in a scatterv/gatherv (or all-to-all) layout.
inline int64_t offset_of(const int64_t* counts, int r) {
    int64_t offset = 0;
    for (int q = 0; q < r; ++q) offset += counts[q];
    return offset;
}
inline int64_t offset_of(const std::vector<int64_t>& counts, int r) {
    return offset_of(counts.data(), r);
}

// A communicator whose all-reduce, reduce-scatter and all-gather are one ring (local.cpp,
// "Ring"): reduce-scatter steps then all-gather steps, or either alone.
class RingCommunicator : public Communicator {
protected:
    using Communicator::Communicator;
    virtual void ring(void* data, int64_t count, DType dtype, ReduceOp op, bool reduce, bool gather) = 0;

    void all_reduce_impl(void* data, int64_t count, DType dtype, ReduceOp op) override {
        ring(data, count, dtype, op, true, true);
    }
    void reduce_scatter_impl(void* data, int64_t count, DType dtype, ReduceOp op) override {
        ring(data, count, dtype, op, true, false);
    }
    void all_gather_impl(void* data, int64_t count, DType dtype) override {
        ring(data, count, dtype, ReduceOp::sum, false, true);
    }
};

// A group's shared state: per rank a progress counter and the pointer it published for the
// current call, each on its own cache line (the neighbours poll them), and the abort flag.
class PeerBoard {
public:
    explicit PeerBoard(int world) : m_slots(size_t(world)) {}
    int world() const { return int(m_slots.size()); }
    const AbortFlag& aborted() const { return m_aborted; }

    // Sets the flag (false if it already was) and bumps every counter far ahead, so that every
    // wait ends; the waits then see the flag and throw CommAborted.
    bool abort(const std::string& reason) {
        if (!m_aborted.set(reason)) return false;
        for (Slot& s : m_slots) {
            s.progress.fetch_add(k_abort_bump, std::memory_order_acq_rel);
            s.progress.notify_all();
        }
        return true;
    }

private:
    friend class PeerCursor;
    static constexpr int64_t k_abort_bump = int64_t{1} << 60;
    struct alignas(64) Slot {
        std::atomic<int64_t> progress{0};          // ticked by its rank; bumped by abort()
        std::atomic<const void*> buffer{nullptr};  // published before the "entered" tick
    };
    std::vector<Slot> m_slots;  // never resized
    AbortFlag m_aborted;
};

// One rank's side of the protocol. Every rank makes the same calls in the same order and every
// call ticks alike on every rank, so a call's ticks are numbered from a base all ranks compute
// alike: tick 1 = entered, tick 2 + k = step k done.
class PeerCursor {
public:
    PeerCursor(PeerBoard& board, int rank) : m_board(board), m_rank(rank) {}
    int rank() const { return m_rank; }
    int world() const { return m_board.world(); }
    int prev() const { return wrap(m_rank - 1, world()); }
    int next() const { return wrap(m_rank + 1, world()); }

    // Starts a call: its ticks count from here.
    void begin_call() { m_base = m_ticks; }
    // The pointer this rank's peers may read during the call; visible to whoever sees the next
    // tick (a release).
    void publish(const void* buffer) {
        m_board.m_slots[size_t(m_rank)].buffer.store(buffer, std::memory_order_relaxed);
    }
    // begin_call, publish, and tick 1.
    void enter(const void* buffer) {
        begin_call();
        publish(buffer);
        tick();
    }
    // The number within the call of the tick the next tick() makes.
    int64_t next_call_tick() const { return m_ticks - m_base + 1; }
    void tick() {
        ++m_ticks;
        auto& progress = m_board.m_slots[size_t(m_rank)].progress;
        progress.fetch_add(1, std::memory_order_release);
        progress.notify_all();
    }

    // Waits until `peer` has made tick `call_tick` of this call: a short spin (ranks are often
    // more threads than cores, so a waiter must soon yield the core to the rank it waits for),
    // then sleeps on the counter. Throws CommAborted once the group is aborted.
    void wait(int peer, int64_t call_tick) const {
        const int64_t target = m_base + call_tick;
        auto& progress = m_board.m_slots[size_t(peer)].progress;
        int64_t seen = progress.load(std::memory_order_acquire);
        for (int i = 0; seen < target && i < k_spin_polls; ++i) {
            cpu_pause();
            seen = progress.load(std::memory_order_acquire);
        }
        while (seen < target && !m_board.m_aborted.is_set()) {
            progress.wait(seen, std::memory_order_acquire);
            seen = progress.load(std::memory_order_acquire);
        }
        m_board.m_aborted.check();
    }
    // `peer`'s published pointer of this call; call after wait(peer, 1). Valid while this rank
    // reads it: a rank returns only after its readers are done.
    const void* published(int peer) const {
        return m_board.m_slots[size_t(peer)].buffer.load(std::memory_order_relaxed);
    }

    // This rank's ring schedule (ring_reduced_chunk, ring_gathered_chunk).
    int reduced_chunk(int k, int shift) const { return ring_reduced_chunk(m_rank, world(), k, shift); }
    int gathered_chunk(int k, int shift) const { return ring_gathered_chunk(m_rank, world(), k, shift); }

private:
    static constexpr int k_spin_polls = 256;
    static void cpu_pause() {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#elif defined(__aarch64__)
        asm volatile("yield");
#endif
    }

    PeerBoard& m_board;
    const int m_rank;
    int64_t m_ticks = 0;  // ticks this rank made (its counter less abort bumps)
    int64_t m_base = 0;   // m_ticks when the current call began
};

}  // namespace paralab::comm::detail
