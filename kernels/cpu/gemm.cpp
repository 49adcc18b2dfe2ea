#include <kernels/cpu/gemm.h>
#include <kernels/cpu/threads.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <cblas.h>
#ifdef PARALAB_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

#ifdef _OPENMP
#include <omp.h>
#endif

namespace paralab::kernels::cpu {

namespace {
inline CBLAS_TRANSPOSE op(bool t) { return t ? CblasTrans : CblasNoTrans; }
thread_local int t_threads = 1;

// One owner of the threads: OpenBLAS always runs on the calling thread (its own pool is set
// to 1 thread, process-wide, so its workers never wake), and a GEMM on more than one compute
// thread is split here into one single-threaded OpenBLAS call per thread of our OpenMP team,
// the team that also runs the elementwise loops. Two thread pools each spinning on the same
// two cores made the 2-thread steps collapse.
//
// Below this many FLOPs (2*M*N*K) a parallel region costs more than it saves.
constexpr int64_t kSplitMinFlops = int64_t{1} << 21;
// Column/row blocks are multiples of this, so that a block boundary falls on the kernel's
// register tile.
constexpr int64_t kSplitQuantum = 16;

// Single precision goes to oneDNN's sgemm where it is built in: it JITs its kernel for the
// machine's widest vector unit (AVX-512 where there is one), about twice OpenBLAS's rate where
// the environment holds OpenBLAS to its Haswell kernel (docs/benchmarks.md, "Layer
// kernels"). Double precision (the gradient checks' reference) stays with OpenBLAS.
template <class T>
void blas(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
          const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
#ifdef PARALAB_HAVE_DNNL
    if constexpr (std::is_same_v<T, float>) {
        if (K == 0) {  // C = beta * C, as BLAS defines it (beta = 0 writes zeros); oneDNN
                       // refuses K = 0 (its leading dimensions must be at least 1)
            for (int64_t i = 0; i < M; ++i)
                for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0 ? 0 : beta * C[i * ldc + j];
            return;
        }
        const dnnl_status_t status = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A,
                                                lda, B, ldb, beta, C, ldc);
        if (status != dnnl_success)
            throw std::invalid_argument("dnnl_sgemm refused M=" + std::to_string(M) +
                                        " N=" + std::to_string(N) + " K=" + std::to_string(K) +
                                        " (status " + std::to_string(status) + ")");
        return;
    }
#endif
    if constexpr (std::is_same_v<T, float>)
        cblas_sgemm(CblasRowMajor, op(ta), op(tb), static_cast<blasint>(M),
                    static_cast<blasint>(N), static_cast<blasint>(K), alpha, A,
                    static_cast<blasint>(lda), B, static_cast<blasint>(ldb), beta, C,
                    static_cast<blasint>(ldc));
    else
        cblas_dgemm(CblasRowMajor, op(ta), op(tb), static_cast<blasint>(M),
                    static_cast<blasint>(N), static_cast<blasint>(K), alpha, A,
                    static_cast<blasint>(lda), B, static_cast<blasint>(ldb), beta, C,
                    static_cast<blasint>(ldc));
}

// How many threads a GEMM of this size gets: 1 inside a parallel region (a layer that already
// splits its work over samples) or when it is too small to split.
int split_threads(int64_t M, int64_t N, int64_t K) {
#ifdef _OPENMP
    if (t_threads <= 1 || omp_in_parallel()) return 1;
    if (2 * M * N * K < kSplitMinFlops) return 1;
    const int64_t blocks = std::max(M, N) / kSplitQuantum;
    return static_cast<int>(std::clamp<int64_t>(blocks, 1, t_threads));
#else
    (void)M, (void)N, (void)K;
    return 1;
#endif
}

template <class T>
void gemm_split(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
                int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
    const int threads = split_threads(M, N, K);
    if (threads == 1) return blas<T>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    // Split the longer of M and N: each thread owns a block of C's rows or columns, reads its
    // slice of one operand and all of the other; the sums over K are those of one call.
    const bool by_rows = M >= N;
    const int64_t extent = by_rows ? M : N;
    const int64_t quanta = (extent + kSplitQuantum - 1) / kSplitQuantum;
#pragma omp parallel num_threads(threads)
    {
#ifdef _OPENMP
        const int64_t id = omp_get_thread_num(), n = omp_get_num_threads();
#else
        const int64_t id = 0, n = 1;
#endif
        const int64_t lo = std::min(extent, quanta * id / n * kSplitQuantum);
        const int64_t hi = std::min(extent, quanta * (id + 1) / n * kSplitQuantum);
        if (hi > lo) {
            if (by_rows) {
                const T* a = ta ? A + lo : A + lo * lda;
                blas<T>(ta, tb, hi - lo, N, K, alpha, a, lda, B, ldb, beta, C + lo * ldc, ldc);
            } else {
                const T* b = tb ? B + lo * ldb : B + lo;
                blas<T>(ta, tb, M, hi - lo, K, alpha, A, lda, b, ldb, beta, C + lo, ldc);
            }
        }
    }
}
}  // namespace

template <>
void gemm<float>(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                 int64_t ldc) {
    if (M == 0 || N == 0) return;
    gemm_split<float>(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <>
void gemm<double>(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
                  const double* A, int64_t lda, const double* B, int64_t ldb, double beta,
                  double* C, int64_t ldc) {
    if (M == 0 || N == 0) return;
    gemm_split<double>(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void set_num_threads(int threads) {
    if (threads < 1) threads = 1;
    t_threads = threads;
    openblas_set_num_threads(1);  // see "One owner of the threads" above
#ifdef _OPENMP
    omp_set_num_threads(threads);
#endif
}

int num_threads() { return t_threads; }

std::string gemm_library() {
#ifdef PARALAB_HAVE_DNNL
    const dnnl_version_t* v = dnnl_version();
    const char* isa = "?";
    switch (dnnl_get_effective_cpu_isa()) {
        case dnnl_cpu_isa_sse41: isa = "sse41"; break;
        case dnnl_cpu_isa_avx: isa = "avx"; break;
        case dnnl_cpu_isa_avx2: isa = "avx2"; break;
        case dnnl_cpu_isa_avx2_vnni: isa = "avx2_vnni"; break;
        case dnnl_cpu_isa_avx512_core: isa = "avx512_core"; break;
        case dnnl_cpu_isa_avx512_core_vnni: isa = "avx512_core_vnni"; break;
        case dnnl_cpu_isa_avx512_core_bf16: isa = "avx512_core_bf16"; break;
        case dnnl_cpu_isa_avx512_core_amx: isa = "avx512_core_amx"; break;
        default: break;
    }
    return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
           std::to_string(v->patch) + " sgemm (ISA " + isa + ")";
#else
    const char* core = openblas_get_corename();
    return std::string("OpenBLAS sgemm (kernel ") + (core ? core : "unknown") + ")";
#endif
}

int chunk_count(int64_t n) {
#ifdef _OPENMP
    if (omp_in_parallel()) return n > 0 ? 1 : 0;
#endif
    return static_cast<int>(std::clamp<int64_t>(n, 0, t_threads));
}

int parallel_chunks(int64_t n, const std::function<void(int64_t, int64_t, int)>& body) {
    const int chunks = chunk_count(n);
    if (chunks <= 1) {
        if (chunks == 1) body(0, n, 0);
        return chunks;
    }
#pragma omp parallel for schedule(static, 1) num_threads(chunks)
    for (int c = 0; c < chunks; ++c) body(n * c / chunks, n * (c + 1) / chunks, c);
    return chunks;
}

}  // namespace paralab::kernels::cpu
