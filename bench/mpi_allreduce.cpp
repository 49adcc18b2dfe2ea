// MPI all-reduce bus bandwidth on this host against the in-process (local) backend, for
// docs/benchmarks.md ("MPI all-reduce on localhost"). Not a test.
//
//   mpirun -np 2 [--oversubscribe --allow-run-as-root] bench_mpi_allreduce
//       the MPI backend, one process per rank; rank 0 prints the table
//   bench_mpi_allreduce --local 2
//       the local backend, 2 ranks as threads of this process (MPI is not touched); also the
//       one-thread memcpy rate, the napkin-math ceiling of a shared-memory ring's busbw
//
// Sizes 1..256 MB per rank (f32, sum), busbw = algbw * 2(N-1)/N as in nccl-tests.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#if defined(__GLIBC__)  // defined by the C library's headers above
#include <malloc.h>
#endif

#include "bench/comm_bench.h"
#include "engine/comm/mpi.h"

namespace {

// Enough calls for about 1 GB of data per size, at least 4.
int iterations_for(long long bytes) {
    const long long calls = (1LL << 30) / bytes;
    return int(calls < 4 ? 4 : calls > 50 ? 50 : calls);
}

void print_row(const char* backend, const paralab::bench::AllReduceBench& b) {
    std::printf("%-6s %5d %10.0f %6d %12.3f %10.2f %10.2f\n", backend, b.world,
                double(b.bytes) / (1 << 20), b.iterations, b.seconds_per_call * 1e3, b.algbw_gbps,
                b.busbw_gbps);
    std::fflush(stdout);
}

void print_header() {
    std::printf("%-6s %5s %10s %6s %12s %10s %10s\n", "backend", "ranks", "MB/rank", "iters",
                "ms/call", "algbw GB/s", "busbw GB/s");
}

}  // namespace

int main(int argc, char** argv) {
#if defined(__GLIBC__)
    // Open MPI's all-reduce allocates a temporary buffer of the message's size on every call.
    // glibc maps blocks of 32 MB and more afresh and unmaps them when freed, so every call would
    // pay a page fault per 4 KB (about 12 us each on a virtual machine here, more than the
    // transfer): keep freed memory, as a long-running training process effectively does.
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
    try {
        if (argc == 3 && std::strcmp(argv[1], "--local") == 0) {
            const int world = std::atoi(argv[2]);
            std::printf("memcpy, one thread, 64 MB: %.2f GB/s\n",
                        paralab::bench::measure_memcpy_gbps(64 << 20, 20));
            print_header();
            for (long long mb = 1; mb <= 256; mb *= 2)
                print_row("local", paralab::bench::bench_all_reduce(world, mb << 20,
                                                                    iterations_for(mb << 20)));
            return 0;
        }
        if (argc != 1) {
            std::fprintf(stderr, "usage: mpirun -np N %s | %s --local N\n", argv[0], argv[0]);
            return 2;
        }
        const bool root = paralab::comm::MpiGroup::world().rank() == 0;
        if (root) print_header();
        for (long long mb = 1; mb <= 256; mb *= 2) {
            const auto b = paralab::bench::bench_mpi_all_reduce(mb << 20, iterations_for(mb << 20));
            if (root) print_row("mpi", b);
        }
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_mpi_allreduce: %s\n", e.what());
        return 1;
    }
}
