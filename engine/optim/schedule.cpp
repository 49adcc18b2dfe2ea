#include "engine/optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "engine/util/error.h"

namespace paralab::optim {

Schedule::Schedule(ScheduleConfig config, double base_lr, int64_t total_steps)
    : m_config(std::move(config)), m_base_lr(base_lr), m_total_steps(total_steps) {}

double Schedule::lr_at(int64_t step) const {
    step = std::max<int64_t>(step, 0);
    if (m_config.type == "step")
        return m_base_lr * std::pow(m_config.gamma, static_cast<double>(step / m_config.step_size));
    if (m_config.type == "cosine") {
        const int64_t warm = m_config.warmup_steps;
        if (step < warm) return m_base_lr * static_cast<double>(step + 1) / static_cast<double>(warm);
        const double span = static_cast<double>(std::max<int64_t>(1, m_total_steps - warm));
        const double progress = std::min(1.0, static_cast<double>(step - warm) / span);
        return std::max(0.0, 0.5 * m_base_lr * (1.0 + std::cos(std::numbers::pi * progress)));
    }
    return m_base_lr;
}

std::unique_ptr<Schedule> make_schedule(const ScheduleConfig& c, double base_lr, int64_t total_steps) {
    if (c.type != "constant" && c.type != "step" && c.type != "cosine")
        throw ConfigError("schedule.type: unknown schedule '" + c.type +
                          "'; expected constant, step or cosine");
    if (c.type == "step" && c.step_size < 1)
        throw ConfigError("schedule.step_size: expected a positive integer, got " +
                          std::to_string(c.step_size));
    if (c.type == "step" && !(c.gamma > 0))
        throw ConfigError("schedule.gamma: expected a positive number");
    if (c.type == "cosine" && c.warmup_steps < 0)
        throw ConfigError("schedule.warmup_steps: expected a non-negative integer, got " +
                          std::to_string(c.warmup_steps));
    return std::make_unique<Schedule>(c, base_lr, total_steps);
}

}  // namespace paralab::optim
