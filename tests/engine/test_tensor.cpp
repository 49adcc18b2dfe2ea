// Tensors, the accounting allocator, and devices.
#include <gtest/gtest.h>

#include <array>
#include <string>
#include <vector>

#include "engine/device/device.h"
#include "engine/tensor/tensor.h"
#include "engine/util/error.h"

using namespace paralab;

namespace {

// A step's peak: begin_step starts it from what is live; it follows current_total up, never
// down, and keeps the categories as they were at the top; the run's peak is another count.
TEST(Allocator, KeepsTheStepsPeakAndItsCategories) {
    auto dev = make_cpu_device(0);
    Allocator& a = dev->allocator();
    const size_t acts = size_t(MemCategory::activations), grads = size_t(MemCategory::gradients);
    Tensor params = Tensor::zeros({16}, DType::f32, *dev, MemCategory::parameters);  // 64 B
    {
        Tensor big = Tensor::empty({1000}, DType::f32, *dev, MemCategory::activations);  // 4000 B
        a.begin_step();
        EXPECT_EQ(a.stats().step_peak_total, 64 + 4032);
    }
    a.begin_step();  // the step starts with the parameters alone
    EXPECT_EQ(a.stats().step_peak_total, 64);
    {
        Tensor x = Tensor::empty({100}, DType::f32, *dev, MemCategory::activations);  // 448 B
        Tensor y = Tensor::empty({200}, DType::f32, *dev, MemCategory::activations);  // 832 B
    }  // backward freed them
    Tensor g = Tensor::zeros({16}, DType::f32, *dev, MemCategory::gradients);
    const MemoryStats s = a.stats();
    EXPECT_EQ(s.current_total, 64 + 64);
    EXPECT_EQ(s.step_peak_total, 64 + 448 + 832);
    EXPECT_EQ(s.at_step_peak[acts], 448 + 832);
    EXPECT_EQ(s.at_step_peak[grads], 0);  // the gradients came after the top
    EXPECT_EQ(s.peak_total, 64 + 4032);   // the run's peak: the first block
    a.begin_step();
    EXPECT_EQ(a.stats().step_peak_total, 128);
    EXPECT_EQ(a.stats().at_step_peak[grads], 64);
}

TEST(Allocator, AccountsBytesPerCategoryAndPeak) {
    auto dev = make_cpu_device(0);
    {
        Tensor p = Tensor::zeros({10, 10}, DType::f32, *dev, MemCategory::parameters);
        Tensor a = Tensor::empty({100}, DType::f64, *dev, MemCategory::activations);
        const auto s = dev->allocator().stats();
        EXPECT_EQ(s.current[size_t(MemCategory::parameters)], 448);  // 400 rounded to 64
        EXPECT_EQ(s.current[size_t(MemCategory::activations)], 832);  // 800 rounded to 64
        EXPECT_EQ(s.current_total, 448 + 832);
        EXPECT_EQ(s.peak_total, 448 + 832);
    }
    const auto s = dev->allocator().stats();
    EXPECT_EQ(s.current_total, 0);
    EXPECT_EQ(s.peak_total, 448 + 832);
    EXPECT_EQ(s.peak[size_t(MemCategory::parameters)], 448);
    dev->allocator().reset_peak();
    EXPECT_EQ(dev->allocator().stats().peak_total, 0);
}

TEST(Allocator, ReusesFreedBlocksInTheSteadyState) {
    auto dev = make_cpu_device(0);
    for (int step = 0; step < 5; ++step) {
        Tensor a = Tensor::empty({64, 128}, DType::f32, *dev, MemCategory::activations);
        Tensor b = Tensor::empty({64, 10}, DType::f32, *dev, MemCategory::activations);
    }
    // Two distinct sizes: two system allocations, however many steps ran.
    EXPECT_EQ(dev->allocator().stats().system_allocs, 2);
}

TEST(Allocator, LimitGivesAClearOutOfMemoryError) {
    auto dev = make_cpu_device(3);
    dev->allocator().set_limit(1 << 20);
    Tensor ok = Tensor::empty({1000}, DType::f32, *dev, MemCategory::parameters);
    try {
        Tensor big = Tensor::empty({1 << 20}, DType::f32, *dev, MemCategory::activations);
        FAIL() << "expected OutOfMemoryError";
    } catch (const OutOfMemoryError& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("cpu:3"), std::string::npos) << msg;
        EXPECT_NE(msg.find("activations"), std::string::npos) << msg;
    }
    // Nothing the device already had is lost.
    EXPECT_EQ(dev->allocator().stats().current_total, 4032);
}

// A recorded graph's pool (Allocator::begin_pool): while recording, the recording thread is
// served from the cache and nothing new; every block it got joins the pool, and a block of the
// pool freed, then or later, is kept for the pool: nothing else is given memory a replay writes.
// release_pool gives the pool's freed blocks back to the cache.
TEST(Allocator, AGraphsPoolKeepsItsBlocks) {
    auto dev = make_cpu_device(0);
    Allocator& a = dev->allocator();
    const auto raw = [](const Tensor& t) { return t.raw(); };
    void* warm = nullptr;
    {  // an eager step leaves a block of 4032 bytes in the cache
        Tensor t = Tensor::empty({1000}, DType::f32, *dev, MemCategory::activations);
        warm = raw(t);
    }
    a.begin_pool();
    void* recorded_block = nullptr;
    try {
        Tensor t = Tensor::empty({1000}, DType::f32, *dev, MemCategory::activations);
        recorded_block = raw(t);
        EXPECT_EQ(recorded_block, warm);  // from the cache
        Tensor u = Tensor::empty({1000}, DType::f32, *dev, MemCategory::activations);  // none left
        FAIL() << "expected PoolMissError";
    } catch (const PoolMissError& e) {
        EXPECT_NE(std::string(e.what()).find("4032 bytes for activations"), std::string::npos) << e.what();
    }
    {  // the block the recording freed is the pool's again while it records
        Tensor t = Tensor::empty({1000}, DType::f32, *dev, MemCategory::activations);
        EXPECT_EQ(raw(t), recorded_block);
    }
    a.end_pool();
    {  // after the recording, a block of that size comes from the system, not from the pool
        const int64_t before = a.stats().system_allocs;
        Tensor t = Tensor::empty({1000}, DType::f32, *dev, MemCategory::activations);
        EXPECT_NE(raw(t), recorded_block);
        EXPECT_EQ(a.stats().system_allocs, before + 1);
    }
    EXPECT_THROW(a.begin_pool(), Error);  // one pool at a time
    a.release_pool();
    int found = 0;  // the pool's block is the cache's again (two of that size are cached now)
    std::vector<Tensor> two;
    for (int i = 0; i < 2; ++i) {
        two.push_back(Tensor::empty({1000}, DType::f32, *dev, MemCategory::activations));
        found += raw(two.back()) == recorded_block;
    }
    EXPECT_EQ(found, 1);
    EXPECT_EQ(a.stats().current_total, 2 * 4032);
}

// A replayed step allocates nothing, yet its record carries the recorded step's peak.
TEST(Allocator, AReplayedStepKeepsTheRecordedPeak) {
    auto dev = make_cpu_device(0);
    Allocator& a = dev->allocator();
    Tensor params = Tensor::zeros({16}, DType::f32, *dev, MemCategory::parameters);
    std::array<int64_t, kMemCategoryCount> at{};
    at[size_t(MemCategory::parameters)] = 64;
    at[size_t(MemCategory::activations)] = 4032;
    a.begin_step();
    a.add_replayed_step(64 + 4032, at);
    EXPECT_EQ(a.stats().step_peak_total, 64 + 4032);
    EXPECT_EQ(a.stats().at_step_peak[size_t(MemCategory::activations)], 4032);
    EXPECT_EQ(a.stats().peak_total, 64 + 4032);
    a.add_replayed_step(10, {});  // below what is live: no change
    EXPECT_EQ(a.stats().step_peak_total, 64 + 4032);
}

TEST(Tensor, ReshapeSharesStorageAndChecksCount) {
    auto dev = make_cpu_device(0);
    Tensor t = Tensor::zeros({2, 3, 4}, DType::f32, *dev, MemCategory::activations);
    Tensor r = t.reshape({6, 4});
    EXPECT_TRUE(r.same_storage(t));
    EXPECT_EQ(r.shape(), (Shape{6, 4}));
    EXPECT_THROW(t.reshape({5, 5}), ShapeError);
}

TEST(Tensor, ViewsShareStorageAtTheirOffsetAndStayInBounds) {
    auto dev = make_cpu_device(0);
    Tensor flat = Tensor::zeros({10}, DType::f32, *dev, MemCategory::gradients);
    Tensor a = flat.view(0, {2, 2});
    Tensor b = flat.view(4, {3, 2});
    EXPECT_TRUE(b.same_storage(flat));
    EXPECT_EQ(b.shape(), (Shape{3, 2}));
    a.fill(1);
    b.fill(2);
    const std::vector<float> expected{1, 1, 1, 1, 2, 2, 2, 2, 2, 2};
    EXPECT_EQ(std::vector<float>(flat.data<float>(), flat.data<float>() + 10), expected);
    flat.data<float>()[5] = 7;  // writes through the buffer are seen by the view
    EXPECT_EQ(b.data<float>()[1], 7);
    Tensor inner = b.view(2, {2});  // a view of a view: offsets add
    EXPECT_EQ(inner.data<float>(), flat.data<float>() + 6);
    b.zero();  // zeroes the view's elements only
    EXPECT_EQ(flat.data<float>()[3], 1);
    EXPECT_EQ(flat.data<float>()[4], 0);
    EXPECT_THROW(flat.view(8, {3}), ShapeError);
    EXPECT_THROW(flat.view(-1, {2}), ShapeError);
    // The buffer is accounted once, under its own category; views allocate nothing.
    EXPECT_EQ(dev->allocator().stats().current[static_cast<size_t>(MemCategory::gradients)], 64);
}

TEST(Tensor, TypedAccessIsChecked) {
    auto dev = make_cpu_device(0);
    Tensor t = Tensor::zeros({3}, DType::f32, *dev, MemCategory::activations);
    EXPECT_NO_THROW(t.data<float>());
    EXPECT_THROW(t.data<double>(), Error);
}

TEST(Tensor, ConvertsBetweenF32AndF64) {
    auto dev = make_cpu_device(0);
    Tensor t = Tensor::empty({3}, DType::f64, *dev, MemCategory::activations);
    t.data<double>()[0] = 1.5;
    t.data<double>()[1] = -2.25;
    t.data<double>()[2] = 1e-3;
    Tensor f = t.to(DType::f32);
    EXPECT_EQ(f.dtype(), DType::f32);
    EXPECT_FLOAT_EQ(f.data<float>()[1], -2.25f);
    EXPECT_FLOAT_EQ(f.data<float>()[2], 1e-3f);
    Tensor c = f.clone(MemCategory::workspace);
    EXPECT_FALSE(c.same_storage(f));
    EXPECT_EQ(c.category(), MemCategory::workspace);
}

TEST(Tensor, FillAndNegativeShape) {
    auto dev = make_cpu_device(0);
    Tensor t = Tensor::empty({4}, DType::f32, *dev, MemCategory::activations);
    t.fill(2.5);
    for (float v : t.span<float>()) EXPECT_EQ(v, 2.5f);
    EXPECT_THROW(Tensor::empty(Shape{2, -1}, DType::f32, *dev, MemCategory::activations), ShapeError);
}

TEST(Shape, PrintsAndAddsBatch) {
    Shape s{1, 28, 28};
    EXPECT_EQ(s.to_string(), "[1, 28, 28]");
    EXPECT_EQ(s.with_batch(64), (Shape{64, 1, 28, 28}));
    EXPECT_EQ(s.with_batch(64).drop_first(), s);
    EXPECT_EQ(s.numel(), 784);
}

struct DeviceNameCase {
    const char* text;
    bool ok;
    DeviceKind kind;
    int index;
};

class DeviceNames : public ::testing::TestWithParam<DeviceNameCase> {};

TEST_P(DeviceNames, Parse) {
    const auto c = GetParam();
    if (!c.ok) {
        EXPECT_THROW(parse_device_id(c.text), ConfigError) << c.text;
        return;
    }
    const DeviceId id = parse_device_id(c.text);
    EXPECT_EQ(id.kind, c.kind);
    EXPECT_EQ(id.index, c.index);
}

INSTANTIATE_TEST_SUITE_P(
    Table, DeviceNames,
    ::testing::Values(DeviceNameCase{"cpu:0", true, DeviceKind::cpu, 0},
                      DeviceNameCase{"cpu:12", true, DeviceKind::cpu, 12},
                      DeviceNameCase{"cpu", true, DeviceKind::cpu, 0},
                      DeviceNameCase{"cuda:1", true, DeviceKind::cuda, 1},
                      DeviceNameCase{"gpu:0", false, DeviceKind::cpu, 0},
                      DeviceNameCase{"cpu:-1", false, DeviceKind::cpu, 0},
                      DeviceNameCase{"cpu:x", false, DeviceKind::cpu, 0},
                      DeviceNameCase{"cpu:", false, DeviceKind::cpu, 0}));

TEST(Devices, CpuIsAlwaysListedFirst) {
    const auto devices = discover_devices();
    ASSERT_FALSE(devices.empty());
    EXPECT_EQ(devices[0].kind, DeviceKind::cpu);
    EXPECT_GT(devices[0].cores, 0);
    EXPECT_GT(devices[0].memory_bytes, 0);
}

TEST(Devices, ComputeThreadsAreSettable) {
    auto dev = make_cpu_device(1, 2);
    EXPECT_EQ(dev->compute_threads(), 2);
    EXPECT_EQ(dev->name(), "cpu:1");
    EXPECT_THROW(dev->set_compute_threads(0), ConfigError);
}

}  // namespace
