// Devices: `cpu:K` virtual CPU devices (a rank thread each, own memory accounting, settable
// compute threads) and `cuda:N` GPUs (CUDA backend). See docs/design.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/tensor/allocator.h"

namespace paralab {

enum class DeviceKind { cpu, cuda };

// How a device's float GEMMs multiply (train.precision): fp32, or mixed precision with bf16 or
// fp16 inputs, fp32 accumulation and fp32 results, the parameters staying fp32 (master
// weights). Only GPUs take bf16/fp16.
enum class MatmulPrecision : uint8_t { fp32, bf16, fp16 };

// "fp32", "bf16", "fp16" (the experiment file's train.precision) and back; another name throws
// ConfigError naming `key`.
const char* precision_name(MatmulPrecision p);
MatmulPrecision precision_from_name(const std::string& name,
                                    const std::string& key = "train.precision");

// A parsed device name: "cpu:3" -> {cpu, 3}.
struct DeviceId {
    DeviceKind kind = DeviceKind::cpu;
    int index = 0;
    std::string to_string() const;
    bool operator==(const DeviceId&) const = default;
};

// Parses "cpu:K" / "cuda:N" (also "cpu" = "cpu:0"); throws ConfigError naming the text.
DeviceId parse_device_id(const std::string& text);

class Device {
public:
    virtual ~Device();
    Device(const Device&) = delete;
    Device& operator=(const Device&) = delete;

    const DeviceId& id() const { return m_id; }
    DeviceKind kind() const { return m_id.kind; }
    const std::string& name() const { return m_name; }
    // The name records and plots show: in an MPI job, "r1/cpu:0" (the process, then the id).
    void set_name(std::string name) { m_name = std::move(name); }
    Allocator& allocator() { return *m_allocator; }
    const Allocator& allocator() const { return *m_allocator; }

    int compute_threads() const { return m_threads; }
    void set_compute_threads(int threads);

    // Binds the calling thread to this device: compute-thread counts for the CPU kernels,
    // the current CUDA device for a GPU. A rank thread calls this once before its first step.
    virtual void make_current() = 0;

    // The queue this device's kernels are ordered on: the compute stream (an opaque
    // cudaStream_t) of a GPU, nullptr for a CPU device, whose kernels run on the calling thread.
    virtual void* queue() const { return nullptr; }
    // Returns when the work queued on this device so far has finished (at once on a CPU). The
    // run calls it at the end of each timed phase, so that a GPU's spans hold its kernels' time
    // and not only their launches.
    virtual void finish_queued() {}
    bool is_gpu() const { return m_id.kind == DeviceKind::cuda; }
    // A meta device holds shapes, not data: its tensors have no memory (shape inference).
    bool is_meta() const { return m_meta; }
    MatmulPrecision matmul_precision() const { return m_matmul; }
    void set_matmul_precision(MatmulPrecision p) { m_matmul = p; }

protected:
    Device(DeviceId id, std::unique_ptr<Allocator> allocator);
    void set_meta() { m_meta = true; }

private:
    DeviceId m_id;
    std::string m_name;
    std::unique_ptr<Allocator> m_allocator;
    int m_threads = 1;
    MatmulPrecision m_matmul = MatmulPrecision::fp32;
    bool m_meta = false;
};

// A virtual CPU device: host memory with its own accounting.
std::unique_ptr<Device> make_cpu_device(int index, int compute_threads = 1);

// The meta device: tensors made on it have a shape and no memory, and filling them does
// nothing, so that a model built on it has every layer's shapes and parameter counts and
// allocates nothing (nn::summarize). No kernel may run on it. Lives as long as the process.
Device& meta_device();

// A host device that lives as long as the process, for tensors that outlive a run (the
// trained parameters a run hands back). Not one of any run's devices.
Device& detached_host_device();

// What `paralab devices` lists.
struct DeviceInfo {
    std::string name;         // "cpu" or "cuda:0"
    DeviceKind kind = DeviceKind::cpu;
    std::string description;  // CPU model or GPU name
    int64_t memory_bytes = 0;
    int cores = 0;            // CPU cores, or GPU multiprocessors
    int cc_major = 0, cc_minor = 0;  // compute capability (GPUs)
    std::string driver;              // GPUs: "580.159.04, CUDA 13.0" (kernels/gpu/info.h)
};

std::vector<DeviceInfo> discover_devices();
// True when this build has the CUDA backend (whether or not a GPU is present).
bool cuda_backend_built();

}  // namespace paralab
