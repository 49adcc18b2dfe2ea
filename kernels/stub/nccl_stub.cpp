// kernels/gpu/nccl.h where this build has no NCCL (no CUDA backend, or a toolkit without NCCL):
// built() and available() say so, and every other call throws naming the call and the cause.
// The engine's GPU group factory (engine/comm/gpu_group.cpp) asks available() first and picks
// the local CUDA communicator or says why it cannot.
#include <kernels/gpu/nccl.h>

#include <stdexcept>
#include <string>

namespace paralab::kernels::gpu::nccl {
namespace {
[[noreturn]] void built_without_nccl(const char* call) {
    throw std::runtime_error(std::string("nccl::") + call +
                             ": this ParaLab was built without NCCL (CMake found no nccl.h next to "
                             "the CUDA toolkit)");
}
}  // namespace

bool built() { return false; }
bool available() { return false; }
std::string version() { return "built without NCCL"; }
std::vector<void*> comm_init_all(const std::vector<int>&) { built_without_nccl("comm_init_all"); }
void comm_destroy(void*) { built_without_nccl("comm_destroy"); }
void comm_abort(void*) { built_without_nccl("comm_abort"); }
void check_async_error(void*) { built_without_nccl("check_async_error"); }
void group_start() { built_without_nccl("group_start"); }
void group_end() { built_without_nccl("group_end"); }
void all_reduce(const void*, void*, size_t, Type, Op, void*, void*) { built_without_nccl("all_reduce"); }
void reduce_scatter(const void*, void*, size_t, Type, Op, void*, void*) {
    built_without_nccl("reduce_scatter");
}
void all_gather(const void*, void*, size_t, Type, void*, void*) { built_without_nccl("all_gather"); }
void broadcast(const void*, void*, size_t, Type, int, void*, void*) { built_without_nccl("broadcast"); }
void reduce(const void*, void*, size_t, Type, Op, int, void*, void*) { built_without_nccl("reduce"); }
void send(const void*, size_t, Type, int, void*, void*) { built_without_nccl("send"); }
void recv(void*, size_t, Type, int, void*, void*) { built_without_nccl("recv"); }

}  // namespace paralab::kernels::gpu::nccl
