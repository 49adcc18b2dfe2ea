// Optimizers, schedules and clipping: values worked out by hand from the formulas, three steps
// of each optimizer against the numbers PyTorch 1.13 printed for the same parameter and
// gradients (float64 and float32 runs), the fused kernels against a plain double-precision
// reference, and the argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <kernels/cpu/optim.h>
#include <kernels/cpu/threads.h>
#include <limits>
#include <numbers>
#include <vector>

#include "engine/device/device.h"
#include "engine/optim/adam.h"
#include "engine/optim/clip.h"
#include "engine/optim/optimizer.h"
#include "engine/optim/schedule.h"
#include "engine/optim/sgd.h"
#include "engine/util/rng.h"

using namespace paralab;
using namespace paralab::optim;

namespace {

Tensor tensor_of(const std::vector<double>& values, DType dtype, Device& dev, MemCategory cat) {
    Tensor t = Tensor::empty(Shape{static_cast<int64_t>(values.size())}, DType::f64, dev, cat);
    for (size_t i = 0; i < values.size(); ++i) t.data<double>()[i] = values[i];
    if (dtype == DType::f64) return t;
    Tensor c = Tensor::empty(t.shape(), dtype, dev, cat);
    c.copy_from(t);
    return c;
}

std::vector<double> values_of(const Tensor& t) {
    const Tensor d = t.to(DType::f64);
    return {d.data<double>(), d.data<double>() + d.numel()};
}

// One parameter of a few elements with its own device, so that memory stats are its own.
struct OneParam {
    std::unique_ptr<Device> dev = make_cpu_device(0);
    nn::Param p;
    explicit OneParam(const std::vector<double>& values, DType dtype = DType::f64) {
        p.name = "w";
        p.value = tensor_of(values, dtype, *dev, MemCategory::parameters);
        p.grad = Tensor::zeros(p.value.shape(), dtype, *dev, MemCategory::gradients);
    }
    void set_grad(const std::vector<double>& g) {
        p.grad.copy_from(tensor_of(g, DType::f64, *dev, MemCategory::workspace));
    }
    double at(size_t i) const { return values_of(p.value)[i]; }
    std::vector<nn::Param*> params() { return {&p}; }
};

OptimizerConfig cfg(std::string type, double lr, double momentum = 0, bool nesterov = false,
                    double wd = 0) {
    OptimizerConfig c;
    c.type = std::move(type);
    c.lr = lr;
    c.momentum = momentum;
    c.nesterov = nesterov;
    c.weight_decay = wd;
    return c;
}

OptimizerConfig adam_cfg(std::string type, double lr, double b1, double b2, double eps, double wd) {
    OptimizerConfig c = cfg(std::move(type), lr, 0, false, wd);
    c.beta1 = b1;
    c.beta2 = b2;
    c.eps = eps;
    return c;
}

// ---- against PyTorch ----------------------------------------------------------------------

// p = [1, -2, 0.5] and these gradients, one per step; produced by
//   p = torch.nn.Parameter(torch.tensor([1., -2., .5], dtype=...)); opt = torch.optim.X([p], ...)
//   for g, lr in zip(grads, lrs): opt.param_groups[0]['lr'] = lr; p.grad = torch.tensor(g); opt.step()
const std::vector<std::vector<double>> kGrads{{0.1, 0.2, -0.3}, {-0.5, 0.4, 0.1}, {0.3, -0.1, 0.2}};

struct TorchCase {
    const char* name;
    OptimizerConfig config;
    std::vector<double> lrs;                  // per step
    std::vector<double> expected_f64;         // parameter after 3 steps, float64 run
    std::vector<double> expected_f32;         // the same in a float32 run
    std::vector<std::vector<double>> state;   // state after 3 steps (float64), torch's order
};

void PrintTo(const TorchCase& c, std::ostream* os) { *os << c.name; }

class MatchesTorch : public ::testing::TestWithParam<TorchCase> {};

TEST_P(MatchesTorch, ThreeSteps) {
    const auto& c = GetParam();
    for (DType dtype : {DType::f64, DType::f32}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)));
        OneParam w({1.0, -2.0, 0.5}, dtype);
        auto opt = make_optimizer(c.config);
        for (size_t s = 0; s < kGrads.size(); ++s) {
            w.set_grad(kGrads[s]);
            opt->step(w.params(), c.lrs[s]);
        }
        EXPECT_EQ(opt->steps_taken(), 3);
        // The kernels evaluate torch's expressions in torch's order: at most an ulp apart
        // (an f32 ulp is 2.4e-7 at 2; torch's vector loops may fuse a multiply-add).
        const auto& expected = dtype == DType::f64 ? c.expected_f64 : c.expected_f32;
        const double tol = dtype == DType::f64 ? 1e-15 : 2.5e-7;
        for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(w.at(i), expected[i], tol) << "element " << i;
        if (dtype != DType::f64) continue;
        ASSERT_EQ(opt->state().size(), 1u);
        ASSERT_EQ(opt->state()[0].size(), c.state.size());
        for (size_t k = 0; k < c.state.size(); ++k) {
            const auto got = values_of(opt->state()[0][k]);
            for (size_t i = 0; i < 3; ++i)
                EXPECT_NEAR(got[i], c.state[k][i], 1e-15) << opt->state_names()[k] << " " << i;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(
    Torch, MatchesTorch,
    ::testing::Values(
        TorchCase{"sgd_plain_wd", cfg("sgd", 0.1, 0, false, 0.05), {0.1, 0.1, 0.1},
                  {0.99492462500000012, -2.0197502499999995, 0.49228818749999997},
                  {0.99492472410202026, -2.0197501182556152, 0.49228817224502563},
                  {}},
        TorchCase{"sgd_momentum", cfg("sgd", 0.1, 0.9), {0.1, 0.1, 0.1},
                  {1.0378999999999998, -2.1202000000000001, 0.5423},
                  {1.0378999710083008, -2.1202001571655273, 0.54230004549026489},
                  {{-0.069000000000000006, 0.42200000000000015, 0.046999999999999986}}},
        TorchCase{"sgd_nesterov_wd", cfg("sgd", 0.1, 0.9, true, 0.01), {0.1, 0.1, 0.1},
                  {1.0359973125509998, -2.1417595794620001, 0.53377981634050009},
                  {1.0359972715377808, -2.1417593955993652, 0.5337797999382019},
                  {{-0.041454802900000032, 0.36628304980000009, 0.061653335050000008}}},
        TorchCase{"sgd_nesterov_lr_changes", cfg("sgd", 0.2, 0.5, true, 0.1), {0.2, 0.1, 0.05},
                  {0.96975575000000003, -2.0097749999999999, 0.53803656249999987},
                  {0.96975570917129517, -2.009774923324585, 0.53803658485412598},
                  {{0.24658999999999998, -0.20299999999999999, 0.27201249999999999}}},
        TorchCase{"adam", cfg("adam", 0.01), {0.01, 0.01, 0.01},
                  {0.99672888669156334, -2.0255378865578488, 0.51319920889599036},
                  {0.99672889709472656, -2.0255379676818848, 0.51319921016693115},
                  {{-0.0068999999999999964, 0.042199999999999994, 0.0047000000000000011},
                   {0.00034973001000000031, 0.00020976004000000022, 0.00013981009000000013}}},
        TorchCase{"adam_l2", cfg("adam", 0.01, 0, false, 0.1), {0.01, 0.01, 0.01},
                  {0.99153614255021982, -2.0053054246474007, 0.50882355783555511},
                  {0.99153614044189453, -2.005305290222168, 0.50882357358932495},
                  {{0.020046703332099059, -0.012074413677096168, 0.018458861074078708},
                   {0.00036005426622760664, 0.00013040703580211106, 0.00014824897967190447}}},
        TorchCase{"adam_betas_eps", adam_cfg("adam", 0.05, 0.5, 0.9, 1e-3, 0.02),
                  {0.05, 0.05, 0.05},
                  {0.98040777854623706, -2.1104188559517976, 0.52924158727400616},
                  {0.98040777444839478, -2.1104190349578857, 0.52924156188964844},
                  {{0.054646451434496937, 0.038738981338534526, 0.097049842866334918},
                   {0.032214660251547081, 0.015690405491877328, 0.012377301616054747}}},
        TorchCase{"adamw", cfg("adamw", 0.01, 0, false, 0.1), {0.01, 0.01, 0.01},
                  {0.99374589214790909, -2.0195142427388952, 0.51167671621111621},
                  {0.99374598264694214, -2.0195145606994629, 0.51167678833007812},
                  {{-0.0068999999999999964, 0.042199999999999994, 0.0047000000000000011},
                   {0.00034973001000000031, 0.00020976004000000022, 0.00013981009000000013}}},
        TorchCase{"adamw_lr_changes", adam_cfg("adamw", 0.05, 0.5, 0.9, 1e-3, 0.02),
                  {0.05, 0.02, 0.01},
                  {0.96389160965645237, -2.0704666876668498, 0.54734322830505855},
                  {0.96389162540435791, -2.0704667568206787, 0.54734319448471069},
                  {{0.037499999999999992, 0.074999999999999997, 0.087500000000000008},
                   {0.032309999999999992, 0.01864, 0.012189999999999998}}}),
    [](const auto& info) { return std::string(info.param.name); });

// ---- SGD by hand ---------------------------------------------------------------------------

TEST(Sgd, PlainStepWithWeightDecayByHand) {
    OneParam w({2.0, -1.0});
    auto opt = make_optimizer(cfg("sgd", 0.5, 0, false, 0.1));
    w.set_grad({1.0, 0.5});
    opt->step(w.params(), 0.5);
    EXPECT_DOUBLE_EQ(w.at(0), 2.0 - 0.5 * (1.0 + 0.1 * 2.0));     // 1.4
    EXPECT_DOUBLE_EQ(w.at(1), -1.0 - 0.5 * (0.5 + 0.1 * -1.0));   // -1.2
    EXPECT_EQ(opt->state_bytes(), 0);  // no momentum, no state
    EXPECT_TRUE(opt->state_names().empty());
}

TEST(Sgd, MomentumOverThreeStepsByHand) {
    OneParam w({0.0});
    auto opt = make_optimizer(cfg("sgd", 1.0, 0.5));
    w.set_grad({1.0});
    opt->step(w.params(), 1.0);  // buf = 1 (the first gradient itself), p = -1
    EXPECT_DOUBLE_EQ(w.at(0), -1.0);
    opt->step(w.params(), 1.0);  // buf = 0.5 + 1 = 1.5, p = -2.5
    EXPECT_DOUBLE_EQ(w.at(0), -2.5);
    w.set_grad({-2.0});
    opt->step(w.params(), 1.0);  // buf = 0.75 - 2 = -1.25, p = -1.25
    EXPECT_DOUBLE_EQ(w.at(0), -1.25);
    EXPECT_DOUBLE_EQ(values_of(opt->state()[0][0])[0], -1.25);
    EXPECT_EQ(opt->state_names(), std::vector<std::string>{"momentum_buffer"});
}

TEST(Sgd, NesterovByHand) {
    OneParam w({1.0});
    auto opt = make_optimizer(cfg("sgd", 0.1, 0.9, true));
    w.set_grad({2.0});
    opt->step(w.params(), 0.1);  // buf = 2; step = 2 + 0.9*2 = 3.8
    EXPECT_DOUBLE_EQ(w.at(0), 1.0 - 0.1 * 3.8);
    w.set_grad({1.0});
    opt->step(w.params(), 0.1);  // buf = 1.8 + 1 = 2.8; step = 1 + 0.9*2.8 = 3.52
    EXPECT_NEAR(w.at(0), 1.0 - 0.38 - 0.352, 1e-15);
}

TEST(Sgd, WeightDecayEntersTheMomentumBuffer) {
    OneParam w({2.0});
    auto opt = make_optimizer(cfg("sgd", 0.1, 0.5, false, 0.25));
    w.set_grad({0.0});
    opt->step(w.params(), 0.1);  // d = 0.5 (decay only); buf = 0.5; p = 1.95
    EXPECT_DOUBLE_EQ(w.at(0), 1.95);
    opt->step(w.params(), 0.1);  // d = 0.4875; buf = 0.25 + 0.4875 = 0.7375; p = 1.87625
    EXPECT_NEAR(w.at(0), 1.87625, 1e-15);
}

// ---- Adam by hand --------------------------------------------------------------------------

TEST(Adam, FirstTwoStepsByHand) {
    OneParam w({1.0});
    auto opt = make_optimizer(cfg("adam", 0.1));
    w.set_grad({2.0});
    opt->step(w.params(), 0.1);
    // m = 0.2, v = 0.004; mhat = 2, vhat = 4: p = 1 - 0.1 * 2 / (2 + 1e-8)
    EXPECT_NEAR(w.at(0), 1.0 - 0.1 * 2.0 / (2.0 + 1e-8), 1e-15);
    const double p1 = w.at(0);
    w.set_grad({-1.0});
    opt->step(w.params(), 0.1);
    const double m = 0.9 * 0.2 + 0.1 * -1.0, v = 0.999 * 0.004 + 0.001 * 1.0;
    const double mhat = m / (1 - 0.9 * 0.9), vhat = v / (1 - 0.999 * 0.999);
    EXPECT_NEAR(w.at(0), p1 - 0.1 * mhat / (std::sqrt(vhat) + 1e-8), 1e-14);
    EXPECT_NEAR(values_of(opt->state()[0][0])[0], m, 1e-16);
    EXPECT_NEAR(values_of(opt->state()[0][1])[0], v, 1e-16);
}

TEST(Adam, AdamWDecaysTheWeightInsteadOfTheGradient) {
    // p = 1, g = 2, lr = 0.1, wd = 0.5, one step (mhat = d, vhat = d^2: the step is ~lr).
    OneParam a({1.0}), b({1.0});
    auto adam = make_optimizer(cfg("adam", 0.1, 0, false, 0.5));
    auto adamw = make_optimizer(cfg("adamw", 0.1, 0, false, 0.5));
    a.set_grad({2.0});
    b.set_grad({2.0});
    adam->step(a.params(), 0.1);
    adamw->step(b.params(), 0.1);
    // Adam: d = 2 + 0.5*1 = 2.5 goes through the moments.
    EXPECT_NEAR(a.at(0), 1.0 - 0.1 * 2.5 / (2.5 + 1e-8), 1e-15);
    // AdamW: p = 1 * (1 - 0.1*0.5) = 0.95 first, then the plain step on g = 2.
    EXPECT_NEAR(b.at(0), 0.95 - 0.1 * 2.0 / (2.0 + 1e-8), 1e-15);
    EXPECT_NEAR(b.at(0) - a.at(0), -0.05, 1e-8);
    // The moments differ too: Adam's saw the decay term, AdamW's did not.
    EXPECT_NEAR(values_of(adam->state()[0][0])[0], 0.25, 1e-16);
    EXPECT_NEAR(values_of(adamw->state()[0][0])[0], 0.2, 1e-16);
}

TEST(Adam, WithoutWeightDecayAdamWIsAdam) {
    OneParam a({0.3, -0.7}), b({0.3, -0.7});
    auto adam = make_optimizer(cfg("adam", 0.05));
    auto adamw = make_optimizer(cfg("adamw", 0.05));
    for (const auto& g : kGrads) {
        a.set_grad({g[0], g[1]});
        b.set_grad({g[0], g[1]});
        adam->step(a.params(), 0.05);
        adamw->step(b.params(), 0.05);
    }
    EXPECT_EQ(a.at(0), b.at(0));
    EXPECT_EQ(a.at(1), b.at(1));
    EXPECT_NE(a.at(0), 0.3);
}

TEST(Adam, ClassesAreWhatTheFactoryMakes) {
    EXPECT_NE(dynamic_cast<Sgd*>(make_optimizer(cfg("sgd", 0.1)).get()), nullptr);
    auto adamw = make_optimizer(cfg("adamw", 0.1));
    ASSERT_NE(dynamic_cast<Adam*>(adamw.get()), nullptr);
    EXPECT_TRUE(dynamic_cast<Adam*>(adamw.get())->decoupled_weight_decay());
    EXPECT_FALSE(Adam(cfg("adam", 0.1)).decoupled_weight_decay());
    EXPECT_THROW(Sgd(cfg("adam", 0.1)), ConfigError);
    EXPECT_THROW(Adam(cfg("sgd", 0.1)), ConfigError);
    EXPECT_THROW(Sgd(cfg("sgd", -0.1)), ConfigError);  // constructors validate too
}

// ---- the optimizer interface ----------------------------------------------------------------

int64_t optimizer_state_bytes(Device& dev) {
    return dev.allocator().stats().current[static_cast<size_t>(MemCategory::optimizer_state)];
}

struct StateCase {
    OptimizerConfig config;
    DType dtype;
    int64_t bytes;  // for 1024 elements (whole 64-byte blocks: no allocator rounding)
};

void PrintTo(const StateCase& c, std::ostream* os) {
    *os << c.config.type << " momentum " << c.config.momentum << " " << dtype_name(c.dtype);
}

class OptimizerState : public ::testing::TestWithParam<StateCase> {};

TEST_P(OptimizerState, IsAccountedAsOptimizerStateOnTheParametersDevice) {
    const auto& c = GetParam();
    OneParam w(std::vector<double>(1024, 1.0), c.dtype);
    w.set_grad(std::vector<double>(1024, 0.5));
    const auto params_before = w.dev->allocator().stats().current[0];
    {
        auto opt = make_optimizer(c.config);
        EXPECT_EQ(opt->state_bytes(), 0);  // lazily allocated
        EXPECT_EQ(optimizer_state_bytes(*w.dev), 0);
        opt->step(w.params(), c.config.lr);
        EXPECT_EQ(opt->state_bytes(), c.bytes);
        EXPECT_EQ(optimizer_state_bytes(*w.dev), c.bytes);
        opt->step(w.params(), c.config.lr);  // allocated once, not per step
        EXPECT_EQ(optimizer_state_bytes(*w.dev), c.bytes);
        for (const auto& s : opt->state()[0])
            EXPECT_EQ(s.category(), MemCategory::optimizer_state);
    }
    EXPECT_EQ(optimizer_state_bytes(*w.dev), 0);  // released with the optimizer
    EXPECT_EQ(w.dev->allocator().stats().current[0], params_before);
}

INSTANTIATE_TEST_SUITE_P(Kinds, OptimizerState,
                         ::testing::Values(StateCase{cfg("sgd", 0.1), DType::f32, 0},
                                           StateCase{cfg("sgd", 0.1, 0.9), DType::f32, 4096},
                                           StateCase{cfg("adam", 0.1), DType::f32, 8192},
                                           StateCase{cfg("adamw", 0.1), DType::f64, 16384}));

TEST(Optimizer, UsesTheLearningRateItIsGiven) {
    OneParam w({1.0});
    auto opt = make_optimizer(cfg("sgd", 0.1));
    w.set_grad({2.0});
    opt->step(w.params(), 0.25);  // the schedule's rate, not the config's
    EXPECT_DOUBLE_EQ(w.at(0), 0.5);
    opt->step(w.params(), 0.0);   // the end of a cosine schedule
    EXPECT_DOUBLE_EQ(w.at(0), 0.5);
    EXPECT_EQ(opt->steps_taken(), 2);
}

TEST(Optimizer, RefusesBadArgumentsBeforeChangingAnything) {
    OneParam a({1.0}), b({2.0, 3.0});
    auto opt = make_optimizer(cfg("sgd", 0.1, 0.9));
    a.set_grad({1.0});
    opt->step(a.params(), 0.1);
    const double a1 = a.at(0);
    const auto expect_refused = [&](std::vector<nn::Param*> params, double lr, const char* what) {
        try {
            opt->step(params, lr);
            ADD_FAILURE() << "no error for " << what;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
        }
        EXPECT_EQ(opt->steps_taken(), 1);
        EXPECT_EQ(a.at(0), a1);
    };
    expect_refused({&a.p, &b.p}, 0.1, "given 2 parameters, but it updates 1");
    expect_refused({&b.p}, 0.1, "is [2] f64, but was [1] f64");
    expect_refused({&a.p}, -0.1, "learning rate -0.1");
    expect_refused({&a.p}, std::numeric_limits<double>::quiet_NaN(), "learning rate nan");

    nn::Param no_grad{"bias", a.p.value, Tensor()};
    expect_refused({&no_grad}, 0.1, "parameter 0 ('bias') [1] f64 has no gradient");
    nn::Param wrong_dtype{"w", a.p.value, Tensor::zeros(Shape{1}, DType::f32, *a.dev,
                                                        MemCategory::gradients)};
    expect_refused({&wrong_dtype}, 0.1, "has no gradient of its shape and dtype");
}

TEST(Optimizer, AnEmptyShardStaysEmpty) {
    // A ZeRO device with no parameters still steps (its count stays in line with the others').
    auto opt = make_optimizer(cfg("adam", 0.1));
    opt->step({}, 0.1);
    opt->step({}, 0.1);
    EXPECT_EQ(opt->steps_taken(), 2);
    EXPECT_EQ(opt->state_bytes(), 0);
    OneParam w({1.0});
    EXPECT_THROW(opt->step(w.params(), 0.1), Error);
}

TEST(Optimizer, RefusesStorageTypes) {
    auto dev = make_cpu_device(0);
    nn::Param p{"w", Tensor::zeros(Shape{4}, DType::bf16, *dev, MemCategory::parameters),
                Tensor::zeros(Shape{4}, DType::bf16, *dev, MemCategory::gradients)};
    auto opt = make_optimizer(cfg("adam", 0.1));
    EXPECT_THROW(opt->step({&p}, 0.1), Error);
    EXPECT_EQ(opt->steps_taken(), 0);
    EXPECT_EQ(opt->state_bytes(), 0);
}

TEST(Optimizer, LoadStateResumesExactly) {
    for (const char* type : {"sgd", "adam", "adamw"}) {
        SCOPED_TRACE(type);
        const OptimizerConfig c = cfg(type, 0.05, std::string(type) == "sgd" ? 0.9 : 0.0, false, 0.1);
        OneParam a({1.0, -2.0, 0.5}), b({1.0, -2.0, 0.5});
        auto first = make_optimizer(c);
        for (size_t s = 0; s < 2; ++s) {
            a.set_grad(kGrads[s]);
            first->step(a.params(), c.lr);
        }
        // b resumes from a's checkpoint.
        b.p.value.copy_from(a.p.value);
        auto resumed = make_optimizer(c);
        resumed->load_state(b.params(), first->state(), first->steps_taken());
        EXPECT_EQ(resumed->steps_taken(), 2);
        EXPECT_EQ(resumed->state_bytes(), first->state_bytes());
        EXPECT_FALSE(resumed->state()[0][0].same_storage(first->state()[0][0]));  // a copy
        a.set_grad(kGrads[2]);
        b.set_grad(kGrads[2]);
        first->step(a.params(), c.lr);
        resumed->step(b.params(), c.lr);
        for (size_t i = 0; i < 3; ++i) EXPECT_EQ(a.at(i), b.at(i));

        // A checkpoint that does not fit is refused and leaves the optimizer as it was.
        OneParam other({1.0, 2.0});
        EXPECT_THROW(resumed->load_state(other.params(), first->state(), 2), Error);
        EXPECT_THROW(resumed->load_state(b.params(), {}, 2), Error);
        EXPECT_EQ(resumed->steps_taken(), 3);
    }
}

// ---- validation ----------------------------------------------------------------------------

struct BadConfig {
    const char* name;
    OptimizerConfig config;
    const char* message;
};
void PrintTo(const BadConfig& c, std::ostream* os) { *os << c.name; }
class OptimizerValidation : public ::testing::TestWithParam<BadConfig> {};
TEST_P(OptimizerValidation, NamesTheField) {
    try {
        make_optimizer(GetParam().config);
        FAIL() << "accepted";
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find(GetParam().message), std::string::npos) << e.what();
    }
}
INSTANTIATE_TEST_SUITE_P(
    Table, OptimizerValidation,
    ::testing::Values(
        BadConfig{"lr_negative", cfg("sgd", -1), "optimizer.lr: expected a positive number, got -1"},
        BadConfig{"lr_zero", cfg("adam", 0), "optimizer.lr: expected a positive number, got 0"},
        BadConfig{"lr_nan", cfg("sgd", std::nan("")), "optimizer.lr: expected a positive number"},
        BadConfig{"momentum_one", cfg("sgd", 0.1, 1.0), "optimizer.momentum: expected a number in [0, 1), got 1"},
        BadConfig{"momentum_negative", cfg("sgd", 0.1, -0.1), "optimizer.momentum"},
        BadConfig{"nesterov_without_momentum", cfg("sgd", 0.1, 0, true), "optimizer.nesterov"},
        BadConfig{"weight_decay_negative", cfg("adam", 0.1, 0, false, -0.5),
                  "optimizer.weight_decay: expected a non-negative number, got -0.5"},
        BadConfig{"beta1_one", adam_cfg("adam", 0.1, 1.0, 0.999, 1e-8, 0),
                  "optimizer.betas: expected two numbers in [0, 1), got [1, 0.999]"},
        BadConfig{"beta2_negative", adam_cfg("adamw", 0.1, 0.9, -0.1, 1e-8, 0), "optimizer.betas"},
        BadConfig{"eps_zero", adam_cfg("adam", 0.1, 0.9, 0.999, 0, 0), "optimizer.eps"},
        BadConfig{"type_unknown", cfg("rmsprop", 0.1), "optimizer.type: unknown optimizer 'rmsprop'"}),
    [](const auto& info) { return std::string(info.param.name); });

// ---- schedules -----------------------------------------------------------------------------

ScheduleConfig sched(std::string type, int64_t step_size = 1, double gamma = 0.1, int64_t warmup = 0) {
    ScheduleConfig c;
    c.type = std::move(type);
    c.step_size = step_size;
    c.gamma = gamma;
    c.warmup_steps = warmup;
    return c;
}

TEST(Schedule, Constant) {
    auto s = make_schedule(sched("constant"), 0.1, 100);
    EXPECT_DOUBLE_EQ(s->lr_at(0), 0.1);
    EXPECT_DOUBLE_EQ(s->lr_at(57), 0.1);
    EXPECT_DOUBLE_EQ(s->lr_at(1000), 0.1);
}

TEST(Schedule, StepDecaysEveryStepSize) {
    auto s = make_schedule(sched("step", 10, 0.5), 0.1, 100);
    EXPECT_DOUBLE_EQ(s->lr_at(0), 0.1);
    EXPECT_DOUBLE_EQ(s->lr_at(9), 0.1);
    EXPECT_DOUBLE_EQ(s->lr_at(10), 0.05);
    EXPECT_DOUBLE_EQ(s->lr_at(19), 0.05);
    EXPECT_DOUBLE_EQ(s->lr_at(25), 0.025);
    EXPECT_DOUBLE_EQ(make_schedule(sched("step", 1, 0.1), 1.0, 10)->lr_at(3), 1e-3);
}

TEST(Schedule, CosineWithWarmup) {
    auto s = make_schedule(sched("cosine", 1, 0.1, 4), 1.0, 104);
    EXPECT_DOUBLE_EQ(s->lr_at(0), 0.25);  // (0 + 1) / 4: the first step already learns
    EXPECT_DOUBLE_EQ(s->lr_at(1), 0.5);
    EXPECT_DOUBLE_EQ(s->lr_at(3), 1.0);
    EXPECT_DOUBLE_EQ(s->lr_at(4), 1.0);   // cosine from the top
    EXPECT_NEAR(s->lr_at(29), 0.5 * (1 + std::cos(std::numbers::pi * 0.25)), 1e-15);
    EXPECT_NEAR(s->lr_at(54), 0.5, 1e-15);
    EXPECT_NEAR(s->lr_at(103), 0.5 * (1 + std::cos(std::numbers::pi * 0.99)), 1e-15);
    EXPECT_EQ(s->lr_at(104), 0.0);
    EXPECT_EQ(s->lr_at(500), 0.0);        // past the end: stays at 0, never negative
    double previous = s->lr_at(4);
    for (int64_t t = 5; t <= 110; ++t) {
        const double lr = s->lr_at(t);
        EXPECT_LE(lr, previous) << t;
        EXPECT_GE(lr, 0.0) << t;
        previous = lr;
    }
}

TEST(Schedule, CosineWithoutWarmupMatchesCosineAnnealing) {
    // torch.optim.lr_scheduler.CosineAnnealingLR(T_max=10, eta_min=0) closed form.
    auto s = make_schedule(sched("cosine"), 0.1, 10);
    EXPECT_DOUBLE_EQ(s->lr_at(0), 0.1);
    EXPECT_NEAR(s->lr_at(3), 0.05 * (1 + std::cos(std::numbers::pi * 0.3)), 1e-16);
    EXPECT_NEAR(s->lr_at(5), 0.05, 1e-16);
    // A one-step run: span max(1, 1 - 0) keeps the division defined.
    EXPECT_DOUBLE_EQ(make_schedule(sched("cosine"), 0.1, 1)->lr_at(0), 0.1);
    EXPECT_DOUBLE_EQ(make_schedule(sched("cosine"), 0.1, 0)->lr_at(0), 0.1);
}

struct BadSchedule {
    const char* name;
    ScheduleConfig config;
    double base_lr;
    const char* message;
};
void PrintTo(const BadSchedule& c, std::ostream* os) { *os << c.name; }
class ScheduleValidation : public ::testing::TestWithParam<BadSchedule> {};
TEST_P(ScheduleValidation, NamesTheField) {
    try {
        make_schedule(GetParam().config, GetParam().base_lr, 100);
        FAIL() << "accepted";
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find(GetParam().message), std::string::npos) << e.what();
    }
}
INSTANTIATE_TEST_SUITE_P(
    Table, ScheduleValidation,
    ::testing::Values(
        BadSchedule{"step_size_zero", sched("step", 0), 0.1,
                    "schedule.step_size: expected a positive integer, got 0"},
        BadSchedule{"gamma_zero", sched("step", 5, 0.0), 0.1, "schedule.gamma"},
        BadSchedule{"warmup_negative", sched("cosine", 1, 0.1, -1), 0.1, "schedule.warmup_steps"},
        BadSchedule{"type_unknown", sched("linear"), 0.1, "schedule.type: unknown schedule 'linear'"},
        BadSchedule{"base_lr_zero", sched("constant"), 0.0, "optimizer.lr"}),
    [](const auto& info) { return std::string(info.param.name); });

// ---- clipping ------------------------------------------------------------------------------

TEST(Clip, ScalesToTheMaxNorm) {
    for (DType dtype : {DType::f64, DType::f32}) {
        OneParam w({0.0, 0.0}, dtype);
        w.set_grad({3.0, 4.0});
        EXPECT_DOUBLE_EQ(clip_grad_norm(w.params(), 1.0), 5.0);  // the norm before clipping
        const auto g = values_of(w.p.grad);
        EXPECT_NEAR(g[0], 0.6, 1e-6);
        EXPECT_NEAR(g[1], 0.8, 1e-6);
        EXPECT_NEAR(global_grad_norm(w.params()), 1.0, 1e-6);
    }
}

TEST(Clip, UnderTheLimitLeavesGradientsAlone) {
    OneParam w({0.0, 0.0});
    w.set_grad({0.3, 0.4});
    EXPECT_DOUBLE_EQ(clip_grad_norm(w.params(), 1.0), 0.5);
    EXPECT_EQ(w.p.grad.data<double>()[0], 0.3);
    EXPECT_EQ(w.p.grad.data<double>()[1], 0.4);
    w.set_grad({0.0, 0.0});
    EXPECT_EQ(clip_grad_norm(w.params(), 1.0), 0.0);
}

TEST(Clip, MatchesTorchOverSeveralParameters) {
    // torch.nn.utils.clip_grad_norm_([p1, p2], 2.0) with p1.grad = [1, -2], p2.grad = [2, .5, -4]
    OneParam a({0, 0}), b({0, 0, 0});
    a.set_grad({1, -2});
    b.set_grad({2, 0.5, -4});
    std::vector<nn::Param*> both{&a.p, &b.p};
    EXPECT_NEAR(clip_grad_norm(both, 2.0), 5.024937810560445, 1e-15);
    const std::vector<double> ga{0.39801479687609065, -0.7960295937521813};
    const std::vector<double> gb{0.7960295937521813, 0.19900739843804532, -1.5920591875043626};
    for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(values_of(a.p.grad)[i], ga[i], 1e-15);
    for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(values_of(b.p.grad)[i], gb[i], 1e-15);
}

TEST(Clip, WithATotalNormFromSeveralDevices) {
    // Two shards on two devices: the all-reduced squared norm is the sum of the shards'.
    OneParam a({0, 0}), b({0, 0, 0});
    a.set_grad({1, -2});
    b.set_grad({2, 0.5, -4});
    const double total = std::sqrt(grad_sq_norm(a.params()) + grad_sq_norm(b.params()));
    EXPECT_DOUBLE_EQ(grad_sq_norm(a.params()), 5.0);
    const double coef = 2.0 / (total + 1e-6);
    EXPECT_DOUBLE_EQ(clip_grads_with_norm(a.params(), total, 2.0), coef);
    EXPECT_DOUBLE_EQ(clip_grads_with_norm(b.params(), total, 2.0), coef);
    EXPECT_NEAR(values_of(a.p.grad)[1], -0.7960295937521813, 1e-15);
    EXPECT_NEAR(values_of(b.p.grad)[2], -1.5920591875043626, 1e-15);
    EXPECT_EQ(clip_grads_with_norm(a.params(), 0.5, 2.0), 1.0);  // under the limit: untouched
    EXPECT_NEAR(values_of(a.p.grad)[1], -0.7960295937521813, 1e-15);
    scale_grads(a.params(), -2.0);
    EXPECT_NEAR(values_of(a.p.grad)[1], 1.5920591875043626, 1e-15);
}

TEST(Clip, CoefficientIsTorchs) {
    EXPECT_EQ(clip_coefficient(0.5, 1.0), 1.0);
    EXPECT_EQ(clip_coefficient(0.0, 1.0), 1.0);
    EXPECT_DOUBLE_EQ(clip_coefficient(4.0, 1.0), 1.0 / (4.0 + 1e-6));
    EXPECT_LT(clip_coefficient(1.0, 1.0), 1.0);  // the 1e-6 in the denominator
    EXPECT_EQ(clip_coefficient(INFINITY, 1.0), 1.0);
    EXPECT_EQ(clip_coefficient(0.0, 0.0), 0.0);
    EXPECT_THROW(clip_coefficient(1.0, -1.0), Error);
    EXPECT_THROW(clip_coefficient(1.0, std::nan("")), Error);
}

TEST(Clip, NonFiniteNormIsReturnedAndGradientsAreLeftAlone) {
    for (double bad : {std::nan(""), double(INFINITY)}) {
        OneParam w({0.0, 0.0});
        w.set_grad({bad, 1.0});
        const double norm = clip_grad_norm(w.params(), 1.0);
        EXPECT_FALSE(std::isfinite(norm));
        EXPECT_EQ(std::isnan(norm), std::isnan(bad));
        EXPECT_EQ(w.p.grad.data<double>()[1], 1.0);
    }
}

TEST(Clip, RefusesAParameterWithoutGradient) {
    OneParam w({1.0});
    nn::Param no_grad{"bias", w.p.value, Tensor()};
    std::vector<nn::Param*> params{&no_grad};
    EXPECT_THROW(grad_sq_norm(params), Error);
    EXPECT_THROW(scale_grads(params, 0.5), Error);
}

// ---- fused kernels against a plain reference ------------------------------------------------

// Large enough for the parallel loops (and several sum blocks), odd for the tails.
constexpr int64_t kN = 100'003;

template <class T>
std::vector<T> random_values(uint64_t seed, double lo, double hi) {
    Rng rng(seed);
    std::vector<T> v(kN);
    for (auto& x : v) x = static_cast<T>(rng.uniform(lo, hi));
    return v;
}

// Runs `kernel` on copies of the inputs with 1 and with 3 threads: the results must be
// bit-identical (no thread-dependent rounding).
template <class T, class Kernel>
std::vector<std::vector<T>> run_on_threads(std::vector<std::vector<T>> arrays, Kernel kernel) {
    auto single = arrays;
    kernels::cpu::set_num_threads(1);
    kernel(single);
    kernels::cpu::set_num_threads(3);
    kernel(arrays);
    kernels::cpu::set_num_threads(1);
    for (size_t k = 0; k < arrays.size(); ++k) EXPECT_TRUE(arrays[k] == single[k]) << "array " << k;
    return arrays;
}

template <class T>
class FusedKernels : public ::testing::Test {
protected:
    static constexpr double tol = std::is_same_v<T, float> ? 2e-6 : 1e-14;
};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(FusedKernels, FloatTypes);

TYPED_TEST(FusedKernels, SgdMomentumNesterovMatchesReference) {
    using T = TypeParam;
    const auto p0 = random_values<T>(1, -1, 1), g = random_values<T>(2, -1, 1),
               b0 = random_values<T>(3, -1, 1);
    const double lr = 0.1, mu = 0.9, wd = 0.01;
    auto out = run_on_threads<T>({p0, b0}, [&](auto& a) {
        kernels::cpu::sgd_momentum_update<T>(kN, a[0].data(), g.data(), a[1].data(), lr, mu, wd,
                                             true, false);
    });
    for (int64_t i = 0; i < kN; i += 97) {
        const double d = double(g[i]) + wd * p0[i], b = mu * b0[i] + d;
        EXPECT_NEAR(out[1][i], b, this->tol) << i;
        EXPECT_NEAR(out[0][i], p0[i] - lr * (d + mu * b), this->tol) << i;
    }
}

TYPED_TEST(FusedKernels, AdamAndAdamWMatchReference) {
    using T = TypeParam;
    const auto p0 = random_values<T>(4, -1, 1), g = random_values<T>(5, -1, 1),
               m0 = random_values<T>(6, -0.1, 0.1), v0 = random_values<T>(7, 0, 0.01);
    const double lr = 1e-3, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.05;
    const int64_t t = 7;
    for (bool decoupled : {false, true}) {
        auto out = run_on_threads<T>({p0, m0, v0}, [&](auto& a) {
            auto* fn = decoupled ? &kernels::cpu::adamw_update<T> : &kernels::cpu::adam_update<T>;
            fn(kN, a[0].data(), g.data(), a[1].data(), a[2].data(), lr, b1, b2, eps, wd, t);
        });
        for (int64_t i = 0; i < kN; i += 97) {
            double p = p0[i], d = g[i];
            if (decoupled) p *= 1 - lr * wd;
            else d += wd * p;
            const double m = b1 * m0[i] + (1 - b1) * d, v = b2 * v0[i] + (1 - b2) * d * d;
            p -= lr * (m / (1 - std::pow(b1, t))) / (std::sqrt(v / (1 - std::pow(b2, t))) + eps);
            EXPECT_NEAR(out[1][i], m, this->tol) << i;
            EXPECT_NEAR(out[2][i], v, this->tol) << i;
            EXPECT_NEAR(out[0][i], p, this->tol) << i << (decoupled ? " adamw" : " adam");
        }
    }
}

TYPED_TEST(FusedKernels, SumOfSquaresIsThreadCountIndependent) {
    using T = TypeParam;
    const auto x = random_values<T>(8, -2, 2);
    kernels::cpu::set_num_threads(1);
    const double one = kernels::cpu::sum_of_squares<T>(kN, x.data());
    kernels::cpu::set_num_threads(3);
    const double three = kernels::cpu::sum_of_squares<T>(kN, x.data());
    kernels::cpu::set_num_threads(1);
    EXPECT_EQ(one, three);
    long double reference = 0;
    for (T v : x) reference += static_cast<long double>(v) * v;
    EXPECT_NEAR(one, static_cast<double>(reference), 1e-9 * one);
    EXPECT_EQ(kernels::cpu::sum_of_squares<T>(0, x.data()), 0.0);
}

}  // namespace
