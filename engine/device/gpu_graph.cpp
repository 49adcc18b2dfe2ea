#include "engine/device/gpu_graph.h"

#include <kernels/gpu/graph.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace paralab::gpu {

namespace kg = kernels::gpu;

namespace {

std::atomic<int>& graphs_setting() {
    static std::atomic<int> setting{[] {
        const char* v = std::getenv("PARALAB_CUDA_GRAPHS");
        return v && std::strcmp(v, "0") == 0 ? 0 : 1;
    }()};
    return setting;
}

std::atomic<int64_t> g_captures{0}, g_launches{0}, g_step_recordings{0}, g_step_replays{0};
thread_local int t_enclosed = 0;  // RecordingEnclosed objects alive on this thread

}  // namespace

bool graphs_enabled() { return graphs_setting().load() != 0; }
void set_graphs_enabled(bool on) { graphs_setting().store(on ? 1 : 0); }

GraphCounts graph_counts() {
    return {g_captures.load(), g_launches.load(), g_step_recordings.load(), g_step_replays.load()};
}

void count_step_graph(bool recorded) { ++(recorded ? g_step_recordings : g_step_replays); }

RecordingEnclosed::RecordingEnclosed() { ++t_enclosed; }
RecordingEnclosed::~RecordingEnclosed() { --t_enclosed; }

void* capture_graph(void* stream, const std::function<void()>& record) {
    kg::stream_begin_capture(stream);
    try {
        record();
    } catch (...) {
        try {
            kg::graph_destroy(kg::stream_end_capture(stream));  // leave capture mode
        } catch (...) {
        }
        throw;
    }
    return kg::stream_end_capture(stream);
}

GraphReplay::~GraphReplay() { release(); }

GraphReplay::GraphReplay(GraphReplay&& other) noexcept
    : m_graphs(std::exchange(other.m_graphs, {})),
      m_clock(other.m_clock),
      m_eager(other.m_eager),
      m_captures(other.m_captures) {}

GraphReplay& GraphReplay::operator=(GraphReplay&& other) noexcept {
    if (this != &other) {
        release();
        m_graphs = std::exchange(other.m_graphs, {});
        m_clock = other.m_clock;
        m_eager = other.m_eager;
        m_captures = other.m_captures;
    }
    return *this;
}

void GraphReplay::release() {
    for (Graph& g : m_graphs) {
        try {
            kg::graph_exec_destroy(g.exec);
        } catch (...) {  // a destructor must not throw; a failing runtime is reported elsewhere
        }
    }
    m_graphs.clear();
}

void GraphReplay::run(void* stream, const std::vector<uint64_t>& key, const std::function<void()>& record) {
    if (m_eager || !graphs_enabled() || !stream || t_enclosed > 0) return record();
    for (Graph& g : m_graphs)
        if (g.key == key) {
            g.last_used = ++m_clock;
            kg::graph_launch(g.exec, stream);
            ++g_launches;
            return;
        }

    void* graph = nullptr;
    Graph* made = nullptr;
    try {
        graph = capture_graph(stream, record);
        ++m_captures;
        ++g_captures;
        if (m_graphs.size() < kMaxGraphs) {
            m_graphs.push_back({key, kg::graph_instantiate(graph), 0});
            made = &m_graphs.back();
        } else {
            made = &*std::min_element(m_graphs.begin(), m_graphs.end(),
                                      [](const Graph& x, const Graph& y) { return x.last_used < y.last_used; });
            if (!kg::graph_exec_update(made->exec, graph)) {
                void* fresh = kg::graph_instantiate(graph);
                kg::graph_exec_destroy(made->exec);
                made->exec = fresh;
            }
            made->key = key;
        }
        kg::graph_destroy(graph);
        graph = nullptr;
    } catch (...) {
        // The runtime refused to capture (or `record` failed while captured, which running it
        // eagerly below reports again): nothing of it ran, so run it now, and from now on.
        if (graph) {
            try {
                kg::graph_destroy(graph);
            } catch (...) {
            }
        }
        release();
        m_eager = true;
        return record();
    }
    made->last_used = ++m_clock;
    kg::graph_launch(made->exec, stream);
    ++g_launches;
}

}  // namespace paralab::gpu
