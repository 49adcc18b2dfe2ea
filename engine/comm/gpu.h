// The GPU communicators (docs/design.md), behind comm::Group:
//
//   NcclGroup       real multi-GPU: one process, one rank thread per GPU, communicators made by
//                   ncclCommInitAll over the group's distinct GPUs.
//   CudaLocalGroup  virtual GPUs (the same cuda:N listed several times, which NCCL refuses):
//                   device-to-device copies and reduction kernels, with the CPU local backend's
//                   ring and per-element summation order, so that its results equal the CPU
//                   ranks' bit for bit (engine/comm/local.cpp).
//   make_device_group  picks LocalGroup, NcclGroup or CudaLocalGroup for a run's devices.
//
// Buffers are device pointers on the rank's GPU. A call waits on the device's compute stream's
// work queued so far (the data is ready), runs on the device's communication stream, and
// returns once that stream has finished it: the buffer holds the result on return, whatever
// stream reads it next, as the Communicator contract (communicator.h) promises. send is eager
// and recv blocking, through a host mailbox (ncclSend would block until the receiver posts).
//
// Bit-identity run to run: CudaLocalGroup's order depends only on the world size and the
// element's index. NCCL's ring all-reduce is deterministic for a fixed world size, algorithm,
// protocol and channel count; NcclGroup pins NCCL_ALGO=Ring unless the environment already sets
// NCCL_ALGO (ncclConfig_t has no algorithm field, so the environment is the only way), and
// its results equal themselves run to run, not the CPU's bits.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/device/device.h"

namespace paralab {
class CudaDevice;
}

namespace paralab::comm {

// One rank per device; devices[r] is rank r's GPU. The devices must outlive the group and be
// distinct GPUs (ordinals). Throws ConfigError when a GPU is listed twice or this build has no
// NCCL; GpuError with NCCL's words when ncclCommInitAll fails. own_streams: run on streams made
// for this group instead of the devices' communication streams (what split() does: two NCCL
// communicators on one stream deadlock when their threads enqueue in different orders).
class NcclGroup final : public Group {
public:
    explicit NcclGroup(std::vector<CudaDevice*> devices, bool own_streams = false);
    ~NcclGroup() override;
    NcclGroup(const NcclGroup&) = delete;
    NcclGroup& operator=(const NcclGroup&) = delete;

    int world() const override;
    bool is_local(int r) const override { return r >= 0 && r < world(); }
    Communicator& rank(int r) override;
    // Wakes every waiting rank with CommAborted and ncclCommAbort's every communicator.
    void abort(const std::string& reason) override;
    // A second set of NCCL communicators over the same GPUs (ncclCommInitAll again), on streams
    // of their own.
    std::unique_ptr<Group> split() override;

    struct State;

private:
    std::unique_ptr<State> m_state;
    std::vector<std::unique_ptr<Communicator>> m_ranks;
};

// One rank per device; devices[r] is rank r's (possibly virtual) GPU; several may share one
// physical GPU, and distinct GPUs work too (peer copies). The devices must outlive the group.
class CudaLocalGroup final : public Group {
public:
    explicit CudaLocalGroup(std::vector<CudaDevice*> devices);
    ~CudaLocalGroup() override;
    CudaLocalGroup(const CudaLocalGroup&) = delete;
    CudaLocalGroup& operator=(const CudaLocalGroup&) = delete;

    int world() const override;
    bool is_local(int r) const override { return r >= 0 && r < world(); }
    Communicator& rank(int r) override;
    void abort(const std::string& reason) override;
    // Same devices and streams: the local protocol's stream waits are on work already queued,
    // so two groups sharing a stream cannot deadlock (they only serialise).
    std::unique_ptr<Group> split() override;

    struct State;

private:
    std::vector<CudaDevice*> m_devices;
    std::unique_ptr<State> m_state;
    std::vector<std::unique_ptr<Communicator>> m_ranks;
};

enum class DeviceGroupBackend { local, nccl, cuda_local };

struct DeviceGroupChoice {
    DeviceGroupBackend backend = DeviceGroupBackend::local;
    std::string reason;  // why this backend, for logs and the run's record
};

// The backend for a run's devices (no GPU needed): all cpu -> local; all cuda on distinct GPUs
// -> nccl when NCCL is there, else cuda_local; a GPU listed twice -> cuda_local. Throws
// ConfigError naming the devices when cpu and cuda devices are mixed (no communicator serves
// both) or the list is empty. nccl_built: whether NCCL is there
// (kernels::gpu::nccl::available(): built with it and libnccl opened).
DeviceGroupChoice choose_device_group(const std::vector<DeviceId>& devices, bool nccl_built);

// The group for a run's devices, as choose_device_group picks with this build's NCCL. cuda
// devices must be CudaDevice objects.
std::unique_ptr<Group> make_device_group(const std::vector<Device*>& devices);

}  // namespace paralab::comm
