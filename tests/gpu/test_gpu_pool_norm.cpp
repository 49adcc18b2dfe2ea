// Pooling (kernels/gpu/pool.h) and batch norm (kernels/gpu/norm.h) on the GPU against the CPU
// kernels they mirror (kernels/cpu/pool.h, kernels/cpu/norm.h), run on the same inputs. Max
// pool must equal the CPU bit for bit (values, argmax, gradient), with ties (values from a set
// of four) and NaNs (several in one window: the first wins) and overlapping windows (stride <
// kernel, whose backward gathers from several windows) and gaps (stride > kernel). The window
// averages, global average pool's backward and batch norm's two formulas round as the CPU
// does: bit for bit too. The double sums (global average, batch norm's channel sums) are
// summed in another order: within 1e-12 (f64) / 1e-6 (f32) of the CPU. Outputs are poisoned
// (NaN, argmax -1) first, so an unwritten element fails; reruns repeat bit for bit.
#include <gtest/gtest.h>
#include <kernels/cpu/norm.h>
#include <kernels/cpu/pool.h>
#include <kernels/gpu/norm.h>
#include <kernels/gpu/pool.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tests/gpu/gpu_testing.h"

using namespace paralab;
using namespace paralab::gpu_testing;
namespace kc = kernels::cpu;

namespace {

template <class T>
class GpuPoolNorm : public GpuTest {};
TYPED_TEST_SUITE(GpuPoolNorm, FloatTypes);

template <class T>
std::vector<T> nans(int64_t n) {
    return std::vector<T>(static_cast<size_t>(n), std::numeric_limits<T>::quiet_NaN());
}

// Equal bit patterns (a NaN equals the same NaN), with the first difference in the message.
template <class T>
::testing::AssertionResult same_bits(const std::vector<T>& got, const std::vector<T>& expected) {
    if (got.size() != expected.size())
        return ::testing::AssertionFailure() << "sizes differ: " << got.size() << " vs " << expected.size();
    for (size_t i = 0; i < got.size(); ++i)
        if (std::memcmp(&got[i], &expected[i], sizeof(T)) != 0)
            return ::testing::AssertionFailure() << "differs at " << i << ": computed " << +got[i] << ", expected "
                                                 << +expected[i] << " (of " << got.size() << ")";
    return ::testing::AssertionSuccess();
}

struct PoolCase {
    const char* name;
    int64_t planes, H, W, kernel, stride;
};

const PoolCase kPoolCases[] = {
    {"lenet_2x2", 64 * 16, 28, 28, 2, 2},     {"odd_2x2_drops_edge", 37, 13, 11, 2, 2},
    {"overlap_3s2", 21, 13, 11, 3, 2},         {"overlap_3s1", 9, 10, 12, 3, 1},
    {"gaps_2s3", 17, 14, 13, 2, 3},            {"k4s4", 8, 16, 16, 4, 4},
    {"one_window_5x5", 11, 5, 5, 5, 1},        {"k1s1", 6, 7, 9, 1, 1},
};

enum class Fill { normal, ties, nans };

const char* name_of(Fill f) { return f == Fill::normal ? "normal" : f == Fill::ties ? "ties" : "nans"; }

// Random inputs: normal values; values from {-1, 0, 1, 2} (many ties in every window); or
// normal values with 15% NaNs (windows with one, several, or only NaNs).
template <class T>
std::vector<T> pool_input(int64_t n, Fill fill, uint64_t seed) {
    std::vector<T> v = random_normal<T>(n, seed);
    std::mt19937_64 gen(seed + 17);
    if (fill == Fill::ties) {
        std::uniform_int_distribution<int> pick(-1, 2);
        for (T& x : v) x = static_cast<T>(pick(gen));
    } else if (fill == Fill::nans) {
        std::bernoulli_distribution nan(0.15);
        for (T& x : v)
            if (nan(gen)) x = std::numeric_limits<T>::quiet_NaN();
    }
    return v;
}

kc::Pool2dGeometry geometry(const PoolCase& pc) { return kc::Pool2dGeometry{pc.planes, pc.H, pc.W, pc.kernel, pc.stride}; }

}  // namespace

TYPED_TEST(GpuPoolNorm, MaxPoolEqualsCpuBitForBit) {
    using T = TypeParam;
    for (const PoolCase& pc : kPoolCases) {
        for (Fill fill : {Fill::normal, Fill::ties, Fill::nans}) {
            SCOPED_TRACE(std::string(pc.name) + ", " + name_of(fill));
            const auto g = geometry(pc);
            const int64_t in_n = g.planes * g.height * g.width, out_n = g.planes * g.out_height() * g.out_width();
            const auto x = pool_input<T>(in_n, fill, 11 + pc.planes);
            const auto dy = random_normal<T>(out_n, 12 + pc.planes);
            std::vector<T> y(out_n), dx(in_n);
            std::vector<int32_t> argmax(out_n);
            kc::maxpool2d_forward<T>(g, x.data(), y.data(), argmax.data());
            kc::maxpool2d_backward<T>(g, argmax.data(), dy.data(), dx.data());

            DeviceBuffer<T> d_x(x), d_dy(dy), d_y(nans<T>(out_n)), d_dx(nans<T>(in_n));
            DeviceBuffer<int32_t> d_argmax(std::vector<int32_t>(out_n, -1));
            kg::maxpool2d_forward<T>(g, d_x.get(), d_y.get(), d_argmax.get(), nullptr);
            kg::maxpool2d_backward<T>(g, d_argmax.get(), d_dy.get(), d_dx.get(), nullptr);
            EXPECT_TRUE(same_bits(d_y.download(), y));
            EXPECT_EQ(d_argmax.download(), argmax);
            EXPECT_TRUE(same_bits(d_dx.download(), dx));
            if (fill == Fill::nans) {  // the case is what it says: some windows did take a NaN
                EXPECT_TRUE(std::any_of(y.begin(), y.end(), [](T v) { return std::isnan(v); }));
            }
        }
    }
}

// The tie rule and the NaN rule on hand-made windows: one 4x4 plane, 2x2 windows.
TYPED_TEST(GpuPoolNorm, MaxPoolTiesAndNansTakeTheFirst) {
    using T = TypeParam;
    const T nan = std::numeric_limits<T>::quiet_NaN();
    const T neg_nan = -std::numeric_limits<T>::quiet_NaN();
    // Window 0 {1, 3, 3, 0}: the first 3 (index 1). Window 1 {2, NaN, NaN, -NaN}: the first
    // NaN (index 3). Window 2, all 5: index 8. Window 3, all -1: index 10.
    const std::vector<T> x = {1, 3, 2, nan,  //
                              3, 0, nan, neg_nan,
                              5, 5, -1, -1,
                              5, 5, -1, -1};
    const kc::Pool2dGeometry g{1, 4, 4, 2, 2};
    std::vector<T> y(4);
    std::vector<int32_t> argmax(4);
    kc::maxpool2d_forward<T>(g, x.data(), y.data(), argmax.data());
    ASSERT_EQ(argmax, (std::vector<int32_t>{1, 3, 8, 10}));  // the CPU rule itself
    DeviceBuffer<T> d_x(x), d_y(nans<T>(4));
    DeviceBuffer<int32_t> d_argmax(std::vector<int32_t>(4, -1));
    kg::maxpool2d_forward<T>(g, d_x.get(), d_y.get(), d_argmax.get(), nullptr);
    EXPECT_EQ(d_argmax.download(), argmax);
    EXPECT_TRUE(same_bits(d_y.download(), y));
}

TYPED_TEST(GpuPoolNorm, AvgPoolEqualsCpuBitForBit) {
    using T = TypeParam;
    for (const PoolCase& pc : kPoolCases) {
        SCOPED_TRACE(pc.name);
        const auto g = geometry(pc);
        const int64_t in_n = g.planes * g.height * g.width, out_n = g.planes * g.out_height() * g.out_width();
        const auto x = random_normal<T>(in_n, 21 + pc.planes), dy = random_normal<T>(out_n, 22 + pc.planes);
        std::vector<T> y(out_n), dx(in_n);
        kc::avgpool2d_forward<T>(g, x.data(), y.data());
        kc::avgpool2d_backward<T>(g, dy.data(), dx.data());
        DeviceBuffer<T> d_x(x), d_dy(dy), d_y(nans<T>(out_n)), d_dx(nans<T>(in_n));
        kg::avgpool2d_forward<T>(g, d_x.get(), d_y.get(), nullptr);
        kg::avgpool2d_backward<T>(g, d_dy.get(), d_dx.get(), nullptr);
        const auto gy = d_y.download(), gdx = d_dx.download();
        // The bound of the averages (1e-6 f32, 1e-12 f64) holds a fortiori: the order of
        // additions and the roundings are the CPU's.
        EXPECT_TRUE(close_to(gy, y, sizeof(T) == 4 ? 1e-6 : kFp64Tol));
        EXPECT_TRUE(close_to(gdx, dx, sizeof(T) == 4 ? 1e-6 : kFp64Tol));
        EXPECT_TRUE(same_bits(gy, y));
        EXPECT_TRUE(same_bits(gdx, dx));
    }
}

TYPED_TEST(GpuPoolNorm, GlobalAvgPoolMatchesCpu) {
    using T = TypeParam;
    for (int64_t plane_size : {int64_t{1}, int64_t{49}, int64_t{784}, int64_t{5000}}) {
        SCOPED_TRACE("plane_size " + std::to_string(plane_size));
        const int64_t planes = 37;
        const auto x = random_normal<T>(planes * plane_size, 31, 0.5, 2.0), dy = random_normal<T>(planes, 32);
        std::vector<T> y(planes), dx(planes * plane_size);
        kc::global_avgpool_forward<T>(planes, plane_size, x.data(), y.data());
        kc::global_avgpool_backward<T>(planes, plane_size, dy.data(), dx.data());
        DeviceBuffer<T> d_x(x), d_dy(dy), d_y(nans<T>(planes)), d_dx(nans<T>(planes * plane_size));
        kg::global_avgpool_forward<T>(planes, plane_size, d_x.get(), d_y.get(), nullptr);
        kg::global_avgpool_backward<T>(planes, plane_size, d_dy.get(), d_dx.get(), nullptr);
        EXPECT_TRUE(close_to(d_y.download(), y, sizeof(T) == 4 ? 1e-6 : kFp64Tol));
        EXPECT_TRUE(same_bits(d_dx.download(), dx));
    }
}

// Overlapping windows gather from several windows in a fixed order: a rerun gives the same bits.
TYPED_TEST(GpuPoolNorm, PoolBackwardRepeatsBitForBit) {
    using T = TypeParam;
    const auto g = geometry(kPoolCases[3]);  // 3x3, stride 1: up to 9 windows per input
    const int64_t in_n = g.planes * g.height * g.width, out_n = g.planes * g.out_height() * g.out_width();
    const auto x = pool_input<T>(in_n, Fill::ties, 41);
    const auto dy = random_normal<T>(out_n, 42);
    DeviceBuffer<T> d_x(x), d_dy(dy), d_y(out_n), d_dx1(in_n), d_dx2(in_n), d_dx3(in_n), d_dx4(in_n);
    DeviceBuffer<int32_t> d_argmax(out_n);
    kg::maxpool2d_forward<T>(g, d_x.get(), d_y.get(), d_argmax.get(), nullptr);
    kg::maxpool2d_backward<T>(g, d_argmax.get(), d_dy.get(), d_dx1.get(), nullptr);
    kg::maxpool2d_backward<T>(g, d_argmax.get(), d_dy.get(), d_dx2.get(), nullptr);
    kg::avgpool2d_backward<T>(g, d_dy.get(), d_dx3.get(), nullptr);
    kg::avgpool2d_backward<T>(g, d_dy.get(), d_dx4.get(), nullptr);
    EXPECT_TRUE(same_bits(d_dx1.download(), d_dx2.download()));
    EXPECT_TRUE(same_bits(d_dx3.download(), d_dx4.download()));
}

// ---- batch norm ------------------------------------------------------------------------------

namespace {

struct BnCase {
    int64_t N, C, S;
};

// [N, C, H*W] of a LeNet-sized conv, [N, C] (S = 1), short rows (S < 32: the flat walk), long
// rows, one element.
const BnCase kBnCases[] = {{64, 16, 196}, {1000, 37, 1}, {3, 5, 31}, {2, 3, 1000}, {1, 1, 1}, {7, 300, 2}};

std::string name_of(const BnCase& bc) {
    return "N " + std::to_string(bc.N) + ", C " + std::to_string(bc.C) + ", S " + std::to_string(bc.S);
}

}  // namespace

// The sums into DEVICE doubles, within double rounding of the CPU's; the formulas bit for bit.
TYPED_TEST(GpuPoolNorm, BatchNormMatchesCpu) {
    using T = TypeParam;
    for (const BnCase& bc : kBnCases) {
        SCOPED_TRACE(name_of(bc));
        const int64_t n = bc.N * bc.C * bc.S, C = bc.C;
        const auto x = random_normal<T>(n, 51, 0.5, 2.0), dy = random_normal<T>(n, 52);
        const auto mean = random_normal<T>(C, 53, 0.5, 0.1), scale = random_normal<T>(C, 54, 1.0, 0.3),
                   shift = random_normal<T>(C, 55), mean_dy = random_normal<T>(C, 56, 0.0, 0.1),
                   k = random_normal<T>(C, 57, 0.0, 0.1);
        std::vector<double> sum(C), sumsq(C), sum_dy(C), sum_dy_xmu(C);
        std::vector<T> y(n), dx(n);
        kc::batchnorm_channel_sums<T>(bc.N, C, bc.S, x.data(), sum.data(), sumsq.data());
        kc::batchnorm_normalize<T>(bc.N, C, bc.S, x.data(), mean.data(), scale.data(), shift.data(), y.data());
        kc::batchnorm_backward_sums<T>(bc.N, C, bc.S, x.data(), dy.data(), mean.data(), sum_dy.data(),
                                       sum_dy_xmu.data());
        kc::batchnorm_backward_input<T>(bc.N, C, bc.S, x.data(), dy.data(), mean.data(), scale.data(),
                                        mean_dy.data(), k.data(), dx.data());

        DeviceBuffer<T> d_x(x), d_dy(dy), d_mean(mean), d_scale(scale), d_shift(shift), d_mean_dy(mean_dy), d_k(k),
            d_y(nans<T>(n)), d_dx(nans<T>(n));
        DeviceBuffer<double> d_sum(nans<double>(C)), d_sumsq(nans<double>(C)), d_sum_dy(nans<double>(C)),
            d_sum_dy_xmu(nans<double>(C));
        kg::batchnorm_channel_sums<T>(bc.N, C, bc.S, d_x.get(), d_sum.get(), d_sumsq.get(), nullptr);
        kg::batchnorm_normalize<T>(bc.N, C, bc.S, d_x.get(), d_mean.get(), d_scale.get(), d_shift.get(), d_y.get(),
                                   nullptr);
        kg::batchnorm_backward_sums<T>(bc.N, C, bc.S, d_x.get(), d_dy.get(), d_mean.get(), d_sum_dy.get(),
                                       d_sum_dy_xmu.get(), nullptr);
        kg::batchnorm_backward_input<T>(bc.N, C, bc.S, d_x.get(), d_dy.get(), d_mean.get(), d_scale.get(),
                                        d_mean_dy.get(), d_k.get(), d_dx.get(), nullptr);
        // Sums of doubles in another order: double rounding over up to 12544 terms.
        EXPECT_TRUE(close_to(d_sum.download(), sum, kFp64Tol));
        EXPECT_TRUE(close_to(d_sumsq.download(), sumsq, kFp64Tol));
        EXPECT_TRUE(close_to(d_sum_dy.download(), sum_dy, kFp64Tol));
        EXPECT_TRUE(close_to(d_sum_dy_xmu.download(), sum_dy_xmu, kFp64Tol));
        const auto gy = d_y.download(), gdx = d_dx.download();
        EXPECT_TRUE(close_to(gy, y, tolerance<T>()));
        EXPECT_TRUE(close_to(gdx, dx, tolerance<T>()));
        EXPECT_TRUE(same_bits(gy, y));
        EXPECT_TRUE(same_bits(gdx, dx));
    }
}

// y may alias x (normalize in place), dx may alias dy (the input gradient in place).
TYPED_TEST(GpuPoolNorm, BatchNormInPlace) {
    using T = TypeParam;
    const BnCase bc{8, 6, 49};
    const int64_t n = bc.N * bc.C * bc.S, C = bc.C;
    const auto x = random_normal<T>(n, 61), dy = random_normal<T>(n, 62);
    const auto mean = random_normal<T>(C, 63), scale = random_normal<T>(C, 64), shift = random_normal<T>(C, 65),
               mean_dy = random_normal<T>(C, 66), k = random_normal<T>(C, 67);
    std::vector<T> y(n), dx(n);
    kc::batchnorm_normalize<T>(bc.N, C, bc.S, x.data(), mean.data(), scale.data(), shift.data(), y.data());
    kc::batchnorm_backward_input<T>(bc.N, C, bc.S, x.data(), dy.data(), mean.data(), scale.data(), mean_dy.data(),
                                    k.data(), dx.data());
    DeviceBuffer<T> d_x(x), d_x2(x), d_dy(dy), d_mean(mean), d_scale(scale), d_shift(shift), d_mean_dy(mean_dy),
        d_k(k);
    kg::batchnorm_backward_input<T>(bc.N, C, bc.S, d_x.get(), d_dy.get(), d_mean.get(), d_scale.get(),
                                    d_mean_dy.get(), d_k.get(), d_dy.get(), nullptr);
    kg::batchnorm_normalize<T>(bc.N, C, bc.S, d_x2.get(), d_mean.get(), d_scale.get(), d_shift.get(), d_x2.get(),
                               nullptr);
    EXPECT_TRUE(same_bits(d_x2.download(), y));
    EXPECT_TRUE(same_bits(d_dy.download(), dx));
}

// The sums are deterministic: a rerun gives the same bits.
TYPED_TEST(GpuPoolNorm, BatchNormSumsRepeatBitForBit) {
    using T = TypeParam;
    for (const BnCase& bc : {kBnCases[0], kBnCases[1], kBnCases[2]}) {
        SCOPED_TRACE(name_of(bc));
        const int64_t n = bc.N * bc.C * bc.S, C = bc.C;
        const auto x = random_normal<T>(n, 71), dy = random_normal<T>(n, 72), mean = random_normal<T>(C, 73);
        DeviceBuffer<T> d_x(x), d_dy(dy), d_mean(mean);
        std::vector<std::vector<double>> runs;
        for (int r = 0; r < 2; ++r) {
            DeviceBuffer<double> s(C), sq(C), sd(C), sdx(C);
            kg::batchnorm_channel_sums<T>(bc.N, C, bc.S, d_x.get(), s.get(), sq.get(), nullptr);
            kg::batchnorm_backward_sums<T>(bc.N, C, bc.S, d_x.get(), d_dy.get(), d_mean.get(), sd.get(), sdx.get(),
                                           nullptr);
            for (const auto* b : {&s, &sq, &sd, &sdx}) runs.push_back(b->download());
        }
        for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(same_bits(runs[i], runs[i + 4])) << "sum " << i;
    }
}

// The per-channel formulas between the sums and the element-wise kernels: the CPU twins' bits,
// train (running statistics moved, the unbiased variance) and eval, and the backward's.
TYPED_TEST(GpuPoolNorm, BatchNormFormulasEqualCpuBitForBit) {
    using T = TypeParam;
    const int64_t C = 37;
    std::vector<double> stats(2 * C + 1), sums(2 * C + 1), invstd_in(C);
    std::mt19937 rng(81);
    std::normal_distribution<double> z(0.0, 3.0);
    const double n = 96;
    for (int64_t c = 0; c < C; ++c) {
        const double mean = z(rng), var = std::abs(z(rng)) + 0.01;
        stats[c] = mean * n;
        stats[C + c] = (var + mean * mean) * n;
        sums[c] = z(rng) * 10;
        sums[C + c] = z(rng) * 10;
        invstd_in[c] = 1.0 / std::sqrt(var + 1e-5);
    }
    stats[C] = 0;  // a constant channel: variance exactly 0
    stats[2 * C] = sums[2 * C] = n;
    const auto gamma = random_normal<T>(C, 82), rm0 = random_normal<T>(C, 83);
    std::vector<T> rv0 = random_normal<T>(C, 84);
    for (T& v : rv0) v = std::abs(v) + T(0.1);
    for (bool train : {true, false}) {
        SCOPED_TRACE(train ? "train" : "eval");
        std::vector<T> rm = rm0, rv = rv0, mean(C), scale(C);
        std::vector<double> invstd(C);
        kc::batchnorm_stats<T>(C, train, stats.data(), 1e-5, 0.1, gamma.data(), rm.data(), rv.data(), mean.data(),
                               scale.data(), invstd.data());
        DeviceBuffer<double> d_stats(stats), d_invstd(C);
        DeviceBuffer<T> d_gamma(gamma), d_rm(rm0), d_rv(rv0), d_mean(C), d_scale(C);
        kg::batchnorm_stats<T>(C, train, d_stats.get(), 1e-5, 0.1, d_gamma.get(), d_rm.get(), d_rv.get(),
                               d_mean.get(), d_scale.get(), d_invstd.get(), nullptr);
        EXPECT_TRUE(same_bits(rm, d_rm.download()));
        EXPECT_TRUE(same_bits(rv, d_rv.download()));
        EXPECT_TRUE(same_bits(mean, d_mean.download()));
        EXPECT_TRUE(same_bits(scale, d_scale.download()));
        EXPECT_TRUE(same_bits(invstd, d_invstd.download()));

        std::vector<T> dgamma = random_normal<T>(C, 85), dbeta = random_normal<T>(C, 86);
        DeviceBuffer<T> d_dgamma(dgamma), d_dbeta(dbeta), d_cf(3 * C);
        DeviceBuffer<double> d_sums(sums), d_inv(invstd_in);
        kc::batchnorm_param_grads<T>(C, sums.data(), invstd_in.data(), dgamma.data(), dbeta.data());
        kg::batchnorm_param_grads<T>(C, d_sums.get(), d_inv.get(), d_dgamma.get(), d_dbeta.get(), nullptr);
        EXPECT_TRUE(same_bits(dgamma, d_dgamma.download()));
        EXPECT_TRUE(same_bits(dbeta, d_dbeta.download()));
        std::vector<T> cf(3 * C);
        kc::batchnorm_backward_coeffs<T>(C, train, sums.data(), invstd_in.data(), gamma.data(), cf.data(),
                                         cf.data() + C, cf.data() + 2 * C);
        kg::batchnorm_backward_coeffs<T>(C, train, d_sums.get(), d_inv.get(), d_gamma.get(), d_cf.get(),
                                         d_cf.get() + C, d_cf.get() + 2 * C, nullptr);
        EXPECT_TRUE(same_bits(cf, d_cf.download()));
    }
}

// ---- no GPU needed -------------------------------------------------------------------------

// A pooling geometry without a window is refused before anything is queued, in every build
// that has the CUDA backend (the stub throws "built without the CUDA backend" first).
TEST(GpuPoolNoDevice, BadGeometryIsRefused) {
    if (!kg::backend_built()) GTEST_SKIP() << "this ParaLab was built without the CUDA backend";
    const kc::Pool2dGeometry too_small{4, 3, 3, 4, 1};  // a 4x4 window on 3x3 planes
    EXPECT_THROW(kg::maxpool2d_forward<float>(too_small, nullptr, nullptr, nullptr, nullptr), std::invalid_argument);
    EXPECT_THROW(kg::avgpool2d_backward<double>(too_small, nullptr, nullptr, nullptr), std::invalid_argument);
    EXPECT_THROW(kg::global_avgpool_forward<float>(3, 0, nullptr, nullptr, nullptr), std::invalid_argument);
    EXPECT_THROW(kg::batchnorm_channel_sums<float>(-1, 3, 4, nullptr, nullptr, nullptr, nullptr),
                 std::invalid_argument);
}
