// LSTM, PyTorch's equations and gate order (i, f, g, o):
//   i, f, o = sigmoid(.), g = tanh(.) of x W_ih^T + b_ih + h W_hh^T + b_hh
//   c' = f c + i g, h' = o tanh(c')
//
// Layout: every per-step array stays batch-first, [B, T, X], as the input arrives and the
// sequence output leaves; one step's B rows are then X-wide rows T*X apart, which gemm (lda,
// ldc) and the cell kernels (ld arguments) take directly. No transposes, and the input
// projection of all steps and the weight gradients remain single dense GEMMs over B*T rows.

#include <cmath>
#include <string>

#include "engine/nn/ops.h"
#include "engine/nn/recurrent.h"

namespace paralab::nn {


namespace {
constexpr int64_t kGates = 4;
}  // namespace

LSTM::LSTM(int64_t hidden, int64_t num_layers, bool return_sequence)
    : RecurrentLayer("lstm", kGates, hidden, num_layers, return_sequence) {}

// x: [B, T, F] -> y: [B, H] (last step of the top layer) or [B, T, H] (every step)
Tensor LSTM::forward_impl(const Tensor& x, Mode mode) {
    (void)mode;
    const int64_t B = x.dim(0), steps = m_steps, H = m_hidden, G = kGates * H;
    m_saved.clear();
    const Ops ops = ops_for(x);
    dispatch_float(x.dtype(), [&]<class T>() {
        Tensor input = x;
        Tensor bias = new_workspace(Shape{G});
        for (int64_t l = 0; l < m_num_layers; ++l) {
            const RecurrentWeights& w = m_weights[static_cast<size_t>(l)];
            const int64_t F = input.dim(2);
            Saved s{loop_buffer(l, kSavedGates, Shape{B, steps, G}, true),
                    loop_buffer(l, kSavedState, Shape{B, steps, H}, true),
                    loop_buffer(l, kSavedTanhState, Shape{B, steps, H}, true),
                    loop_buffer(l, kSavedOut, Shape{B, steps, H}, true)};
            T* gates = s.gates.data<T>();
            T* c = s.c.data<T>();
            T* tanh_c = s.tanh_c.data<T>();
            T* h = s.h.data<T>();
            const T* w_hh = w.w_hh->value.data<T>();

            // Both biases enter every step's pre-activations: sum them once, then the input
            // projection of all steps is one GEMM on top of the broadcast bias.
            T* bsum = bias.data<T>();
            const T* b_ih = w.b_ih->value.data<T>();
            const T* b_hh = w.b_hh->value.data<T>();
            ops.add<T>(G, b_ih, b_hh, bsum);
            ops.bias_broadcast_rows<T>(B * steps, G, bsum, gates);
            ops.gemm<T>(false, true, B * steps, G, F, T(1), input.data<T>(),
                        w.w_ih->value.data<T>(), T(1), gates);

            const int64_t ldg = steps * G, lds = steps * H;
            const auto loop = [&] {
                for (int64_t t = 0; t < steps; ++t) {
                    T* g_t = gates + t * G;
                    // h_{-1} = 0: the first step has no recurrent term.
                    if (t > 0)
                        ops.gemm<T>(false, true, B, G, H, T(1), h + (t - 1) * H, lds, w_hh, H, T(1),
                                    g_t, ldg);
                    ops.lstm_cell_forward<T>(B, H, g_t, ldg, t > 0 ? c + (t - 1) * H : nullptr,
                                             c + t * H, tanh_c + t * H, h + t * H, lds);
                }
            };
            run_loop(m_forward_loops[static_cast<size_t>(l)], ops.q,
                     {uint64_t(B), uint64_t(steps), uint64_t(H), sizeof(T), gpu::key_of(gates),
                      gpu::key_of(c), gpu::key_of(tanh_c), gpu::key_of(h), gpu::key_of(w_hh)},
                     loop);
            input = s.h;
            m_saved.push_back(std::move(s));
        }
    });
    m_x = x;
    return layer_output(m_saved.back().h);
}

// dy: [B, H] or [B, T, H] -> dx: [B, T, F]. Backward through time, top layer first; a lower
// layer's output gradient is the upper layer's input gradient.
Tensor LSTM::backward_impl(const Tensor& dy) {
    PARALAB_CHECK(m_x.defined(), label() + ": a second backward after one forward");
    const int64_t B = dy.dim(0), steps = m_steps, H = m_hidden, G = kGates * H;
    const int64_t ldg = steps * G, lds = steps * H;
    Tensor dx;
    const Ops ops = ops_for(dy);
    dispatch_float(dy.dtype(), [&]<class T>() {
        // dh: [B, T, H], the gradient reaching each h_t of the current layer. It starts as the
        // gradient from above; the loop adds the recurrent part of step t+1 before step t.
        Tensor dh = output_gradient(dy);
        for (int64_t l = m_num_layers - 1; l >= 0; --l) {
            const Saved& s = m_saved[static_cast<size_t>(l)];
            const RecurrentWeights& w = m_weights[static_cast<size_t>(l)];
            const Tensor& input = l > 0 ? m_saved[static_cast<size_t>(l - 1)].h : m_x;
            const T* gates = s.gates.data<T>();
            const T* c = s.c.data<T>();
            const T* tanh_c = s.tanh_c.data<T>();
            const T* w_hh = w.w_hh->value.data<T>();
            T* dhp = dh.data<T>();

            // Gate gradients of every step, so that dW_ih, dW_hh, the biases and dx are GEMMs
            // over all B*T rows after the loop.
            Tensor dgates = loop_buffer(l, kGradGates, Shape{B, steps, G}, false);
            T* dg = dgates.data<T>();
            Tensor dc = loop_buffer(l, kGradState, Shape{B, H}, false);
            dc.zero();
            T* dcp = dc.data<T>();
            const auto loop = [&] {
                for (int64_t t = steps - 1; t >= 0; --t) {
                    ops.lstm_cell_backward<T>(B, H, gates + t * G, ldg,
                                              t > 0 ? c + (t - 1) * H : nullptr, tanh_c + t * H,
                                              dhp + t * H, lds, dcp, dg + t * G);
                    if (t > 0)
                        ops.gemm<T>(false, false, B, H, G, T(1), dg + t * G, ldg, w_hh, H, T(1),
                                    dhp + (t - 1) * H, lds);
                }
            };
            run_loop(m_backward_loops[static_cast<size_t>(l)], ops.q,
                     {uint64_t(B), uint64_t(steps), uint64_t(H), sizeof(T), gpu::key_of(gates),
                      gpu::key_of(c), gpu::key_of(tanh_c), gpu::key_of(dhp), gpu::key_of(dcp),
                      gpu::key_of(dg), gpu::key_of(w_hh)},
                     loop);
            // Both biases sit in the same sum, so both sides receive the same gate gradients.
            finish_layer_backward<T>(ops, l, B, input, dg, dg, s.h.data<T>(), dh, dx);
        }
    });
    m_x = Tensor();  // the saved state is dead once its gradients are out
    m_saved.clear();
    return dx;
}

}  // namespace paralab::nn
