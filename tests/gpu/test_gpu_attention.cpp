// Scaled dot-product attention's four passes on the GPU (kernels/gpu/attention.h) against a
// plain reference in double written here (loops, no GEMM), itself checked by finite
// differences: probs and out, dprobs, the dS written over it and dqkv, causal and not, on random
// qkv and dout. Outputs are poisoned with NaN first, so an entry left unwritten fails; entries
// the causal mask hides must come out exactly 0.
#include <gtest/gtest.h>
#include <kernels/gpu/attention.h>

#include <cmath>
#include <limits>
#include <stdexcept>

#include "tests/gpu/gpu_testing.h"

using namespace paralab;
using namespace paralab::gpu_testing;

namespace {

struct Shape {
    int64_t B, T, H, Dh;
};
struct Case {
    Shape shape;
    bool causal;
};
void PrintTo(const Case& c, std::ostream* out) {
    *out << "B" << c.shape.B << " T" << c.shape.T << " H" << c.shape.H << " Dh" << c.shape.Dh
         << (c.causal ? " causal" : "");
}

// What the four passes make, in double. qkv [B, T, 3D], dout [B, T, D] -> probs, dprobs (dP,
// masked), dscores (dS), [B, H, T, T]; out [B, T, D]; dqkv [B, T, 3D].
struct Reference {
    std::vector<double> probs, out, dprobs, dscores, dqkv;
};

Reference reference(const Shape& s, bool causal, const std::vector<double>& qkv,
                    const std::vector<double>& dout) {
    const int64_t B = s.B, T = s.T, H = s.H, Dh = s.Dh, D = H * Dh;
    const double scale = 1.0 / std::sqrt(static_cast<double>(Dh));
    Reference r;
    r.probs.assign(B * H * T * T, 0.0);
    r.dprobs.assign(B * H * T * T, 0.0);
    r.dscores.assign(B * H * T * T, 0.0);
    r.out.assign(B * T * D, 0.0);
    r.dqkv.assign(B * T * 3 * D, 0.0);
    // Element d of head h's q (part 0), k (1) or v (2) at position t of sequence b.
    auto at = [&](int64_t b, int64_t t, int part, int64_t h, int64_t d) -> size_t {
        return ((b * T + t) * 3 + part) * D + h * Dh + d;
    };
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h) {
            double* P = r.probs.data() + (b * H + h) * T * T;
            double* dP = r.dprobs.data() + (b * H + h) * T * T;
            double* dS = r.dscores.data() + (b * H + h) * T * T;
            for (int64_t i = 0; i < T; ++i) {
                const int64_t n = causal ? i + 1 : T;
                double max = -INFINITY;
                for (int64_t j = 0; j < n; ++j) {
                    double dot = 0;
                    for (int64_t d = 0; d < Dh; ++d)
                        dot += qkv[at(b, i, 0, h, d)] * qkv[at(b, j, 1, h, d)];
                    P[i * T + j] = dot * scale;
                    max = std::max(max, P[i * T + j]);
                }
                double sum = 0;
                for (int64_t j = 0; j < n; ++j) {
                    P[i * T + j] = std::exp(P[i * T + j] - max);
                    sum += P[i * T + j];
                }
                for (int64_t j = 0; j < n; ++j) P[i * T + j] /= sum;
            }
            for (int64_t i = 0; i < T; ++i)
                for (int64_t d = 0; d < Dh; ++d) {
                    double o = 0;
                    for (int64_t j = 0; j < T; ++j) o += P[i * T + j] * qkv[at(b, j, 2, h, d)];
                    r.out[(b * T + i) * D + h * Dh + d] = o;
                }
            for (int64_t i = 0; i < T; ++i) {
                const int64_t n = causal ? i + 1 : T;
                double row = 0;
                for (int64_t j = 0; j < n; ++j) {
                    double dot = 0;
                    for (int64_t d = 0; d < Dh; ++d)
                        dot += dout[(b * T + i) * D + h * Dh + d] * qkv[at(b, j, 2, h, d)];
                    dP[i * T + j] = dot;
                    row += dot * P[i * T + j];
                }
                for (int64_t j = 0; j < n; ++j)
                    dS[i * T + j] = P[i * T + j] * (dP[i * T + j] - row) * scale;
            }
            for (int64_t t = 0; t < T; ++t)
                for (int64_t d = 0; d < Dh; ++d) {
                    double dq = 0, dk = 0, dv = 0;
                    for (int64_t u = 0; u < T; ++u) {
                        dq += dS[t * T + u] * qkv[at(b, u, 1, h, d)];
                        dk += dS[u * T + t] * qkv[at(b, u, 0, h, d)];
                        dv += P[u * T + t] * dout[(b * T + u) * D + h * Dh + d];
                    }
                    r.dqkv[at(b, t, 0, h, d)] = dq;
                    r.dqkv[at(b, t, 1, h, d)] = dk;
                    r.dqkv[at(b, t, 2, h, d)] = dv;
                }
        }
    return r;
}

// The entries j > i of every [T, T] block, which the causal mask hides, that are not exactly 0.
template <class T>
int64_t masked_nonzeros(const std::vector<T>& x, int64_t T_) {
    int64_t count = 0;
    for (size_t e = 0; e < x.size(); ++e) {
        const int64_t i = static_cast<int64_t>(e) / T_ % T_, j = static_cast<int64_t>(e) % T_;
        if (j > i && x[e] != T(0)) ++count;
    }
    return count;
}

template <class T>
void check_attention(const Shape& s, bool causal) {
    const int64_t B = s.B, T_ = s.T, H = s.H, Dh = s.Dh, D = H * Dh;
    const auto qkv = random_normal<T>(B * T_ * 3 * D, 71 + T_);
    const auto dout = random_normal<T>(B * T_ * D, 72 + T_);
    const Reference ref = reference(s, causal, convert<double>(qkv), convert<double>(dout));
    // The suite's bounds: the CPU twin (the fake GPU) stays within 3e-6 (fp32) and 6e-15 (fp64).
    const double tol = tolerance<T>();
    const T nan = std::numeric_limits<T>::quiet_NaN();

    DeviceBuffer<T> d_qkv(qkv), d_dout(dout);
    DeviceBuffer<T> d_probs(std::vector<T>(B * H * T_ * T_, nan)),
        d_out(std::vector<T>(B * T_ * D, nan));
    DeviceBuffer<T> d_dprobs(std::vector<T>(B * H * T_ * T_, nan)),
        d_dqkv(std::vector<T>(B * T_ * 3 * D, nan));

    kg::attention_scores_softmax<T>(B, T_, H, Dh, causal, d_qkv.get(), d_probs.get(), nullptr);
    const auto probs = d_probs.download();
    EXPECT_TRUE(close_to(probs, ref.probs, tol)) << "probs";
    if (causal) {
        EXPECT_EQ(masked_nonzeros(probs, T_), 0) << "probs above the diagonal";
    }

    kg::attention_apply<T>(B, T_, H, Dh, causal, d_probs.get(), d_qkv.get(), d_out.get(), nullptr);
    EXPECT_TRUE(close_to(d_out.download(), ref.out, tol)) << "out";

    kg::attention_backward_values<T>(B, T_, H, Dh, causal, d_probs.get(), d_qkv.get(), d_dout.get(),
                                     d_dprobs.get(), d_dqkv.get(), nullptr);
    const auto dprobs = d_dprobs.download();
    EXPECT_TRUE(close_to(dprobs, ref.dprobs, tol)) << "dprobs";
    if (causal) {
        EXPECT_EQ(masked_nonzeros(dprobs, T_), 0) << "dprobs above the diagonal";
    }

    kg::attention_backward_scores<T>(B, T_, H, Dh, causal, d_probs.get(), d_qkv.get(),
                                     d_dprobs.get(), d_dqkv.get(), nullptr);
    const auto dscores = d_dprobs.download();
    EXPECT_TRUE(close_to(dscores, ref.dscores, tol)) << "dS";
    if (causal) {
        EXPECT_EQ(masked_nonzeros(dscores, T_), 0) << "dS above the diagonal";
    }
    // q and k parts from backward_scores, the v part from backward_values; no NaN left.
    EXPECT_TRUE(close_to(d_dqkv.download(), ref.dqkv, tol)) << "dqkv";
}

// Each shape masked and not.
std::vector<Case> cases() {
    std::vector<Case> out;
    for (const Shape& s :
         {Shape{2, 5, 3, 4}, Shape{3, 64, 4, 32}, Shape{1, 1, 1, 8}, Shape{2, 130, 2, 16}})
        for (bool causal : {false, true}) out.push_back({s, causal});
    return out;
}

class GpuAttention : public GpuParamTest<Case> {};

}  // namespace

TEST_P(GpuAttention, Fp32MatchesReference) {
    check_attention<float>(GetParam().shape, GetParam().causal);
}
TEST_P(GpuAttention, Fp64MatchesReference) {
    check_attention<double>(GetParam().shape, GetParam().causal);
}

INSTANTIATE_TEST_SUITE_P(Shapes, GpuAttention, ::testing::ValuesIn(cases()), [](const auto& info) {
    const Shape& s = info.param.shape;
    return "B" + std::to_string(s.B) + "T" + std::to_string(s.T) + "H" + std::to_string(s.H) +
           "Dh" + std::to_string(s.Dh) + (info.param.causal ? "Causal" : "Full");
});

// The reference's dqkv is the gradient of sum(out * dout): central differences on a small
// case, causal and not. Needs no GPU.
TEST(AttentionReference, GradientMatchesFiniteDifferences) {
    const Shape s{2, 4, 2, 3};
    const int64_t D = s.H * s.Dh;
    for (bool causal : {false, true}) {
        SCOPED_TRACE(causal ? "causal" : "full");
        auto qkv = random_normal<double>(s.B * s.T * 3 * D, 81);
        const auto dout = random_normal<double>(s.B * s.T * D, 82);
        const Reference r = reference(s, causal, qkv, dout);
        auto loss = [&] {
            const auto out = reference(s, causal, qkv, dout).out;
            double l = 0;
            for (size_t e = 0; e < out.size(); ++e) l += out[e] * dout[e];
            return l;
        };
        const double h = 1e-6;
        std::vector<double> numeric(qkv.size());
        for (size_t e = 0; e < qkv.size(); ++e) {
            const double x = qkv[e];
            qkv[e] = x + h;
            const double up = loss();
            qkv[e] = x - h;
            const double down = loss();
            qkv[e] = x;
            numeric[e] = (up - down) / (2 * h);
        }
        EXPECT_TRUE(close_to(r.dqkv, numeric, 1e-6));
    }
}

// Checked on the calling thread before anything is queued, so no GPU is needed; empty
// batches, sequences and head lists do nothing.
TEST(GpuAttentionArguments, BadSizesAreRefusedAndEmptyOnesDoNothing) {
    float* none = nullptr;
    EXPECT_THROW(kg::attention_scores_softmax<float>(-1, 4, 2, 8, false, none, none, nullptr),
                 std::invalid_argument);
    EXPECT_THROW(kg::attention_apply<float>(1, -4, 2, 8, true, none, none, none, nullptr),
                 std::invalid_argument);
    EXPECT_THROW(kg::attention_backward_values<float>(1, 4, -2, 8, false, none, none, none, none,
                                                      none, nullptr),
                 std::invalid_argument);
    EXPECT_THROW(kg::attention_backward_scores<double>(1, 4, 2, 0, true, nullptr, nullptr, nullptr,
                                                       nullptr, nullptr),
                 std::invalid_argument);
    EXPECT_THROW(kg::attention_scores_softmax<double>(1, 4, int64_t{1} << 30, 8, false, nullptr,
                                                      nullptr, nullptr),
                 std::invalid_argument);
    EXPECT_NO_THROW(kg::attention_scores_softmax<float>(0, 4, 2, 8, true, none, none, nullptr));
    EXPECT_NO_THROW(kg::attention_apply<float>(2, 0, 2, 8, false, none, none, none, nullptr));
    EXPECT_NO_THROW(kg::attention_backward_values<double>(2, 4, 0, 8, true, nullptr, nullptr,
                                                          nullptr, nullptr, nullptr, nullptr));
    EXPECT_NO_THROW(
        kg::attention_backward_scores<float>(0, 0, 0, 1, false, none, none, none, none, nullptr));
}
