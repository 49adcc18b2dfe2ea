#include "bench/comm_bench.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/comm/mpi.h"

namespace paralab::bench {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

// As nccl-tests do, every benchmark checks what it timed: after the timed calls each rank
// all-reduces r + 1 once more, and every element must be the exact sum N(N+1)/2.
void check_sum(comm::Communicator& comm, std::vector<float>& data, const char* who) {
    const int n = comm.world();
    std::fill(data.begin(), data.end(), float(comm.rank() + 1));
    comm.all_reduce(data.data(), static_cast<int64_t>(data.size()), DType::f32, comm::ReduceOp::sum);
    const float want = float(n) * float(n + 1) / 2;
    for (size_t i = 0; i < data.size(); ++i)
        if (data[i] != want)
            throw Error(std::string(who) + ": element " + std::to_string(i) + " of rank " +
                        std::to_string(comm.rank()) + " is " + std::to_string(data[i]) + ", expected " +
                        std::to_string(want));
}

}  // namespace

double measure_memcpy_gbps(int64_t bytes, int iterations) {
    if (bytes <= 0 || iterations <= 0)
        throw Error("measure_memcpy_gbps: bytes and iterations must be positive, got " +
                    std::to_string(bytes) + " and " + std::to_string(iterations));
    // Touched before timing, so that page faults are not measured.
    std::vector<std::byte> src(static_cast<size_t>(bytes), std::byte{1});
    std::vector<std::byte> dst(static_cast<size_t>(bytes), std::byte{0});
    std::memcpy(dst.data(), src.data(), src.size());
    const auto t0 = Clock::now();
    for (int i = 0; i < iterations; ++i) {
        src[static_cast<size_t>(i) % src.size()] = std::byte(i);  // each copy is new work
        std::memcpy(dst.data(), src.data(), src.size());
    }
    const double seconds = seconds_since(t0);
    volatile std::byte sink = dst[dst.size() / 2];  // the copies are observed
    (void)sink;
    return static_cast<double>(bytes) * iterations / seconds / 1e9;
}

AllReduceBench bench_all_reduce(int world, int64_t bytes, int iterations) {
    if (world < 1 || bytes < 0 || iterations <= 0)
        throw Error("bench_all_reduce: world " + std::to_string(world) + ", bytes " +
                    std::to_string(bytes) + ", iterations " + std::to_string(iterations));
    const int64_t count = bytes / static_cast<int64_t>(sizeof(float));
    comm::LocalGroup group(world);
    std::vector<double> rank_seconds(static_cast<size_t>(world), 0.0);
    std::vector<std::exception_ptr> errors(static_cast<size_t>(world));
    std::vector<std::thread> threads;
    threads.reserve(static_cast<size_t>(world));
    for (int r = 0; r < world; ++r) {
        threads.emplace_back([&, r] {
            try {
                comm::Communicator& comm = group.rank(r);
                // Small values: sums grow by N per call, and reach inf only after hundreds of
                // calls (inf costs the same as finite values; denormals never appear).
                std::vector<float> data(static_cast<size_t>(count), 1e-3f * float(r + 1));
                comm.all_reduce(data.data(), count, DType::f32, comm::ReduceOp::sum);
                comm.barrier();
                const auto t0 = Clock::now();
                for (int i = 0; i < iterations; ++i)
                    comm.all_reduce(data.data(), count, DType::f32, comm::ReduceOp::sum);
                rank_seconds[static_cast<size_t>(r)] = seconds_since(t0);
                check_sum(comm, data, "bench_all_reduce");
            } catch (...) {
                errors[static_cast<size_t>(r)] = std::current_exception();
                group.abort("bench_all_reduce: rank " + std::to_string(r) + " failed");
            }
        });
    }
    for (auto& t : threads) t.join();
    for (auto& e : errors)
        if (e) std::rethrow_exception(e);

    AllReduceBench result;
    result.world = world;
    result.bytes = count * static_cast<int64_t>(sizeof(float));
    result.iterations = iterations;
    result.seconds_per_call =
        *std::max_element(rank_seconds.begin(), rank_seconds.end()) / iterations;
    if (result.seconds_per_call > 0)
        result.algbw_gbps = static_cast<double>(result.bytes) / result.seconds_per_call / 1e9;
    result.busbw_gbps = result.algbw_gbps * 2.0 * (world - 1) / world;
    return result;
}

AllReduceBench bench_mpi_all_reduce(int64_t bytes, int iterations) {
    if (bytes < 0 || iterations <= 0)
        throw Error("bench_mpi_all_reduce: bytes " + std::to_string(bytes) + ", iterations " +
                    std::to_string(iterations));
    comm::Communicator& comm = comm::MpiGroup::world().communicator();
    const int world = comm.world();
    const int64_t count = bytes / static_cast<int64_t>(sizeof(float));
    // As in bench_all_reduce: small values, touched before timing.
    std::vector<float> data(static_cast<size_t>(count), 1e-3f * float(comm.rank() + 1));
    comm.all_reduce(data.data(), count, DType::f32, comm::ReduceOp::sum);
    comm.barrier();
    const auto t0 = Clock::now();
    for (int i = 0; i < iterations; ++i)
        comm.all_reduce(data.data(), count, DType::f32, comm::ReduceOp::sum);
    double slowest = seconds_since(t0);
    comm.all_reduce(&slowest, 1, DType::f64, comm::ReduceOp::max);
    check_sum(comm, data, "bench_mpi_all_reduce");

    AllReduceBench result;
    result.world = world;
    result.bytes = count * static_cast<int64_t>(sizeof(float));
    result.iterations = iterations;
    result.seconds_per_call = slowest / iterations;
    if (result.seconds_per_call > 0)
        result.algbw_gbps = static_cast<double>(result.bytes) / result.seconds_per_call / 1e9;
    result.busbw_gbps = result.algbw_gbps * 2.0 * (world - 1) / world;
    return result;
}

}  // namespace paralab::bench
