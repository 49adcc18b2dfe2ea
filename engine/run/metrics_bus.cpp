#include "engine/run/metrics_bus.h"

#include <algorithm>
#include <cctype>
#include <string_view>

namespace paralab::run {

namespace {

// "model.layers[2]" before "model.layers[10]": runs of digits compared as numbers.
bool natural_less(const std::string& a, const std::string& b) {
    size_t i = 0, j = 0;
    while (i < a.size() && j < b.size()) {
        if (std::isdigit(static_cast<unsigned char>(a[i])) && std::isdigit(static_cast<unsigned char>(b[j]))) {
            size_t ei = i, ej = j;
            while (ei < a.size() && std::isdigit(static_cast<unsigned char>(a[ei]))) ++ei;
            while (ej < b.size() && std::isdigit(static_cast<unsigned char>(b[ej]))) ++ej;
            const std::string_view na(a.data() + i, ei - i), nb(b.data() + j, ej - j);
            if (na.size() != nb.size()) return na.size() < nb.size();
            if (na != nb) return na < nb;
            i = ei, j = ej;
            continue;
        }
        if (a[i] != b[j]) return a[i] < b[j];
        ++i, ++j;
    }
    return a.size() - i < b.size() - j;
}

}  // namespace

void MetricsBus::publish(std::vector<config::Span> spans, const config::StepRecord& r, double loss_sum, int64_t loss_samples) {
    std::lock_guard lock(m_mutex);
    if (m_observer) {
        for (const config::Span& s : spans) m_observer->on_span(s);
        m_observer->on_step(r);
    }
    Pending& p = m_pending[r.step];
    config::StepRecord& t = p.total;
    if (p.reported == 0) {
        t = r;
        t.device = "all";
        t.samples = 0;
        t.grad_norm = 0;
        t.moe.clear();
        t.compute_ms = t.comm_ms = t.idle_ms = t.data_wait_ms = 0;
    }
    ++p.reported;
    // Times of the slowest device; memory as the first device reports it (device 0 for every
    // synchronous strategy); samples counted where the loss is, else where the data went.
    t.wall_s = std::max(t.wall_s, r.wall_s);
    t.compute_ms = std::max(t.compute_ms, r.compute_ms);
    t.comm_ms = std::max(t.comm_ms, r.comm_ms);
    t.idle_ms = std::max(t.idle_ms, r.idle_ms);
    t.data_wait_ms = std::max(t.data_wait_ms, r.data_wait_ms);
    t.grad_norm = std::max(t.grad_norm, r.grad_norm);
    p.loss_sum += loss_sum;
    p.loss_samples += loss_samples;
    if (r.device == m_device0) t.memory = r.memory;
    // Each mixture of experts' routing summed over the devices that ran it (the replicas, the
    // micro-batches; a tensor group's first shard only counts), kept in model order.
    for (const config::MoERecord& m : r.moe) config::add_moe_record(t.moe, m);
    std::stable_sort(t.moe.begin(), t.moe.end(), [](const config::MoERecord& a, const config::MoERecord& b) {
        return natural_less(a.layer, b.layer);
    });

    while (!m_pending.empty() && m_pending.begin()->first == m_next_end &&
           m_pending.begin()->second.reported == m_world) {
        Pending done = std::move(m_pending.begin()->second);
        m_pending.erase(m_pending.begin());
        ++m_next_end;
        done.total.loss = done.loss_samples > 0 ? done.loss_sum / static_cast<double>(done.loss_samples)
                                                : std::numeric_limits<double>::quiet_NaN();
        done.total.samples = done.loss_samples;
        m_last_loss = done.total.loss;
        m_samples_ended += done.total.samples;
        if (m_observer) m_observer->on_step_end(done.total);
    }
}

void MetricsBus::publish_eval(const config::EvalResult& r) {
    std::lock_guard lock(m_mutex);
    if (m_observer) m_observer->on_eval(r);
}

void MetricsBus::publish_finish(const config::RunSummary& s) {
    std::lock_guard lock(m_mutex);
    if (m_observer) m_observer->on_finish(s);
}

int64_t MetricsBus::steps_ended() const {
    std::lock_guard lock(m_mutex);
    return m_next_end - 1;
}

int64_t MetricsBus::samples_ended() const {
    std::lock_guard lock(m_mutex);
    return m_samples_ended;
}

double MetricsBus::last_step_loss() const {
    std::lock_guard lock(m_mutex);
    return m_last_loss;
}

}  // namespace paralab::run
