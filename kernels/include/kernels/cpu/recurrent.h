// Recurrent cells (LSTM, GRU): the fused gate nonlinearities of one time step, forward and
// backward, plus the strided helpers the layers need around them. The GEMMs (input projection,
// h W_hh^T) stay outside in kernels::cpu::gemm; these kernels do the elementwise part that
// would otherwise take a dozen passes over the gate buffer.
//
// Layout: the layers keep every per-step quantity in a [B, T, X] array, so the rows of one time
// step are `batch` rows of X elements `ld` apart (ld = T * X). Gate rows hold G blocks of
// `hidden` elements in PyTorch's order: LSTM (i, f, g, o), GRU (r, z, n). Everything is plain
// pointers; T = float or double. Rows are independent, so a parallel split over rows gives the
// same result for any thread count.
#pragma once

#include <cstdint>

namespace paralab::kernels::cpu {

// ---- LSTM: c' = f c + i g, h' = o tanh(c') ------------------------------------------------

// gates:  [batch, 4H] at row stride ld_gates. In: the pre-activations
//         x W_ih^T + b_ih + h W_hh^T + b_hh. Out: sigmoid(i), sigmoid(f), tanh(g), sigmoid(o),
//         which backward reads back.
// c_prev: [batch, H] at ld_state, or nullptr for the zero initial state.
// c, tanh_c, h: [batch, H] at ld_state, written: the new cell state, its tanh, the output.
template <class T>
void lstm_cell_forward(int64_t batch, int64_t hidden, T* gates, int64_t ld_gates, const T* c_prev,
                       T* c, T* tanh_c, T* h, int64_t ld_state);

// gates, c_prev, tanh_c: as forward left them (c_prev nullptr at the first step).
// dh:     [batch, H] at ld_state: the whole gradient reaching h_t (from above and from t+1).
// dc:     [batch, H] dense. In: the gradient reaching c_t from step t+1 (zeros at the last
//         step). Out: the gradient reaching c_{t-1} (= dc_t * f).
// dgates: [batch, 4H] at ld_gates, written: the gradient of the pre-activations.
template <class T>
void lstm_cell_backward(int64_t batch, int64_t hidden, const T* gates, int64_t ld_gates,
                        const T* c_prev, const T* tanh_c, const T* dh, int64_t ld_state, T* dc,
                        T* dgates);

// ---- GRU (PyTorch's equations) -------------------------------------------------------------
//   r = sigmoid(xr + hr), z = sigmoid(xz + hz), n = tanh(xn + r * hn), h' = (1 - z) n + z h
// with x* = x W_i*^T + b_i* and h* = h W_h*^T + b_h*.

// gates:  [batch, 3H] at ld_gates. In: x W_ih^T + b_ih. Out: r, z, n.
// hh:     [batch, 3H] dense: h_prev W_hh^T + b_hh (just b_hh at the first step).
// h_prev: [batch, H] at ld_state, or nullptr for the zero initial state.
// hn, h:  [batch, H] at ld_state, written: hh's n block (backward needs it) and the output.
template <class T>
void gru_cell_forward(int64_t batch, int64_t hidden, T* gates, int64_t ld_gates, const T* hh,
                      const T* h_prev, T* hn, T* h, int64_t ld_state);

// gates, hn, h_prev: as forward left them (h_prev nullptr at the first step).
// dh:        [batch, H] at ld_state: the whole gradient reaching h_t.
// dh_prev:   [batch, H] at ld_state: += the direct path dh * z; nullptr at the first step.
// dgates_ih: [batch, 3H] at ld_gates, written: gradient of the input-side pre-activations.
// dgates_hh: [batch, 3H] at ld_gates, written: gradient of h W_hh^T + b_hh (its n block is
//            the ih one times r).
template <class T>
void gru_cell_backward(int64_t batch, int64_t hidden, const T* gates, int64_t ld_gates, const T* hn,
                       const T* h_prev, const T* dh, T* dh_prev, int64_t ld_state, T* dgates_ih,
                       T* dgates_hh);

// ---- around the cells ------------------------------------------------------------------------

// dst[r, :cols] = src[r, :cols] for r < rows, rows ld_src and ld_dst apart (one time step of a
// [B, T, X] array to or from a dense [B, X] one).
template <class T>
void strided_rows_copy(int64_t rows, int64_t cols, const T* src, int64_t ld_src, T* dst,
                       int64_t ld_dst);

// dw[G, H] += sum over b < batch and 1 <= t < steps of dgates[b, t, :]^T h[b, t - 1, :]
// for dgates: [batch, steps, G] and h: [batch, steps, H] (dense). The recurrent weight's
// gradient, batched after the time loop: per sample (GEMM depth steps - 1) or per step (depth
// batch), whichever is deeper; the order is fixed by the sizes, not by threads.
template <class T>
void recurrent_weight_grad_accumulate(int64_t batch, int64_t steps, int64_t gate_cols,
                                      int64_t hidden, const T* dgates, const T* h, T* dw);

}  // namespace paralab::kernels::cpu
