// NCCL, free of CUDA and NCCL types: a communicator is an opaque void* (ncclComm_t), a stream an
// opaque void* (cudaStream_t). Every call throws GpuError (kernels/gpu/error.h) with NCCL's own
// words (ncclGetErrorString) when NCCL fails. Implemented by kernels/cuda/nccl_comm.cu where
// NCCL's header was found, which opens libnccl at the first use (a machine without it answers
// available() false); kernels/stub/nccl_stub.cpp otherwise, whose calls throw "built without
// NCCL".
//
// Buffers are device pointers of `count` elements of `type`; every collective is enqueued on
// `stream` and returns at once (the caller waits on the stream).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace paralab::kernels::gpu::nccl {

enum class Type { f32, f64 };
enum class Op { sum, average, max };  // ncclSum, ncclAvg, ncclMax

// True when this build has NCCL's wrapper (CMake found nccl.h).
bool built();
// True when built() and libnccl opened at run time (asked once; the first call opens it). The
// other calls need it: without it they throw GpuError naming the library and the loader's reason.
bool available();
// "2.28.9", or why there is none ("built without NCCL", "NCCL not available: cannot open
// libnccl.so.2 (...)").
std::string version();

// ncclCommInitAll: one communicator per entry of `devices` (distinct GPU ordinals; rank i is on
// devices[i]), all made by the calling thread. NCCL refuses a GPU listed twice.
std::vector<void*> comm_init_all(const std::vector<int>& devices);
// ncclCommDestroy: waits for the communicator's outstanding work.
void comm_destroy(void* comm);
// ncclCommAbort: ends outstanding work (kernels included) and frees the communicator.
void comm_abort(void* comm);
// ncclCommGetAsyncError: throws GpuError when the communicator hit an asynchronous error.
void check_async_error(void* comm);

// ncclGroupStart / ncclGroupEnd (per calling thread): the calls between are fused, so that
// sends and receives that need each other progress together.
void group_start();
void group_end();

void all_reduce(const void* send, void* recv, size_t count, Type type, Op op, void* comm,
                void* stream);
// recv_count elements per rank; in place when recv == send + rank * recv_count.
void reduce_scatter(const void* send, void* recv, size_t recv_count, Type type, Op op, void* comm,
                    void* stream);
// send_count elements per rank; in place when send == recv + rank * send_count.
void all_gather(const void* send, void* recv, size_t send_count, Type type, void* comm,
                void* stream);
void broadcast(const void* send, void* recv, size_t count, Type type, int root, void* comm,
               void* stream);
void reduce(const void* send, void* recv, size_t count, Type type, Op op, int root, void* comm,
            void* stream);
void send(const void* data, size_t count, Type type, int peer, void* comm, void* stream);
void recv(void* data, size_t count, Type type, int peer, void* comm, void* stream);

}  // namespace paralab::kernels::gpu::nccl
