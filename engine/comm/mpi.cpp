// The MPI backend (mpi.h): each Communicator call is one MPI call (or a few, for counts beyond
// an int) on a private duplicate of MPI_COMM_WORLD whose error handler returns codes, and every
// code is checked (PARALAB_MPI_CHECK: the call, file and line).
//
// In-place mappings (communicator.h's layout: chunk r = rows shard_of_dataset(count, r, N)):
//   all_reduce      MPI_Allreduce(MPI_IN_PLACE); average = sum, then every rank divides alike
//   reduce_scatter  MPI_Reduce_scatter(MPI_IN_PLACE, recvcounts = chunk sizes) leaves rank r's
//                   reduced chunk at the *start* of data; it is moved to the chunk's offset
//   all_gather      MPI_Allgatherv(MPI_IN_PLACE): rank r's contribution is read at its offset
//   broadcast       MPI_Bcast; reduce: MPI_Reduce(MPI_IN_PLACE at root)
//   scatter/gather  MPI_Scatterv/Gatherv with MPI_IN_PLACE at root (MPI forbids aliased buffers;
//                   the root moves its own rows itself)
//   all_to_all      MPI_Alltoallv, counts and displacements in rank order (send and recv are
//                   disjoint: communicator.cpp checks)
//   send            MPI_Isend from a copy (communicator.h's eager send: a large MPI_Send would
//                   wait for the receiver); copies are freed once their requests complete
//   recv            MPI_Probe, size check (a mismatch names both and leaves the message), MPI_Recv
#define OMPI_SKIP_MPICXX 1  // the C API only: no deprecated C++ bindings
#define MPICH_SKIP_MPICXX 1
#include "engine/comm/mpi.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/data/loader.h"

#define PARALAB_MPI_CHECK(call)                                                           \
    do {                                                                                  \
        const int paralab_mpi_rc_ = (call);                                               \
        if (paralab_mpi_rc_ != MPI_SUCCESS)                                               \
            ::paralab::comm::throw_mpi_error(#call, paralab_mpi_rc_, __FILE__, __LINE__); \
    } while (0)

namespace paralab::comm {
namespace {

[[noreturn]] void throw_mpi_error(const char* call, int code, const char* file, int line) {
    char text[MPI_MAX_ERROR_STRING] = {};
    int length = 0;
    if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) length = 0;
    throw Error(std::string("MPI call `") + call +
                "` failed: " + std::string(text, size_t(length)) + " (error " +
                std::to_string(code) + ") at " + file + ":" + std::to_string(line));
}

// Elements per MPI call for the calls that split a count beyond an int.
constexpr int64_t k_max_piece = int64_t{1} << 30;

MPI_Datatype mpi_type(DType dtype) {
    return dtype == DType::f64 ? MPI_DOUBLE : MPI_FLOAT;  // checked f32 or f64 by the base
}

MPI_Op mpi_op(ReduceOp op) {
    return op == ReduceOp::max ? MPI_MAX : MPI_SUM;  // average: a sum, divided afterwards
}

std::byte* at(void* data, int64_t elements, DType dtype) {
    return static_cast<std::byte*>(data) + size_t(elements) * dtype_size(dtype);
}

// fn(offset, n) over pieces of at most k_max_piece elements; once with n = 0 for count 0.
template <class Fn>
void for_each_piece(int64_t count, Fn&& fn) {
    int64_t offset = 0;
    do {
        const int64_t n = std::min(count - offset, k_max_piece);
        fn(offset, int(n));
        offset += n;
    } while (offset < count);
}

void divide_by_world(void* data, int64_t count, DType dtype, int world) {
    dispatch_float(dtype, [&]<class T>() {
        T* x = static_cast<T*>(data);
        const T w = static_cast<T>(world);
        for (int64_t i = 0; i < count; ++i) x[i] /= w;
    });
}

// Per-rank counts and offsets as MPI's ints; `total` elements in all.
struct IntLayout {
    std::vector<int> counts, offsets;
};

IntLayout int_layout(const char* op, const std::vector<int64_t>& counts, int64_t total) {
    if (total > INT_MAX)
        throw Error(std::string("Communicator::") + op + " (mpi): " + std::to_string(total) +
                    " elements in all; MPI's per-rank counts and offsets are ints (at most " +
                    std::to_string(INT_MAX) + ")");
    IntLayout layout;
    int offset = 0;
    for (int64_t c : counts) {
        layout.counts.push_back(int(c));
        layout.offsets.push_back(offset);
        offset += int(c);
    }
    return layout;
}

IntLayout shard_layout(const char* op, int64_t count, int world) {
    std::vector<int64_t> counts;
    for (int r = 0; r < world; ++r) counts.push_back(data::shard_of_dataset(count, r, world).count);
    return int_layout(op, counts, count);
}

class MpiCommunicator final : public Communicator {
public:
    // Takes ownership of `comm` (a duplicate of MPI_COMM_WORLD).
    MpiCommunicator(MPI_Comm comm, int rank, int world, int tag_ub)
        : Communicator(rank, world), m_comm(comm), m_tag_ub(tag_ub) {}

    ~MpiCommunicator() override {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (finalized) return;
        // Sends nobody received yet complete in the background; their copies must outlive them.
        for (auto& pending : m_pending) {
            for (MPI_Request& request : pending.requests)
                if (request != MPI_REQUEST_NULL) MPI_Request_free(&request);
            orphaned_send_buffers().push_back(std::move(pending.bytes));
        }
        MPI_Comm_free(&m_comm);
    }

    std::string backend() const override { return "mpi"; }

    // MPI cannot wake a peer that is blocked in a call, so the job ends as a whole: mpirun
    // kills every rank.
    void abort(const std::string& reason) override {
        if (m_aborted.exchange(true)) return;
        std::fprintf(stderr, "paralab: rank %d of %d aborts the MPI job: %s\n", rank(), world(),
                     reason.c_str());
        std::fflush(stderr);
        MPI_Abort(m_comm, 1);
    }

protected:
    void all_reduce_impl(void* data, int64_t count, DType dtype, ReduceOp op) override {
        begin_call();
        if (world() == 1 || count == 0) return;
        for_each_piece(count, [&](int64_t offset, int n) {
            PARALAB_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, at(data, offset, dtype), n,
                                            mpi_type(dtype), mpi_op(op), m_comm));
        });
        if (op == ReduceOp::average) divide_by_world(data, count, dtype, world());
    }

    void reduce_scatter_impl(void* data, int64_t count, DType dtype, ReduceOp op) override {
        begin_call();
        if (world() == 1 || count == 0) return;
        const IntLayout layout = shard_layout("reduce_scatter", count, world());
        PARALAB_MPI_CHECK(MPI_Reduce_scatter(MPI_IN_PLACE, data, layout.counts.data(),
                                             mpi_type(dtype), mpi_op(op), m_comm));
        const auto shard = data::shard_of_dataset(count, rank(), world());
        if (shard.count > 0 && shard.offset > 0)
            std::memmove(at(data, shard.offset, dtype), data,
                         size_t(shard.count) * dtype_size(dtype));
        if (op == ReduceOp::average)
            divide_by_world(at(data, shard.offset, dtype), shard.count, dtype, world());
    }

    void all_gather_impl(void* data, int64_t count, DType dtype) override {
        begin_call();
        if (world() == 1 || count == 0) return;
        const IntLayout layout = shard_layout("all_gather", count, world());
        PARALAB_MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data,
                                         layout.counts.data(), layout.offsets.data(),
                                         mpi_type(dtype), m_comm));
    }

    void broadcast_impl(void* data, int64_t count, DType dtype, int root) override {
        begin_call();
        if (world() == 1 || count == 0) return;
        for_each_piece(count, [&](int64_t offset, int n) {
            PARALAB_MPI_CHECK(MPI_Bcast(at(data, offset, dtype), n, mpi_type(dtype), root, m_comm));
        });
    }

    void reduce_impl(void* data, int64_t count, DType dtype, ReduceOp op, int root) override {
        begin_call();
        if (world() == 1 || count == 0) return;
        const bool is_root = rank() == root;
        for_each_piece(count, [&](int64_t offset, int n) {
            void* piece = at(data, offset, dtype);
            PARALAB_MPI_CHECK(MPI_Reduce(is_root ? MPI_IN_PLACE : piece, is_root ? piece : nullptr,
                                         n, mpi_type(dtype), mpi_op(op), root, m_comm));
        });
        if (is_root && op == ReduceOp::average) divide_by_world(data, count, dtype, world());
    }

    void scatter_impl(const void* send, void* recv, const std::vector<int64_t>& counts, DType dtype,
                      int root) override {
        begin_call();
        int64_t total = 0;
        for (int64_t c : counts) total += c;
        const IntLayout layout = int_layout("scatter", counts, total);
        const int mine = layout.counts[size_t(rank())];
        if (rank() == root) {
            const std::byte* own = static_cast<const std::byte*>(send) +
                                   size_t(layout.offsets[size_t(root)]) * dtype_size(dtype);
            if (mine > 0 && recv != own) std::memmove(recv, own, size_t(mine) * dtype_size(dtype));
            if (world() == 1) return;
            PARALAB_MPI_CHECK(MPI_Scatterv(send, layout.counts.data(), layout.offsets.data(),
                                           mpi_type(dtype), MPI_IN_PLACE, 0, mpi_type(dtype), root,
                                           m_comm));
        } else {
            PARALAB_MPI_CHECK(MPI_Scatterv(nullptr, layout.counts.data(), layout.offsets.data(),
                                           mpi_type(dtype), recv, mine, mpi_type(dtype), root,
                                           m_comm));
        }
    }

    void gather_impl(const void* send, void* recv, const std::vector<int64_t>& counts, DType dtype,
                     int root) override {
        begin_call();
        int64_t total = 0;
        for (int64_t c : counts) total += c;
        const IntLayout layout = int_layout("gather", counts, total);
        const int mine = layout.counts[size_t(rank())];
        if (rank() == root) {
            std::byte* own = at(recv, layout.offsets[size_t(root)], dtype);
            if (mine > 0 && send != own) std::memmove(own, send, size_t(mine) * dtype_size(dtype));
            if (world() == 1) return;
            PARALAB_MPI_CHECK(MPI_Gatherv(MPI_IN_PLACE, 0, mpi_type(dtype), recv,
                                          layout.counts.data(), layout.offsets.data(),
                                          mpi_type(dtype), root, m_comm));
        } else {
            PARALAB_MPI_CHECK(MPI_Gatherv(send, mine, mpi_type(dtype), nullptr,
                                          layout.counts.data(), layout.offsets.data(),
                                          mpi_type(dtype), root, m_comm));
        }
    }

    void all_to_all_impl(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                         const std::vector<int64_t>& recv_counts, DType dtype) override {
        begin_call();
        int64_t sent = 0, received = 0;
        for (int64_t c : send_counts) sent += c;
        for (int64_t c : recv_counts) received += c;
        const IntLayout out = int_layout("all_to_all", send_counts, sent);
        const IntLayout in = int_layout("all_to_all", recv_counts, received);
        PARALAB_MPI_CHECK(MPI_Alltoallv(send, out.counts.data(), out.offsets.data(), mpi_type(dtype), recv,
                                        in.counts.data(), in.offsets.data(), mpi_type(dtype), m_comm));
    }

    void send_impl(const void* data, int64_t count, DType dtype, int peer, int tag) override {
        begin_call();
        check_tag("send", tag);
        PendingSend pending;
        pending.bytes.resize(size_t(count) * dtype_size(dtype));
        if (!pending.bytes.empty()) std::memcpy(pending.bytes.data(), data, pending.bytes.size());
        for_each_piece(count, [&](int64_t offset, int n) {
            MPI_Request request = MPI_REQUEST_NULL;
            PARALAB_MPI_CHECK(MPI_Isend(at(pending.bytes.data(), offset, dtype), n, mpi_type(dtype),
                                        peer, tag, m_comm, &request));
            pending.requests.push_back(request);
        });
        m_pending.push_back(std::move(pending));  // the vector's heap block does not move
    }

    void recv_impl(void* data, int64_t count, DType dtype, int peer, int tag) override {
        begin_call();
        check_tag("recv", tag);
        MPI_Status status;
        PARALAB_MPI_CHECK(MPI_Probe(peer, tag, m_comm, &status));
        int bytes = 0;
        PARALAB_MPI_CHECK(MPI_Get_count(&status, MPI_BYTE, &bytes));
        const int64_t first_piece = std::min(count, k_max_piece);
        if (int64_t(bytes) != first_piece * int64_t(dtype_size(dtype)))
            throw Error("Communicator::recv: rank " + std::to_string(rank()) + " expects " +
                        std::to_string(count) + " " + std::string(dtype_name(dtype)) +
                        " from rank " + std::to_string(peer) + " (tag " + std::to_string(tag) +
                        "), but the message holds " + std::to_string(bytes) + " bytes");
        for_each_piece(count, [&](int64_t offset, int n) {
            PARALAB_MPI_CHECK(MPI_Recv(at(data, offset, dtype), n, mpi_type(dtype), peer, tag,
                                       m_comm, MPI_STATUS_IGNORE));
        });
    }

    void barrier_impl() override {
        begin_call();
        if (world() == 1) return;
        PARALAB_MPI_CHECK(MPI_Barrier(m_comm));
    }

private:
    struct PendingSend {
        std::vector<MPI_Request> requests;
        std::vector<std::byte> bytes;  // the eager copy the requests read
    };

    // Copies of sends still in flight when their communicator was destroyed; kept to the end.
    static std::vector<std::vector<std::byte>>& orphaned_send_buffers() {
        static auto* buffers = new std::vector<std::vector<std::byte>>();  // never freed
        return *buffers;
    }

    // Every call: refuses to start after abort(), and frees the copies of sends that completed
    // (a rank that sends once and then only joins collectives still gets its memory back).
    void begin_call() {
        if (m_aborted.load()) throw CommAborted("communicator aborted (MPI_Abort was called)");
        if (!m_pending.empty()) reap_completed_sends();
    }

    void check_tag(const char* op, int tag) const {
        if (tag < 0 || tag > m_tag_ub)
            throw Error(std::string("Communicator::") + op + ": tag " + std::to_string(tag) +
                        " is outside MPI's range 0.." + std::to_string(m_tag_ub));
    }

    void reap_completed_sends() {
        std::erase_if(m_pending, [](PendingSend& pending) {
            int done = 0;
            PARALAB_MPI_CHECK(MPI_Testall(int(pending.requests.size()), pending.requests.data(),
                                          &done, MPI_STATUSES_IGNORE));
            return done != 0;
        });
    }

    MPI_Comm m_comm;
    const int m_tag_ub;
    std::vector<PendingSend> m_pending;  // this rank's thread only
    std::atomic<bool> m_aborted{false};
};

// A duplicate of MPI_COMM_WORLD whose errors are returned (and thrown), not fatal.
std::unique_ptr<Communicator> make_communicator(int rank, int world, int tag_ub) {
    MPI_Comm comm = MPI_COMM_NULL;
    PARALAB_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
    PARALAB_MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
    return std::make_unique<MpiCommunicator>(comm, rank, world, tag_ub);
}

const char* thread_level_name(int level) {
    switch (level) {
        case MPI_THREAD_SINGLE:
            return "MPI_THREAD_SINGLE";
        case MPI_THREAD_FUNNELED:
            return "MPI_THREAD_FUNNELED";
        case MPI_THREAD_SERIALIZED:
            return "MPI_THREAD_SERIALIZED";
        case MPI_THREAD_MULTIPLE:
            return "MPI_THREAD_MULTIPLE";
        default:
            return "an unknown level";
    }
}

}  // namespace

struct MpiGroup::State {
    bool initialised_here = false;  // this process's MPI_Init_thread was ours: we finalise
    int rank = 0, size = 1, tag_ub = 32767;
    std::unique_ptr<Communicator> communicator;
    MPI_Comm messages = MPI_COMM_NULL;  // the run's own messages (all_gather_strings, bytes)
};

bool MpiGroup::available() {
    return true;
}

MpiGroup& MpiGroup::world() {
    static MpiGroup group;  // destroyed at exit, which finalises MPI
    return group;
}

MpiGroup::MpiGroup() : m_state(std::make_unique<State>()) {
    int initialised = 0, finalised = 0;
    PARALAB_MPI_CHECK(MPI_Finalized(&finalised));
    if (finalised) throw Error("MpiGroup::world: MPI was already finalised in this process");
    PARALAB_MPI_CHECK(MPI_Initialized(&initialised));
    int provided = MPI_THREAD_SINGLE;
    if (!initialised) {
        PARALAB_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
        m_state->initialised_here = true;
    } else {
        PARALAB_MPI_CHECK(MPI_Query_thread(&provided));
    }
    if (provided < MPI_THREAD_MULTIPLE) {
        if (m_state->initialised_here) MPI_Finalize();
        throw Error(std::string("MpiGroup::world: this MPI provides ") +
                    thread_level_name(provided) +
                    ", and ParaLab needs MPI_THREAD_MULTIPLE (a rank communicates from more than "
                    "one thread); use an Open MPI built with thread support (Debian's is)");
    }
    PARALAB_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &m_state->rank));
    PARALAB_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &m_state->size));
    int* tag_ub = nullptr;
    int has_tag_ub = 0;
    PARALAB_MPI_CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &has_tag_ub));
    if (has_tag_ub && tag_ub != nullptr) m_state->tag_ub = *tag_ub;
    m_state->communicator = make_communicator(m_state->rank, m_state->size, m_state->tag_ub);
    PARALAB_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &m_state->messages));
    PARALAB_MPI_CHECK(MPI_Comm_set_errhandler(m_state->messages, MPI_ERRORS_RETURN));
}

MpiGroup::~MpiGroup() {
    m_state->communicator.reset();
    int finalised = 0;
    MPI_Finalized(&finalised);
    if (!finalised && m_state->messages != MPI_COMM_NULL) MPI_Comm_free(&m_state->messages);
    if (m_state->initialised_here && !finalised) MPI_Finalize();
}

int MpiGroup::rank() const {
    return m_state->rank;
}

int MpiGroup::size() const {
    return m_state->size;
}

Communicator& MpiGroup::communicator() {
    return *m_state->communicator;
}

std::unique_ptr<Communicator> MpiGroup::split_communicator() {
    return make_communicator(m_state->rank, m_state->size, m_state->tag_ub);
}

// ---- MpiChannel ----------------------------------------------------------------------------

struct MpiChannel::State {
    MPI_Comm comm = MPI_COMM_NULL;
    int tag_ub = 32767;
    std::mutex mutex;  // the sends in flight
    struct Pending {
        MPI_Request request = MPI_REQUEST_NULL;
        std::vector<std::byte> bytes;
    };
    std::vector<std::unique_ptr<Pending>> pending;  // guarded by mutex

    void reap_locked() {
        std::erase_if(pending, [](std::unique_ptr<Pending>& p) {
            int done = 0;
            PARALAB_MPI_CHECK(MPI_Test(&p->request, &done, MPI_STATUS_IGNORE));
            return done != 0;
        });
    }
};

MpiChannel::MpiChannel() : m_state(std::make_unique<State>()) {
    MpiGroup& world = MpiGroup::world();  // MPI initialised
    (void)world;
    PARALAB_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &m_state->comm));
    PARALAB_MPI_CHECK(MPI_Comm_set_errhandler(m_state->comm, MPI_ERRORS_RETURN));
    int* tag_ub = nullptr;
    int has = 0;
    PARALAB_MPI_CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &has));
    if (has && tag_ub) m_state->tag_ub = *tag_ub;
}

MpiChannel::~MpiChannel() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    std::lock_guard lock(m_state->mutex);
    for (auto& p : m_state->pending) {
        if (p->request != MPI_REQUEST_NULL) MPI_Request_free(&p->request);
        p.release();  // its bytes must outlive the send: kept to the end
    }
    MPI_Comm_free(&m_state->comm);
}

int MpiChannel::tag_ub() const { return m_state->tag_ub; }

void MpiChannel::send(int process, int tag, const void* data, size_t bytes) {
    if (bytes > size_t(INT_MAX)) throw Error("MpiChannel::send: message of " + std::to_string(bytes) + " bytes is too long");
    auto p = std::make_unique<State::Pending>();
    p->bytes.resize(bytes);
    if (bytes) std::memcpy(p->bytes.data(), data, bytes);
    std::lock_guard lock(m_state->mutex);
    m_state->reap_locked();
    PARALAB_MPI_CHECK(MPI_Isend(p->bytes.data(), int(bytes), MPI_BYTE, process, tag, m_state->comm, &p->request));
    m_state->pending.push_back(std::move(p));
}

void MpiChannel::recv(int process, int tag, void* data, size_t bytes) {
    MPI_Status status;
    PARALAB_MPI_CHECK(MPI_Probe(process, tag, m_state->comm, &status));
    int got = 0;
    PARALAB_MPI_CHECK(MPI_Get_count(&status, MPI_BYTE, &got));
    if (size_t(got) != bytes)
        throw Error("MpiChannel::recv: expected " + std::to_string(bytes) + " bytes from process " +
                    std::to_string(process) + " (tag " + std::to_string(tag) + "), but the message holds " +
                    std::to_string(got));
    PARALAB_MPI_CHECK(MPI_Recv(data, got, MPI_BYTE, process, tag, m_state->comm, MPI_STATUS_IGNORE));
}

std::vector<std::string> MpiGroup::all_gather_strings(const std::string& mine) {
    const int n = m_state->size;
    if (mine.size() > size_t(INT_MAX)) throw Error("MpiGroup::all_gather_strings: string too long");
    int length = int(mine.size());
    std::vector<int> lengths(static_cast<size_t>(n)), offsets(static_cast<size_t>(n));
    PARALAB_MPI_CHECK(MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, m_state->messages));
    int64_t total = 0;
    for (int r = 0; r < n; ++r) {
        offsets[size_t(r)] = int(total);
        total += lengths[size_t(r)];
    }
    if (total > INT_MAX) throw Error("MpiGroup::all_gather_strings: strings too long in all");
    std::string all(size_t(total), '\0');
    PARALAB_MPI_CHECK(MPI_Allgatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(),
                                     offsets.data(), MPI_CHAR, m_state->messages));
    std::vector<std::string> out;
    for (int r = 0; r < n; ++r)
        out.push_back(all.substr(size_t(offsets[size_t(r)]), size_t(lengths[size_t(r)])));
    return out;
}

void MpiGroup::send_bytes(int dest, int tag, const std::string& bytes) {
    if (bytes.size() > size_t(INT_MAX)) throw Error("MpiGroup::send_bytes: message too long");
    PARALAB_MPI_CHECK(MPI_Send(bytes.data(), int(bytes.size()), MPI_CHAR, dest, tag, m_state->messages));
}

bool MpiGroup::try_recv_bytes(int tag, int& source, std::string& bytes) {
    int arrived = 0;
    MPI_Status status;
    PARALAB_MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, tag, m_state->messages, &arrived, &status));
    if (!arrived) return false;
    int length = 0;
    PARALAB_MPI_CHECK(MPI_Get_count(&status, MPI_CHAR, &length));
    bytes.assign(size_t(length), '\0');
    source = status.MPI_SOURCE;
    PARALAB_MPI_CHECK(MPI_Recv(bytes.data(), length, MPI_CHAR, source, tag, m_state->messages,
                               MPI_STATUS_IGNORE));
    return true;
}

void MpiGroup::abort_job(const std::string& reason) {
    std::fprintf(stderr, "paralab: rank %d of %d ends the MPI job: %s\n", m_state->rank,
                 m_state->size, reason.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::_Exit(1);  // MPI_Abort does not return; if it ever did, the job must still end
}

}  // namespace paralab::comm
