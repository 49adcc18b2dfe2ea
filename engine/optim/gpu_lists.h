// The host arrays of device pointers that the GPU's multi-tensor optimizer kernels take
// (kernels/gpu/optim.h): parameter k with its gradient and its first two state tensors.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/nn/layer.h"

namespace paralab::optim {

// The queue an update of `params` runs on: their gradients' GPU queue (the rank that computed
// them; under hogwild on virtual GPUs the values are rank 0's, shared, on the same card), or
// nullptr when they are in host memory (or there are none).
inline void* gpu_queue(const std::vector<nn::Param*>& params) {
    if (params.empty()) return nullptr;
    const nn::Param& p = *params.front();
    return p.grad.defined() ? p.grad.queue() : p.value.queue();
}

template <class T>
struct GpuLists {
    std::vector<T*> p, s0, s1;
    std::vector<const T*> g;
    std::vector<int64_t> sizes;

    GpuLists(const std::vector<nn::Param*>& params, const std::vector<std::vector<Tensor>>& state) {
        for (size_t i = 0; i < params.size(); ++i) {
            p.push_back(params[i]->value.data<T>());
            g.push_back(params[i]->grad.data<T>());
            sizes.push_back(params[i]->value.numel());
            if (i < state.size() && !state[i].empty()) s0.push_back(state[i][0].data<T>());
            if (i < state.size() && state[i].size() > 1) s1.push_back(state[i][1].data<T>());
        }
    }
    int64_t count() const { return static_cast<int64_t>(p.size()); }
};

}  // namespace paralab::optim
