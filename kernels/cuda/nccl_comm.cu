// NCCL behind the CUDA-free kernels/gpu/nccl.h: each call through the library opened at first
// use (nccl_api.cuh) and checked with PARALAB_GPU_CHECK, which throws GpuError carrying
// ncclGetErrorString's text (check_nccl.cuh). Compiled only where CMake found nccl.h
// (kernels/CMakeLists.txt); kernels/stub/nccl_stub.cpp stands in otherwise.
#include <kernels/gpu/nccl.h>

#include <stdexcept>
#include <string>

#include "check_nccl.cuh"

namespace paralab::kernels::gpu::nccl {
namespace {

// The library's functions; throws GpuError naming libnccl and the loader's reason when it
// cannot be opened.
const detail::NcclApi& lib() {
    return detail::nccl_library();
}

ncclDataType_t nccl_type(Type type) {
    return type == Type::f32 ? ncclFloat32 : ncclFloat64;
}

ncclRedOp_t nccl_op(Op op) {
    switch (op) {
        case Op::sum: return ncclSum;
        case Op::average: return ncclAvg;
        case Op::max: return ncclMax;
    }
    throw std::invalid_argument("nccl: unknown reduce op " + std::to_string(static_cast<int>(op)));
}

ncclComm_t as_comm(void* comm) {
    if (!comm) throw std::invalid_argument("nccl: null communicator");
    return static_cast<ncclComm_t>(comm);
}

cudaStream_t as_stream(void* stream) {
    return static_cast<cudaStream_t>(stream);
}

}  // namespace

bool built() {
    return true;
}

// The first answer is kept: a library that appears later is not looked for again, so that a
// run's choice of communicator does not change under it.
bool available() {
    static const bool opened = detail::nccl_load_error().empty();
    return opened;
}

std::string version() {
    if (!available()) return "NCCL not available: " + detail::nccl_load_error();
    int code = 0;
    PARALAB_GPU_CHECK(lib().ncclGetVersion(&code));
    // NCCL_VERSION(X,Y,Z) = X*10000 + Y*100 + Z since 2.9.
    return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." +
           std::to_string(code % 100);
}

std::vector<void*> comm_init_all(const std::vector<int>& devices) {
    if (devices.empty()) throw std::invalid_argument("nccl::comm_init_all: no devices");
    std::vector<ncclComm_t> comms(devices.size(), nullptr);
    PARALAB_GPU_CHECK(lib().ncclCommInitAll(comms.data(), static_cast<int>(devices.size()), devices.data()));
    return std::vector<void*>(comms.begin(), comms.end());
}

void comm_destroy(void* comm) {
    PARALAB_GPU_CHECK(lib().ncclCommDestroy(as_comm(comm)));
}

void comm_abort(void* comm) {
    PARALAB_GPU_CHECK(lib().ncclCommAbort(as_comm(comm)));
}

void check_async_error(void* comm) {
    ncclResult_t async_error = ncclSuccess;
    PARALAB_GPU_CHECK(lib().ncclCommGetAsyncError(as_comm(comm), &async_error));
    PARALAB_GPU_CHECK(async_error);
}

void group_start() {
    PARALAB_GPU_CHECK(lib().ncclGroupStart());
}

void group_end() {
    PARALAB_GPU_CHECK(lib().ncclGroupEnd());
}

void all_reduce(const void* send, void* recv, size_t count, Type type, Op op, void* comm,
                void* stream) {
    PARALAB_GPU_CHECK(lib().ncclAllReduce(send, recv, count, nccl_type(type), nccl_op(op), as_comm(comm),
                                    as_stream(stream)));
}

void reduce_scatter(const void* send, void* recv, size_t recv_count, Type type, Op op, void* comm,
                    void* stream) {
    PARALAB_GPU_CHECK(lib().ncclReduceScatter(send, recv, recv_count, nccl_type(type), nccl_op(op),
                                        as_comm(comm), as_stream(stream)));
}

void all_gather(const void* send, void* recv, size_t send_count, Type type, void* comm,
                void* stream) {
    PARALAB_GPU_CHECK(lib().ncclAllGather(send, recv, send_count, nccl_type(type), as_comm(comm),
                                    as_stream(stream)));
}

void broadcast(const void* send, void* recv, size_t count, Type type, int root, void* comm,
               void* stream) {
    PARALAB_GPU_CHECK(lib().ncclBroadcast(send, recv, count, nccl_type(type), root, as_comm(comm),
                                    as_stream(stream)));
}

void reduce(const void* send, void* recv, size_t count, Type type, Op op, int root, void* comm,
            void* stream) {
    PARALAB_GPU_CHECK(lib().ncclReduce(send, recv, count, nccl_type(type), nccl_op(op), root,
                                 as_comm(comm), as_stream(stream)));
}

void send(const void* data, size_t count, Type type, int peer, void* comm, void* stream) {
    PARALAB_GPU_CHECK(lib().ncclSend(data, count, nccl_type(type), peer, as_comm(comm), as_stream(stream)));
}

void recv(void* data, size_t count, Type type, int peer, void* comm, void* stream) {
    PARALAB_GPU_CHECK(lib().ncclRecv(data, count, nccl_type(type), peer, as_comm(comm), as_stream(stream)));
}

}  // namespace paralab::kernels::gpu::nccl
