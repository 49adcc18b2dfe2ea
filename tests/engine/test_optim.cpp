// Optimizers, schedules and clipping: hand-computed values, and three steps of each optimizer
// against numbers PyTorch 1.13 printed for the same parameter and gradients (float64).
#include <gtest/gtest.h>

#include <cmath>

#include "engine/device/device.h"
#include "engine/optim/clip.h"
#include "engine/optim/optimizer.h"
#include "engine/optim/schedule.h"

using namespace paralab;
using namespace paralab::optim;

namespace {

struct OneParam {
    std::unique_ptr<Device> dev = make_cpu_device(0);
    nn::Param p;
    explicit OneParam(std::vector<double> values, DType dtype = DType::f64) {
        const Shape s{static_cast<int64_t>(values.size())};
        p.name = "w";
        p.value = Tensor::empty(s, DType::f64, *dev, MemCategory::parameters);
        for (size_t i = 0; i < values.size(); ++i) p.value.data<double>()[i] = values[i];
        p.value = p.value.to(dtype);
        p.grad = Tensor::zeros(s, dtype, *dev, MemCategory::gradients);
    }
    void set_grad(std::vector<double> g) {
        Tensor t = Tensor::empty(p.grad.shape(), DType::f64, *dev, MemCategory::workspace);
        for (size_t i = 0; i < g.size(); ++i) t.data<double>()[i] = g[i];
        p.grad.copy_from(t);
    }
    double at(size_t i) const { return p.value.to(DType::f64).data<double>()[i]; }
    std::vector<nn::Param*> params() { return {&p}; }
};

// The three gradients the PyTorch reference used.
const std::vector<std::vector<double>> kGrads{{0.1, 0.2, -0.3}, {-0.5, 0.4, 0.1}, {0.3, -0.1, 0.2}};

struct TorchCase {
    const char* name;
    OptimizerConfig config;
    std::vector<double> expected;  // parameter after 3 steps, printed by torch.optim
};

class MatchesTorch : public ::testing::TestWithParam<TorchCase> {};

TEST_P(MatchesTorch, ThreeSteps) {
    const auto& c = GetParam();
    for (DType dtype : {DType::f64, DType::f32}) {
        OneParam w({1.0, -2.0, 0.5}, dtype);
        auto opt = make_optimizer(c.config);
        for (const auto& g : kGrads) {
            w.set_grad(g);
            opt->step(w.params(), c.config.lr);
        }
        const double tol = dtype == DType::f64 ? 1e-12 : 2e-6;
        for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(w.at(i), c.expected[i], tol) << i;
        EXPECT_EQ(opt->steps_taken(), 3);
    }
}

OptimizerConfig cfg(std::string type, double lr, double momentum, bool nesterov, double wd) {
    OptimizerConfig c;
    c.type = std::move(type);
    c.lr = lr;
    c.momentum = momentum;
    c.nesterov = nesterov;
    c.weight_decay = wd;
    return c;
}

INSTANTIATE_TEST_SUITE_P(
    Torch, MatchesTorch,
    ::testing::Values(
        TorchCase{"sgd_nesterov_wd", cfg("sgd", 0.1, 0.9, true, 0.01),
                  {1.0359973125509998, -2.1417595794620001, 0.53377981634050009}},
        TorchCase{"sgd_momentum", cfg("sgd", 0.1, 0.9, false, 0.0), {1.0379, -2.1202, 0.5423}},
        TorchCase{"adam_l2", cfg("adam", 0.01, 0, false, 0.1),
                  {0.99153614255021982, -2.0053054246474007, 0.50882355783555511}},
        TorchCase{"adamw", cfg("adamw", 0.01, 0, false, 0.1),
                  {0.99374589214790909, -2.0195142427388952, 0.51167671621111621}}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(Sgd, PlainStepByHand) {
    OneParam w({2.0});
    auto opt = make_optimizer(cfg("sgd", 0.5, 0, false, 0.1));
    w.set_grad({1.0});
    opt->step(w.params(), 0.5);
    EXPECT_DOUBLE_EQ(w.at(0), 2.0 - 0.5 * (1.0 + 0.1 * 2.0));  // 1.4
    EXPECT_EQ(opt->state_bytes(), 0);  // no momentum, no state
}

TEST(Sgd, MomentumByHand) {
    OneParam w({0.0});
    auto opt = make_optimizer(cfg("sgd", 1.0, 0.5, false, 0));
    w.set_grad({1.0});
    opt->step(w.params(), 1.0);  // buf = 1, p = -1
    EXPECT_DOUBLE_EQ(w.at(0), -1.0);
    opt->step(w.params(), 1.0);  // buf = 1.5, p = -2.5
    EXPECT_DOUBLE_EQ(w.at(0), -2.5);
    opt->step(w.params(), 1.0);  // buf = 1.75, p = -4.25
    EXPECT_DOUBLE_EQ(w.at(0), -4.25);
}

TEST(Adam, FirstTwoStepsByHand) {
    OneParam w({1.0});
    OptimizerConfig c = cfg("adam", 0.1, 0, false, 0);
    auto opt = make_optimizer(c);
    w.set_grad({2.0});
    opt->step(w.params(), 0.1);
    // m = 0.2, v = 0.004; mhat = 2, vhat = 4: p = 1 - 0.1 * 2 / (2 + 1e-8)
    EXPECT_NEAR(w.at(0), 1.0 - 0.1 * 2.0 / (2.0 + 1e-8), 1e-15);
    const double p1 = w.at(0);
    w.set_grad({-1.0});
    opt->step(w.params(), 0.1);
    const double m = 0.9 * 0.2 + 0.1 * -1.0, v = 0.999 * 0.004 + 0.001 * 1.0;
    const double mhat = m / (1 - 0.81), vhat = v / (1 - 0.999 * 0.999);
    EXPECT_NEAR(w.at(0), p1 - 0.1 * mhat / (std::sqrt(vhat) + 1e-8), 1e-14);
}

TEST(Optimizer, StateIsAccountedAsOptimizerStateOnTheDevice) {
    OneParam w(std::vector<double>(1000, 1.0), DType::f32);
    const auto before = w.dev->allocator().stats().current[size_t(MemCategory::optimizer_state)];
    EXPECT_EQ(before, 0);
    auto opt = make_optimizer(cfg("adam", 0.01, 0, false, 0));
    w.set_grad(std::vector<double>(1000, 0.5));
    opt->step(w.params(), 0.01);
    EXPECT_EQ(opt->state_bytes(), 2 * 1000 * 4);
    EXPECT_EQ(w.dev->allocator().stats().current[size_t(MemCategory::optimizer_state)], 2 * 4032);
}

TEST(Optimizer, RefusesADifferentParameterList) {
    OneParam a({1.0}), b({2.0});
    auto opt = make_optimizer(cfg("sgd", 0.1, 0.9, false, 0));
    opt->step(a.params(), 0.1);
    std::vector<nn::Param*> two{&a.p, &b.p};
    EXPECT_THROW(opt->step(two, 0.1), Error);
}

struct BadConfig {
    OptimizerConfig config;
    const char* message;
};
class OptimizerValidation : public ::testing::TestWithParam<BadConfig> {};
TEST_P(OptimizerValidation, NamesTheField) {
    try {
        make_optimizer(GetParam().config);
        FAIL();
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find(GetParam().message), std::string::npos) << e.what();
    }
}
INSTANTIATE_TEST_SUITE_P(
    Table, OptimizerValidation,
    ::testing::Values(BadConfig{cfg("sgd", -1, 0, false, 0), "optimizer.lr: expected a positive number, got -1"},
                      BadConfig{cfg("sgd", 0.1, 1.0, false, 0), "optimizer.momentum"},
                      BadConfig{cfg("sgd", 0.1, 0, true, 0), "optimizer.nesterov"},
                      BadConfig{cfg("adam", 0.1, 0, false, -0.5), "optimizer.weight_decay"},
                      BadConfig{cfg("rmsprop", 0.1, 0, false, 0), "optimizer.type"}));

TEST(Schedule, ConstantStepAndCosine) {
    ScheduleConfig c;
    EXPECT_DOUBLE_EQ(make_schedule(c, 0.1, 100)->lr_at(57), 0.1);

    c.type = "step";
    c.step_size = 10;
    c.gamma = 0.5;
    auto s = make_schedule(c, 0.1, 100);
    EXPECT_DOUBLE_EQ(s->lr_at(0), 0.1);
    EXPECT_DOUBLE_EQ(s->lr_at(9), 0.1);
    EXPECT_DOUBLE_EQ(s->lr_at(10), 0.05);
    EXPECT_DOUBLE_EQ(s->lr_at(25), 0.025);

    c = ScheduleConfig{};
    c.type = "cosine";
    c.warmup_steps = 4;
    s = make_schedule(c, 1.0, 104);
    EXPECT_DOUBLE_EQ(s->lr_at(0), 0.25);
    EXPECT_DOUBLE_EQ(s->lr_at(3), 1.0);
    EXPECT_DOUBLE_EQ(s->lr_at(4), 1.0);
    EXPECT_NEAR(s->lr_at(54), 0.5, 1e-12);
    EXPECT_NEAR(s->lr_at(104), 0.0, 1e-12);
    EXPECT_GE(s->lr_at(500), 0.0);
}

TEST(Schedule, BadValuesNameTheField) {
    ScheduleConfig c;
    c.type = "step";
    c.step_size = 0;
    EXPECT_THROW(make_schedule(c, 0.1, 10), ConfigError);
    c.type = "linear";
    EXPECT_THROW(make_schedule(c, 0.1, 10), ConfigError);
}

TEST(Clip, ScalesToTheMaxNorm) {
    OneParam w({0.0, 0.0});
    w.set_grad({3.0, 4.0});
    const double norm = clip_grad_norm(w.params(), 1.0);
    EXPECT_DOUBLE_EQ(norm, 5.0);
    const Tensor g = w.p.grad;
    EXPECT_NEAR(g.data<double>()[0], 0.6, 1e-6);
    EXPECT_NEAR(g.data<double>()[1], 0.8, 1e-6);
    // Under the limit: untouched.
    w.set_grad({0.3, 0.4});
    EXPECT_DOUBLE_EQ(clip_grad_norm(w.params(), 1.0), 0.5);
    EXPECT_DOUBLE_EQ(g.data<double>()[0], 0.3);
}

TEST(Clip, NonFiniteNormLeavesGradientsAlone) {
    OneParam w({0.0, 0.0});
    w.set_grad({NAN, 1.0});
    EXPECT_TRUE(std::isnan(clip_grad_norm(w.params(), 1.0)));
    EXPECT_DOUBLE_EQ(w.p.grad.data<double>()[1], 1.0);
}

}  // namespace
