// All-reduce bus bandwidth of the GPU communicators on virtual GPUs, against the device's copy
// bandwidth. Not a test: run by
// tests/gpu/run_on_gpu.sh --bench on a GPU machine.
//
// For each size (f32, 1 MiB .. 256 MiB per rank) and world (2, 4 virtual GPUs on GPU 0; 2..N
// distinct GPUs with NCCL where there are several): the time of one all_reduce (host wall time
// per call, every call ending synchronised, median of 20 after 3 warm-ups), algbw = bytes / t
// and busbw = algbw * 2(N-1)/N (nccl-tests' definition: what each link carries). Beside it,
// the device's copy bandwidth: a device-to-device cudaMemcpy of the same bytes on GPU 0
// (bytes / t; the memory moves twice that, a read and a write). A ring on one card moves
// 2(N-1)/N of the data per rank through the same memory, so busbw near the copy bandwidth is
// the ceiling; the gap is the per-step synchronisation and the reduction kernels' extra read.
#include <kernels/gpu/info.h>
#include <kernels/gpu/memory.h>
#include <kernels/gpu/nccl.h>
#include <kernels/gpu/stream.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "engine/comm/gpu.h"
#include "engine/device/cuda_device.h"

namespace {

using namespace paralab;
namespace kg = paralab::kernels::gpu;
using Clock = std::chrono::steady_clock;

constexpr int k_warmup = 3, k_iters = 20;

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// Seconds per device-to-device copy of `bytes` on GPU 0 (CUDA events, median).
double copy_seconds(size_t bytes) {
    kg::set_device(0);
    void* a = kg::device_allocate(0, bytes);
    void* b = kg::device_allocate(0, bytes);
    void* stream = kg::stream_create(0);
    void* start = kg::event_create(0);
    void* stop = kg::event_create(0);
    std::vector<double> times;
    for (int i = 0; i < k_warmup + k_iters; ++i) {
        kg::event_record(start, stream);
        kg::copy_device_to_device_async(b, a, bytes, stream);
        kg::event_record(stop, stream);
        kg::event_synchronize(stop);
        if (i >= k_warmup) times.push_back(kg::event_elapsed_ms(start, stop) * 1e-3);
    }
    kg::event_destroy(start);
    kg::event_destroy(stop);
    kg::stream_destroy(stream);
    kg::device_free(0, a);
    kg::device_free(0, b);
    return median(times);
}

// Seconds per all_reduce of `count` floats per rank (rank 0's wall time, median).
double all_reduce_seconds(comm::Group& group, const std::vector<CudaDevice*>& devices, int64_t count) {
    const int world = group.world();
    std::vector<double> times;
    std::mutex failures_mutex;
    std::vector<std::string> failures;  // guarded by failures_mutex
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r)
        threads.emplace_back([&, r] {
            devices[size_t(r)]->make_current();
            const size_t bytes = size_t(count) * sizeof(float);
            void* data = kg::device_allocate(devices[size_t(r)]->ordinal(), bytes);
            kg::fill_bytes_async(data, 0, bytes, devices[size_t(r)]->compute_stream());
            comm::Communicator& c = group.rank(r);
            for (int i = 0; i < k_warmup + k_iters; ++i) {
                c.barrier();
                const auto t0 = Clock::now();
                c.all_reduce(data, count, DType::f32, comm::ReduceOp::sum);
                const double s = std::chrono::duration<double>(Clock::now() - t0).count();
                if (r == 0 && i >= k_warmup) times.push_back(s);
            }
            // What was timed is checked (as nccl-tests do): every rank all-reduces r + 1 once
            // more, and every element must be the exact sum N(N+1)/2.
            std::vector<float> host(size_t(count), float(r + 1));
            const int ordinal = devices[size_t(r)]->ordinal();
            kg::copy_host_to_device(data, host.data(), bytes);
            kg::synchronize_device(ordinal);
            c.all_reduce(data, count, DType::f32, comm::ReduceOp::sum);
            kg::synchronize_device(ordinal);
            kg::copy_device_to_host(host.data(), data, bytes);
            const float want = float(world) * float(world + 1) / 2;
            for (size_t i = 0; i < host.size(); ++i)
                if (host[i] != want) {
                    std::lock_guard lock(failures_mutex);
                    failures.push_back("rank " + std::to_string(r) + ", element " + std::to_string(i) + ": " +
                                       std::to_string(host[i]) + ", expected " + std::to_string(want));
                    break;
                }
            kg::device_free(devices[size_t(r)]->ordinal(), data);
        });
    for (auto& t : threads) t.join();
    if (!failures.empty()) throw std::runtime_error("bench_gpu_comm: a wrong sum: " + failures.front());
    return median(times);
}

void bench(const char* label, bool nccl, int world) {
    std::vector<std::unique_ptr<CudaDevice>> owned;
    std::vector<CudaDevice*> devices;
    for (int r = 0; r < world; ++r) {
        const int ordinal = nccl ? r : 0;
        owned.push_back(make_cuda_device(ordinal, "cuda:" + std::to_string(ordinal) + "/" + std::to_string(r)));
        devices.push_back(owned.back().get());
    }
    std::unique_ptr<comm::Group> group;
    if (nccl)
        group = std::make_unique<comm::NcclGroup>(devices);
    else
        group = std::make_unique<comm::CudaLocalGroup>(devices);
    for (size_t mib : {1, 4, 16, 64, 256}) {
        const size_t bytes = mib << 20;
        const double t = all_reduce_seconds(*group, devices, int64_t(bytes / sizeof(float)));
        const double copy = copy_seconds(bytes);
        const double algbw = double(bytes) / t * 1e-9;
        const double busbw = algbw * 2.0 * (world - 1) / world;
        std::printf("%-12s N=%d %5zu MiB  all_reduce %9.3f ms  algbw %7.1f GB/s  busbw %7.1f GB/s"
                    "  | d2d copy %7.1f GB/s  busbw/copy %.2f\n",
                    label, world, mib, t * 1e3, algbw, busbw, double(bytes) / copy * 1e-9,
                    busbw / (double(bytes) / copy * 1e-9));
    }
}

}  // namespace

int main() {
    const int gpus = kg::device_count();
    if (gpus == 0) {
        std::printf("bench_gpu_comm: no CUDA device; nothing to measure\n");
        return 0;
    }
    const auto info = kg::device_info(0);
    std::printf("bench_gpu_comm on %s (%d GPU%s), NCCL %s\n", info.name.c_str(), gpus,
                gpus == 1 ? "" : "s", kg::nccl::version().c_str());
    try {
        for (int world : {2, 4}) bench("virtual", false, world);
        if (kg::nccl::available())
            for (int world = 2; world <= gpus; world *= 2) bench("nccl", true, world);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_gpu_comm: %s\n", e.what());
        return 1;
    }
    return 0;
}
