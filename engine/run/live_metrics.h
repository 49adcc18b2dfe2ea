// The in-memory consumer of the metrics bus for a live view (the window's dashboard): the rank
// threads push, a viewer drains whenever it likes (the window at ~30 Hz). Pushing never waits
// for the viewer: past `capacity` entries of a kind, the oldest are dropped and counted, so a
// view that stalls loses frames of the picture, never training steps (the store keeps every
// row through its own recorder).
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "engine/run/trainer.h"

namespace paralab::run {

class LiveMetrics : public RunObserver {
public:
    explicit LiveMetrics(size_t capacity = 100000) : m_capacity(capacity) {}

    // What arrived since the last drain, oldest first.
    struct Frame {
        int64_t total_steps = -1;             // announced by on_start since the last drain; else -1
        std::vector<config::StepRecord> device_steps; // one per device per step
        std::vector<config::StepRecord> steps;        // the step over all devices (on_step_end)
        std::vector<config::Span> spans;
        std::vector<config::EvalResult> evals;
        int64_t dropped = 0;                  // entries lost to the capacity since the last drain
        bool empty() const {
            return total_steps < 0 && device_steps.empty() && steps.empty() && spans.empty() && evals.empty();
        }
    };
    Frame drain();

    void on_start(const config::Experiment& e, int64_t total_steps) override;
    void on_span(const config::Span& s) override;
    void on_step(const config::StepRecord& r) override;
    void on_step_end(const config::StepRecord& r) override;
    void on_eval(const config::EvalResult& r) override;

private:
    template <class T>
    void push(std::deque<T>& q, const T& v);

    const size_t m_capacity;
    std::mutex m_mutex;
    int64_t m_total_steps = -1;            // guarded by m_mutex
    std::deque<config::StepRecord> m_device_steps; // guarded by m_mutex
    std::deque<config::StepRecord> m_steps;        // guarded by m_mutex
    std::deque<config::Span> m_spans;              // guarded by m_mutex
    std::deque<config::EvalResult> m_evals;        // guarded by m_mutex
    int64_t m_dropped = 0;                 // guarded by m_mutex
};

}  // namespace paralab::run
