// cublas() (cublas_api.cuh): dlopen and dlsym, once.
#include "cublas_api.cuh"

#include <dlfcn.h>

#include <string>

#include <kernels/gpu/error.h>

namespace paralab::kernels::gpu::detail {

namespace {

// The exported name behind a cublas_v2.h macro (cublasCreate is cublasCreate_v2).
#define PARALAB_SYMBOL_NAME(f) PARALAB_SYMBOL_NAME_(f)
#define PARALAB_SYMBOL_NAME_(f) #f

// Compiles only while the header declares this exported cublasGemmEx.
[[maybe_unused]] constexpr CublasApi::GemmEx k_gemm_ex_declared = &::cublasGemmEx;

[[noreturn]] void fail(const std::string& what) {
    throw GpuError("cuBLAS", -1, what, "loading " PARALAB_CUBLAS_SONAME, __FILE__, __LINE__);
}

void* open_library() {
    if (void* lib = dlopen(PARALAB_CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL)) return lib;
    const std::string first = dlerror();
    if (void* lib = dlopen(PARALAB_CUBLAS_DIR "/" PARALAB_CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL)) return lib;
    fail("cannot open " PARALAB_CUBLAS_SONAME " (" + first +
         "); install the CUDA toolkit's cuBLAS or add its folder to LD_LIBRARY_PATH");
}

template <class F>
void bind(void* lib, F& slot, const char* name) {
    slot = reinterpret_cast<F>(dlsym(lib, name));
    if (slot == nullptr) fail(std::string(PARALAB_CUBLAS_SONAME " has no ") + name);
}

CublasApi load() {
    void* lib = open_library();  // kept open for the life of the process
    CublasApi api{};
    bind(lib, api.create, PARALAB_SYMBOL_NAME(cublasCreate));
    bind(lib, api.destroy, PARALAB_SYMBOL_NAME(cublasDestroy));
    bind(lib, api.set_stream, PARALAB_SYMBOL_NAME(cublasSetStream));
    bind(lib, api.gemm_ex, PARALAB_SYMBOL_NAME(cublasGemmEx));
    bind(lib, api.dgemm, PARALAB_SYMBOL_NAME(cublasDgemm));
    bind(lib, api.sgemm_strided_batched, PARALAB_SYMBOL_NAME(cublasSgemmStridedBatched));
    bind(lib, api.dgemm_strided_batched, PARALAB_SYMBOL_NAME(cublasDgemmStridedBatched));
    bind(lib, api.status_name, PARALAB_SYMBOL_NAME(cublasGetStatusName));
    bind(lib, api.status_string, PARALAB_SYMBOL_NAME(cublasGetStatusString));
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
