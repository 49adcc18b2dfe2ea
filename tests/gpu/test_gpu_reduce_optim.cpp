// Reductions, clipping, fused optimizer steps and dynamic loss scaling on the GPU against the
// CPU (kernels/cpu/optim.h, engine/optim/clip.cpp's coefficient, torch's GradScaler rules).
#include <gtest/gtest.h>
#include <kernels/cpu/optim.h>
#include <kernels/gpu/loss_scale.h>
#include <kernels/gpu/optim.h>
#include <kernels/gpu/reduce.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "tests/gpu/gpu_testing.h"

using namespace paralab;
using namespace paralab::gpu_testing;
namespace kc = kernels::cpu;

namespace {

template <class T>
class GpuReduceOptim : public GpuTest {};
TYPED_TEST_SUITE(GpuReduceOptim, FloatTypes);

// Sizes of a model's parameters: empty, tiny, odd, and one past a multi-tensor chunk (64 Ki)
// and past a launch's 320 chunks, so that a tensor straddles two launches.
const std::vector<int64_t> kParamSizes{0, 1, 10, 4097, 65536, 65537, 300000, 21 * 1000 * 1000 + 5, 3};

// One parameter list on the host and on the GPU.
template <class T>
struct Params {
    std::vector<std::vector<T>> host;
    std::vector<std::unique_ptr<DeviceBuffer<T>>> device;
    std::vector<T*> ptrs;
    std::vector<int64_t> sizes;

    Params(const std::vector<int64_t>& n, uint64_t seed, double mean = 0.0, double stddev = 1.0) {
        for (size_t k = 0; k < n.size(); ++k) {
            host.push_back(random_normal<T>(n[k], seed + k, mean, stddev));
            device.push_back(std::make_unique<DeviceBuffer<T>>(host.back()));
            ptrs.push_back(device.back()->get());
            sizes.push_back(n[k]);
        }
    }
    const T* const* cptrs() const { return const_cast<const T* const*>(ptrs.data()); }
    int64_t count() const { return static_cast<int64_t>(ptrs.size()); }
};

}  // namespace

TYPED_TEST(GpuReduceOptim, SumsAndSquaredNormMatchCpu) {
    using T = TypeParam;
    DeviceBuffer<double> result(1), scratch(kg::kReduceScratch);
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1000}, int64_t{5000000} + 1}) {
        SCOPED_TRACE("n=" + std::to_string(n));
        const auto x = random_normal<T>(n, 61, 0.5);
        const auto xd = convert<double>(x);
        double sum_ref = 0;
        for (double v : xd) sum_ref += v;
        DeviceBuffer<T> d_x(x);
        kg::sum<T>(n, d_x.get(), result.get(), scratch.get(), nullptr);
        EXPECT_TRUE(close_to(result.download(), std::vector<double>{sum_ref}, 1e-12));
        kg::sum_of_squares<T>(n, d_x.get(), result.get(), scratch.get(), nullptr);
        EXPECT_TRUE(close_to(result.download(), std::vector<double>{kc::sum_of_squares<double>(n, xd.data())}, 1e-12));
    }
    // The global norm over many tensors in one pass: the CPU adds each tensor's sum in order.
    const Params<T> grads(kParamSizes, 62);
    double norm_ref = 0;
    for (const auto& g : grads.host) norm_ref += kc::sum_of_squares<T>(static_cast<int64_t>(g.size()), g.data());
    kg::sum_of_squares_multi<T>(grads.count(), grads.cptrs(), grads.sizes.data(), result.get(), scratch.get(), nullptr);
    const auto first = result.download();
    EXPECT_TRUE(close_to(first, std::vector<double>{norm_ref}, 1e-12));
    kg::sum_of_squares_multi<T>(grads.count(), grads.cptrs(), grads.sizes.data(), result.get(), scratch.get(), nullptr);
    EXPECT_EQ(result.download(), first) << "a rerun must give the same bits";
    // More tensors than one pass of the scratch holds.
    const Params<T> many(std::vector<int64_t>(700, 333), 63);
    double many_ref = 0;
    for (const auto& g : many.host) many_ref += kc::sum_of_squares<T>(333, g.data());
    kg::sum_of_squares_multi<T>(many.count(), many.cptrs(), many.sizes.data(), result.get(), scratch.get(), nullptr);
    EXPECT_TRUE(close_to(result.download(), std::vector<double>{many_ref}, 1e-12));
}

TYPED_TEST(GpuReduceOptim, ClipCoefficientAndScaleMatchCpu) {
    using T = TypeParam;
    DeviceBuffer<double> sq(1), coef(1);
    for (double sq_norm : {0.0, 4.0, 1e6, std::numeric_limits<double>::infinity(),
                           std::numeric_limits<double>::quiet_NaN()}) {
        const double norm = std::sqrt(sq_norm), max_norm = 5.0;
        const double ref = std::isfinite(norm) ? std::min(1.0, max_norm / (norm + 1e-6)) : 1.0;
        sq.upload({sq_norm});
        kg::clip_coefficient(sq.get(), max_norm, coef.get(), nullptr);
        EXPECT_EQ(coef.download()[0], ref) << "squared norm " << sq_norm;
    }
    EXPECT_THROW(kg::clip_coefficient(sq.get(), -1.0, coef.get(), nullptr), std::invalid_argument);

    const int64_t n = 100003;
    auto x = random_normal<T>(n, 64);
    std::vector<T> ref = x;
    kc::scale_in_place<T>(n, ref.data(), 0.37);
    DeviceBuffer<T> d_x(x);
    kg::scale_in_place<T>(n, d_x.get(), 0.37, nullptr);
    EXPECT_TRUE(close_to(d_x.download(), ref, 0.0));  // one rounded multiply: exact
    coef.upload({0.37});
    d_x.upload(x);
    kg::scale_in_place_by_device_scalar<T>(n, d_x.get(), coef.get(), nullptr);
    EXPECT_TRUE(close_to(d_x.download(), ref, 0.0));
}

// Three steps of every optimizer over a model's worth of tensors in one launch per step,
// against the CPU kernel run tensor by tensor in the same precision.
TYPED_TEST(GpuReduceOptim, FusedOptimizerStepsMatchCpu) {
    using T = TypeParam;
    const double lr = 0.01, momentum = 0.9, wd = 0.05;
    enum Kind { sgd, momentum_plain, momentum_nesterov, adam, adamw };
    for (Kind kind : {sgd, momentum_plain, momentum_nesterov, adam, adamw}) {
        SCOPED_TRACE("optimizer " + std::to_string(kind));
        Params<T> p(kParamSizes, 71), m(kParamSizes, 72, 0.0, 0.1), v(kParamSizes, 73, 1.0, 0.1);
        for (auto& h : v.host)  // second moments are >= 0
            for (auto& e : h) e = std::abs(e);
        for (size_t k = 0; k < v.host.size(); ++k) v.device[k]->upload(v.host[k]);
        auto ref_p = p.host, ref_m = m.host, ref_v = v.host;
        for (int step = 1; step <= 3; ++step) {
            const Params<T> g(kParamSizes, 80 + 10 * step);
            for (size_t k = 0; k < kParamSizes.size(); ++k) {
                const int64_t n = kParamSizes[k];
                T* pp = ref_p[k].data();
                const T* gg = g.host[k].data();
                switch (kind) {
                    case sgd: kc::sgd_update<T>(n, pp, gg, lr, wd); break;
                    case momentum_plain:
                    case momentum_nesterov:
                        kc::sgd_momentum_update<T>(n, pp, gg, ref_m[k].data(), lr, momentum, wd,
                                                   kind == momentum_nesterov, step == 1);
                        break;
                    case adam: kc::adam_update<T>(n, pp, gg, ref_m[k].data(), ref_v[k].data(), lr, 0.9, 0.999, 1e-8, wd, step); break;
                    case adamw: kc::adamw_update<T>(n, pp, gg, ref_m[k].data(), ref_v[k].data(), lr, 0.9, 0.999, 1e-8, wd, step); break;
                }
            }
            const int64_t c = p.count();
            switch (kind) {
                case sgd: kg::sgd_update_multi<T>(c, p.ptrs.data(), g.cptrs(), p.sizes.data(), lr, wd, nullptr); break;
                case momentum_plain:
                case momentum_nesterov:
                    kg::sgd_momentum_update_multi<T>(c, p.ptrs.data(), g.cptrs(), m.ptrs.data(), p.sizes.data(), lr,
                                                     momentum, wd, kind == momentum_nesterov, step == 1, nullptr);
                    break;
                case adam:
                    kg::adam_update_multi<T>(c, p.ptrs.data(), g.cptrs(), m.ptrs.data(), v.ptrs.data(), p.sizes.data(),
                                             lr, 0.9, 0.999, 1e-8, wd, step, nullptr);
                    break;
                case adamw:
                    kg::adamw_update_multi<T>(c, p.ptrs.data(), g.cptrs(), m.ptrs.data(), v.ptrs.data(), p.sizes.data(),
                                              lr, 0.9, 0.999, 1e-8, wd, step, nullptr);
                    break;
            }
        }
        for (size_t k = 0; k < kParamSizes.size(); ++k) {
            SCOPED_TRACE("tensor " + std::to_string(k));
            EXPECT_TRUE(close_to(p.device[k]->download(), ref_p[k], tolerance<T>()));
            if (kind != sgd) {
                EXPECT_TRUE(close_to(m.device[k]->download(), ref_m[k], tolerance<T>()));
            }
            if (kind == adam || kind == adamw) {
                EXPECT_TRUE(close_to(v.device[k]->download(), ref_v[k], tolerance<T>()));
            }
        }
    }
}

TYPED_TEST(GpuReduceOptim, SingleTensorStepIsTheListOfOne) {
    using T = TypeParam;
    const int64_t n = 70000;
    auto p = random_normal<T>(n, 91);
    const auto g = random_normal<T>(n, 92);
    auto ref = p;
    std::vector<T> m(n, T(0)), v(n, T(0)), ref_m = m, ref_v = v;
    kc::adamw_update<T>(n, ref.data(), g.data(), ref_m.data(), ref_v.data(), 1e-3, 0.9, 0.999, 1e-8, 0.01, 1);
    DeviceBuffer<T> d_p(p), d_g(g), d_m(m), d_v(v);
    kg::adamw_update<T>(n, d_p.get(), d_g.get(), d_m.get(), d_v.get(), 1e-3, 0.9, 0.999, 1e-8, 0.01, 1, nullptr);
    EXPECT_TRUE(close_to(d_p.download(), ref, tolerance<T>()));
    EXPECT_THROW(kg::adam_update<T>(n, d_p.get(), d_g.get(), d_m.get(), d_v.get(), 1e-3, 0.9, 0.999, 1e-8, 0, 0, nullptr),
                 std::invalid_argument);
}

TYPED_TEST(GpuReduceOptim, LossScalingFindsInfAndUnscales) {
    using T = TypeParam;
    Params<T> grads(kParamSizes, 101, 0.0, 1000.0);
    DeviceBuffer<float> found(1), inv(1);
    found.upload({0.0f});
    inv.upload({1.0f / 1024});
    kg::non_finite_check_and_unscale_multi<T>(grads.count(), grads.ptrs.data(), grads.sizes.data(), found.get(), inv.get(), nullptr);
    EXPECT_EQ(found.download()[0], 0.0f);
    for (size_t k = 0; k < kParamSizes.size(); ++k) {
        std::vector<T> ref = grads.host[k];
        for (auto& e : ref) e = static_cast<T>(e * (1.0f / 1024));
        EXPECT_TRUE(close_to(grads.device[k]->download(), ref, 0.0)) << "tensor " << k;
    }
    // One inf deep inside the largest tensor, one NaN in a small one: both found.
    for (T bad : {std::numeric_limits<T>::infinity(), std::numeric_limits<T>::quiet_NaN()}) {
        std::vector<T> g(kParamSizes[7], T(1));
        g[g.size() - 2] = bad;
        grads.device[7]->upload(g);
        found.upload({0.0f});
        kg::non_finite_check_and_unscale_multi<T>(grads.count(), grads.ptrs.data(), grads.sizes.data(), found.get(), inv.get(), nullptr);
        EXPECT_EQ(found.download()[0], 1.0f) << bad;
    }
}

TEST(GpuLossScale, UpdateFollowsGradScalerRules) {
    if (kg::device_count() == 0) GTEST_SKIP() << no_gpu_reason();
    kg::set_device(0);
    DeviceBuffer<float> scale(1), found(1);
    DeviceBuffer<int32_t> tracker(1);
    scale.upload({65536.0f});
    tracker.upload({0});
    // growth_interval 3: two clean steps grow nothing, the third doubles; an overflow halves and
    // restarts the count.
    const std::vector<std::pair<float, float>> steps{{0, 65536}, {0, 65536}, {0, 131072}, {1, 65536},
                                                     {0, 65536}, {0, 65536}, {0, 131072}};
    for (const auto& [overflow, expected] : steps) {
        found.upload({overflow});
        kg::update_loss_scale(scale.get(), tracker.get(), found.get(), 2.0, 0.5, 3, nullptr);
        EXPECT_EQ(scale.download()[0], expected);
    }
    EXPECT_THROW(kg::update_loss_scale(scale.get(), tracker.get(), found.get(), 1.0, 0.5, 3, nullptr),
                 std::invalid_argument);
}
