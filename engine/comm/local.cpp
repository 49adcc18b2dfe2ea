// The local backend: ranks are threads of one process and read each other's buffers directly.
//
// Protocol. Every rank owns a monotonic progress counter. A call begins with "enter": the rank
// publishes the pointer its peers may read during this call, then ticks once; each step of the
// call ticks once more. Every rank makes the same calls in the same order, and every call ticks
// the same number of times on every rank, so a call's ticks are numbered from a base that all
// ranks compute alike (m_base): base + 1 = entered, base + 2 + k = step k done. Waits are
// neighbour to neighbour ("rank r-1 has done step k-1"), never a group barrier, and a rank whose
// buffer is read in a call returns only after its readers are done with it, so a published
// pointer stays valid for as long as anyone reads it.
//
// Ring (all_reduce = reduce-scatter then all-gather; chunk c = rows shard_of_dataset(count, c,
// N)): in reduce-scatter step k rank r adds chunk (r-k-1-s) of rank r-1's buffer into its own,
// and ends with the reduction of chunk (r+1-s) (s = 0 for all_reduce; s = 1 for reduce_scatter,
// which must end with chunk r). In all-gather step k rank r copies chunk (r-k-s) of rank r-1.
// Rank r+1 reads r's chunk only after r's step that wrote it, and (transitively around the
// ring) r overwrites a chunk only after r+1 has read the old one. The sum of chunk c is taken in
// rank order c, c+1, ..., c+N-1 (mod N) whatever the timing: bit-identical run to run.
//
// Segments. A large call runs the ring once per segment: segment s is piece s (k_piece_bytes at
// most) of every chunk, so that what a step reads from its neighbour was written moments ago and
// is still in that core's cache, as NCCL pipelines its ring in slices (docs/benchmarks.md,
// "Collectives", has the figures in pieces and in one piece). The chunks, and so the order of
// every sum and the bytes each rank reads, are those of the unsegmented ring. A group with more
// ranks than the machine has hardware threads runs whole chunks: there every extra step is a
// wait that may have to sleep until the neighbour is scheduled (16 MiB over 4 ranks on 2 cores:
// 4.1 ms whole, 4.9 ms in pieces).
//
// All-to-all: every rank publishes its send buffer and its send counts, then copies from every
// peer in rank order the rows that peer lays out for it (tick 2), and returns once every peer
// has ticked 2, that is, has finished reading its buffer.
//
// abort() sets a flag and bumps every counter far ahead, so that every wait ends; every wait
// then checks the flag and throws CommAborted.
//
// The counters, the waits, abort and the ring's schedule are peer_protocol.h's, shared with the
// local CUDA communicator (cuda_local.cpp).
#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include "engine/comm/communicator.h"
#include "engine/comm/peer_protocol.h"
#include "engine/data/loader.h"

namespace paralab::comm {
namespace {

using detail::combine;
using detail::divide;
using detail::offset_of;

// The most bytes of one chunk that one ring step moves (see "Segments" above).
constexpr int64_t k_piece_bytes = 256 * 1024;

}  // namespace

struct LocalGroup::State {
    State(int world_size, int64_t piece_bytes_)
        : world(world_size), piece_bytes(piece_bytes_), board(world_size) {}

    struct Message {
        int64_t count = 0;
        DType dtype = DType::f32;
        std::vector<std::byte> bytes;  // eager copy of the sender's data
    };
    using MailKey = std::tuple<int, int, int>;  // (src, dst, tag)

    void abort(const std::string& reason) {
        if (!board.abort(reason)) return;      // the first reason wins
        { std::lock_guard lock(mail_mutex); }  // a recv between its check and its sleep wakes
        mail_cv.notify_all();
    }

    void check_aborted() const { board.aborted().check(); }

    const int world;
    const int64_t piece_bytes;  // see "Segments": k_piece_bytes, or whole chunks when oversubscribed
    detail::PeerBoard board;

    std::mutex mail_mutex;
    std::condition_variable mail_cv;              // a message arrived, or abort
    std::map<MailKey, std::deque<Message>> mail;  // guarded by mail_mutex
};

namespace {

class LocalCommunicator final : public detail::RingCommunicator {
public:
    LocalCommunicator(LocalGroup::State& state, int rank)
        : RingCommunicator(rank, state.world), m_state(state), m_cursor(state.board, rank) {}

    std::string backend() const override { return "local"; }
    void abort(const std::string& reason) override { m_state.abort(reason); }

protected:
    // Non-roots copy from the root's buffer; the root returns once all have copied.
    void broadcast_impl(void* data, int64_t count, DType dtype, int root) override {
        m_state.check_aborted();
        if (world() == 1 || count == 0) return;
        const size_t bytes = static_cast<size_t>(count) * dtype_size(dtype);
        if (rank() == root) {
            enter(data);
            tick();
            for (int q = 0; q < world(); ++q)
                if (q != root) wait_for(q, 2);
        } else {
            const void* src = enter_and_read(data, root);
            std::memcpy(data, src, bytes);
            tick();
        }
    }

    // The root reduces every rank's buffer in rank order 0..N-1, in blocks that stay in cache;
    // the others return once the root is done reading them.
    void reduce_impl(void* data, int64_t count, DType dtype, ReduceOp op, int root) override {
        m_state.check_aborted();
        if (world() == 1 || count == 0) return;
        enter(data);
        if (rank() != root) {
            tick();
            wait_for(root, 2);
            return;
        }
        std::vector<const void*> inputs(static_cast<size_t>(world()));
        for (int q = 0; q < world(); ++q) inputs[static_cast<size_t>(q)] = read_buffer(q);
        dispatch_float(dtype, [&]<class T>() {
            constexpr int64_t block = 2048;
            T partial[block];
            T* out = static_cast<T*>(data);
            for (int64_t b = 0; b < count; b += block) {
                const int64_t m = std::min(block, count - b);
                std::memcpy(partial, static_cast<const T*>(inputs[0]) + b, size_t(m) * sizeof(T));
                for (int q = 1; q < world(); ++q)
                    combine(partial, static_cast<const T*>(inputs[size_t(q)]) + b, m, op);
                if (op == ReduceOp::average) divide(partial, m, world());
                std::memcpy(out + b, partial, size_t(m) * sizeof(T));
            }
        });
        tick();
    }

    void scatter_impl(const void* send, void* recv, const std::vector<int64_t>& counts, DType dtype,
                      int root) override {
        m_state.check_aborted();
        const size_t esize = dtype_size(dtype);
        const size_t mine = size_t(counts[size_t(rank())]) * esize;
        const size_t offset = size_t(offset_of(counts, rank())) * esize;
        if (rank() == root) {
            if (mine > 0 && recv != static_cast<const std::byte*>(send) + offset)
                std::memmove(recv, static_cast<const std::byte*>(send) + offset, mine);
            if (world() == 1) return;
            enter(send);
            tick();
            for (int q = 0; q < world(); ++q)
                if (q != root) wait_for(q, 2);
        } else {
            const void* src = enter_and_read(nullptr, root);
            if (mine > 0) std::memcpy(recv, static_cast<const std::byte*>(src) + offset, mine);
            tick();
        }
    }

    void gather_impl(const void* send, void* recv, const std::vector<int64_t>& counts, DType dtype,
                     int root) override {
        m_state.check_aborted();
        const size_t esize = dtype_size(dtype);
        if (rank() != root) {
            if (world() == 1) return;
            enter(send);
            tick();
            wait_for(root, 2);
            return;
        }
        enter(send);
        for (int q = 0; q < world(); ++q) {
            const size_t bytes = size_t(counts[size_t(q)]) * esize;
            std::byte* dst = static_cast<std::byte*>(recv) + size_t(offset_of(counts, q)) * esize;
            const void* src = q == rank() ? send : read_buffer(q);
            if (bytes > 0 && dst != src) std::memmove(dst, src, bytes);
        }
        tick();
    }

    void all_to_all_impl(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                         const std::vector<int64_t>& recv_counts, DType dtype) override {
        m_state.check_aborted();
        const size_t esize = dtype_size(dtype);
        const int me = rank();
        const auto copy_own = [&] {
            const size_t bytes = size_t(send_counts[size_t(me)]) * esize;
            if (bytes > 0)
                std::memcpy(static_cast<std::byte*>(recv) + size_t(offset_of(recv_counts, me)) * esize,
                            static_cast<const std::byte*>(send) + size_t(offset_of(send_counts, me)) * esize, bytes);
        };
        // A count that does not match its sender's is a caller's error on every rank that sees it:
        // the group is aborted, so that no peer waits for this rank's tick.
        const auto mismatch = [&](int q, int64_t n) {
            const std::string reason = "Communicator::all_to_all: rank " + std::to_string(q) + " sends " +
                                       std::to_string(n) + " elements to rank " + std::to_string(me) +
                                       ", which expects " + std::to_string(recv_counts[size_t(q)]);
            if (world() > 1) m_state.abort(reason);
            throw Error(reason);
        };
        if (send_counts[size_t(me)] != recv_counts[size_t(me)]) mismatch(me, send_counts[size_t(me)]);
        if (world() == 1) return copy_own();
        const Outgoing mine{send, send_counts.data()};
        enter(&mine);
        for (int q = 0; q < world(); ++q) {
            if (q == me) {
                copy_own();
                continue;
            }
            const auto* theirs = static_cast<const Outgoing*>(read_buffer(q));
            const int64_t n = theirs->counts[me];
            if (n != recv_counts[size_t(q)]) mismatch(q, n);
            if (n > 0)
                std::memcpy(static_cast<std::byte*>(recv) + size_t(offset_of(recv_counts, q)) * esize,
                            static_cast<const std::byte*>(theirs->send) + size_t(offset_of(theirs->counts, me)) * esize,
                            size_t(n) * esize);
        }
        tick();
        for (int q = 0; q < world(); ++q)
            if (q != me) wait_for(q, 2);  // q is done reading our buffer
    }

    void send_impl(const void* data, int64_t count, DType dtype, int peer, int tag) override {
        m_state.check_aborted();
        LocalGroup::State::Message message;
        message.count = count;
        message.dtype = dtype;
        message.bytes.resize(size_t(count) * dtype_size(dtype));
        if (!message.bytes.empty()) std::memcpy(message.bytes.data(), data, message.bytes.size());
        {
            std::lock_guard lock(m_state.mail_mutex);
            m_state.mail[{rank(), peer, tag}].push_back(std::move(message));
        }
        m_state.mail_cv.notify_all();
    }

    void recv_impl(void* data, int64_t count, DType dtype, int peer, int tag) override {
        m_state.check_aborted();
        const LocalGroup::State::MailKey key{peer, rank(), tag};
        LocalGroup::State::Message message;
        {
            std::unique_lock lock(m_state.mail_mutex);
            m_state.mail_cv.wait(lock, [&] {
                if (m_state.board.aborted().is_set()) return true;
                auto it = m_state.mail.find(key);
                return it != m_state.mail.end() && !it->second.empty();
            });
            if (!m_state.board.aborted().is_set()) {
                auto it = m_state.mail.find(key);
                const auto& front = it->second.front();
                if (front.count != count || front.dtype != dtype)
                    throw Error("Communicator::recv: rank " + std::to_string(rank()) + " expects " +
                                std::to_string(count) + " " + std::string(dtype_name(dtype)) +
                                " from rank " + std::to_string(peer) + " (tag " +
                                std::to_string(tag) + "), but the message holds " +
                                std::to_string(front.count) + " " +
                                std::string(dtype_name(front.dtype)));
                message = std::move(it->second.front());
                it->second.pop_front();
                if (it->second.empty()) m_state.mail.erase(it);
            }
        }
        m_state.check_aborted();
        if (!message.bytes.empty()) std::memcpy(data, message.bytes.data(), message.bytes.size());
    }

    void barrier_impl() override {
        m_state.check_aborted();
        if (world() == 1) return;
        enter(nullptr);
        for (int q = 0; q < world(); ++q)
            if (q != rank()) wait_for(q, 1);
    }

private:
    // What an all-to-all publishes: the send buffer and its per-rank counts, valid until every
    // peer has read them.
    struct Outgoing {
        const void* send;
        const int64_t* counts;
    };

    int prev_rank() const { return m_cursor.prev(); }
    int next_rank() const { return m_cursor.next(); }
    void enter(const void* buffer) { m_cursor.enter(buffer); }
    void tick() { m_cursor.tick(); }
    void wait_for(int peer, int64_t call_tick) { m_cursor.wait(peer, call_tick); }

    // `peer`'s published pointer of this call (valid: peer returns only after we are done).
    const void* read_buffer(int peer) {
        wait_for(peer, 1);
        return m_cursor.published(peer);
    }

    const void* enter_and_read(const void* own, int peer) {
        enter(own);
        return read_buffer(peer);
    }

    // The ring collectives: on each segment in turn, the reduce-scatter steps (`reduce`), then
    // the all-gather steps (`gather`). An all-reduce's reduce-scatter ends with chunk r+1, where
    // its all-gather starts (shift 0); reduce_scatter alone must end with chunk r, and
    // all_gather alone starts from it (shift 1).
    void ring(void* data, int64_t count, DType dtype, ReduceOp op, bool reduce, bool gather) override {
        m_state.check_aborted();
        const int n = world();
        if (n == 1 || count == 0) return;
        const int shift = reduce && gather ? 0 : 1;
        const int64_t steps = (n - 1) * ((reduce ? 1 : 0) + (gather ? 1 : 0));  // per segment
        dispatch_float(dtype, [&]<class T>() {
            T* own = static_cast<T*>(data);
            const T* prev = static_cast<const T*>(enter_and_read(own, prev_rank()));
            const Segments seg(count, n, sizeof(T), m_state.piece_bytes);
            for (int64_t s = 0; s < seg.segments; ++s) {
                int64_t first = steps * s;
                if (reduce) {
                    ring_reduce_scatter(own, prev, seg, s, first, op, shift);
                    first += n - 1;
                }
                if (gather) ring_all_gather(own, prev, seg, s, first, shift);
            }
            wait_for(next_rank(), 1 + steps * seg.segments);  // r+1 reads our buffer until its last step
        });
    }

    // The ring's chunks (shard_of_dataset of the whole buffer) cut into pieces of at most
    // `piece` elements; segment s is piece s of every chunk.
    struct Segments {
        Segments(int64_t count_, int world_, size_t element_bytes, int64_t piece_bytes)
            : count(count_), world(world_),
              piece(std::max<int64_t>(1, piece_bytes / static_cast<int64_t>(element_bytes))) {
            const int64_t largest = data::shard_of_dataset(count, 0, world).count;  // chunk 0 is never smaller
            segments = std::max<int64_t>(1, (largest + piece - 1) / piece);
        }
        // Piece s of chunk c (empty when the chunk is shorter).
        data::ShardRange of(int c, int64_t s) const {
            const auto chunk = data::shard_of_dataset(count, c, world);
            const int64_t begin = std::min(chunk.count, s * piece);
            return {chunk.offset + begin, std::min(chunk.count, begin + piece) - begin};
        }
        int64_t count;
        int world;
        int64_t piece;
        int64_t segments = 1;
    };

    // Steps first_step .. first_step + N-2, on segment s: in step k rank r adds piece s of chunk
    // (r-k-1-shift) of rank r-1 into its own, and ends with piece s of chunk (r+1-shift) reduced.
    template <class T>
    void ring_reduce_scatter(T* own, const T* prev, const Segments& seg, int64_t s, int64_t first_step,
                             ReduceOp op, int shift) {
        const int n = world();
        for (int k = 0; k <= n - 2; ++k) {
            wait_for(prev_rank(), 1 + first_step + k);
            const auto piece = seg.of(m_cursor.reduced_chunk(k, shift), s);
            combine(own + piece.offset, prev + piece.offset, piece.count, op);
            // The finished piece is divided before anyone can read it: deterministic average.
            if (k == n - 2 && op == ReduceOp::average) divide(own + piece.offset, piece.count, n);
            tick();
        }
    }

    // Steps first_step .. first_step + N-2, on segment s: rank r copies piece s of chunk
    // (r-k-shift) of rank r-1.
    template <class T>
    void ring_all_gather(T* own, const T* prev, const Segments& seg, int64_t s, int64_t first_step, int shift) {
        const int n = world();
        for (int k = 0; k <= n - 2; ++k) {
            wait_for(prev_rank(), 1 + first_step + k);
            const auto piece = seg.of(m_cursor.gathered_chunk(k, shift), s);
            if (piece.count > 0)
                std::memcpy(own + piece.offset, prev + piece.offset, size_t(piece.count) * sizeof(T));
            tick();
        }
    }

    LocalGroup::State& m_state;
    detail::PeerCursor m_cursor;
};

}  // namespace

LocalGroup::LocalGroup(int world, int64_t piece_bytes) {
    if (world < 1) throw Error("LocalGroup: world must be >= 1, got " + std::to_string(world));
    if (piece_bytes < 0)
        throw Error("LocalGroup: piece_bytes must be >= 0 (0: automatic), got " + std::to_string(piece_bytes));
    if (piece_bytes == 0)
        piece_bytes = static_cast<unsigned>(world) <= std::max(1u, std::thread::hardware_concurrency())
                          ? k_piece_bytes
                          : std::numeric_limits<int64_t>::max();
    m_state = std::make_unique<State>(world, piece_bytes);
    m_ranks.reserve(size_t(world));
    for (int r = 0; r < world; ++r)
        m_ranks.push_back(std::make_unique<LocalCommunicator>(*m_state, r));
}

LocalGroup::~LocalGroup() = default;

std::unique_ptr<Group> LocalGroup::split() {
    return std::make_unique<LocalGroup>(world(), m_state->piece_bytes);
}

int LocalGroup::world() const {
    return m_state->world;
}

Communicator& LocalGroup::rank(int r) {
    return rank_of(m_ranks, r, "LocalGroup");
}

void LocalGroup::abort(const std::string& reason) {
    m_state->abort(reason);
}

}  // namespace paralab::comm
