// Multi-tensor launches (the pattern of NVIDIA apex's multi_tensor_apply): one kernel launch
// covers many tensors, e.g. every parameter of a model for an optimizer step, instead of a
// launch per parameter. The host cuts every tensor into chunks of `chunk` elements and packs
// up to kListTensors tensors and kListBlocks chunks into a kernel argument; block b of the
// launch works on chunk block_chunk[b] of tensor block_tensor[b]. Private to kernels/cuda.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>

namespace paralab::kernels::gpu::detail {

// Sized so that TensorList<4> (Adam: p, g, m, v) stays under the 4 KB kernel-argument limit
// that every CUDA version accepts.
constexpr int kListTensors = 36;
constexpr int kListBlocks = 320;

// The chunk and block size of the elementwise multi-tensor launches (optimizer steps, the loss
// scaler's unscale): 64 Ki elements per block, 256 per thread, so that a launch of kListBlocks
// chunks covers ~21 M elements and a small model's whole step is one launch.
constexpr int64_t kTensorChunk = int64_t{1} << 16;
constexpr int kTensorChunkBlock = 256;

// Depth parallel lists: ptr[d][k] is the k-th tensor of list d (parameters, gradients, ...).
template <int Depth>
struct TensorList {
    void* ptr[Depth][kListTensors];
    int64_t size[kListTensors];
    uint16_t block_tensor[kListBlocks];
    int32_t block_chunk[kListBlocks];
    int32_t first_block;  // index of this launch's block 0 among all the chunks so far
};

// Calls launch(const TensorList<Depth>&, int blocks) once per packed list. lists[d][k] is the
// k-th tensor of list d; sizes[k] its element count (empty tensors are skipped). Returns the
// number of chunks (blocks) launched in all.
template <int Depth, class Launch>
int64_t for_each_tensor_chunk(int64_t count, const std::array<void* const*, Depth>& lists,
                              const int64_t* sizes, int64_t chunk, Launch&& launch) {
    TensorList<Depth> list{};
    int tensors = 0, blocks = 0;
    int64_t launched = 0;
    for (int64_t t = 0; t < count; ++t) {
        const int64_t n = sizes[t];
        if (n == 0) continue;
        for (int d = 0; d < Depth; ++d) list.ptr[d][tensors] = lists[d][t];
        list.size[tensors] = n;
        ++tensors;
        const int64_t chunks = (n + chunk - 1) / chunk;
        for (int64_t c = 0; c < chunks; ++c) {
            list.block_tensor[blocks] = static_cast<uint16_t>(tensors - 1);
            list.block_chunk[blocks] = static_cast<int32_t>(c);
            ++blocks;
            const bool last_chunk = c == chunks - 1;
            if (blocks == kListBlocks || (tensors == kListTensors && last_chunk)) {
                list.first_block = static_cast<int32_t>(launched);
                launch(list, blocks);
                launched += blocks;
                blocks = 0;
                if (last_chunk) {
                    tensors = 0;
                } else {
                    // The tensor goes on in the next launch, as its entry 0.
                    for (int d = 0; d < Depth; ++d) list.ptr[d][0] = list.ptr[d][tensors - 1];
                    list.size[0] = list.size[tensors - 1];
                    tensors = 1;
                }
            }
        }
    }
    if (blocks > 0) {
        list.first_block = static_cast<int32_t>(launched);
        launch(list, blocks);
        launched += blocks;
    }
    return launched;
}

// The chunk size at which `tensors` tensors holding `total` elements make at most `slots`
// chunks (blocks), never below min_chunk: each tensor makes at most n/chunk + 1, so
// total/chunk + tensors <= slots suffices. Needs tensors < slots.
inline int64_t chunk_to_fit(int64_t total, int64_t tensors, int64_t slots, int64_t min_chunk) {
    const int64_t room = slots - tensors;
    return std::max(min_chunk, (total + room - 1) / room);
}

}  // namespace paralab::kernels::gpu::detail
