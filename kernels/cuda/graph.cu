// CUDA graphs (kernels/gpu/graph.h): thin checked wrappers over the runtime's stream capture.
#include <kernels/gpu/graph.h>

#include "check.cuh"
#include "launch.cuh"

namespace paralab::kernels::gpu {

using detail::as_stream;

void stream_begin_capture(void* stream) {
    PARALAB_GPU_CHECK(cudaStreamBeginCapture(as_stream(stream), cudaStreamCaptureModeThreadLocal));
}

void* stream_end_capture(void* stream) {
    cudaGraph_t graph = nullptr;
    const cudaError_t status = cudaStreamEndCapture(as_stream(stream), &graph);
    if (status != cudaSuccess) {
        cudaGetLastError();  // an invalidated capture is not sticky: clear it before reporting
        if (graph) cudaGraphDestroy(graph);
        PARALAB_GPU_CHECK(status);
    }
    return graph;
}

void* graph_instantiate(void* graph) {
    cudaGraphExec_t exec = nullptr;
    PARALAB_GPU_CHECK(cudaGraphInstantiate(&exec, static_cast<cudaGraph_t>(graph), 0));
    return exec;
}

bool graph_exec_update(void* exec, void* graph) {
    cudaGraphExecUpdateResultInfo info{};
    const cudaError_t status =
        cudaGraphExecUpdate(static_cast<cudaGraphExec_t>(exec), static_cast<cudaGraph_t>(graph), &info);
    if (status == cudaErrorGraphExecUpdateFailure) {
        cudaGetLastError();
        return false;
    }
    PARALAB_GPU_CHECK(status);
    return true;
}

void graph_launch(void* exec, void* stream) {
    PARALAB_GPU_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec), as_stream(stream)));
}

void graph_destroy(void* graph) {
    if (graph) PARALAB_GPU_CHECK(cudaGraphDestroy(static_cast<cudaGraph_t>(graph)));
}

void graph_exec_destroy(void* exec) {
    if (exec) PARALAB_GPU_CHECK(cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec)));
}

}  // namespace paralab::kernels::gpu
