// Learning-rate schedules, a function of the optimizer step: constant; step decay
// (torch's StepLR); cosine decay to 0 over the run, after an optional linear warm-up.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace paralab::optim {

// The experiment file's "schedule" section.
struct ScheduleConfig {
    std::string type = "constant";  // constant | step | cosine
    int64_t step_size = 1;          // step: decay every step_size steps
    double gamma = 0.1;             // step: by this factor
    int64_t warmup_steps = 0;       // cosine
};

class Schedule {
public:
    Schedule(ScheduleConfig config, double base_lr, int64_t total_steps);
    virtual ~Schedule();

    // The learning rate for optimizer step `step`: the number of steps taken so far (0 for the
    // first). Steps past total_steps keep the final value (0 for cosine). Never negative.
    double lr_at(int64_t step) const;

    const ScheduleConfig& config() const { return m_config; }
    double base_lr() const { return m_base_lr; }
    int64_t total_steps() const { return m_total_steps; }

protected:
    // step >= 0.
    virtual double lr_at_impl(int64_t step) const = 0;

    ScheduleConfig m_config;
    double m_base_lr;
    int64_t m_total_steps;
};

// constant: base_lr.
// step:     base_lr * gamma^floor(step / step_size).
// cosine:   base_lr * (step + 1) / warmup_steps while step < warmup_steps, then
//           0.5 * base_lr * (1 + cos(pi * (step - warmup) / max(1, total_steps - warmup))).
//           A warm-up longer than the run is allowed: the run ends still warming up.
// Throws ConfigError naming the field ("schedule.step_size: ...") for bad values, and for a
// base_lr that is not a positive number ("optimizer.lr"); total_steps must be >= 0.
std::unique_ptr<Schedule> make_schedule(const ScheduleConfig& config, double base_lr,
                                        int64_t total_steps);

}  // namespace paralab::optim
