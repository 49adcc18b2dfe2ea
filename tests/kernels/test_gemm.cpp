// OpenBLAS GEMM wrapper against a plain triple loop, for every transpose combination and
// awkward sizes, in f32 and f64.
#include <gtest/gtest.h>
#include <kernels/cpu/gemm.h>

#include <tuple>
#include <vector>

#include "engine/util/rng.h"

using namespace paralab;

namespace {

template <class T>
void reference_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha,
                    const std::vector<T>& A, const std::vector<T>& B, T beta, std::vector<T>& C) {
    for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
            double s = 0;
            for (int64_t k = 0; k < K; ++k) {
                const double a = ta ? A[k * M + i] : A[i * K + k];
                const double b = tb ? B[j * K + k] : B[k * N + j];
                s += a * b;
            }
            C[i * N + j] = static_cast<T>(alpha * s + beta * C[i * N + j]);
        }
}

using GemmCase = std::tuple<bool, bool, int, int, int>;

class GemmTest : public ::testing::TestWithParam<GemmCase> {};

template <class T>
void run_case(const GemmCase& c, double tol) {
    const auto [ta, tb, M, N, K] = c;
    Rng rng(M * 131 + N * 17 + K);
    std::vector<T> A(M * K), B(K * N), C(M * N), R;
    for (auto& v : A) v = static_cast<T>(rng.normal());
    for (auto& v : B) v = static_cast<T>(rng.normal());
    for (auto& v : C) v = static_cast<T>(rng.normal());
    R = C;
    kernels::cpu::gemm<T>(ta, tb, M, N, K, T(0.5), A.data(), B.data(), T(2), C.data());
    reference_gemm<T>(ta, tb, M, N, K, T(0.5), A, B, T(2), R);
    for (size_t i = 0; i < C.size(); ++i) ASSERT_NEAR(C[i], R[i], tol * (1 + std::abs(R[i]))) << i;
}

TEST_P(GemmTest, MatchesReferenceF32) { run_case<float>(GetParam(), 1e-4); }
TEST_P(GemmTest, MatchesReferenceF64) { run_case<double>(GetParam(), 1e-12); }

INSTANTIATE_TEST_SUITE_P(
    Shapes, GemmTest,
    ::testing::Combine(::testing::Bool(), ::testing::Bool(), ::testing::Values(1, 7, 64),
                       ::testing::Values(1, 13), ::testing::Values(0, 1, 33)));

}  // namespace
