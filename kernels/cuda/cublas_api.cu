// cublas() (cublas_api.cuh): dlopen and dlsym, once (shared_library.cuh).
#include "cublas_api.cuh"

#include "shared_library.cuh"

namespace paralab::kernels::gpu::detail {

namespace {

// Compiles only while the header declares this exported cublasGemmEx.
[[maybe_unused]] constexpr CublasApi::GemmEx k_gemm_ex_declared = &::cublasGemmEx;

constexpr SharedLibrary k_cublas{"cuBLAS", PARALAB_CUBLAS_SONAME, PARALAB_CUBLAS_DIR,
                                 "install the CUDA toolkit's cuBLAS"};

CublasApi load() {
    void* lib = open_shared_library(k_cublas);  // kept open for the life of the process
    CublasApi api{};
    bind_symbol(k_cublas, lib, api.create, PARALAB_SYMBOL_NAME(cublasCreate));
    bind_symbol(k_cublas, lib, api.destroy, PARALAB_SYMBOL_NAME(cublasDestroy));
    bind_symbol(k_cublas, lib, api.set_stream, PARALAB_SYMBOL_NAME(cublasSetStream));
    bind_symbol(k_cublas, lib, api.gemm_ex, PARALAB_SYMBOL_NAME(cublasGemmEx));
    bind_symbol(k_cublas, lib, api.dgemm, PARALAB_SYMBOL_NAME(cublasDgemm));
    bind_symbol(k_cublas, lib, api.sgemm_strided_batched, PARALAB_SYMBOL_NAME(cublasSgemmStridedBatched));
    bind_symbol(k_cublas, lib, api.dgemm_strided_batched, PARALAB_SYMBOL_NAME(cublasDgemmStridedBatched));
    bind_symbol(k_cublas, lib, api.sgemm_batched, PARALAB_SYMBOL_NAME(cublasSgemmBatched));
    bind_symbol(k_cublas, lib, api.dgemm_batched, PARALAB_SYMBOL_NAME(cublasDgemmBatched));
    bind_symbol(k_cublas, lib, api.status_name, PARALAB_SYMBOL_NAME(cublasGetStatusName));
    bind_symbol(k_cublas, lib, api.status_string, PARALAB_SYMBOL_NAME(cublasGetStatusString));
    return api;
}

}  // namespace

// A static's initialiser runs once, thread-safely, and runs again on the next call if it threw:
// no lock on the GEMMs' path after the first.
const CublasApi& cublas() {
    static const CublasApi api = load();
    return api;
}

}  // namespace paralab::kernels::gpu::detail
