#include "engine/run/live_metrics.h"

#include <iterator>

namespace paralab::run {

template <class T>
void LiveMetrics::push(std::deque<T>& q, const T& v) {
    if (q.size() >= m_capacity) {
        q.pop_front();
        ++m_dropped;
    }
    q.push_back(v);
}

void LiveMetrics::on_start(const config::Experiment& e, int64_t total_steps) {
    (void)e;
    std::lock_guard lock(m_mutex);
    m_total_steps = total_steps;
}

void LiveMetrics::on_span(const config::Span& s) {
    std::lock_guard lock(m_mutex);
    push(m_spans, s);
}

void LiveMetrics::on_step(const config::StepRecord& r) {
    std::lock_guard lock(m_mutex);
    push(m_device_steps, r);
}

void LiveMetrics::on_step_end(const config::StepRecord& r) {
    std::lock_guard lock(m_mutex);
    push(m_steps, r);
}

void LiveMetrics::on_eval(const config::EvalResult& r) {
    std::lock_guard lock(m_mutex);
    push(m_evals, r);
}

namespace {
template <class T>
std::vector<T> take(std::deque<T>& q) {
    std::vector<T> out(std::make_move_iterator(q.begin()), std::make_move_iterator(q.end()));
    q.clear();
    return out;
}
}  // namespace

LiveMetrics::Frame LiveMetrics::drain() {
    std::lock_guard lock(m_mutex);
    Frame f;
    std::swap(f.total_steps, m_total_steps);
    f.device_steps = take(m_device_steps);
    f.steps = take(m_steps);
    f.spans = take(m_spans);
    f.evals = take(m_evals);
    std::swap(f.dropped, m_dropped);
    return f;
}

}  // namespace paralab::run
