// CPU conv / pool / norm kernels against their definitions written as plain loops, on random
// data over a table of geometries (odd sizes, strides, padding larger than the stride), and
// against themselves across thread counts (results must not depend on it).
#include <gtest/gtest.h>

#include <kernels/cpu/conv.h>
#include <kernels/cpu/norm.h>
#include <kernels/cpu/pool.h>
#include <kernels/cpu/threads.h>

#include <cmath>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace paralab::kernels::cpu {
namespace {

std::vector<double> random_vector(size_t n, unsigned seed) {
    std::mt19937 gen(seed);
    std::normal_distribution<double> dist;
    std::vector<double> v(n);
    for (double& x : v) x = dist(gen);
    return v;
}

// The value im2col must put at col[(c*k + i)*k + j, oh*OW + ow].
double im2col_definition(const Conv2dGeometry& g, const std::vector<double>& x, int64_t c,
                         int64_t i, int64_t j, int64_t oh, int64_t ow) {
    const int64_t h = oh * g.stride - g.padding + i, w = ow * g.stride - g.padding + j;
    if (h < 0 || h >= g.height || w < 0 || w >= g.width) return 0.0;
    return x[(c * g.height + h) * g.width + w];
}

class Im2col : public ::testing::TestWithParam<Conv2dGeometry> {};

TEST_P(Im2col, MatchesDefinition) {
    const Conv2dGeometry g = GetParam();
    const int64_t k = g.kernel, OH = g.out_height(), OW = g.out_width();
    const auto x = random_vector(g.channels * g.height * g.width, 1);
    std::vector<double> col(g.col_rows() * g.col_cols(), -7.0);  // stale values must go
    im2col<double>(g, x.data(), col.data());
    for (int64_t c = 0; c < g.channels; ++c)
        for (int64_t i = 0; i < k; ++i)
            for (int64_t j = 0; j < k; ++j)
                for (int64_t oh = 0; oh < OH; ++oh)
                    for (int64_t ow = 0; ow < OW; ++ow)
                        ASSERT_EQ(col[((c * k + i) * k + j) * OH * OW + oh * OW + ow],
                                  im2col_definition(g, x, c, i, j, oh, ow))
                            << "c" << c << " i" << i << " j" << j << " oh" << oh << " ow" << ow;
}

// col2im is the adjoint of im2col: <im2col(x), r> = <x, col2im(r)> for any x, r.
TEST_P(Im2col, Col2imIsTheAdjoint) {
    const Conv2dGeometry g = GetParam();
    const auto x = random_vector(g.channels * g.height * g.width, 2);
    const auto r = random_vector(g.col_rows() * g.col_cols(), 3);
    std::vector<double> col(r.size()), back(x.size(), -7.0);
    im2col<double>(g, x.data(), col.data());
    col2im<double>(g, r.data(), back.data());
    double lhs = 0, rhs = 0;
    for (size_t i = 0; i < r.size(); ++i) lhs += col[i] * r[i];
    for (size_t i = 0; i < x.size(); ++i) rhs += x[i] * back[i];
    EXPECT_NEAR(lhs, rhs, 1e-10 * (1 + std::abs(lhs)));
}

TEST_P(Im2col, FloatMatchesDouble) {
    const Conv2dGeometry g = GetParam();
    const auto x = random_vector(g.channels * g.height * g.width, 4);
    std::vector<float> xf(x.begin(), x.end()), colf(g.col_rows() * g.col_cols());
    std::vector<double> cold(colf.size());
    im2col<float>(g, xf.data(), colf.data());
    im2col<double>(g, x.data(), cold.data());
    for (size_t i = 0; i < colf.size(); ++i) ASSERT_EQ(colf[i], static_cast<float>(cold[i]));
}

std::string geometry_name(const ::testing::TestParamInfo<Conv2dGeometry>& info) {
    const Conv2dGeometry& g = info.param;
    std::ostringstream name;
    name << 'c' << g.channels << '_' << g.height << 'x' << g.width << "_k" << g.kernel << "_s"
         << g.stride << "_p" << g.padding;
    return name.str();
}

INSTANTIATE_TEST_SUITE_P(
    Geometries, Im2col,
    ::testing::Values(Conv2dGeometry{3, 7, 5, 3, 1, 0}, Conv2dGeometry{2, 6, 7, 3, 2, 1},
                      Conv2dGeometry{2, 5, 4, 1, 2, 1}, Conv2dGeometry{1, 5, 5, 5, 1, 0},
                      Conv2dGeometry{2, 5, 7, 2, 3, 2}, Conv2dGeometry{1, 3, 4, 4, 1, 3},
                      Conv2dGeometry{4, 9, 8, 3, 3, 1},
                      // stride 1, output the size of the input: the shifted-plane path
                      Conv2dGeometry{3, 6, 7, 5, 1, 2}, Conv2dGeometry{2, 5, 4, 3, 1, 1},
                      Conv2dGeometry{2, 2, 3, 5, 1, 2}, Conv2dGeometry{2, 1, 1, 3, 1, 1},
                      Conv2dGeometry{2, 4, 3, 1, 1, 0}),
    geometry_name);

// Pooling against the window definition, on odd sizes and overlapping windows.
TEST(PoolKernels, MatchDefinition) {
    for (const Pool2dGeometry& g : {Pool2dGeometry{3, 7, 5, 2, 2}, Pool2dGeometry{2, 7, 5, 3, 2},
                                    Pool2dGeometry{2, 6, 6, 3, 1}, Pool2dGeometry{1, 4, 4, 4, 4}}) {
        const int64_t H = g.height, W = g.width, OH = g.out_height(), OW = g.out_width();
        const auto x = random_vector(g.planes * H * W, 5);
        std::vector<double> ymax(g.planes * OH * OW), yavg(ymax.size());
        std::vector<int32_t> argmax(ymax.size());
        maxpool2d_forward<double>(g, x.data(), ymax.data(), argmax.data());
        avgpool2d_forward<double>(g, x.data(), yavg.data());
        for (int64_t p = 0; p < g.planes; ++p)
            for (int64_t oh = 0; oh < OH; ++oh)
                for (int64_t ow = 0; ow < OW; ++ow) {
                    double best = -INFINITY, sum = 0;
                    for (int64_t i = 0; i < g.kernel; ++i)
                        for (int64_t j = 0; j < g.kernel; ++j) {
                            const double v = x[(p * H + oh * g.stride + i) * W + ow * g.stride + j];
                            best = std::max(best, v);
                            sum += v;
                        }
                    const int64_t o = (p * OH + oh) * OW + ow;
                    EXPECT_EQ(ymax[o], best);
                    EXPECT_EQ(x[p * H * W + argmax[o]], best);
                    EXPECT_NEAR(yavg[o], sum / double(g.kernel * g.kernel), 1e-14);
                }
    }
}

// Max pooling against its documented rule written as plain branches: ties go to the first in
// row-major window order, a NaN wins over numbers and the first NaN over later ones. Random
// values from a small set (many ties) with NaNs mixed in, on several geometries.
TEST(PoolKernels, MaxPoolTiesAndNaNsFollowTheRule) {
    for (const Pool2dGeometry& g : {Pool2dGeometry{3, 8, 8, 2, 2}, Pool2dGeometry{2, 7, 9, 3, 2},
                                    Pool2dGeometry{2, 6, 5, 3, 1}, Pool2dGeometry{64, 28, 28, 2, 2},
                                    Pool2dGeometry{3, 7, 9, 2, 2}, Pool2dGeometry{5, 14, 14, 2, 2}}) {
        const int64_t H = g.height, W = g.width, OH = g.out_height(), OW = g.out_width();
        std::mt19937 gen(11);
        std::uniform_int_distribution<int> pick(0, 9);
        std::vector<float> x(g.planes * H * W);
        for (float& v : x) {
            const int r = pick(gen);
            v = r == 0 ? NAN : static_cast<float>(r % 4);  // 10% NaN, values 0..3
        }
        std::vector<float> y(g.planes * OH * OW);
        std::vector<int32_t> argmax(y.size());
        maxpool2d_forward<float>(g, x.data(), y.data(), argmax.data());
        for (int64_t p = 0; p < g.planes; ++p)
            for (int64_t oh = 0; oh < OH; ++oh)
                for (int64_t ow = 0; ow < OW; ++ow) {
                    int64_t best = -1;
                    for (int64_t i = 0; i < g.kernel; ++i)
                        for (int64_t j = 0; j < g.kernel; ++j) {
                            const int64_t at = (oh * g.stride + i) * W + ow * g.stride + j;
                            const float v = x[p * H * W + at];
                            if (best < 0) {
                                best = at;
                                continue;
                            }
                            const float b = x[p * H * W + best];
                            if (std::isnan(b)) continue;
                            if (std::isnan(v) || v > b) best = at;
                        }
                    const int64_t o = (p * OH + oh) * OW + ow;
                    ASSERT_EQ(argmax[o], best) << "plane " << p << " at " << oh << "," << ow;
                    const float want = x[p * H * W + best];
                    if (std::isnan(want)) {
                        ASSERT_TRUE(std::isnan(y[o]));
                    } else {
                        ASSERT_EQ(y[o], want);
                    }
                }
    }
}

// Batch-norm sums against the definition for the three layouts S = 1, L, H*W.
TEST(NormKernels, BatchNormSumsMatchDefinition) {
    for (int64_t S : {1, 5, 12}) {
        const int64_t N = 3, C = 4;
        const auto x = random_vector(N * C * S, 6);
        const auto dy = random_vector(N * C * S, 7);
        std::vector<double> sum(C), sumsq(C), sdy(C), sdyx(C), mean = {0.5, -1, 0, 2};
        batchnorm_channel_sums<double>(N, C, S, x.data(), sum.data(), sumsq.data());
        batchnorm_backward_sums<double>(N, C, S, x.data(), dy.data(), mean.data(), sdy.data(),
                                        sdyx.data());
        for (int64_t c = 0; c < C; ++c) {
            double e_sum = 0, e_sq = 0, e_dy = 0, e_dyx = 0;
            for (int64_t n = 0; n < N; ++n)
                for (int64_t s = 0; s < S; ++s) {
                    const int64_t i = (n * C + c) * S + s;
                    e_sum += x[i];
                    e_sq += x[i] * x[i];
                    e_dy += dy[i];
                    e_dyx += dy[i] * (x[i] - mean[c]);
                }
            EXPECT_NEAR(sum[c], e_sum, 1e-12) << "S " << S;
            EXPECT_NEAR(sumsq[c], e_sq, 1e-12) << "S " << S;
            EXPECT_NEAR(sdy[c], e_dy, 1e-12) << "S " << S;
            EXPECT_NEAR(sdyx[c], e_dyx, 1e-12) << "S " << S;
        }
    }
}

// Large enough for the parallel paths: one thread and four must give identical bits.
TEST(ConvKernels, ResultsDoNotDependOnThreadCount) {
    const Conv2dGeometry g{16, 33, 31, 3, 1, 1};
    const auto xd = random_vector(g.channels * g.height * g.width, 8);
    const auto rd = random_vector(g.col_rows() * g.col_cols(), 9);
    const std::vector<float> x(xd.begin(), xd.end()), r(rd.begin(), rd.end());
    const Pool2dGeometry pg{g.channels * 4, g.height, g.width, 3, 2};
    const auto xp = random_vector(pg.planes * pg.height * pg.width, 10);
    const std::vector<float> xpf(xp.begin(), xp.end());
    auto run = [&](int threads) {
        set_num_threads(threads);
        std::vector<float> col(r.size()), dx(x.size());
        im2col<float>(g, x.data(), col.data());
        col2im<float>(g, r.data(), dx.data());
        std::vector<double> sum(16), sumsq(16);
        // xpf as [N = 4, C = 16, S = H*W]
        batchnorm_channel_sums<float>(4, 16, pg.height * pg.width, xpf.data(), sum.data(),
                                      sumsq.data());
        std::vector<float> y(pg.planes * pg.out_height() * pg.out_width());
        std::vector<float> dxp(xpf.size());
        avgpool2d_forward<float>(pg, xpf.data(), y.data());
        avgpool2d_backward<float>(pg, y.data(), dxp.data());
        std::vector<double> all(col.begin(), col.end());
        all.insert(all.end(), dx.begin(), dx.end());
        all.insert(all.end(), sum.begin(), sum.end());
        all.insert(all.end(), sumsq.begin(), sumsq.end());
        all.insert(all.end(), dxp.begin(), dxp.end());
        return all;
    };
    const auto one = run(1), four = run(4);
    set_num_threads(1);
    ASSERT_EQ(one.size(), four.size());
    for (size_t i = 0; i < one.size(); ++i) ASSERT_EQ(one[i], four[i]) << i;
}

}  // namespace
}  // namespace paralab::kernels::cpu
