// Communication benchmarks (no main: the CLI, the tests and throwaway programs call these).
// Bandwidths follow nccl-tests (doc/PERFORMANCE.md): for an all-reduce of S bytes per rank
// taking t seconds, algbw = S / t and busbw = algbw * 2(N-1)/N, the rate at which each rank
// moves data in a ring; busbw is comparable with the memory bandwidth one copy achieves.
#pragma once

#include <cstdint>

namespace paralab::bench {

// GB/s (1e9 bytes per second) of std::memcpy from one `bytes` buffer into another, one thread:
// each byte is read once and written once, as a rank of the local ring does for every byte it
// moves.
double measure_memcpy_gbps(int64_t bytes, int iterations = 10);

struct AllReduceBench {
    int world = 0;
    int64_t bytes = 0;  // per rank: an f32 buffer of bytes / 4 elements
    int iterations = 0;
    double seconds_per_call = 0;  // the slowest rank's mean over the timed calls
    double algbw_gbps = 0;        // bytes / seconds_per_call / 1e9
    double busbw_gbps = 0;        // algbw * 2(N-1)/N (0 for N = 1)
};

// `iterations` timed sum all-reduces (after one untimed warm-up call and a barrier) on a
// LocalGroup of `world` ranks, each rank on its own std::thread.
AllReduceBench bench_all_reduce(int world, int64_t bytes, int iterations);

// The same measurement on MpiGroup::world()'s communicator (engine/comm/mpi.h): every rank of
// an MPI job (one process per rank, under mpirun) calls it with the same arguments; `world` is
// the job's size, and seconds_per_call the slowest rank's (agreed by an all-reduce), so every
// rank returns the same result. Throws Error in a build without MPI.
AllReduceBench bench_mpi_all_reduce(int64_t bytes, int iterations);

}  // namespace paralab::bench
