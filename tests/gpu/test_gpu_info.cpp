// The CUDA backend sees the machine's GPUs; skipped (not passed) where there are none.
#include <gtest/gtest.h>
#include <kernels/gpu/info.h>

#include "engine/device/device.h"

using namespace paralab;

TEST(GpuInfo, ReportsEveryVisibleGpu) {
    if (kernels::gpu::device_count() == 0) GTEST_SKIP() << "no GPU on this machine";
    const auto devices = discover_devices();
    int gpus = 0;
    for (const auto& d : devices) {
        if (d.kind != DeviceKind::cuda) continue;
        ++gpus;
        EXPECT_GT(d.memory_bytes, 0) << d.name;
        EXPECT_GE(d.cc_major, 3) << d.name;
        EXPECT_FALSE(d.description.empty()) << d.name;
    }
    EXPECT_EQ(gpus, kernels::gpu::device_count());
}
