// Recurrent layers, like torch.nn.LSTM and torch.nn.GRU with batch_first = true and a zero
// initial state: per-sample input [T, features] -> [H] (the top layer's last step) or [T, H]
// (the top layer's every step). Parameters carry PyTorch's names, shapes, gate order and
// module.parameters() order, so weights move between the two unchanged:
//   weight_ih_l{l} [G*H, F_l], weight_hh_l{l} [G*H, H], bias_ih_l{l} [G*H], bias_hh_l{l} [G*H]
// for each layer l (F_0 = features, F_l = H above), G = 4 (i, f, g, o) for LSTM and
// G = 3 (r, z, n) for GRU.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "engine/device/gpu_graph.h"
#include "engine/nn/layer.h"

namespace paralab::nn {

struct Ops;

// One stacked layer's parameters (pointers into Layer::m_params).
struct RecurrentWeights {
    Param* w_ih = nullptr;  // [G*H, F_l]
    Param* w_hh = nullptr;  // [G*H, H]
    Param* b_ih = nullptr;  // [G*H]
    Param* b_hh = nullptr;  // [G*H]
};

// What LSTM and GRU share: options, PyTorch's parameter layout and initialisation, shape
// inference and FLOP count. `gates` is G (4 for LSTM, 3 for GRU).
class RecurrentLayer : public Layer {
protected:
    // Throws ConfigError when hidden < 1 or num_layers < 1.
    RecurrentLayer(std::string type, int64_t gates, int64_t hidden, int64_t num_layers,
                   bool return_sequence);

    // input: [T, F] -> [H] or [T, H]
    Shape build_impl(const Shape& input) override;
    void reset_parameters_impl(Rng& rng) override;
    int64_t flops_impl() const override;
    void release_saved_impl() override { m_x = Tensor(); }
    // The input, and per stacked layer and step the activated gates and the states (LSTM: c,
    // tanh c, h; GRU: the candidate's hidden part, h).
    int64_t activations_impl() override {
        return input_shape().numel() + m_num_layers * m_steps * m_hidden * (m_gates + (m_gates == 4 ? 3 : 2));
    }

    // top: the top layer's outputs [B, T, H] -> the layer's output: top itself (sequence) or
    // its last step [B, H].
    Tensor layer_output(const Tensor& top) const;
    // dy: [B, H] or [B, T, H] -> [B, T, H], the gradient reaching each of the top layer's h_t
    // from above (zero but at the last step when only the last step is returned); in the top
    // layer's loop buffer kGradOut.
    Tensor output_gradient(const Tensor& dy);

    // The buffers a stacked layer's time loops read and write, by role (each layer type uses
    // the roles it needs). On a GPU they keep their addresses from step to step, so that the
    // loops' recorded graphs stay valid: loop_buffer gives back the (layer, role) buffer of
    // that shape, kept from an earlier call; the last kShapesKept shapes are kept (the
    // training batch, a smaller last batch, evaluation's batch), so that an epoch's end does not
    // move them. On the CPU a fresh tensor each call, released with its last user, as every
    // other layer's.
    enum LoopRole : size_t {
        kSavedGates, kSavedState, kSavedTanhState, kSavedOut,  // forward, kept for backward
        kGradGates, kGradGatesHh, kGradState, kGradOut,        // backward
        kStepScratch,                                          // one step's scratch
        kRoles
    };
    Tensor loop_buffer(int64_t layer, LoopRole role, const Shape& shape, bool activation);
    static constexpr size_t kShapesKept = 3;

    // A stacked layer's time loop: on a GPU (queue set) replayed as a recorded graph, `key`
    // listing everything its work depends on (gpu_graph.h); on the CPU called as it is (no
    // std::function, no key vector on that path).
    template <class Loop>
    static void run_loop(gpu::GraphReplay& replay, void* queue, std::initializer_list<uint64_t> key,
                         const Loop& loop) {
        if (queue) replay.run(queue, std::vector<uint64_t>(key), loop);
        else loop();
    }

    // The end of stacked layer l's backward, once its loop has left the gate gradients of every
    // step ([B, T, G]; dg_ih for the input side, dg_hh for the recurrent side, one buffer when the
    // sides share them, as in an LSTM): dW_ih, dW_hh and both biases accumulated, and the input
    // gradient [B, T, F] when someone reads it, as the output gradient of the layer below (dh)
    // or as the layer's own input gradient (dx). `h` is the layer's saved outputs [B, T, H].
    template <class T>
    void finish_layer_backward(const Ops& ops, int64_t l, int64_t B, const Tensor& input,
                               const T* dg_ih, const T* dg_hh, const T* h, Tensor& dh, Tensor& dx);

    int64_t m_gates;
    int64_t m_hidden;
    int64_t m_num_layers;
    bool m_return_sequence;
    int64_t m_steps = 0;
    int64_t m_features = 0;
    std::vector<RecurrentWeights> m_weights;  // per stacked layer
    Tensor m_x;                               // the last forward's input, released by backward
    // On a GPU each stacked layer's time loop, forward and backward, replays as a CUDA graph
    // (one launch for its ~2 kernels a step); per stacked layer.
    std::vector<gpu::GraphReplay> m_forward_loops, m_backward_loops;
    // GPU: [stacked layer][role], the most recently used shape first.
    std::vector<std::vector<std::vector<Tensor>>> m_loop_slots;
};

class LSTM : public RecurrentLayer {
public:
    bool runs_on_gpu() const override { return true; }
    // Throws ConfigError when hidden < 1 or num_layers < 1.
    LSTM(int64_t hidden, int64_t num_layers = 1, bool return_sequence = false);

protected:
    Tensor forward_impl(const Tensor& x, Mode mode) override;
    Tensor backward_impl(const Tensor& dy) override;
    void release_saved_impl() override {
        RecurrentLayer::release_saved_impl();
        m_saved.clear();
    }

private:
    // What one stacked layer's backward reads, from the last forward; all [B, T, ...].
    struct Saved {
        Tensor gates;   // [B, T, 4H] activated i, f, g, o
        Tensor c;       // [B, T, H] cell states
        Tensor tanh_c;  // [B, T, H]
        Tensor h;       // [B, T, H] outputs (the next layer's input)
    };

    std::vector<Saved> m_saved;  // per stacked layer, released by backward
};

class GRU : public RecurrentLayer {
public:
    bool runs_on_gpu() const override { return true; }
    // Throws ConfigError when hidden < 1 or num_layers < 1.
    GRU(int64_t hidden, int64_t num_layers = 1, bool return_sequence = false);

protected:
    Tensor forward_impl(const Tensor& x, Mode mode) override;
    Tensor backward_impl(const Tensor& dy) override;
    void release_saved_impl() override {
        RecurrentLayer::release_saved_impl();
        m_saved.clear();
    }

private:
    struct Saved {
        Tensor gates;  // [B, T, 3H] activated r, z, n
        Tensor hn;     // [B, T, H] h_{t-1} W_hn^T + b_hn (r scales it inside n)
        Tensor h;      // [B, T, H] outputs
    };

    std::vector<Saved> m_saved;
};

}  // namespace paralab::nn
