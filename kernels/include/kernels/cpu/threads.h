// Compute threads of the CPU kernels. Called by a device's rank thread (Device::make_current).
// One owner of the threads: the calling thread's OpenMP team (per calling thread) runs both our
// loops and the GEMMs, which gemm() splits into one single-threaded OpenBLAS call per team
// thread; OpenBLAS's own pool (process-wide) is kept at 1 thread, so two pools never spin on
// the same cores.
#pragma once

#include <cstdint>
#include <functional>

namespace paralab::kernels::cpu {

void set_num_threads(int threads);
int num_threads();

// Splits [0, n) into num_threads() contiguous chunks, fewer when n is smaller, and calls
// body(lo, hi, chunk) for each on the calling thread's team (chunk 0 on the calling thread):
// chunk c always covers the same range for a given n and thread count, so work that keeps
// per-chunk partial sums and adds them in chunk order is deterministic. A GEMM inside body
// runs single-threaded. Returns the number of chunks. body must not throw.
int parallel_chunks(int64_t n, const std::function<void(int64_t lo, int64_t hi, int chunk)>& body);

// How many chunks parallel_chunks(n, ...) makes.
int chunk_count(int64_t n);

}  // namespace paralab::kernels::cpu
