#include "engine/device/gpu_graph.h"

#include <kernels/gpu/graph.h>

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

}  // namespace

bool graphs_enabled() { return graphs_setting().load() != 0; }
void set_graphs_enabled(bool on) { graphs_setting().store(on ? 1 : 0); }

GraphReplay::~GraphReplay() { release(); }

GraphReplay::GraphReplay(GraphReplay&& other) noexcept
    : m_exec(std::exchange(other.m_exec, nullptr)),
      m_key(std::move(other.m_key)),
      m_eager(other.m_eager),
      m_captures(other.m_captures) {}

GraphReplay& GraphReplay::operator=(GraphReplay&& other) noexcept {
    if (this != &other) {
        release();
        m_exec = std::exchange(other.m_exec, nullptr);
        m_key = std::move(other.m_key);
        m_eager = other.m_eager;
        m_captures = other.m_captures;
    }
    return *this;
}

void GraphReplay::release() {
    if (!m_exec) return;
    try {
        kg::graph_exec_destroy(m_exec);
    } catch (...) {  // a destructor must not throw; a failing runtime is reported elsewhere
    }
    m_exec = nullptr;
}

void GraphReplay::run(void* stream, const std::vector<uint64_t>& key, const std::function<void()>& record) {
    if (m_eager || !graphs_enabled() || !stream) return record();
    if (m_exec && key == m_key) return kg::graph_launch(m_exec, stream);

    void* graph = nullptr;
    try {
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
        graph = kg::stream_end_capture(stream);
        ++m_captures;
        if (!m_exec || !kg::graph_exec_update(m_exec, graph)) {
            release();
            m_exec = kg::graph_instantiate(graph);
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
        m_key.clear();
        m_eager = true;
        return record();
    }
    m_key = key;
    kg::graph_launch(m_exec, stream);
}

}  // namespace paralab::gpu
