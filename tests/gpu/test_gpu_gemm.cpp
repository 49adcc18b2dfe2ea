// cuBLAS GEMM through the row-major wrapper against the CPU GEMM (kernels/cpu/gemm.h, in
// double): every transpose pair, padded leading dimensions, beta accumulation; fp32, opt-in
// TF32, fp64, and bf16/fp16 inputs with the casts that make them.
#include <gtest/gtest.h>
#include <kernels/cpu/gemm.h>
#include <kernels/gpu/cast.h>
#include <kernels/gpu/gemm.h>

#include <cstring>
#include <limits>

#include "tests/gpu/gpu_testing.h"

using namespace paralab;
using namespace paralab::gpu_testing;
namespace kc = kernels::cpu;

namespace {

struct GemmCase {
    bool trans_a, trans_b;
    int64_t M, N, K;
    int64_t pad;  // extra elements at the end of every row (leading dimensions above the minimum)
};

std::string describe(const GemmCase& c) {
    return std::string(c.trans_a ? "T" : "N") + (c.trans_b ? "T" : "N") + "_" + std::to_string(c.M) + "x" +
           std::to_string(c.N) + "x" + std::to_string(c.K) + "_pad" + std::to_string(c.pad);
}
// gtest prints a parameter with PrintTo; without it, its bytes.
void PrintTo(const GemmCase& c, std::ostream* out) { *out << describe(c); }
std::string case_name(const ::testing::TestParamInfo<GemmCase>& info) { return describe(info.param); }

class GpuGemm : public GpuParamTest<GemmCase> {};

// Runs C = alpha op(A) op(B) + beta C on the GPU and in double on the CPU; returns the relative
// error check. run_gpu gets (A, lda, B, ldb, C, ldc) device pointers of the inputs as float.
template <class T, class RunGpu>
::testing::AssertionResult check_gemm(const GemmCase& c, double tol, Metric metric, RunGpu run_gpu) {
    const int64_t a_rows = c.trans_a ? c.K : c.M, a_cols = c.trans_a ? c.M : c.K;
    const int64_t b_rows = c.trans_b ? c.N : c.K, b_cols = c.trans_b ? c.K : c.N;
    const int64_t lda = a_cols + c.pad, ldb = b_cols + c.pad, ldc = c.N + c.pad;
    const auto A = random_normal<T>(a_rows * lda, 151), B = random_normal<T>(b_rows * ldb, 152);
    const auto C0 = random_normal<T>(c.M * ldc, 153);
    const double alpha = 0.75, beta = -0.5;
    const auto Ad = convert<double>(A), Bd = convert<double>(B);
    auto Cd = convert<double>(C0);
    kc::gemm<double>(c.trans_a, c.trans_b, c.M, c.N, c.K, alpha, Ad.data(), lda, Bd.data(), ldb, beta, Cd.data(), ldc);
    DeviceBuffer<T> dA(A), dB(B), dC(C0);
    run_gpu(dA.get(), lda, dB.get(), ldb, static_cast<T>(alpha), static_cast<T>(beta), dC.get(), ldc);
    return close_to(dC.download(), Cd, tol, metric);
}

// check_gemm's run_gpu for kg::gemm<T> with `math` (ignored for double) on the default stream.
template <class T>
auto gpu_gemm(const GemmCase& c, kg::GemmMath math) {
    return [&c, math](const T* A, int64_t lda, const T* B, int64_t ldb, T alpha, T beta, T* C, int64_t ldc) {
        kg::gemm<T>(c.trans_a, c.trans_b, c.M, c.N, c.K, alpha, A, lda, B, ldb, beta, C, ldc, nullptr, math);
    };
}

}  // namespace

TEST_P(GpuGemm, Fp32MatchesCpu) {
    const auto c = GetParam();
    EXPECT_TRUE(check_gemm<float>(c, kFp32Tol, Metric::normwise, gpu_gemm<float>(c, kg::GemmMath::fp32)));
}

// TF32 rounds every input to 10 mantissa bits: its error is a property of sums of many
// products, so it is checked on shapes with K >= 32 (GpuGemmTf32 below).
class GpuGemmTf32 : public GpuParamTest<GemmCase> {};

TEST_P(GpuGemmTf32, Tf32MatchesCpu) {
    const auto c = GetParam();
    EXPECT_TRUE(check_gemm<float>(c, kTf32Tol, Metric::normwise, gpu_gemm<float>(c, kg::GemmMath::tf32)));
}

TEST_P(GpuGemm, Fp64MatchesCpu) {
    const auto c = GetParam();
    EXPECT_TRUE(check_gemm<double>(c, kFp64Tol, Metric::normwise, gpu_gemm<double>(c, kg::GemmMath::fp32)));
}

// Inputs cast to bf16 / fp16 on the GPU, multiplied with fp32 accumulation: within the bf16
// bound of the fp32 inputs' exact product.
TEST_P(GpuGemm, HalfInputsMatchCpu) {
    const auto c = GetParam();
    for (kg::HalfType type : {kg::HalfType::bf16, kg::HalfType::fp16}) {
        SCOPED_TRACE(type == kg::HalfType::bf16 ? "bf16" : "fp16");
        EXPECT_TRUE(check_gemm<float>(
            c, kBf16Tol, Metric::normwise,
            [&](const float* A, int64_t lda, const float* B, int64_t ldb, float alpha, float beta, float* C,
                int64_t ldc) {
                const int64_t na = (c.trans_a ? c.K : c.M) * lda, nb = (c.trans_b ? c.N : c.K) * ldb;
                DeviceBuffer<uint16_t> hA(na), hB(nb);
                auto cast = type == kg::HalfType::bf16 ? kg::cast_f32_to_bf16 : kg::cast_f32_to_f16;
                cast(na, A, hA.get(), nullptr);
                cast(nb, B, hB.get(), nullptr);
                kg::gemm_half(type, c.trans_a, c.trans_b, c.M, c.N, c.K, alpha, hA.get(), lda, hB.get(), ldb, beta, C,
                              ldc, nullptr);
                kg::synchronize_device(0);  // hA, hB go out of scope here
            }));
    }
}

INSTANTIATE_TEST_SUITE_P(Shapes, GpuGemm,
                         ::testing::Values(GemmCase{false, false, 1, 1, 1, 0}, GemmCase{false, false, 64, 48, 32, 0},
                                           GemmCase{true, false, 65, 31, 127, 0}, GemmCase{false, true, 128, 10, 784, 3},
                                           GemmCase{true, true, 33, 257, 64, 5}, GemmCase{false, false, 512, 512, 512, 0},
                                           GemmCase{false, true, 7, 5, 0, 1}),
                         case_name);

INSTANTIATE_TEST_SUITE_P(Shapes, GpuGemmTf32,
                         ::testing::Values(GemmCase{false, false, 64, 48, 32, 0}, GemmCase{true, false, 65, 31, 127, 0},
                                           GemmCase{false, true, 128, 10, 784, 3}, GemmCase{true, true, 33, 257, 64, 5},
                                           GemmCase{false, false, 512, 512, 512, 0}),
                         case_name);

class GpuGemmChecks : public GpuTest {};

TEST_F(GpuGemmChecks, RefusesBadLeadingDimensionsBeforeLaunching) {
    DeviceBuffer<float> buf(64);
    EXPECT_THROW(kg::gemm<float>(false, false, 4, 4, 4, 1.0f, buf.get(), 3, buf.get(), 4, 0.0f, buf.get(), 4, nullptr),
                 std::invalid_argument);
    EXPECT_THROW(kg::gemm<float>(false, false, -1, 4, 4, 1.0f, buf.get(), 4, buf.get(), 4, 0.0f, buf.get(), 4, nullptr),
                 std::invalid_argument);
}

TEST_F(GpuGemmChecks, HandlesAreMadePerStreamAndReleased) {
    void* stream = kg::stream_create(0);
    DeviceBuffer<float> a(std::vector<float>(16, 1.0f)), c(16);
    kg::gemm<float>(false, false, 4, 4, 4, 1.0f, a.get(), a.get(), 0.0f, c.get(), stream);
    kg::stream_synchronize(stream);
    EXPECT_EQ(c.download(), std::vector<float>(16, 4.0f));
    EXPECT_EQ(kg::release_gemm_handles(stream), 1);
    EXPECT_EQ(kg::release_gemm_handles(stream), 0);
    kg::stream_destroy(stream);
}

// ---- casts ---------------------------------------------------------------------------------

namespace {
// The reference narrowing: IEEE round to nearest even, written out on the host.
uint16_t bf16_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
    const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>((u + rounding) >> 16);
}
float from_bf16(uint16_t b) {
    const uint32_t u = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
}  // namespace

class GpuCast : public GpuTest {};

TEST_F(GpuCast, Bf16RoundsToNearestEvenAndWidensExactly) {
    auto x = random_normal<float>(100000, 161, 0.0, 100.0);
    const float inf = std::numeric_limits<float>::infinity();
    for (float special : {0.0f, -0.0f, inf, -inf, 3.4e38f, 1e-40f, 1.00390625f /* a tie */, 1.01171875f})
        x.push_back(special);
    DeviceBuffer<float> d_x(x), d_back(static_cast<int64_t>(x.size()));
    DeviceBuffer<uint16_t> d_b(static_cast<int64_t>(x.size()));
    const auto n = static_cast<int64_t>(x.size());
    kg::cast_f32_to_bf16(n, d_x.get(), d_b.get(), nullptr);
    kg::cast_bf16_to_f32(n, d_b.get(), d_back.get(), nullptr);
    const auto bits = d_b.download();
    const auto back = d_back.download();
    int64_t wrong = 0;
    for (size_t i = 0; i < x.size(); ++i) wrong += bits[i] != bf16_bits(x[i]) || back[i] != from_bf16(bits[i]);
    EXPECT_EQ(wrong, 0);
    EXPECT_TRUE(close_to(std::vector<float>(back.begin(), back.end() - 8), std::vector<float>(x.begin(), x.end() - 8),
                         kBf16Tol));
    // NaN stays NaN.
    d_x.upload(std::vector<float>(x.size(), std::numeric_limits<float>::quiet_NaN()));
    kg::cast_f32_to_bf16(n, d_x.get(), d_b.get(), nullptr);
    kg::cast_bf16_to_f32(n, d_b.get(), d_back.get(), nullptr);
    EXPECT_TRUE(std::isnan(d_back.download()[0]));
}

TEST_F(GpuCast, Fp16RoundsToNearestEvenAndWidensExactly) {
    auto x = random_normal<float>(100000, 162, 0.0, 100.0);
    const float inf = std::numeric_limits<float>::infinity();
    for (float special : {0.0f, -0.0f, inf, -inf, 65504.0f, 65520.0f, 1e-8f, 1.00048828125f /* a tie */})
        x.push_back(special);
    const auto n = static_cast<int64_t>(x.size());
    DeviceBuffer<float> d_x(x), d_back(n);
    DeviceBuffer<uint16_t> d_h(n);
    kg::cast_f32_to_f16(n, d_x.get(), d_h.get(), nullptr);
    kg::cast_f16_to_f32(n, d_h.get(), d_back.get(), nullptr);
    const auto back = d_back.download();
    int64_t wrong = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        const float ref = static_cast<float>(static_cast<_Float16>(x[i]));  // IEEE binary16, nearest even
        wrong += !(back[i] == ref || (std::isnan(back[i]) && std::isnan(ref)));
    }
    EXPECT_EQ(wrong, 0);
}
