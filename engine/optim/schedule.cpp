#include "engine/optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <sstream>

#include "engine/util/error.h"

namespace paralab::optim {

namespace {

class ConstantSchedule final : public Schedule {
public:
    using Schedule::Schedule;

protected:
    double lr_at_impl(int64_t) const override { return m_base_lr; }
};

class StepSchedule final : public Schedule {
public:
    using Schedule::Schedule;

protected:
    double lr_at_impl(int64_t step) const override {
        const auto decays = static_cast<double>(step / m_config.step_size);
        return m_base_lr * std::pow(m_config.gamma, decays);
    }
};

class CosineSchedule final : public Schedule {
public:
    using Schedule::Schedule;

protected:
    double lr_at_impl(int64_t step) const override {
        const int64_t warm = m_config.warmup_steps;
        if (step < warm) return m_base_lr * static_cast<double>(step + 1) / static_cast<double>(warm);
        const double span = static_cast<double>(std::max<int64_t>(1, m_total_steps - warm));
        // Clamped: past the end the cosine would rise again.
        const double progress = std::min(1.0, static_cast<double>(step - warm) / span);
        // cos(pi) is -1 only to rounding; the max keeps the last step's rate from going negative.
        return std::max(0.0, 0.5 * m_base_lr * (1.0 + std::cos(std::numbers::pi * progress)));
    }
};

std::string number_text(double v) {
    std::ostringstream s;
    s << v;
    return s.str();
}

}  // namespace

Schedule::Schedule(ScheduleConfig config, double base_lr, int64_t total_steps)
    : m_config(std::move(config)), m_base_lr(base_lr), m_total_steps(total_steps) {}

Schedule::~Schedule() = default;

double Schedule::lr_at(int64_t step) const {
    PARALAB_CHECK(step >= 0, "learning rate asked for step " + std::to_string(step));
    return lr_at_impl(step);
}

std::unique_ptr<Schedule> make_schedule(const ScheduleConfig& c, double base_lr,
                                        int64_t total_steps) {
    if (!(base_lr > 0) || !std::isfinite(base_lr))
        throw ConfigError("optimizer.lr", "expected a positive number, got " + number_text(base_lr));
    PARALAB_CHECK(total_steps >= 0, "schedule for " + std::to_string(total_steps) + " steps");
    if (c.type == "constant") return std::make_unique<ConstantSchedule>(c, base_lr, total_steps);
    if (c.type == "step") {
        if (c.step_size < 1)
            throw ConfigError("schedule.step_size", "expected a positive integer, got " +
                              std::to_string(c.step_size));
        if (!(c.gamma > 0) || !std::isfinite(c.gamma))
            throw ConfigError("schedule.gamma", "expected a positive number, got " +
                              number_text(c.gamma));
        return std::make_unique<StepSchedule>(c, base_lr, total_steps);
    }
    if (c.type == "cosine") {
        if (c.warmup_steps < 0)
            throw ConfigError("schedule.warmup_steps", "expected a non-negative integer, got " +
                              std::to_string(c.warmup_steps));
        return std::make_unique<CosineSchedule>(c, base_lr, total_steps);
    }
    throw ConfigError("schedule.type", "unknown schedule '" + c.type +
                      "'; expected constant, step or cosine");
}

}  // namespace paralab::optim
