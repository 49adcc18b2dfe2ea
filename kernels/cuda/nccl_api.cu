// nccl_library() (nccl_api.cuh): dlopen and dlsym, once (shared_library.cuh).
#include "nccl_api.cuh"

#include <kernels/gpu/error.h>

#include "shared_library.cuh"

namespace paralab::kernels::gpu::detail {

namespace {

constexpr SharedLibrary k_nccl{"NCCL", "libnccl.so." PARALAB_SYMBOL_NAME(NCCL_MAJOR), PARALAB_NCCL_DIR,
                               "install NCCL " PARALAB_SYMBOL_NAME(NCCL_MAJOR) " (libnccl2)"};

NcclApi load() {
    void* lib = open_shared_library(k_nccl);  // kept open for the life of the process
    NcclApi api{};
    bind_symbol(k_nccl, lib, api.ncclGetErrorString, "ncclGetErrorString");
    bind_symbol(k_nccl, lib, api.ncclGetVersion, "ncclGetVersion");
    bind_symbol(k_nccl, lib, api.ncclCommInitAll, "ncclCommInitAll");
    bind_symbol(k_nccl, lib, api.ncclCommDestroy, "ncclCommDestroy");
    bind_symbol(k_nccl, lib, api.ncclCommAbort, "ncclCommAbort");
    bind_symbol(k_nccl, lib, api.ncclCommGetAsyncError, "ncclCommGetAsyncError");
    bind_symbol(k_nccl, lib, api.ncclGroupStart, "ncclGroupStart");
    bind_symbol(k_nccl, lib, api.ncclGroupEnd, "ncclGroupEnd");
    bind_symbol(k_nccl, lib, api.ncclAllReduce, "ncclAllReduce");
    bind_symbol(k_nccl, lib, api.ncclReduceScatter, "ncclReduceScatter");
    bind_symbol(k_nccl, lib, api.ncclAllGather, "ncclAllGather");
    bind_symbol(k_nccl, lib, api.ncclBroadcast, "ncclBroadcast");
    bind_symbol(k_nccl, lib, api.ncclReduce, "ncclReduce");
    bind_symbol(k_nccl, lib, api.ncclSend, "ncclSend");
    bind_symbol(k_nccl, lib, api.ncclRecv, "ncclRecv");
    return api;
}

}  // namespace

// A static's initialiser runs once, thread-safely, and runs again on the next call if it threw.
const NcclApi& nccl_library() {
    static const NcclApi api = load();
    return api;
}

std::string nccl_load_error() {
    return load_error_of(nccl_library);
}

}  // namespace paralab::kernels::gpu::detail
