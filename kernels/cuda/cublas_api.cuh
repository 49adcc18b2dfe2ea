// cuBLAS, opened on first use instead of linked. Linking it loads libcublasLt (over 500 MB),
// whose start-up costs every process of a CUDA build about 0.4 s, GPU or not: the CLI, each
// rank of an MPI job, each test program. Opened here, it costs that only in a process that
// runs a GPU GEMM. Only the functions the kernels call are bound (their declared types, so a
// changed signature fails to compile). Private to kernels/cuda: it needs CUDA types.
#pragma once

#include <cublas_v2.h>

#include <cstdint>

namespace paralab::kernels::gpu::detail {

struct CublasApi {
    // cublasGemmEx has a second, inline C++ overload (a cudaDataType compute type): this is the
    // exported one, checked against the header in cublas_api.cu.
    using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                      int, const void*, const void*, cudaDataType, int, const void*,
                                      cudaDataType, int, const void*, void*, cudaDataType, int,
                                      cublasComputeType_t, cublasGemmAlgo_t);
    decltype(&::cublasCreate) create;
    decltype(&::cublasDestroy) destroy;
    decltype(&::cublasSetStream) set_stream;
    GemmEx gemm_ex;
    decltype(&::cublasDgemm) dgemm;
    decltype(&::cublasSgemmStridedBatched) sgemm_strided_batched;
    decltype(&::cublasDgemmStridedBatched) dgemm_strided_batched;
    decltype(&::cublasSgemmBatched) sgemm_batched;
    decltype(&::cublasDgemmBatched) dgemm_batched;
    decltype(&::cublasGetStatusName) status_name;
    decltype(&::cublasGetStatusString) status_string;
};

// The library, opened once (thread-safe): the soname of the toolkit built against first, so
// that LD_LIBRARY_PATH and the system's library cache apply, then the toolkit's own folder.
// Throws GpuError naming the library and the loader's reason when it cannot be opened or lacks
// a function; a later call tries again.
const CublasApi& cublas();

// The handle for `stream` on the current device, made on first use and set to that stream:
// gemm.cu's cache, which every launcher that calls cuBLAS shares, so that release_gemm_handles
// (kernels/gpu/gemm.h) releases them all.
cublasHandle_t cublas_handle_for(void* stream);

// Device memory for `count` pointers, for the operand arrays of a pointer-array batched product
// (cublas?gemmBatched) on `stream` and the kernel that fills them before it: both are ordered on
// that stream, so one array serves every product there in turn. Kept with the stream's handle
// and grown as needed; nullptr when it would have to grow while the stream is being captured
// into a CUDA graph (no allocation there): the caller then does without.
void** cublas_pointer_arrays_for(void* stream, int64_t count);

}  // namespace paralab::kernels::gpu::detail
