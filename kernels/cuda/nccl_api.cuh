// NCCL, opened on first use instead of linked (shared_library.cuh), like cuBLAS
// (cublas_api.cuh): a CUDA build then starts on a machine without NCCL, where
// nccl::available() is false and the engine takes the local CUDA communicator, and a process
// that makes no NCCL communicator never maps it. Only the functions nccl_comm.cu and
// check_nccl.cuh call are bound, with their declared types. Built where CMake found nccl.h
// (PARALAB_HAVE_NCCL). Private to kernels/cuda: it needs NCCL types.
// Each member is named after its function, so that a failed call's statement in GpuError reads
// `lib().ncclAllReduce(...)`.
#pragma once

#include <nccl.h>

#include <string>

namespace paralab::kernels::gpu::detail {

struct NcclApi {
    decltype(&::ncclGetErrorString) ncclGetErrorString;
    decltype(&::ncclGetVersion) ncclGetVersion;
    decltype(&::ncclCommInitAll) ncclCommInitAll;
    decltype(&::ncclCommDestroy) ncclCommDestroy;
    decltype(&::ncclCommAbort) ncclCommAbort;
    decltype(&::ncclCommGetAsyncError) ncclCommGetAsyncError;
    decltype(&::ncclGroupStart) ncclGroupStart;
    decltype(&::ncclGroupEnd) ncclGroupEnd;
    decltype(&::ncclAllReduce) ncclAllReduce;
    decltype(&::ncclReduceScatter) ncclReduceScatter;
    decltype(&::ncclAllGather) ncclAllGather;
    decltype(&::ncclBroadcast) ncclBroadcast;
    decltype(&::ncclReduce) ncclReduce;
    decltype(&::ncclSend) ncclSend;
    decltype(&::ncclRecv) ncclRecv;
};

// The library (libnccl.so.<NCCL_MAJOR>), opened once (thread-safe): by soname first, so that
// LD_LIBRARY_PATH and the system's library cache apply, then from the folder the build found it
// in. Throws GpuError naming the library and the loader's reason when it cannot be opened or
// lacks a function; a later call tries again. (Named nccl_library, as kernels::gpu::nccl is the
// CUDA-free wrapper's namespace.)
const NcclApi& nccl_library();

// Why nccl_library() cannot be had ("cannot open libnccl.so.2 (...)"), or empty once it is
// loaded. Opens the library when it is not open yet.
std::string nccl_load_error();

}  // namespace paralab::kernels::gpu::detail
