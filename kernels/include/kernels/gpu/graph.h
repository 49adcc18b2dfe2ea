// CUDA graphs, free of CUDA types: the work one thread queues on a stream between
// stream_begin_capture and stream_end_capture is recorded, not run, and the graph it makes is
// replayed with one launch, so that a loop of small kernels (a recurrent layer's time steps)
// pays one launch instead of one per kernel. Handles are opaque (cudaGraph_t,
// cudaGraphExec_t). Implemented by kernels/cuda/graph.cu; kernels/stub/graph_stub.cpp throws
// "built without CUDA".
#pragma once

namespace paralab::kernels::gpu {

// Starts recording `stream` for the calling thread (cudaStreamCaptureModeThreadLocal: other
// threads, other virtual GPUs' rank threads among them, may go on allocating and launching).
void stream_begin_capture(void* stream);
// Ends the recording and returns the graph. Throws GpuError when the capture was invalidated
// (a call that cannot be captured was made); the stream is out of capture mode either way.
void* stream_end_capture(void* stream);
// An executable graph of `graph` (the graph itself may be destroyed afterwards).
void* graph_instantiate(void* graph);
// Points `exec` at `graph`'s kernels and arguments when the two have the same shape (the same
// nodes in the same order); false when they have not, and exec is unchanged.
bool graph_exec_update(void* exec, void* graph);
// Queues the whole graph on `stream`.
void graph_launch(void* exec, void* stream);
void graph_destroy(void* graph);
void graph_exec_destroy(void* exec);

}  // namespace paralab::kernels::gpu
