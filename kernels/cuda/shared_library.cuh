// A CUDA library opened at its first use instead of linked (cuBLAS, cuDNN, NCCL): a program of
// a CUDA build then starts, and runs on the CPU, on a machine that has none of them, and pays
// their start-up only when it uses them. Each library's table (cublas_api.cuh, cudnn_api.cuh,
// nccl_api.cuh) binds the functions ParaLab calls with these two helpers. Private to
// kernels/cuda.
#pragma once

#include <string>

#include <kernels/gpu/error.h>

namespace paralab::kernels::gpu::detail {

struct SharedLibrary {
    const char* library;  // the name in messages and in GpuError::library(): "cuDNN"
    const char* soname;   // "libcudnn.so.9": the major version the headers were of
    const char* folder;   // where the build found it ("/usr/local/cuda/lib"), tried second
    const char* advice;   // what to install, for the message when it cannot be opened
};

// dlopen(soname), so that LD_LIBRARY_PATH and the system's library cache apply, then
// folder/soname. The handle is kept for the life of the process. Throws GpuError naming the
// library and dlerror()'s reason when neither opens.
void* open_shared_library(const SharedLibrary& lib);

// dlsym; throws GpuError naming the library and the missing function.
void* shared_library_symbol(const SharedLibrary& lib, void* handle, const char* name);

template <class F>
void bind_symbol(const SharedLibrary& lib, void* handle, F& slot, const char* name) {
    slot = reinterpret_cast<F>(shared_library_symbol(lib, handle, name));
}

// "" when `table` (a library's table accessor, which loads it once) succeeds, else why not
// (the GpuError's status text).
template <class Table>
std::string load_error_of(Table table) {
    try {
        table();
        return {};
    } catch (const GpuError& e) {
        return e.status_text();
    }
}

}  // namespace paralab::kernels::gpu::detail

// The exported name behind a header's macro (cublasCreate is cublasCreate_v2).
#define PARALAB_SYMBOL_NAME(f) PARALAB_SYMBOL_NAME_(f)
#define PARALAB_SYMBOL_NAME_(f) #f
