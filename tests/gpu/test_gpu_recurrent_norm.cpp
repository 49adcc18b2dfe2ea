// LSTM and GRU cell pointwise kernels and layer norm on the GPU against kernels/cpu/recurrent.h
// and kernels/cpu/norm.h, with the layers' strided [B, T, X] layout (rows ld apart) and the
// first step's null state.
#include <gtest/gtest.h>
#include <kernels/cpu/norm.h>
#include <kernels/cpu/recurrent.h>
#include <kernels/gpu/norm.h>
#include <kernels/gpu/recurrent.h>

#include "tests/gpu/gpu_testing.h"

using namespace paralab;
using namespace paralab::gpu_testing;
namespace kc = kernels::cpu;

namespace {

template <class T>
class GpuRecurrentNorm : public GpuTest {};
TYPED_TEST_SUITE(GpuRecurrentNorm, FloatTypes);

// One time step t of [batch, steps, X] arrays: rows ld = steps * X apart, starting at t * X.
constexpr int64_t kBatch = 37, kHidden = 129, kSteps = 3, kStep = 1;

}  // namespace

TYPED_TEST(GpuRecurrentNorm, LstmCellMatchesCpu) {
    using T = TypeParam;
    const int64_t B = kBatch, H = kHidden, G = 4 * H;
    const int64_t ld_g = kSteps * G, ld_s = kSteps * H, og = kStep * G, os = kStep * H;
    for (bool first_step : {true, false}) {
        SCOPED_TRACE(first_step ? "first step (no c_prev)" : "later step");
        const auto gates = random_normal<T>(B * ld_g, 111, 0.0, 2.0);
        const auto c_prev = random_normal<T>(B * ld_s, 112);
        const auto dh = random_normal<T>(B * ld_s, 113);
        const auto dc = random_normal<T>(B * H, 114);
        auto gd = convert<double>(gates), dcd = convert<double>(dc);
        const auto cpd = convert<double>(c_prev), dhd = convert<double>(dh);
        std::vector<double> c(B * ld_s, 0.0), tanh_c(B * ld_s, 0.0), h(B * ld_s, 0.0), dgates(B * ld_g, 0.0);
        const double* cp_ref = first_step ? nullptr : cpd.data() + os;
        kc::lstm_cell_forward<double>(B, H, gd.data() + og, ld_g, cp_ref, c.data() + os, tanh_c.data() + os,
                                      h.data() + os, ld_s);
        kc::lstm_cell_backward<double>(B, H, gd.data() + og, ld_g, cp_ref, tanh_c.data() + os, dhd.data() + os, ld_s,
                                       dcd.data(), dgates.data() + og);

        DeviceBuffer<T> d_gates(gates), d_cp(c_prev), d_dh(dh), d_dc(dc);
        DeviceBuffer<T> d_c(std::vector<T>(B * ld_s, T(0))), d_tc(std::vector<T>(B * ld_s, T(0))),
            d_h(std::vector<T>(B * ld_s, T(0))), d_dgates(std::vector<T>(B * ld_g, T(0)));
        const T* cp = first_step ? nullptr : d_cp.get() + os;
        kg::lstm_cell_forward<T>(B, H, d_gates.get() + og, ld_g, cp, d_c.get() + os, d_tc.get() + os,
                                 d_h.get() + os, ld_s, nullptr);
        kg::lstm_cell_backward<T>(B, H, d_gates.get() + og, ld_g, cp, d_tc.get() + os, d_dh.get() + os, ld_s,
                                  d_dc.get(), d_dgates.get() + og, nullptr);
        EXPECT_TRUE(close_to(d_gates.download(), gd, tolerance<T>()));  // activations; other steps untouched
        EXPECT_TRUE(close_to(d_c.download(), c, tolerance<T>()));
        EXPECT_TRUE(close_to(d_tc.download(), tanh_c, tolerance<T>()));
        EXPECT_TRUE(close_to(d_h.download(), h, tolerance<T>()));
        EXPECT_TRUE(close_to(d_dc.download(), dcd, tolerance<T>()));
        EXPECT_TRUE(close_to(d_dgates.download(), dgates, tolerance<T>()));
    }
}

TYPED_TEST(GpuRecurrentNorm, GruCellMatchesCpu) {
    using T = TypeParam;
    const int64_t B = kBatch, H = kHidden, G = 3 * H;
    const int64_t ld_g = kSteps * G, ld_s = kSteps * H, og = kStep * G, os = kStep * H;
    for (bool first_step : {true, false}) {
        SCOPED_TRACE(first_step ? "first step (no h_prev)" : "later step");
        const auto gates = random_normal<T>(B * ld_g, 121, 0.0, 2.0);
        const auto hh = random_normal<T>(B * G, 122);
        const auto h_prev = random_normal<T>(B * ld_s, 123);
        const auto dh = random_normal<T>(B * ld_s, 124);
        const auto dh_prev = random_normal<T>(B * ld_s, 125);
        auto gd = convert<double>(gates), dhpd = convert<double>(dh_prev);
        const auto hhd = convert<double>(hh), hpd = convert<double>(h_prev), dhd = convert<double>(dh);
        std::vector<double> hn(B * ld_s, 0.0), h(B * ld_s, 0.0), dih(B * ld_g, 0.0), dhh(B * ld_g, 0.0);
        const double* hp_ref = first_step ? nullptr : hpd.data() + os;
        double* dhp_ref = first_step ? nullptr : dhpd.data() + os;
        kc::gru_cell_forward<double>(B, H, gd.data() + og, ld_g, hhd.data(), hp_ref, hn.data() + os, h.data() + os, ld_s);
        kc::gru_cell_backward<double>(B, H, gd.data() + og, ld_g, hn.data() + os, hp_ref, dhd.data() + os, dhp_ref, ld_s,
                                      dih.data() + og, dhh.data() + og);

        DeviceBuffer<T> d_gates(gates), d_hh(hh), d_hp(h_prev), d_dh(dh), d_dhp(dh_prev);
        DeviceBuffer<T> d_hn(std::vector<T>(B * ld_s, T(0))), d_h(std::vector<T>(B * ld_s, T(0))),
            d_dih(std::vector<T>(B * ld_g, T(0))), d_dhh(std::vector<T>(B * ld_g, T(0)));
        const T* hp = first_step ? nullptr : d_hp.get() + os;
        T* dhp = first_step ? nullptr : d_dhp.get() + os;
        kg::gru_cell_forward<T>(B, H, d_gates.get() + og, ld_g, d_hh.get(), hp, d_hn.get() + os, d_h.get() + os, ld_s,
                                nullptr);
        kg::gru_cell_backward<T>(B, H, d_gates.get() + og, ld_g, d_hn.get() + os, hp, d_dh.get() + os, dhp, ld_s,
                                 d_dih.get() + og, d_dhh.get() + og, nullptr);
        EXPECT_TRUE(close_to(d_gates.download(), gd, tolerance<T>()));
        EXPECT_TRUE(close_to(d_hn.download(), hn, tolerance<T>()));
        EXPECT_TRUE(close_to(d_h.download(), h, tolerance<T>()));
        EXPECT_TRUE(close_to(d_dhp.download(), dhpd, tolerance<T>()));
        EXPECT_TRUE(close_to(d_dih.download(), dih, tolerance<T>()));
        EXPECT_TRUE(close_to(d_dhh.download(), dhh, tolerance<T>()));
    }
}

TYPED_TEST(GpuRecurrentNorm, StridedRowsCopyMatchesCpu) {
    using T = TypeParam;
    const int64_t rows = 19, cols = 33, ld_src = 100, ld_dst = 40;
    const auto src = random_normal<T>(rows * ld_src, 131);
    const auto dst0 = random_normal<T>(rows * ld_dst, 132);
    auto ref = dst0;
    kc::strided_rows_copy<T>(rows, cols, src.data(), ld_src, ref.data(), ld_dst);
    DeviceBuffer<T> d_src(src), d_dst(dst0);
    kg::strided_rows_copy<T>(rows, cols, d_src.get(), ld_src, d_dst.get(), ld_dst, nullptr);
    EXPECT_TRUE(close_to(d_dst.download(), ref, 0.0));
}

TYPED_TEST(GpuRecurrentNorm, LayerNormMatchesCpu) {
    using T = TypeParam;
    for (auto [rows, D] : {std::pair<int64_t, int64_t>{1, 1}, {64, 768}, {1000, 10}, {3, 5000}}) {
        SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(D));
        const auto x = random_normal<T>(rows * D, 141, 3.0, 2.0);  // an offset mean: the two-pass case
        const auto gamma = random_normal<T>(D, 142, 1.0, 0.2), beta = random_normal<T>(D, 143);
        const auto dy = random_normal<T>(rows * D, 144);
        const auto dgamma0 = random_normal<T>(D, 145), dbeta0 = random_normal<T>(D, 146);
        const auto xd = convert<double>(x), gd = convert<double>(gamma), bd = convert<double>(beta),
                   dyd = convert<double>(dy);
        std::vector<double> y(rows * D), mean(rows), rstd(rows), dx(rows * D);
        auto dgamma = convert<double>(dgamma0), dbeta = convert<double>(dbeta0);
        kc::layernorm_forward<double>(rows, D, 1e-5, xd.data(), gd.data(), bd.data(), y.data(), mean.data(), rstd.data());
        kc::layernorm_backward<double>(rows, D, xd.data(), dyd.data(), gd.data(), mean.data(), rstd.data(), dx.data(),
                                       dgamma.data(), dbeta.data());

        DeviceBuffer<T> d_x(x), d_gamma(gamma), d_beta(beta), d_dy(dy), d_y(rows * D), d_mean(rows), d_rstd(rows),
            d_dx(rows * D), d_dgamma(dgamma0), d_dbeta(dbeta0);
        kg::layernorm_forward<T>(rows, D, 1e-5, d_x.get(), d_gamma.get(), d_beta.get(), d_y.get(), d_mean.get(),
                                 d_rstd.get(), nullptr);
        kg::layernorm_backward<T>(rows, D, d_x.get(), d_dy.get(), d_gamma.get(), d_mean.get(), d_rstd.get(), d_dx.get(),
                                  d_dgamma.get(), d_dbeta.get(), nullptr);
        EXPECT_TRUE(close_to(d_y.download(), y, tolerance<T>()));
        EXPECT_TRUE(close_to(d_mean.download(), mean, tolerance<T>()));
        EXPECT_TRUE(close_to(d_rstd.download(), rstd, tolerance<T>()));
        if (D > 1) {  // D = 1: dx is 0 up to rounding, no relative error to speak of
            EXPECT_TRUE(close_to(d_dx.download(), dx, tolerance<T>()));
        }
        EXPECT_TRUE(close_to(d_dgamma.download(), dgamma, tolerance<T>()));
        EXPECT_TRUE(close_to(d_dbeta.download(), dbeta, tolerance<T>()));
    }
}

// The recurrent weight's gradient through cuBLAS, both batching orders (per sample when the
// sequence is longer than the batch, per step otherwise).
TYPED_TEST(GpuRecurrentNorm, RecurrentWeightGradMatchesCpu) {
    using T = TypeParam;
    for (auto [batch, steps] : {std::pair<int64_t, int64_t>{4, 10}, {16, 3}, {5, 1}}) {
        SCOPED_TRACE("batch " + std::to_string(batch) + ", steps " + std::to_string(steps));
        const int64_t H = 33, G = 4 * H;
        const auto dgates = random_normal<T>(batch * steps * G, 151), h = random_normal<T>(batch * steps * H, 152);
        const auto dw0 = random_normal<T>(G * H, 153);
        const auto dgd = convert<double>(dgates), hd = convert<double>(h);
        auto dw = convert<double>(dw0);
        kc::recurrent_weight_grad_accumulate<double>(batch, steps, G, H, dgd.data(), hd.data(), dw.data());
        DeviceBuffer<T> d_dgates(dgates), d_h(h), d_dw(dw0);
        kg::recurrent_weight_grad_accumulate<T>(batch, steps, G, H, d_dgates.get(), d_h.get(), d_dw.get(), nullptr);
        EXPECT_TRUE(close_to(d_dw.download(), dw, tolerance<T>(), Metric::normwise));
    }
}
