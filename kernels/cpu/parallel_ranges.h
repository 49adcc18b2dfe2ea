// Private to kernels/cpu: how a memory-bound elementwise kernel splits its range.
#pragma once

#include <cstdint>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace paralab::kernels::cpu {

// Runs body(lo, hi) over [0, n) in contiguous ranges: one range per thread of the calling
// thread's OpenMP team when n >= min_parallel (and the caller is not already inside a parallel
// region), else a single call on the calling thread. The body's own inner loop carries the
// `omp simd`. A combined `omp parallel for simd if (...)` whose condition was false ran GCC's
// scalar fallback instead: relu as a compare and a branch per element, ~5 ns an element on
// random signs, 15x the vector loop (docs/benchmarks.md, "Layer kernels").
template <class Body>
inline void parallel_ranges(int64_t n, int64_t min_parallel, const Body& body) {
    if (n <= 0) return;
#ifdef _OPENMP
    if (n >= min_parallel && omp_get_max_threads() > 1 && !omp_in_parallel()) {
#pragma omp parallel
        {
            const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
            const int64_t lo = n * t / nt, hi = n * (t + 1) / nt;
            if (hi > lo) body(lo, hi);
        }
        return;
    }
#else
    (void)min_parallel;
#endif
    body(int64_t{0}, n);
}

}  // namespace paralab::kernels::cpu
