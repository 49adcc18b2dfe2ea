// The metrics bus (docs/design.md): rank threads publish spans and per-device step records; the
// bus hands them to the run's observer (the store's recorder, the CLI's progress line, the
// window), one call at a time, and once every device has reported a step it publishes the
// step over all devices (on_step_end), in step order.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/run/trainer.h"

namespace paralab::run {

class MetricsBus {
public:
    // `observer` may be null (the bus then only aggregates). `world` devices report each step.
    // The step's memory is `device0`'s (the device of rank 0).
    MetricsBus(RunObserver* observer, int world, std::string device0 = "cpu:0")
        : m_observer(observer), m_world(world), m_device0(std::move(device0)) {}

    // Any rank thread. `loss_sum` / `loss_samples`: this device's part of the step's loss
    // (loss_samples 0 when the device computes no loss).
    void publish(std::vector<config::Span> spans, const config::StepRecord& record, double loss_sum, int64_t loss_samples);
    void publish_eval(const config::EvalResult& r);
    // The run's end, when it does not come from the run's own thread (a job's failure).
    void publish_finish(const config::RunSummary& s);

    // A resumed run: steps 1..`done` ended before it (their records are kept); the next to end
    // is done + 1. Before any publish.
    void resume_after(int64_t done) {
        std::lock_guard lock(m_mutex);
        m_next_end = done + 1;
    }

    // The global loss of the last step that every device reported (NaN before the first).
    double last_step_loss() const;
    // Steps every device reported, and their examples (the global batches').
    int64_t steps_ended() const;
    int64_t samples_ended() const;

private:
    struct Pending {
        int reported = 0;
        config::StepRecord total;
        double loss_sum = 0;
        int64_t loss_samples = 0;
    };

    RunObserver* m_observer;
    int m_world;
    std::string m_device0;
    mutable std::mutex m_mutex;
    std::map<int64_t, Pending> m_pending;  // guarded by m_mutex: steps not every device reported
    int64_t m_next_end = 1;                // guarded by m_mutex: the next step on_step_end gets
    int64_t m_samples_ended = 0;           // guarded by m_mutex
    double m_last_loss = std::numeric_limits<double>::quiet_NaN();  // guarded by m_mutex
};

}  // namespace paralab::run
