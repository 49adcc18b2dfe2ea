// Recurrent cells on the GPU: the fused gate nonlinearities of one LSTM or GRU time step,
// forward and backward, the twins of kernels/cpu/recurrent.h with the same layout and
// arguments (see there): per-step rows `ld` elements apart in [B, T, X] arrays, gate blocks in
// PyTorch's order, LSTM (i, f, g, o) and GRU (r, z, n). Device pointers; T = float or double;
// `stream` is an opaque cudaStream_t. One thread per (row, hidden unit).
#pragma once

#include <cstdint>

namespace paralab::kernels::gpu {

// gates: [batch, 4H] (ld_gates), pre-activations in, activations out; c_prev: [batch, H]
// (ld_state) or nullptr; c, tanh_c, h: [batch, H] (ld_state), written.
template <class T>
void lstm_cell_forward(int64_t batch, int64_t hidden, T* gates, int64_t ld_gates, const T* c_prev,
                       T* c, T* tanh_c, T* h, int64_t ld_state, void* stream);

// gates, c_prev, tanh_c as forward left them; dh: [batch, H] (ld_state); dc: [batch, H] dense,
// in: dL/dc_t from t+1, out: dL/dc_{t-1}; dgates: [batch, 4H] (ld_gates), written.
template <class T>
void lstm_cell_backward(int64_t batch, int64_t hidden, const T* gates, int64_t ld_gates,
                        const T* c_prev, const T* tanh_c, const T* dh, int64_t ld_state, T* dc,
                        T* dgates, void* stream);

// gates: [batch, 3H] (ld_gates), x W_ih^T + b_ih in, (r, z, n) out; hh: [batch, 3H] dense;
// h_prev: [batch, H] (ld_state) or nullptr; hn, h: [batch, H] (ld_state), written.
template <class T>
void gru_cell_forward(int64_t batch, int64_t hidden, T* gates, int64_t ld_gates, const T* hh,
                      const T* h_prev, T* hn, T* h, int64_t ld_state, void* stream);

// gates, hn, h_prev as forward left them; dh: [batch, H] (ld_state); dh_prev: += dh * z, or
// nullptr; dgates_ih, dgates_hh: [batch, 3H] (ld_gates), written.
template <class T>
void gru_cell_backward(int64_t batch, int64_t hidden, const T* gates, int64_t ld_gates, const T* hn,
                       const T* h_prev, const T* dh, T* dh_prev, int64_t ld_state, T* dgates_ih,
                       T* dgates_hh, void* stream);

// dst[r, :cols] = src[r, :cols] for r < rows, rows ld_src and ld_dst apart (cudaMemcpy2DAsync).
template <class T>
void strided_rows_copy(int64_t rows, int64_t cols, const T* src, int64_t ld_src, T* dst,
                       int64_t ld_dst, void* stream);

// dw[G, H] += sum over b < batch and 1 <= t < steps of dgates[b, t, :]^T h[b, t - 1, :] for
// dgates: [batch, steps, G] and h: [batch, steps, H] (dense): the recurrent weight's gradient,
// batched after the time loop as the CPU does it (cuBLAS GEMMs per sample or per step,
// whichever is deeper). The calling thread must have made the stream's device current.
template <class T>
void recurrent_weight_grad_accumulate(int64_t batch, int64_t steps, int64_t gate_cols,
                                      int64_t hidden, const T* dgates, const T* h, T* dw,
                                      void* stream);

}  // namespace paralab::kernels::gpu
