// Replaying a fixed sequence of GPU work as a CUDA graph (kernels/gpu/graph.h): a recurrent
// layer's time loop is ~2 kernels a step, each costing a launch (microseconds) far longer than
// the kernel itself at small sizes; as a graph the whole loop is one launch. Free of CUDA types.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace paralab::gpu {

// Whether GraphReplay captures at all: on unless the environment sets PARALAB_CUDA_GRAPHS=0
// (read once); set_graphs_enabled overrides it (tests compare the two paths).
bool graphs_enabled();
void set_graphs_enabled(bool on);

// Every capture and graph launch of the process so far (for tests and reports): GraphReplay's,
// and the whole steps' (engine/strategy/step_graph.h).
struct GraphCounts {
    int64_t captures = 0, launches = 0;
    int64_t step_recordings = 0, step_replays = 0;
};
GraphCounts graph_counts();
void count_step_graph(bool recorded);  // a step graph recorded (true) or replayed (false)

// While one lives on a thread, GraphReplay::run on that thread queues its work as it is: a
// recording that encloses it (a whole step's) takes that work in.
class RecordingEnclosed {
public:
    RecordingEnclosed();
    ~RecordingEnclosed();
    RecordingEnclosed(const RecordingEnclosed&) = delete;
    RecordingEnclosed& operator=(const RecordingEnclosed&) = delete;
};

// One sequence of work, recorded as a graph for each of the last few keys it ran with and
// replayed while the key recurs. Used by one thread at a time (the layer's rank thread).
class GraphReplay {
public:
    GraphReplay() = default;
    ~GraphReplay();
    GraphReplay(GraphReplay&& other) noexcept;
    GraphReplay& operator=(GraphReplay&& other) noexcept;
    GraphReplay(const GraphReplay&) = delete;
    GraphReplay& operator=(const GraphReplay&) = delete;

    // Queues `record`'s work on `stream`. `record` may only queue work on `stream` (kernels,
    // library calls, copies between device buffers): no host waits, no allocations, nothing on
    // other streams. `key` lists everything that work depends on and that may change between
    // calls (pointers, sizes, scalars): with a key recorded before, its graph is launched;
    // with a new one, `record` is captured again and kept beside the others (up to
    // kMaxGraphs; then the least recently used graph is updated in place to it, or remade).
    // Several keys recur because the activations of consecutive steps may take turns among a
    // few blocks of the caching allocator. Graphs off, or a capture the runtime refused: `record` runs
    // eagerly, and after a refusal this object stays eager (capture is only an optimisation).
    void run(void* stream, const std::vector<uint64_t>& key, const std::function<void()>& record);

    // How many times `record` was captured (for tests: a recurring key captures once).
    int captures() const { return m_captures; }

    static constexpr size_t kMaxGraphs = 8;

private:
    struct Graph {
        std::vector<uint64_t> key;
        void* exec = nullptr;  // cudaGraphExec_t
        uint64_t last_used = 0;
    };
    void release();

    std::vector<Graph> m_graphs;
    uint64_t m_clock = 0;
    bool m_eager = false;  // a capture failed: never try again
    int m_captures = 0;
};

// The work `record` queues on `stream`, captured as a graph (a cudaGraph_t, for the caller to
// instantiate and destroy). When `record` throws, the stream leaves capture mode and the
// exception goes on; a capture the runtime invalidated throws GpuError.
void* capture_graph(void* stream, const std::function<void()>& record);

// A key word for a pointer.
inline uint64_t key_of(const void* p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); }

}  // namespace paralab::gpu
