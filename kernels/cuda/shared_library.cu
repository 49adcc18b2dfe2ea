// open_shared_library and shared_library_symbol (shared_library.cuh): dlopen and dlsym.
#include "shared_library.cuh"

#include <dlfcn.h>

#include <string>

#include <kernels/gpu/error.h>

namespace paralab::kernels::gpu::detail {

namespace {

[[noreturn]] void fail(const SharedLibrary& lib, const std::string& what) {
    std::string statement = "loading ";
    statement += lib.soname;
    throw GpuError(lib.library, -1, what, statement, __FILE__, __LINE__);
}

std::string loader_error() {
    const char* e = dlerror();
    return e ? e : "no reason given";
}

}  // namespace

void* open_shared_library(const SharedLibrary& lib) {
    if (void* handle = dlopen(lib.soname, RTLD_NOW | RTLD_LOCAL)) return handle;
    const std::string first = loader_error();
    std::string path = lib.folder;
    path += '/';
    path += lib.soname;
    if (void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
    std::string what = "cannot open ";
    what += lib.soname;
    what += " (";
    what += first;
    what += "); ";
    what += lib.advice;
    what += ", or add its folder to LD_LIBRARY_PATH";
    fail(lib, what);
}

void* shared_library_symbol(const SharedLibrary& lib, void* handle, const char* name) {
    dlerror();  // clear a stale message
    void* symbol = dlsym(handle, name);
    if (symbol == nullptr) {
        std::string what = lib.soname;
        what += " has no ";
        what += name;
        what += " (";
        what += loader_error();
        what += ")";
        fail(lib, what);
    }
    return symbol;
}

}  // namespace paralab::kernels::gpu::detail
