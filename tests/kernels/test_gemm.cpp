// OpenBLAS GEMM wrapper against a plain triple loop, for every transpose combination and
// awkward sizes, in f32 and f64.
#include <gtest/gtest.h>
#include <kernels/cpu/gemm.h>
#include <kernels/cpu/threads.h>

#include <atomic>

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

// Threaded GEMMs are split by rows or columns of C over the calling thread's team, one
// single-threaded OpenBLAS call per block (kernels/cpu/gemm.cpp): every transpose, both split
// directions, block counts that do not divide the extent, and leading dimensions wider than the
// operands, against the reference loop.
template <class T>
void run_split_case(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int threads, double tol) {
    const int64_t pad = 3;  // every operand sits in a wider row-major array
    const int64_t a_rows = ta ? K : M, a_cols = ta ? M : K;
    const int64_t b_rows = tb ? N : K, b_cols = tb ? K : N;
    const int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = N + pad;
    Rng rng(M * 7 + N * 3 + K + threads);
    std::vector<T> A(a_rows * lda), B(b_rows * ldb), C(M * ldc);
    for (auto& v : A) v = static_cast<T>(rng.normal());
    for (auto& v : B) v = static_cast<T>(rng.normal());
    for (auto& v : C) v = static_cast<T>(rng.normal());
    std::vector<T> a(a_rows * a_cols), b(b_rows * b_cols), r(M * N);
    for (int64_t i = 0; i < a_rows; ++i)
        for (int64_t j = 0; j < a_cols; ++j) a[i * a_cols + j] = A[i * lda + j];
    for (int64_t i = 0; i < b_rows; ++i)
        for (int64_t j = 0; j < b_cols; ++j) b[i * b_cols + j] = B[i * ldb + j];
    for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) r[i * N + j] = C[i * ldc + j];
    const std::vector<T> c_before = C;
    kernels::cpu::set_num_threads(threads);
    kernels::cpu::gemm<T>(ta, tb, M, N, K, T(0.5), A.data(), lda, B.data(), ldb, T(2), C.data(), ldc);
    kernels::cpu::set_num_threads(1);
    reference_gemm<T>(ta, tb, M, N, K, T(0.5), a, b, T(2), r);
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) {
            ASSERT_NEAR(C[i * ldc + j], r[i * N + j], tol * (1 + std::abs(r[i * N + j])))
                << "ta " << ta << " tb " << tb << " threads " << threads << " at " << i << "," << j;
        }
        for (int64_t j = N; j < ldc; ++j) {
            ASSERT_EQ(C[i * ldc + j], c_before[i * ldc + j]);  // outside C's columns: untouched
        }
    }
}

TEST(GemmThreads, SplitMatchesReference) {
    // 2*M*N*K >= 2^21 in each, so every one is split; M >= N splits rows, M < N columns.
    for (bool ta : {false, true})
        for (bool tb : {false, true})
            for (int threads : {2, 3})
                for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{150, 70, 120},
                                       std::tuple<int64_t, int64_t, int64_t>{40, 301, 90}}) {
                    run_split_case<float>(ta, tb, M, N, K, threads, 1e-4);
                    run_split_case<double>(ta, tb, M, N, K, threads, 1e-12);
                }
}

TEST(GemmThreads, ParallelChunksCoverTheRangeOnce) {
    for (int threads : {1, 2, 3, 5}) {
        kernels::cpu::set_num_threads(threads);
        for (int64_t n : {0, 1, 2, 4, 7, 64}) {
            std::vector<std::atomic<int>> hits(n);
            std::vector<int64_t> lo_of(threads, -1), hi_of(threads, -1);
            const int chunks = kernels::cpu::parallel_chunks(n, [&](int64_t lo, int64_t hi, int c) {
                lo_of[c] = lo;
                hi_of[c] = hi;
                for (int64_t i = lo; i < hi; ++i) ++hits[i];
            });
            EXPECT_EQ(chunks, std::min<int64_t>(n, threads)) << n << " " << threads;
            EXPECT_EQ(chunks, kernels::cpu::chunk_count(n));
            for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1) << i;
            for (int c = 0; c < chunks; ++c) {  // contiguous, in order, none empty
                EXPECT_EQ(lo_of[c], c == 0 ? 0 : hi_of[c - 1]);
                EXPECT_LT(lo_of[c], hi_of[c]);
            }
            if (chunks > 0) {
                EXPECT_EQ(hi_of[chunks - 1], n);
            }
        }
    }
    // Inside a chunk everything is single-threaded: a nested call makes one chunk.
    kernels::cpu::set_num_threads(2);
    std::atomic<int> nested{0};
    kernels::cpu::parallel_chunks(2, [&](int64_t, int64_t, int) {
        nested += kernels::cpu::parallel_chunks(10, [](int64_t, int64_t, int) {});
    });
    EXPECT_EQ(nested.load(), 2);
    kernels::cpu::set_num_threads(1);
}

}  // namespace
