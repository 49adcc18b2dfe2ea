// vmath's exp, sigmoid and tanh (kernels/cpu/vmath.h) against libm's, in ulps, over a dense
// sweep of their whole range and the special values.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <kernels/cpu/vmath.h>

namespace {

namespace vm = paralab::kernels::cpu::vmath;

// Distance in units in the last place between two finite floats of the same sign (or zero).
int64_t ulps(float a, float b) {
    auto key = [](float v) {
        const int32_t i = std::bit_cast<int32_t>(v);
        return i < 0 ? int64_t{INT32_MIN} - i : int64_t{i};  // monotone in v
    };
    return std::abs(key(a) - key(b));
}

// Every float in [lo, hi] at a step of `step` floats, plus a million random ones.
std::vector<float> sweep(float lo, float hi) {
    std::vector<float> xs;
    for (float x = lo; x <= hi; x = std::nextafter(x, hi + 1) + (hi - lo) * 1e-7f) xs.push_back(x);
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(lo, hi);
    for (int i = 0; i < 1000000; ++i) xs.push_back(u(rng));
    return xs;
}

TEST(Vmath, ExpIsWithinTwoUlpsOfLibm) {
    int64_t worst = 0;
    float at = 0;
    for (float x : sweep(-87.33f, 88.72f)) {
        const float want = std::exp(x);
        if (!(want >= std::numeric_limits<float>::min())) continue;  // subnormal: tested below
        const int64_t d = ulps(vm::exp(x), want);
        if (d > worst) worst = d, at = x;
    }
    EXPECT_LE(worst, 2) << "at x = " << at;
}

TEST(Vmath, ExpAtTheEdgesAndSpecialValues) {
    const float inf = std::numeric_limits<float>::infinity();
    EXPECT_EQ(vm::exp(0.0f), 1.0f);
    EXPECT_EQ(vm::exp(89.0f), inf);
    EXPECT_EQ(vm::exp(1e30f), inf);
    EXPECT_EQ(vm::exp(inf), inf);
    EXPECT_EQ(vm::exp(-inf), 0.0f);
    EXPECT_EQ(vm::exp(-1e30f), 0.0f);
    EXPECT_TRUE(std::isnan(vm::exp(std::nanf(""))));
    EXPECT_TRUE(std::isfinite(vm::exp(88.72f)));
    // Below e^x = FLT_MIN libm returns subnormals and vmath 0: both under FLT_MIN.
    for (float x : {-87.4f, -90.0f, -103.0f, -104.0f}) {
        EXPECT_LT(vm::exp(x), std::numeric_limits<float>::min()) << x;
        EXPECT_GE(vm::exp(x), 0.0f) << x;
    }
}

// tanh: 3 ulps, the division rounding on top of exp's 2 (worst near |x| = 1).
TEST(Vmath, SigmoidWithinTwoAndTanhWithinThreeUlpsOfLibm) {
    int64_t worst_sig = 0, worst_tanh = 0;
    float at_sig = 0, at_tanh = 0;
    for (float x : sweep(-20.0f, 20.0f)) {
        const float sig = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(x))));
        const int64_t ds = ulps(vm::sigmoid(x), sig);
        if (ds > worst_sig) worst_sig = ds, at_sig = x;
        const int64_t dt = ulps(vm::tanh(x), std::tanh(x));
        if (dt > worst_tanh) worst_tanh = dt, at_tanh = x;
    }
    EXPECT_LE(worst_sig, 2) << "sigmoid at x = " << at_sig;
    EXPECT_LE(worst_tanh, 3) << "tanh at x = " << at_tanh;
}

TEST(Vmath, SigmoidAndTanhLimitsAndNaN) {
    const float inf = std::numeric_limits<float>::infinity();
    EXPECT_EQ(vm::sigmoid(-inf), 0.0f);
    EXPECT_EQ(vm::sigmoid(-200.0f), 0.0f);
    EXPECT_EQ(vm::sigmoid(inf), 1.0f);
    EXPECT_EQ(vm::sigmoid(50.0f), 1.0f);
    EXPECT_EQ(vm::sigmoid(0.0f), 0.5f);
    EXPECT_EQ(vm::tanh(inf), 1.0f);
    EXPECT_EQ(vm::tanh(-inf), -1.0f);
    EXPECT_EQ(vm::tanh(60.0f), 1.0f);
    EXPECT_EQ(vm::tanh(0.0f), 0.0f);
    EXPECT_TRUE(std::signbit(vm::tanh(-0.0f)));
    EXPECT_EQ(vm::tanh(1e-30f), 1e-30f);
    EXPECT_TRUE(std::isnan(vm::sigmoid(std::nanf(""))));
    EXPECT_TRUE(std::isnan(vm::tanh(std::nanf(""))));
}

// The point of vmath: a loop over it must give the scalar results element for element (the
// vectorized loop and the scalar remainder agree).
// The GELU's Phi and phi: absolute error against libm's erf and exp in double.
TEST(Vmath, NormalCdfAndPdfWithinFourTenMillionthsOfLibm) {
    double worst_cdf = 0, worst_pdf = 0;
    for (float x : sweep(-12.0f, 12.0f)) {
        const double want_cdf = 0.5 * (1.0 + std::erf(static_cast<double>(x) / std::sqrt(2.0)));
        const double want_pdf = std::exp(-0.5 * static_cast<double>(x) * x) / std::sqrt(2.0 * M_PI);
        worst_cdf = std::max(worst_cdf, std::abs(vm::normal_cdf(x) - want_cdf));
        worst_pdf = std::max(worst_pdf, std::abs(vm::normal_pdf(x) - want_pdf));
    }
    EXPECT_LE(worst_cdf, 4e-7);  // the formula's 0.75e-7, float rounding near 1 the rest
    EXPECT_LE(worst_pdf, 1e-7);
    EXPECT_EQ(vm::normal_cdf(0.0f), 0.5f);
    EXPECT_EQ(vm::normal_cdf(std::numeric_limits<float>::infinity()), 1.0f);
    EXPECT_EQ(vm::normal_cdf(-std::numeric_limits<float>::infinity()), 0.0f);
    EXPECT_TRUE(std::isnan(vm::normal_cdf(std::numeric_limits<float>::quiet_NaN())));
}

TEST(Vmath, LoopAndScalarAgree) {
    std::vector<float> x(1003), y(x.size());
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-30.0f, 30.0f);
    for (float& v : x) v = u(rng);
    x[5] = std::nanf("");
    x[6] = std::numeric_limits<float>::infinity();
#pragma omp simd
    for (size_t i = 0; i < x.size(); ++i) y[i] = vm::tanh(x[i]) + vm::sigmoid(x[i]);
    for (size_t i = 0; i < x.size(); ++i) {
        const float want = vm::tanh(x[i]) + vm::sigmoid(x[i]);
        if (std::isnan(want)) EXPECT_TRUE(std::isnan(y[i])) << i;
        else EXPECT_EQ(y[i], want) << i;
    }
}

}  // namespace
