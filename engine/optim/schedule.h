// Learning-rate schedules: constant, step decay, cosine with linear warm-up.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace paralab::optim {

struct ScheduleConfig {
    std::string type = "constant";  // constant | step | cosine
    int64_t step_size = 1;          // step
    double gamma = 0.1;             // step
    int64_t warmup_steps = 0;       // cosine
};

class Schedule {
public:
    Schedule(ScheduleConfig config, double base_lr, int64_t total_steps);
    // The learning rate of optimizer step `step` (0 for the first step).
    double lr_at(int64_t step) const;
    const ScheduleConfig& config() const { return m_config; }

private:
    ScheduleConfig m_config;
    double m_base_lr;
    int64_t m_total_steps;
};

// Throws ConfigError naming the field for bad values.
std::unique_ptr<Schedule> make_schedule(const ScheduleConfig& config, double base_lr,
                                        int64_t total_steps);

}  // namespace paralab::optim
