// CudaDevice (engine/device/cuda_device.h): the caching allocator's accounting by category and
// its cache, out-of-memory naming the device, what the driver reports free, the two streams,
// event-timed spans, async copies, and virtual GPUs (several CudaDevice on one card), each with
// its own streams and accounting.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "engine/device/cuda_device.h"
#include "engine/util/error.h"
#include "tests/gpu/gpu_testing.h"

using namespace paralab;
using namespace paralab::gpu_testing;

namespace {
constexpr int64_t kMiB = int64_t{1} << 20;
size_t idx(MemCategory c) { return static_cast<size_t>(c); }
}  // namespace

// Runs with or without a GPU: asking for a GPU that is not there is a ConfigError naming it.
TEST(GpuDeviceNoGpu, MissingGpuIsAConfigErrorNotACrash) {
    const int count = kg::device_count();
    try {
        make_cuda_device(count);
        FAIL() << "cuda:" << count << " should not exist";
    } catch (const ConfigError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("cuda:" + std::to_string(count)), std::string::npos) << what;
        EXPECT_NE(what.find("no such GPU"), std::string::npos) << what;
    }
}

class GpuDevice : public GpuTest {};

TEST_F(GpuDevice, HasTwoStreamsAndMakesItsGpuCurrent) {
    auto dev = make_cuda_device(0);
    EXPECT_EQ(dev->kind(), DeviceKind::cuda);
    EXPECT_EQ(dev->name(), "cuda:0");
    EXPECT_EQ(dev->ordinal(), 0);
    EXPECT_NE(dev->compute_stream(), nullptr);
    EXPECT_NE(dev->comm_stream(), nullptr);
    EXPECT_NE(dev->compute_stream(), dev->comm_stream());
    dev->make_current();
    EXPECT_EQ(kg::current_device(), 0);
}

TEST_F(GpuDevice, AllocatorAccountsByCategoryAndCachesBlocks) {
    auto dev = make_cuda_device(0);
    Allocator& alloc = dev->allocator();
    void* p = alloc.allocate(10 * kMiB, MemCategory::parameters);
    void* g = alloc.allocate(10 * kMiB, MemCategory::gradients);
    void* a = alloc.allocate(3 * kMiB + 5, MemCategory::activations);  // rounded up to 64 bytes
    auto s = alloc.stats();
    EXPECT_EQ(s.current[idx(MemCategory::parameters)], 10 * kMiB);
    EXPECT_EQ(s.current[idx(MemCategory::gradients)], 10 * kMiB);
    EXPECT_EQ(s.current[idx(MemCategory::activations)], 3 * kMiB + 64);
    EXPECT_EQ(s.current_total, 23 * kMiB + 64);
    EXPECT_EQ(s.system_allocs, 3);

    alloc.deallocate(a, 3 * kMiB + 5, MemCategory::activations);
    s = alloc.stats();
    EXPECT_EQ(s.current[idx(MemCategory::activations)], 0);
    EXPECT_EQ(s.peak[idx(MemCategory::activations)], 3 * kMiB + 64);
    EXPECT_EQ(s.cached_bytes, 3 * kMiB + 64);
    // The same size again comes from the cache: the same block, no cudaMalloc.
    void* a2 = alloc.allocate(3 * kMiB + 5, MemCategory::workspace);
    EXPECT_EQ(a2, a);
    s = alloc.stats();
    EXPECT_EQ(s.system_allocs, 3);
    EXPECT_EQ(s.cached_bytes, 0);
    EXPECT_EQ(s.current[idx(MemCategory::workspace)], 3 * kMiB + 64);

    // The block is real device memory: a copy round trip through it.
    std::vector<int32_t> host(1000);
    for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<int32_t>(i * 7);
    kg::copy_host_to_device(a2, host.data(), host.size() * 4);
    std::vector<int32_t> back(host.size());
    kg::copy_device_to_host(back.data(), a2, back.size() * 4);
    EXPECT_EQ(back, host);

    alloc.deallocate(a2, 3 * kMiB + 5, MemCategory::workspace);
    alloc.deallocate(g, 10 * kMiB, MemCategory::gradients);
    alloc.deallocate(p, 10 * kMiB, MemCategory::parameters);
    EXPECT_EQ(alloc.stats().current_total, 0);
    alloc.release_cached();
    EXPECT_EQ(alloc.stats().cached_bytes, 0);
}

TEST_F(GpuDevice, DriverFreeBytesFollowsRealAllocations) {
    auto dev = make_cuda_device(0);
    const int64_t total = dev->cuda_allocator().driver_total_bytes();
    const int64_t before = dev->driver_free_bytes();
    EXPECT_GT(total, 0);
    EXPECT_GT(before, 0);
    EXPECT_LE(before, total);
    const int64_t size = 512 * kMiB;
    void* big = dev->allocator().allocate(size, MemCategory::activations);
    // Other processes may allocate meanwhile; 64 MiB of slack covers the driver's granularity.
    EXPECT_LE(dev->driver_free_bytes(), before - size + 64 * kMiB);
    dev->allocator().deallocate(big, size, MemCategory::activations);
    dev->allocator().release_cached();
    EXPECT_GE(dev->driver_free_bytes(), before - 64 * kMiB);
}

TEST_F(GpuDevice, OutOfMemoryNamesTheDevice) {
    auto dev = make_cuda_device(0, "cuda:0/oom");
    const int64_t too_much = dev->cuda_allocator().driver_total_bytes() * 2;
    try {
        dev->allocator().allocate(static_cast<size_t>(too_much), MemCategory::parameters);
        FAIL() << "allocating twice the GPU's memory should fail";
    } catch (const OutOfMemoryError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("cuda:0/oom"), std::string::npos) << what;
        EXPECT_NE(what.find("parameters"), std::string::npos) << what;
    }
    // The device is still usable after the failure (the error was not sticky).
    void* p = dev->allocator().allocate(kMiB, MemCategory::parameters);
    dev->allocator().deallocate(p, kMiB, MemCategory::parameters);
    // A budget teaches out-of-memory below the card's size.
    dev->allocator().set_limit(8 * kMiB);
    EXPECT_THROW(dev->allocator().allocate(16 * kMiB, MemCategory::activations), OutOfMemoryError);
}

TEST_F(GpuDevice, SpansAreTimedWithEventsAndStreamsAreOrdered) {
    auto dev = make_cuda_device(0);
    const int64_t bytes = 256 * kMiB;
    void* buf = dev->allocator().allocate(bytes, MemCategory::communication);
    void* pinned = kg::pinned_host_allocate(static_cast<size_t>(bytes));
    ASSERT_NE(pinned, nullptr);
    std::memset(pinned, 0, static_cast<size_t>(bytes));

    CudaDevice::SpanTimer span(*dev);
    span.begin(dev->compute_stream());
    for (int i = 0; i < 4; ++i) kg::fill_bytes_async(buf, 0x5a, static_cast<size_t>(bytes), dev->compute_stream());
    span.end(dev->compute_stream());
    // The communication stream copies the buffer out only after the compute stream's fills.
    dev->comm_waits_for_compute();
    kg::copy_device_to_host_async(pinned, buf, static_cast<size_t>(bytes), dev->comm_stream());
    dev->synchronize();
    const float ms = span.elapsed_ms();
    EXPECT_GT(ms, 0.0f);
    EXPECT_LT(ms, 10000.0f);
    const auto* bytes_out = static_cast<const unsigned char*>(pinned);
    int64_t wrong = 0;
    for (int64_t i = 0; i < bytes; i += 4093) wrong += bytes_out[i] != 0x5a;
    EXPECT_EQ(wrong, 0);
    std::printf("[ INFO     ] 4 x %lld MiB memset on the compute stream: %.3f ms, %.1f GB/s\n",
                static_cast<long long>(bytes / kMiB), ms, 4.0 * static_cast<double>(bytes) / (ms * 1e6));

    // Async round trip host -> device -> host on the compute stream.
    auto* host = static_cast<int32_t*>(pinned);
    for (int i = 0; i < 1024; ++i) host[i] = i * i;
    kg::copy_host_to_device_async(buf, pinned, 4096, dev->compute_stream());
    kg::stream_synchronize(dev->compute_stream());
    std::memset(pinned, 0, 4096);
    kg::copy_device_to_host_async(pinned, buf, 4096, dev->compute_stream());
    kg::stream_synchronize(dev->compute_stream());
    int64_t mismatched = 0;
    for (int i = 0; i < 1024; ++i) mismatched += host[i] != i * i;
    EXPECT_EQ(mismatched, 0);

    kg::pinned_host_free(pinned);
    dev->allocator().deallocate(buf, bytes, MemCategory::communication);
}

TEST_F(GpuDevice, EventsReportCompletion) {
    auto dev = make_cuda_device(0);
    CudaEvent event(0, false);
    event.record(dev->compute_stream());
    event.synchronize();
    EXPECT_TRUE(event.completed());
    CudaEvent moved = std::move(event);
    EXPECT_EQ(event.handle(), nullptr);
    EXPECT_TRUE(moved.completed());
}

// Virtual GPUs: two devices on GPU 0, each with its own streams and accounting.
TEST_F(GpuDevice, VirtualGpusOnOneCardKeepTheirOwnStreamsAndAccounting) {
    auto a = make_cuda_device(0);
    auto b = make_cuda_device(0, "cuda:0/1");
    EXPECT_EQ(a->ordinal(), b->ordinal());
    EXPECT_EQ(a->id(), b->id());
    EXPECT_NE(a->name(), b->name());
    EXPECT_NE(a->compute_stream(), b->compute_stream());
    EXPECT_NE(a->comm_stream(), b->comm_stream());

    void* pa = a->allocator().allocate(40 * kMiB, MemCategory::parameters);
    void* pb = b->allocator().allocate(8 * kMiB, MemCategory::optimizer_state);
    EXPECT_EQ(a->allocator().stats().current_total, 40 * kMiB);
    EXPECT_EQ(a->allocator().stats().current[idx(MemCategory::optimizer_state)], 0);
    EXPECT_EQ(b->allocator().stats().current_total, 8 * kMiB);
    EXPECT_EQ(b->allocator().stats().current[idx(MemCategory::parameters)], 0);
    // b's budget does not limit a.
    b->allocator().set_limit(16 * kMiB);
    EXPECT_THROW(b->allocator().allocate(16 * kMiB, MemCategory::activations), OutOfMemoryError);
    void* pa2 = a->allocator().allocate(16 * kMiB, MemCategory::activations);

    // Work on one's streams runs while the other lives and after it is gone.
    kg::fill_bytes_async(pa, 1, 40 * kMiB, a->compute_stream());
    kg::fill_bytes_async(pb, 2, 8 * kMiB, b->compute_stream());
    b->allocator().deallocate(pb, 8 * kMiB, MemCategory::optimizer_state);
    b.reset();
    a->synchronize();
    unsigned char probe = 0;
    kg::copy_device_to_host(&probe, static_cast<unsigned char*>(pa) + 123, 1);
    EXPECT_EQ(probe, 1);
    a->allocator().deallocate(pa2, 16 * kMiB, MemCategory::activations);
    a->allocator().deallocate(pa, 40 * kMiB, MemCategory::parameters);
    EXPECT_EQ(a->allocator().stats().current_total, 0);
}
