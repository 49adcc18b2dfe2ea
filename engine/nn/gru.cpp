// GRU, PyTorch's equations and gate order (r, z, n):
//   r = sigmoid(x W_ir^T + b_ir + h W_hr^T + b_hr), z likewise,
//   n = tanh(x W_in^T + b_in + r * (h W_hn^T + b_hn)), h' = (1 - z) n + z h
//
// Layout as in lstm.cpp: batch-first [B, T, X] arrays throughout, one step's rows strided by
// T*X and handed to gemm and the cell kernels through their ld arguments. Unlike the LSTM,
// h W_hh^T + b_hh cannot be summed into the input projection (r scales its n block), so each
// step computes it into a small dense [B, 3H] buffer.

#include <cmath>
#include <string>

#include "engine/nn/ops.h"
#include "engine/nn/recurrent.h"

namespace paralab::nn {


namespace {
constexpr int64_t kGates = 3;
}  // namespace

GRU::GRU(int64_t hidden, int64_t num_layers, bool return_sequence)
    : RecurrentLayer("gru", kGates, hidden, num_layers, return_sequence) {}

// x: [B, T, F] -> y: [B, H] (last step of the top layer) or [B, T, H] (every step)
Tensor GRU::forward_impl(const Tensor& x, Mode mode) {
    (void)mode;
    const int64_t B = x.dim(0), steps = m_steps, H = m_hidden, G = kGates * H;
    m_saved.clear();
    const Ops ops = ops_for(x);
    dispatch_float(x.dtype(), [&]<class T>() {
        Tensor input = x;
        Tensor hh = loop_buffer(0, kStepScratch, Shape{B, G}, false);  // one step's h_{t-1} W_hh^T + b_hh
        for (int64_t l = 0; l < m_num_layers; ++l) {
            const RecurrentWeights& w = m_weights[static_cast<size_t>(l)];
            const int64_t F = input.dim(2);
            Saved s{loop_buffer(l, kSavedGates, Shape{B, steps, G}, true),
                    loop_buffer(l, kSavedState, Shape{B, steps, H}, true),
                    loop_buffer(l, kSavedOut, Shape{B, steps, H}, true)};
            T* gates = s.gates.data<T>();
            T* hn = s.hn.data<T>();
            T* h = s.h.data<T>();
            const T* w_hh = w.w_hh->value.data<T>();
            const T* b_hh = w.b_hh->value.data<T>();
            T* hhp = hh.data<T>();

            // The input projection of all steps: one GEMM on top of the broadcast b_ih.
            ops.bias_broadcast_rows<T>(B * steps, G, w.b_ih->value.data<T>(), gates);
            ops.gemm<T>(false, true, B * steps, G, F, T(1), input.data<T>(),
                        w.w_ih->value.data<T>(), T(1), gates);

            const int64_t ldg = steps * G, lds = steps * H;
            const auto loop = [&] {
                for (int64_t t = 0; t < steps; ++t) {
                    ops.bias_broadcast_rows<T>(B, G, b_hh, hhp);
                    // h_{-1} = 0: the first step's recurrent term is the bias alone.
                    if (t > 0)
                        ops.gemm<T>(false, true, B, G, H, T(1), h + (t - 1) * H, lds, w_hh, H, T(1),
                                    hhp, G);
                    ops.gru_cell_forward<T>(B, H, gates + t * G, ldg, hhp,
                                            t > 0 ? h + (t - 1) * H : nullptr, hn + t * H, h + t * H,
                                            lds);
                }
            };
            run_loop(m_forward_loops[static_cast<size_t>(l)], ops.q,
                     {uint64_t(B), uint64_t(steps), uint64_t(H), sizeof(T), gpu::key_of(gates),
                      gpu::key_of(hhp), gpu::key_of(b_hh), gpu::key_of(hn), gpu::key_of(h),
                      gpu::key_of(w_hh)},
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
Tensor GRU::backward_impl(const Tensor& dy) {
    PARALAB_CHECK(m_x.defined(), label() + ": a second backward after one forward");
    const int64_t B = dy.dim(0), steps = m_steps, H = m_hidden, G = kGates * H;
    const int64_t ldg = steps * G, lds = steps * H;
    Tensor dx;
    const Ops ops = ops_for(dy);
    dispatch_float(dy.dtype(), [&]<class T>() {
        // dh: [B, T, H], the gradient reaching each h_t of the current layer: the gradient from
        // above, plus what step t+1 sends back (directly through z and through W_hh), added
        // before step t runs.
        Tensor dh = output_gradient(dy);
        for (int64_t l = m_num_layers - 1; l >= 0; --l) {
            const Saved& s = m_saved[static_cast<size_t>(l)];
            const RecurrentWeights& w = m_weights[static_cast<size_t>(l)];
            const Tensor& input = l > 0 ? m_saved[static_cast<size_t>(l - 1)].h : m_x;
            const T* gates = s.gates.data<T>();
            const T* hn = s.hn.data<T>();
            const T* h = s.h.data<T>();
            const T* w_hh = w.w_hh->value.data<T>();
            T* dhp = dh.data<T>();

            // The input side and the recurrent side differ in the n block (r scales the
            // latter), so each keeps its own gate gradients, all steps, for the GEMMs after the
            // loop.
            Tensor dgates_ih = loop_buffer(l, kGradGates, Shape{B, steps, G}, false);
            Tensor dgates_hh = loop_buffer(l, kGradGatesHh, Shape{B, steps, G}, false);
            T* dgi = dgates_ih.data<T>();
            T* dgh = dgates_hh.data<T>();
            const auto loop = [&] {
                for (int64_t t = steps - 1; t >= 0; --t) {
                    ops.gru_cell_backward<T>(B, H, gates + t * G, ldg, hn + t * H,
                                             t > 0 ? h + (t - 1) * H : nullptr, dhp + t * H,
                                             t > 0 ? dhp + (t - 1) * H : nullptr, lds, dgi + t * G,
                                             dgh + t * G);
                    if (t > 0)
                        ops.gemm<T>(false, false, B, H, G, T(1), dgh + t * G, ldg, w_hh, H, T(1),
                                    dhp + (t - 1) * H, lds);
                }
            };
            run_loop(m_backward_loops[static_cast<size_t>(l)], ops.q,
                     {uint64_t(B), uint64_t(steps), uint64_t(H), sizeof(T), gpu::key_of(gates),
                      gpu::key_of(hn), gpu::key_of(h), gpu::key_of(dhp), gpu::key_of(dgi),
                      gpu::key_of(dgh), gpu::key_of(w_hh)},
                     loop);
            finish_layer_backward<T>(ops, l, B, input, dgi, dgh, h, dh, dx);
        }
    });
    m_x = Tensor();  // the saved state is dead once its gradients are out
    m_saved.clear();
    return dx;
}

}  // namespace paralab::nn
