// Token embedding, like torch.nn.Embedding: ids [T] (integral values stored in the float
// dtype) -> vectors [T, dim]. The ids are not differentiable, so backward returns an undefined
// tensor and only accumulates the table's gradient.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/nn/layer.h"

namespace paralab::nn {

class Embedding : public Layer {
public:
    // Throws ConfigError when vocab or dim is below 1.
    Embedding(int64_t vocab, int64_t dim);
    bool runs_on_gpu() const override { return true; }

protected:
    Shape build_impl(const Shape& input) override;
    void reset_parameters_impl(Rng& rng) override;
    Tensor forward_impl(const Tensor& x, Mode mode) override;
    Tensor backward_impl(const Tensor& dy) override;

private:
    int64_t m_vocab;
    int64_t m_dim;
    Param* m_weight = nullptr;   // [vocab, dim]
    std::vector<int64_t> m_ids;  // the last forward's ids, [B * T]; kept for backward
    Tensor m_ids_on_gpu;         // on a GPU: m_ids uploaded as int64 (upload_ids), for backward
};

}  // namespace paralab::nn
