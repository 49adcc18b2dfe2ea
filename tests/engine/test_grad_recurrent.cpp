// LSTM and GRU: gradients against finite differences (one GradCase row per variant), then the
// PyTorch correspondence (parameter names, shapes, order and counts; outputs for fixed weights,
// both computed by hand from the gate equations and taken from torch.nn), shapes and errors.
#include <gtest/gtest.h>
#include <kernels/cpu/recurrent.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "engine/device/device.h"
#include "engine/nn/recurrent.h"
#include "engine/util/rng.h"
#include "gradcheck.h"

using namespace paralab;
using nn::Mode;
namespace pt = paralab::testing;
using pt::GradCase;

namespace {

template <class L>
std::function<std::unique_ptr<nn::Layer>()> make(int64_t hidden, int64_t layers, bool sequence) {
    return [=] { return std::make_unique<L>(hidden, layers, sequence); };
}

// ---- gradient checks --------------------------------------------------------------------
// Input shapes are [T, F]. "batch5_steps3" has more samples than steps, so the recurrent
// weight gradient takes its per-step GEMM path; the other rows take the per-sample path.

template <class L>
auto recurrent_cases() {
    return ::testing::Values(GradCase{"l1_last", make<L>(5, 1, false), Shape{4, 3}},
                             GradCase{"l1_sequence", make<L>(5, 1, true), Shape{4, 3}},
                             GradCase{"l2_last", make<L>(4, 2, false), Shape{4, 3}},
                             GradCase{"l3_sequence", make<L>(3, 3, true), Shape{4, 2}},
                             GradCase{"steps1_last", make<L>(4, 1, false), Shape{1, 3}},
                             GradCase{"steps1_l2_sequence", make<L>(3, 2, true), Shape{1, 2}},
                             GradCase{"batch1_sequence", make<L>(4, 2, true), Shape{5, 3}, 1},
                             GradCase{"odd_T5_F3_H4", make<L>(4, 1, false), Shape{5, 3}, 3},
                             GradCase{"hidden1", make<L>(1, 2, true), Shape{3, 2}},
                             GradCase{"batch5_steps3", make<L>(3, 2, true), Shape{3, 2}, 5});
}

class LstmGrad : public ::testing::TestWithParam<GradCase> {};
TEST_P(LstmGrad, MatchesFiniteDifferences) {
    pt::check_layer_gradients(GetParam());
}
INSTANTIATE_TEST_SUITE_P(Grad, LstmGrad, recurrent_cases<nn::LSTM>(), pt::GradCaseName{});

class GruGrad : public ::testing::TestWithParam<GradCase> {};
TEST_P(GruGrad, MatchesFiniteDifferences) {
    pt::check_layer_gradients(GetParam());
}
INSTANTIATE_TEST_SUITE_P(Grad, GruGrad, recurrent_cases<nn::GRU>(), pt::GradCaseName{});

// ---- helpers ----------------------------------------------------------------------------

struct Built {
    std::unique_ptr<Device> device = make_cpu_device(0);
    std::unique_ptr<nn::Layer> layer;
};

template <class L>
Built build(int64_t hidden, int64_t layers, bool sequence, const Shape& input,
            DType dtype = DType::f64) {
    Built b;
    b.layer = std::make_unique<L>(hidden, layers, sequence);
    b.layer->set_label("layer 2 (" + b.layer->type() + ")");
    b.layer->build(input, dtype, *b.device);
    return b;
}

Tensor input_tensor(const Built& b, const Shape& shape, const std::vector<double>& values) {
    Tensor x = Tensor::empty(shape, DType::f64, *b.device, MemCategory::activations);
    EXPECT_EQ(x.numel(), static_cast<int64_t>(values.size()));
    for (int64_t i = 0; i < x.numel(); ++i) x.data<double>()[i] = values[static_cast<size_t>(i)];
    return x;
}

void set_param(nn::Param* p, const std::vector<double>& values) {
    ASSERT_EQ(p->value.numel(), static_cast<int64_t>(values.size())) << p->name;
    for (int64_t i = 0; i < p->value.numel(); ++i)
        p->value.data<double>()[i] = values[static_cast<size_t>(i)];
}

double sigmoid(double v) {
    return 1.0 / (1.0 + std::exp(-v));
}

// ---- the gate equations, by hand (H = 1, F = 1, T = 2, batch 1) ----------------------------
// Every gate gets different weights, so exchanging two gates (or the two biases' roles, or
// the GRU's r and z) changes the output. Two steps make f and W_hh count.

TEST(LstmValues, MatchGateEquationsByHand) {
    Built b = build<nn::LSTM>(1, 1, true, Shape{2, 1});
    auto ps = b.layer->parameters();
    //             i      f     g     o
    const double wi[4] = {0.7, -0.4, 1.3, 0.2};   // weight_ih_l0
    const double wh[4] = {-0.5, 0.9, 0.6, -1.1};  // weight_hh_l0
    const double bi[4] = {0.1, 0.8, -0.3, 0.4};   // bias_ih_l0
    const double bh[4] = {-0.2, 0.3, 0.5, 0.6};   // bias_hh_l0
    set_param(ps[0], {wi[0], wi[1], wi[2], wi[3]});
    set_param(ps[1], {wh[0], wh[1], wh[2], wh[3]});
    set_param(ps[2], {bi[0], bi[1], bi[2], bi[3]});
    set_param(ps[3], {bh[0], bh[1], bh[2], bh[3]});
    const double xs[2] = {0.9, -1.7};
    Tensor y = b.layer->forward(input_tensor(b, Shape{1, 2, 1}, {xs[0], xs[1]}), Mode::train);

    double h = 0, c = 0;
    for (int t = 0; t < 2; ++t) {
        auto pre = [&](int k) { return wi[k] * xs[t] + bi[k] + wh[k] * h + bh[k]; };
        const double i = sigmoid(pre(0)), f = sigmoid(pre(1)), g = std::tanh(pre(2)),
                     o = sigmoid(pre(3));
        c = f * c + i * g;
        h = o * std::tanh(c);
        EXPECT_NEAR(y.data<double>()[t], h, 1e-14) << "step " << t;
    }
}

TEST(GruValues, MatchGateEquationsByHand) {
    Built b = build<nn::GRU>(1, 1, true, Shape{2, 1});
    auto ps = b.layer->parameters();
    //             r      z     n
    const double wi[3] = {0.7, -0.4, 1.3};
    const double wh[3] = {-0.5, 0.9, 0.6};
    const double bi[3] = {0.1, 0.8, -0.3};
    const double bh[3] = {-0.2, 0.3, 0.5};
    set_param(ps[0], {wi[0], wi[1], wi[2]});
    set_param(ps[1], {wh[0], wh[1], wh[2]});
    set_param(ps[2], {bi[0], bi[1], bi[2]});
    set_param(ps[3], {bh[0], bh[1], bh[2]});
    const double xs[2] = {0.9, -1.7};
    Tensor y = b.layer->forward(input_tensor(b, Shape{1, 2, 1}, {xs[0], xs[1]}), Mode::train);

    double h = 0;
    for (int t = 0; t < 2; ++t) {
        const double r = sigmoid(wi[0] * xs[t] + bi[0] + wh[0] * h + bh[0]);
        const double z = sigmoid(wi[1] * xs[t] + bi[1] + wh[1] * h + bh[1]);
        const double n = std::tanh(wi[2] * xs[t] + bi[2] + r * (wh[2] * h + bh[2]));
        h = (1 - z) * n + z * h;
        EXPECT_NEAR(y.data<double>()[t], h, 1e-14) << "step " << t;
    }
}

// ---- torch.nn outputs for fixed weights ---------------------------------------------------
// Generated with torch 1.13 in float64: torch.nn.LSTM / GRU(3, 2, num_layers=2,
// batch_first=True), the j-th element of the k-th parameter of named_parameters() set to
// 0.5 sin(0.37 (j + 1) + 1.1 (k + 1)), x[b, t, f] (flat index i) = cos(0.5 (i + 1)), B = 2, T = 3.

template <class L>
void expect_matches_torch(const std::vector<double>& expected) {
    Built b = build<L>(2, 2, true, Shape{3, 3});
    auto ps = b.layer->parameters();
    for (size_t k = 0; k < ps.size(); ++k) {
        double* v = ps[k]->value.template data<double>();
        for (int64_t j = 0; j < ps[k]->value.numel(); ++j)
            v[j] = 0.5 *
                   std::sin(0.37 * static_cast<double>(j + 1) + 1.1 * static_cast<double>(k + 1));
    }
    std::vector<double> xs;
    for (int i = 0; i < 2 * 3 * 3; ++i) xs.push_back(std::cos(0.5 * (i + 1)));
    Tensor x = input_tensor(b, Shape{2, 3, 3}, xs);
    Tensor y = b.layer->forward(x, Mode::train);
    ASSERT_EQ(y.shape(), (Shape{2, 3, 2}));
    for (int64_t i = 0; i < y.numel(); ++i)
        EXPECT_NEAR(y.data<double>()[i], expected[static_cast<size_t>(i)], 1e-13)
            << "y[" << i << "]";

    // The same weights with return = last give the top layer's last step.
    Built last = build<L>(2, 2, false, Shape{3, 3});
    auto pl = last.layer->parameters();
    for (size_t k = 0; k < ps.size(); ++k) pl[k]->value.copy_from(ps[k]->value);
    Tensor yl = last.layer->forward(input_tensor(last, Shape{2, 3, 3}, xs), Mode::train);
    ASSERT_EQ(yl.shape(), (Shape{2, 2}));
    for (int64_t bi = 0; bi < 2; ++bi)
        for (int64_t j = 0; j < 2; ++j)
            EXPECT_NEAR(yl.data<double>()[bi * 2 + j],
                        expected[static_cast<size_t>(bi * 6 + 4 + j)], 1e-13);
}

TEST(LstmValues, MatchTorchForFixedWeights) {
    expect_matches_torch<nn::LSTM>(
        {-0.10101634271942209, -0.11174655244870152, -0.14263017103017653, -0.13813962372955099,
         -0.15675830833351431, -0.14256982733042481, -0.095892512755060402, -0.11029678997922381,
         -0.14005979954072939, -0.14317985097850222, -0.15661970478768136, -0.14730898989141389});
}

TEST(GruValues, MatchTorchForFixedWeights) {
    expect_matches_torch<nn::GRU>(
        {-0.22194164742174669, -0.29912225003842041, -0.32070852226511104, -0.27482773398852528,
         -0.35463413241640601, -0.22452420925179212, -0.17635707855208688, -0.30866275510447916,
         -0.25109370365786438, -0.38359458900550791, -0.31988643025655217, -0.29864010272174646});
}

// ---- parameters, shapes, counts -----------------------------------------------------------

template <class L>
void expect_torch_parameters(int64_t gates) {
    Built b = build<L>(6, 3, false, Shape{7, 5});
    auto ps = b.layer->parameters();
    ASSERT_EQ(ps.size(), 12u);
    for (int64_t l = 0; l < 3; ++l) {
        const std::string s = "_l" + std::to_string(l);
        const size_t k = static_cast<size_t>(4 * l);
        EXPECT_EQ(ps[k]->name, "weight_ih" + s);
        EXPECT_EQ(ps[k]->value.shape(), (Shape{gates * 6, l == 0 ? 5 : 6}));
        EXPECT_EQ(ps[k + 1]->name, "weight_hh" + s);
        EXPECT_EQ(ps[k + 1]->value.shape(), (Shape{gates * 6, 6}));
        EXPECT_EQ(ps[k + 2]->name, "bias_ih" + s);
        EXPECT_EQ(ps[k + 2]->value.shape(), (Shape{gates * 6}));
        EXPECT_EQ(ps[k + 3]->name, "bias_hh" + s);
        EXPECT_EQ(ps[k + 3]->value.shape(), (Shape{gates * 6}));
        for (size_t j = k; j < k + 4; ++j) EXPECT_EQ(ps[j]->grad.shape(), ps[j]->value.shape());
    }
}

TEST(LstmShapes, ParameterNamesShapesAndOrderAreTorchs) {
    expect_torch_parameters<nn::LSTM>(4);
}
TEST(GruShapes, ParameterNamesShapesAndOrderAreTorchs) {
    expect_torch_parameters<nn::GRU>(3);
}

TEST(RecurrentShapes, ParameterCountsEqualTorchs) {
    // sum(p.numel() for p in torch.nn.LSTM / GRU(32, 128, num_layers).parameters())
    EXPECT_EQ(build<nn::LSTM>(128, 1, false, Shape{10, 32}).layer->parameter_count(), 82944);
    EXPECT_EQ(build<nn::LSTM>(128, 2, false, Shape{10, 32}).layer->parameter_count(), 215040);
    EXPECT_EQ(build<nn::GRU>(128, 1, false, Shape{10, 32}).layer->parameter_count(), 62208);
    EXPECT_EQ(build<nn::GRU>(128, 2, false, Shape{10, 32}).layer->parameter_count(), 161280);
}

TEST(RecurrentShapes, OutputShapesAndFlops) {
    Built lstm = build<nn::LSTM>(8, 2, false, Shape{6, 3});
    EXPECT_EQ(lstm.layer->type(), "lstm");
    EXPECT_EQ(lstm.layer->output_shape(), (Shape{8}));
    EXPECT_EQ(lstm.layer->flops_per_sample(), 2 * 6 * 4 * 8 * (3 + 8) + 2 * 6 * 4 * 8 * (8 + 8));
    Built gru = build<nn::GRU>(8, 2, true, Shape{6, 3});
    EXPECT_EQ(gru.layer->type(), "gru");
    EXPECT_EQ(gru.layer->output_shape(), (Shape{6, 8}));
    EXPECT_EQ(gru.layer->flops_per_sample(), 2 * 6 * 3 * 8 * (3 + 8) + 2 * 6 * 3 * 8 * (8 + 8));

    // Each layer's input on its own device: a layer keeps its last input for backward, and a
    // tensor must not outlive the device it lives on (gru's is destroyed before lstm).
    Tensor x_lstm = Tensor::zeros(Shape{4, 6, 3}, DType::f64, *lstm.device, MemCategory::activations);
    Tensor x_gru = Tensor::zeros(Shape{4, 6, 3}, DType::f64, *gru.device, MemCategory::activations);
    EXPECT_EQ(lstm.layer->forward(x_lstm, Mode::train).shape(), (Shape{4, 8}));
    EXPECT_EQ(gru.layer->forward(x_gru, Mode::eval).shape(), (Shape{4, 6, 8}));
}

TEST(RecurrentShapes, ResetDrawsWithinOneOverSqrtHidden) {
    auto check = [](const Built& b) {
        Rng rng(7);
        b.layer->reset_parameters(rng);
        for (nn::Param* p : b.layer->parameters()) {
            double lo = 1, hi = -1;
            for (double v : p->value.span<double>()) lo = std::min(lo, v), hi = std::max(hi, v);
            EXPECT_GE(lo, -0.25) << p->name;  // 1 / sqrt(16)
            EXPECT_LE(hi, 0.25) << p->name;
            EXPECT_LT(lo, -0.1) << p->name << " does not spread over the range";
            EXPECT_GT(hi, 0.1) << p->name << " does not spread over the range";
        }
    };
    check(build<nn::LSTM>(16, 2, false, Shape{3, 5}));
    check(build<nn::GRU>(16, 2, false, Shape{3, 5}));
}

// ---- backward contract --------------------------------------------------------------------

template <class L>
void expect_accumulates_and_skips_dx() {
    Built b = build<L>(3, 2, false, Shape{4, 2});
    Rng rng(3);
    b.layer->reset_parameters(rng);
    Tensor x = Tensor::empty(Shape{2, 4, 2}, DType::f64, *b.device, MemCategory::activations);
    for (double& v : x.span<double>()) v = rng.normal();
    Tensor dy = Tensor::empty(Shape{2, 3}, DType::f64, *b.device, MemCategory::activations);
    for (double& v : dy.span<double>()) v = rng.normal();

    b.layer->zero_grad();
    b.layer->forward(x, Mode::train);
    EXPECT_TRUE(b.layer->backward(dy).defined());
    std::vector<Tensor> once;
    for (nn::Param* p : b.layer->parameters())
        once.push_back(p->grad.clone(MemCategory::workspace));

    // A second step without zero_grad adds the same gradients again; without an input
    // gradient the layer still computes the lower layers' internal ones.
    b.layer->set_needs_input_grad(false);
    b.layer->forward(x, Mode::train);
    EXPECT_FALSE(b.layer->backward(dy).defined());
    auto ps = b.layer->parameters();
    for (size_t k = 0; k < ps.size(); ++k)
        for (int64_t i = 0; i < once[k].numel(); ++i)
            EXPECT_NEAR(ps[k]->grad.data<double>()[i], 2 * once[k].data<double>()[i], 1e-12)
                << ps[k]->name << "[" << i << "]";
    EXPECT_THROW(b.layer->backward(dy), Error);  // the saved state went with the first backward
}

TEST(LstmBackward, AccumulatesAndSkipsInputGradient) {
    expect_accumulates_and_skips_dx<nn::LSTM>();
}
TEST(GruBackward, AccumulatesAndSkipsInputGradient) {
    expect_accumulates_and_skips_dx<nn::GRU>();
}

// ---- the cell kernels against libm --------------------------------------------------------
// The kernels compute tanh from exp (with a series near 0); here every activation they leave
// behind is compared with std::tanh / std::exp in double, over pre-activations that cross the
// series' edge at |x| = 1/8 and reach where exp overflows. Rows are strided as in the layers.

template <class T>
void expect_cell_kernels_match_libm() {
    const int64_t B = 3, H = 37, ldg = 4 * H + 5, lds = H + 2;
    const double eps = std::numeric_limits<T>::epsilon();
    Rng rng(11);
    const double specials[] = {0.0,  1e-30, -1e-7, 0.1249, -0.1251, 0.125, 0.5,
                               -3.0, 20.0,  -40.0, 100.0,  -800.0,  1e4};
    std::vector<T> gates(static_cast<size_t>(B * ldg)), pre;
    for (size_t i = 0; i < gates.size(); ++i)
        gates[i] =
            static_cast<T>(i < 13 * 4 ? specials[i / 4] * (i % 2 ? 1 : -1) : 3.0 * rng.normal());
    pre = gates;
    std::vector<T> c_prev(static_cast<size_t>(B * lds)), c(c_prev.size()), tanh_c(c_prev.size()),
        h(c_prev.size());
    for (T& v : c_prev) v = static_cast<T>(2.0 * rng.normal());

    auto near = [&](double got, double want, double scale, const char* what, int64_t i) {
        // The floor: sigmoid(-100) in float is 0 where the double reference is subnormal.
        const double floor = std::numeric_limits<T>::min();
        EXPECT_LE(std::abs(got - want), 6 * eps * scale + floor)
            << what << "[" << i << "]: " << got << " vs libm " << want;
    };
    auto sig = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };

    paralab::kernels::cpu::lstm_cell_forward<T>(B, H, gates.data(), ldg, c_prev.data(), c.data(),
                                                tanh_c.data(), h.data(), lds);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < H; ++j) {
            const int64_t g = b * ldg + j, s = b * lds + j;
            const double act[4] = {sig(pre[g]), sig(pre[g + H]), std::tanh(double(pre[g + 2 * H])),
                                   sig(pre[g + 3 * H])};
            for (int k = 0; k < 4; ++k)
                near(gates[g + k * H], act[k], std::abs(act[k]), "gate", g + k * H);
            const double ig = double(gates[g]) * gates[g + 2 * H];
            const double fc = double(gates[g + H]) * c_prev[s];
            near(c[s], fc + ig, std::abs(fc) + std::abs(ig), "c", s);
            near(tanh_c[s], std::tanh(double(c[s])), std::abs(std::tanh(double(c[s]))), "tanh_c",
                 s);
            near(h[s], double(gates[g + 3 * H]) * tanh_c[s], std::abs(h[s]), "h", s);
        }

    // GRU: n = tanh(xn + r hn) carries the same tanh; hh is dense [B, 3H].
    std::vector<T> ggates(static_cast<size_t>(B * ldg)), hh(static_cast<size_t>(B * 3 * H)),
        hn(c_prev.size());
    for (size_t i = 0; i < ggates.size(); ++i)
        ggates[i] = static_cast<T>(i < 13 * 3 ? specials[i / 3] : 3.0 * rng.normal());
    for (T& v : hh) v = static_cast<T>(rng.normal());
    const std::vector<T> gpre = ggates;
    paralab::kernels::cpu::gru_cell_forward<T>(B, H, ggates.data(), ldg, hh.data(), c_prev.data(),
                                               hn.data(), h.data(), lds);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < H; ++j) {
            const int64_t g = b * ldg + j, s = b * lds + j, q = b * 3 * H + j;
            const double r = sig(double(gpre[g]) + hh[q]), z = sig(double(gpre[g + H]) + hh[q + H]);
            near(ggates[g], r, r + std::abs(gpre[g]) + std::abs(hh[q]), "r", g);
            near(ggates[g + H], z, z + std::abs(gpre[g + H]) + std::abs(hh[q + H]), "z", g);
            const double arg = double(gpre[g + 2 * H]) + double(ggates[g]) * hh[q + 2 * H];
            const double n = std::tanh(arg);
            near(ggates[g + 2 * H], n, std::abs(n) + std::abs(arg), "n", g);
            EXPECT_EQ(hn[s], hh[q + 2 * H]);
            const double want =
                (1 - double(ggates[g + H])) * ggates[g + 2 * H] + double(ggates[g + H]) * c_prev[s];
            near(h[s], want, 2 + std::abs(c_prev[s]), "h", s);
        }
}

TEST(RecurrentKernels, CellActivationsMatchLibmInFloat) {
    expect_cell_kernels_match_libm<float>();
}
TEST(RecurrentKernels, CellActivationsMatchLibmInDouble) {
    expect_cell_kernels_match_libm<double>();
}

// ---- errors ---------------------------------------------------------------------------------

template <class L>
void expect_shape_error(const Shape& input, const std::string& type) {
    auto device = make_cpu_device(0);
    L layer(4);
    layer.set_label("layer 2 (" + type + ")");
    try {
        layer.build(input, DType::f32, *device);
        FAIL() << "no ShapeError for " << input.to_string();
    } catch (const ShapeError& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("layer 2 (" + type + ")"), std::string::npos) << msg;
        EXPECT_NE(msg.find("[T, features]"), std::string::npos) << msg;
        EXPECT_NE(msg.find(input.to_string()), std::string::npos) << msg;
    }
}

TEST(RecurrentErrors, WrongInputRankIsAShapeError) {
    expect_shape_error<nn::LSTM>(Shape{12}, "lstm");
    expect_shape_error<nn::LSTM>(Shape{2, 3, 4}, "lstm");
    expect_shape_error<nn::GRU>(Shape{12}, "gru");
    expect_shape_error<nn::GRU>(Shape{1, 3, 4}, "gru");
}

TEST(RecurrentErrors, BadOptionsAreConfigErrors) {
    EXPECT_THROW(nn::LSTM(0), ConfigError);
    EXPECT_THROW(nn::LSTM(4, 0), ConfigError);
    EXPECT_THROW(nn::GRU(-1), ConfigError);
    EXPECT_THROW(nn::GRU(4, 0, true), ConfigError);
}

TEST(RecurrentErrors, WrongBatchInputIsAShapeError) {
    Built b = build<nn::GRU>(4, 1, false, Shape{5, 3}, DType::f32);
    Tensor x = Tensor::zeros(Shape{2, 5, 4}, DType::f32, *b.device, MemCategory::activations);
    EXPECT_THROW(b.layer->forward(x, Mode::train), ShapeError);
}

}  // namespace
