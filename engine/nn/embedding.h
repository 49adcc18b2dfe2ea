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

    // A GPU step graph (engine/strategy/step_graph.h) records a forward that may not read its
    // input back: the ids of `host_x` are checked here (as forward checks them) and copied into
    // `staged` (int64s on this layer's GPU, made on the first call, then written in place), and
    // a forward whose input is `input` (the graph's staged batch) gathers with them.
    void stage_ids(const Tensor& host_x, const Tensor& input, Tensor& staged);

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
    Tensor m_staged_input, m_staged_ids;  // stage_ids'
    void check_ids(const Tensor& host_x);  // into m_ids; Error naming the first bad id
};

}  // namespace paralab::nn
