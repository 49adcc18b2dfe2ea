// The CPU-only build's CUDA graphs (kernels/gpu/graph.h): no GPU, so every call throws, naming
// the call and why (nothing is ever captured without a GPU stream to capture).
#include <kernels/gpu/graph.h>

#include "built_without_cuda.h"

namespace paralab::kernels::gpu {

void stream_begin_capture(void*) { built_without_cuda("stream_begin_capture"); }
void* stream_end_capture(void*) { built_without_cuda("stream_end_capture"); }
void* graph_instantiate(void*) { built_without_cuda("graph_instantiate"); }
bool graph_exec_update(void*, void*) { built_without_cuda("graph_exec_update"); }
void graph_launch(void*, void*) { built_without_cuda("graph_launch"); }
void graph_destroy(void*) { built_without_cuda("graph_destroy"); }
void graph_exec_destroy(void*) { built_without_cuda("graph_exec_destroy"); }

}  // namespace paralab::kernels::gpu
