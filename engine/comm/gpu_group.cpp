// The communicator for a run's devices (gpu.h): the CPU's LocalGroup, NCCL across distinct GPUs,
// or the local CUDA group where a GPU is listed more than once (NCCL refuses two ranks on one
// GPU) or this build has no NCCL.
#include <map>
#include <set>

#include <kernels/gpu/nccl.h>

#include "engine/comm/gpu.h"
#include "engine/device/cuda_device.h"

namespace paralab::comm {

namespace {

std::string list_of(const std::vector<DeviceId>& devices) {
    std::string text;
    for (const DeviceId& d : devices) text += (text.empty() ? "" : ", ") + d.to_string();
    return text;
}

}  // namespace

DeviceGroupChoice choose_device_group(const std::vector<DeviceId>& devices, bool nccl_built) {
    if (devices.empty()) throw ConfigError("devices", "a run needs at least one device");
    int cpus = 0;
    std::map<int, int> per_gpu;  // ordinal -> ranks on it
    for (const DeviceId& d : devices) {
        if (d.kind == DeviceKind::cpu)
            ++cpus;
        else
            ++per_gpu[d.index];
    }
    if (cpus == int(devices.size()))
        return {DeviceGroupBackend::local, "cpu devices: the in-process local communicator"};
    if (cpus > 0)
        throw ConfigError("devices", "[" + list_of(devices) +
                          "] mixes cpu and cuda devices; no communicator serves both (GPU "
                          "buffers are not host memory): list only cpu devices or only cuda "
                          "devices");
    for (const auto& [ordinal, ranks] : per_gpu)
        if (ranks > 1)
            return {DeviceGroupBackend::cuda_local,
                    "cuda:" + std::to_string(ordinal) + " is listed " + std::to_string(ranks) +
                        " times (virtual GPUs), which NCCL refuses: the local CUDA communicator"};
    if (!nccl_built)
        return {DeviceGroupBackend::cuda_local,
                "distinct GPUs, but without NCCL (this ParaLab was built without it, or libnccl "
                "was not found at run time): the local CUDA communicator (peer copies)"};
    return {DeviceGroupBackend::nccl, "distinct GPUs: NCCL (ncclCommInitAll)"};
}

std::unique_ptr<Group> make_device_group(const std::vector<Device*>& devices) {
    std::vector<DeviceId> ids;
    for (Device* d : devices) {
        if (d == nullptr) throw ConfigError("make_device_group: a null device");
        ids.push_back(d->id());
    }
    const DeviceGroupChoice choice = choose_device_group(ids, kernels::gpu::nccl::available());
    if (choice.backend == DeviceGroupBackend::local)
        return std::make_unique<LocalGroup>(int(devices.size()));
    std::vector<CudaDevice*> gpus;
    for (Device* d : devices) {
        auto* gpu = dynamic_cast<CudaDevice*>(d);
        if (gpu == nullptr)
            throw ConfigError("make_device_group: " + d->name() +
                              " is a cuda device id but not a CudaDevice object");
        gpus.push_back(gpu);
    }
    if (choice.backend == DeviceGroupBackend::nccl) return std::make_unique<NcclGroup>(gpus);
    return std::make_unique<CudaLocalGroup>(gpus);
}

}  // namespace paralab::comm
