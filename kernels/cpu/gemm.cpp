#include <kernels/cpu/gemm.h>
#include <kernels/cpu/threads.h>

#include <cblas.h>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace paralab::kernels::cpu {

namespace {
inline CBLAS_TRANSPOSE op(bool t) { return t ? CblasTrans : CblasNoTrans; }
thread_local int t_threads = 1;
}  // namespace

template <>
void gemm<float>(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                 int64_t ldc) {
    if (M == 0 || N == 0) return;
    cblas_sgemm(CblasRowMajor, op(trans_a), op(trans_b), static_cast<blasint>(M),
                static_cast<blasint>(N), static_cast<blasint>(K), alpha, A,
                static_cast<blasint>(lda), B, static_cast<blasint>(ldb), beta, C,
                static_cast<blasint>(ldc));
}

template <>
void gemm<double>(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
                  const double* A, int64_t lda, const double* B, int64_t ldb, double beta,
                  double* C, int64_t ldc) {
    if (M == 0 || N == 0) return;
    cblas_dgemm(CblasRowMajor, op(trans_a), op(trans_b), static_cast<blasint>(M),
                static_cast<blasint>(N), static_cast<blasint>(K), alpha, A,
                static_cast<blasint>(lda), B, static_cast<blasint>(ldb), beta, C,
                static_cast<blasint>(ldc));
}

void set_num_threads(int threads) {
    if (threads < 1) threads = 1;
    t_threads = threads;
    openblas_set_num_threads(threads);
#ifdef _OPENMP
    omp_set_num_threads(threads);
#endif
}

int num_threads() { return t_threads; }

}  // namespace paralab::kernels::cpu
