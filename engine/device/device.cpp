#include "engine/device/device.h"

#include <charconv>
#include <fstream>
#include <thread>

#include <kernels/cpu/threads.h>

#include "engine/util/error.h"

namespace paralab {

std::string DeviceId::to_string() const {
    return (kind == DeviceKind::cpu ? "cpu:" : "cuda:") + std::to_string(index);
}

const char* precision_name(MatmulPrecision p) {
    switch (p) {
        case MatmulPrecision::fp32:
            return "fp32";
        case MatmulPrecision::bf16:
            return "bf16";
        case MatmulPrecision::fp16:
            return "fp16";
    }
    return "?";
}

MatmulPrecision precision_from_name(const std::string& name, const std::string& key) {
    for (const auto p : {MatmulPrecision::fp32, MatmulPrecision::bf16, MatmulPrecision::fp16})
        if (name == precision_name(p)) return p;
    throw ConfigError(key, "expected one of fp32, bf16, fp16, got \"" + name + "\"");
}

DeviceId parse_device_id(const std::string& text) {
    DeviceId id;
    std::string rest;
    if (text == "cpu") return id;
    if (text.rfind("cpu:", 0) == 0) {
        id.kind = DeviceKind::cpu;
        rest = text.substr(4);
    } else if (text.rfind("cuda:", 0) == 0) {
        id.kind = DeviceKind::cuda;
        rest = text.substr(5);
    } else {
        throw ConfigError("unknown device '" + text + "': expected cpu:K or cuda:N");
    }
    int value = -1;
    auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), value);
    if (ec != std::errc() || end != rest.data() + rest.size() || value < 0 || rest.empty())
        throw ConfigError("bad device index in '" + text + "': expected a non-negative integer");
    id.index = value;
    return id;
}

Device::Device(DeviceId id, std::unique_ptr<Allocator> allocator)
    : m_id(id), m_name(id.to_string()), m_allocator(std::move(allocator)) {}

Device::~Device() = default;

void Device::set_compute_threads(int threads) {
    if (threads < 1) throw ConfigError("compute threads must be at least 1, got " + std::to_string(threads));
    m_threads = threads;
}

namespace {

class CpuDevice final : public Device {
public:
    CpuDevice(int index, int threads)
        : Device(DeviceId{DeviceKind::cpu, index},
                 std::make_unique<HostAllocator>("cpu:" + std::to_string(index))) {
        set_compute_threads(threads);
    }
    void make_current() override { kernels::cpu::set_num_threads(compute_threads()); }
};

class MetaDevice final : public Device {
public:
    MetaDevice() : Device(DeviceId{DeviceKind::cpu, 0}, std::make_unique<HostAllocator>("meta")) {
        set_name("meta");
        set_meta();
    }
    void make_current() override {}
};

std::string cpu_model_name() {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("model name", 0) == 0) {
            auto pos = line.find(':');
            if (pos != std::string::npos) return line.substr(pos + 2);
        }
    }
    return "CPU";
}

int64_t total_memory_bytes() {
    std::ifstream in("/proc/meminfo");
    std::string key;
    int64_t kb = 0;
    while (in >> key >> kb) {
        if (key == "MemTotal:") return kb * 1024;
        in.ignore(256, '\n');
    }
    return 0;
}

}  // namespace

std::unique_ptr<Device> make_cpu_device(int index, int compute_threads) {
    return std::make_unique<CpuDevice>(index, compute_threads);
}

// GPUs, through kernels/gpu/info.h (engine/device/gpu_discovery.cpp).
std::vector<DeviceInfo> discover_cuda_devices();

std::vector<DeviceInfo> discover_devices() {
    std::vector<DeviceInfo> out;
    DeviceInfo cpu;
    cpu.name = "cpu";
    cpu.kind = DeviceKind::cpu;
    cpu.description = cpu_model_name();
    cpu.memory_bytes = total_memory_bytes();
    cpu.cores = static_cast<int>(std::thread::hardware_concurrency());
    out.push_back(cpu);
    for (auto& gpu : discover_cuda_devices()) out.push_back(gpu);
    return out;
}

Device& detached_host_device() {
    // Never destroyed: tensors on it may be released during static destruction.
    static Device* device = make_cpu_device(0).release();
    return *device;
}

Device& meta_device() {
    static Device* device = new MetaDevice();  // never destroyed, as above
    return *device;
}

}  // namespace paralab
