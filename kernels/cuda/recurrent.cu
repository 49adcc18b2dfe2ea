// LSTM and GRU cell pointwise kernels (kernels/gpu/recurrent.h): the loop bodies of
// kernels/cpu/recurrent.cpp, one thread per (b, j). The CPU's tanh_via_exp is its own fast
// tanh within ~2 ulp; here the device tanh (also within 2 ulp) does the same job.
#include <kernels/gpu/gemm.h>
#include <kernels/gpu/recurrent.h>
#include <kernels/gpu/detail/op_lists.h>

#include "launch.cuh"

namespace paralab::kernels::gpu {

namespace {

using namespace detail;

template <class T>
__device__ __forceinline__ T sigmoid(T x) {
    return T(1) / (T(1) + exp(-x));
}

// One thread per unit k = b * H + j of the batch, grid-stride.
template <class T>
__global__ void lstm_cell_forward_kernel(int64_t batch, int64_t H, T* gates, int64_t ld_gates,
                                         const T* c_prev, T* c, T* tanh_c, T* h, int64_t ld_state) {
    PARALAB_GRID_STRIDE_LOOP(k, batch * H) {
        const int64_t b = k / H, j = k - b * H;
        T* g = gates + b * ld_gates;
        const T i = sigmoid(g[j]);
        const T f = sigmoid(g[H + j]);
        const T gg = tanh(g[2 * H + j]);
        const T o = sigmoid(g[3 * H + j]);
        g[j] = i;
        g[H + j] = f;
        g[2 * H + j] = gg;
        g[3 * H + j] = o;
        const int64_t s = b * ld_state + j;
        const T cn = i * gg + (c_prev ? f * c_prev[s] : T(0));
        const T t = tanh(cn);
        c[s] = cn;
        tanh_c[s] = t;
        h[s] = o * t;
    }
}

template <class T>
__global__ void lstm_cell_backward_kernel(int64_t batch, int64_t H, const T* gates, int64_t ld_gates,
                                          const T* c_prev, const T* tanh_c, const T* dh,
                                          int64_t ld_state, T* dc, T* dgates) {
    PARALAB_GRID_STRIDE_LOOP(k, batch * H) {
        const int64_t b = k / H, j = k - b * H;
        const T* g = gates + b * ld_gates;
        T* dg = dgates + b * ld_gates;
        const int64_t s = b * ld_state + j;
        const T i = g[j], f = g[H + j], gg = g[2 * H + j], o = g[3 * H + j];
        const T t = tanh_c[s];
        const T dhj = dh[s];
        // c_t reaches the loss through h_t = o tanh(c_t) and through c_{t+1} = f c_t + ...
        const T dct = dc[k] + dhj * o * (T(1) - t * t);
        const T cprev = c_prev ? c_prev[s] : T(0);
        dg[j] = dct * gg * i * (T(1) - i);
        dg[H + j] = dct * cprev * f * (T(1) - f);
        dg[2 * H + j] = dct * i * (T(1) - gg * gg);
        dg[3 * H + j] = dhj * t * o * (T(1) - o);
        dc[k] = dct * f;  // dc is dense [batch, H]: its index is k
    }
}

template <class T>
__global__ void gru_cell_forward_kernel(int64_t batch, int64_t H, T* gates, int64_t ld_gates, const T* hh,
                                        const T* h_prev, T* hn, T* h, int64_t ld_state) {
    PARALAB_GRID_STRIDE_LOOP(k, batch * H) {
        const int64_t b = k / H, j = k - b * H;
        T* g = gates + b * ld_gates;
        const T* hhr = hh + b * 3 * H;
        const int64_t s = b * ld_state + j;
        const T r = sigmoid(g[j] + hhr[j]);
        const T z = sigmoid(g[H + j] + hhr[H + j]);
        const T hnj = hhr[2 * H + j];
        const T n = tanh(g[2 * H + j] + r * hnj);
        const T hprev = h_prev ? h_prev[s] : T(0);
        g[j] = r;
        g[H + j] = z;
        g[2 * H + j] = n;
        hn[s] = hnj;
        h[s] = (T(1) - z) * n + z * hprev;
    }
}

template <class T>
__global__ void gru_cell_backward_kernel(int64_t batch, int64_t H, const T* gates, int64_t ld_gates,
                                         const T* hn, const T* h_prev, const T* dh, T* dh_prev,
                                         int64_t ld_state, T* dgates_ih, T* dgates_hh) {
    PARALAB_GRID_STRIDE_LOOP(k, batch * H) {
        const int64_t b = k / H, j = k - b * H;
        const T* g = gates + b * ld_gates;
        T* dih = dgates_ih + b * ld_gates;
        T* dhh = dgates_hh + b * ld_gates;
        const int64_t s = b * ld_state + j;
        const T r = g[j], z = g[H + j], n = g[2 * H + j];
        const T dhj = dh[s];
        const T hprev = h_prev ? h_prev[s] : T(0);
        const T dn = dhj * (T(1) - z) * (T(1) - n * n);
        const T dr = dn * hn[s] * r * (T(1) - r);
        const T dz = dhj * (hprev - n) * z * (T(1) - z);
        dih[j] = dr;
        dih[H + j] = dz;
        dih[2 * H + j] = dn;
        dhh[j] = dr;
        dhh[H + j] = dz;
        dhh[2 * H + j] = dn * r;  // hn enters n only through r * hn
        if (dh_prev) dh_prev[s] += dhj * z;
    }
}

using detail::check_cell_sizes;

}  // namespace

template <class T>
void lstm_cell_forward(int64_t batch, int64_t hidden, T* gates, int64_t ld_gates, const T* c_prev,
                       T* c, T* tanh_c, T* h, int64_t ld_state, void* stream) {
    check_cell_sizes("lstm_cell_forward", batch, hidden, ld_gates, 4, ld_state);
    if (batch * hidden == 0) return;
    lstm_cell_forward_kernel<T><<<grid_for(batch * hidden), kBlock, 0, as_stream(stream)>>>(
        batch, hidden, gates, ld_gates, c_prev, c, tanh_c, h, ld_state);
    PARALAB_GPU_CHECK_LAUNCH("lstm_cell_forward_kernel");
}

template <class T>
void lstm_cell_backward(int64_t batch, int64_t hidden, const T* gates, int64_t ld_gates,
                        const T* c_prev, const T* tanh_c, const T* dh, int64_t ld_state, T* dc,
                        T* dgates, void* stream) {
    check_cell_sizes("lstm_cell_backward", batch, hidden, ld_gates, 4, ld_state);
    if (batch * hidden == 0) return;
    lstm_cell_backward_kernel<T><<<grid_for(batch * hidden), kBlock, 0, as_stream(stream)>>>(
        batch, hidden, gates, ld_gates, c_prev, tanh_c, dh, ld_state, dc, dgates);
    PARALAB_GPU_CHECK_LAUNCH("lstm_cell_backward_kernel");
}

template <class T>
void gru_cell_forward(int64_t batch, int64_t hidden, T* gates, int64_t ld_gates, const T* hh,
                      const T* h_prev, T* hn, T* h, int64_t ld_state, void* stream) {
    check_cell_sizes("gru_cell_forward", batch, hidden, ld_gates, 3, ld_state);
    if (batch * hidden == 0) return;
    gru_cell_forward_kernel<T><<<grid_for(batch * hidden), kBlock, 0, as_stream(stream)>>>(
        batch, hidden, gates, ld_gates, hh, h_prev, hn, h, ld_state);
    PARALAB_GPU_CHECK_LAUNCH("gru_cell_forward_kernel");
}

template <class T>
void gru_cell_backward(int64_t batch, int64_t hidden, const T* gates, int64_t ld_gates, const T* hn,
                       const T* h_prev, const T* dh, T* dh_prev, int64_t ld_state, T* dgates_ih,
                       T* dgates_hh, void* stream) {
    check_cell_sizes("gru_cell_backward", batch, hidden, ld_gates, 3, ld_state);
    if (batch * hidden == 0) return;
    gru_cell_backward_kernel<T><<<grid_for(batch * hidden), kBlock, 0, as_stream(stream)>>>(
        batch, hidden, gates, ld_gates, hn, h_prev, dh, dh_prev, ld_state, dgates_ih, dgates_hh);
    PARALAB_GPU_CHECK_LAUNCH("gru_cell_backward_kernel");
}

template <class T>
void strided_rows_copy(int64_t rows, int64_t cols, const T* src, int64_t ld_src, T* dst,
                       int64_t ld_dst, void* stream) {
    require(rows >= 0 && cols >= 0, "strided_rows_copy", "negative size");
    require(ld_src >= cols && ld_dst >= cols, "strided_rows_copy", "a leading dimension is below cols");
    if (rows * cols == 0) return;
    PARALAB_GPU_CHECK(cudaMemcpy2DAsync(dst, ld_dst * sizeof(T), src, ld_src * sizeof(T), cols * sizeof(T),
                                        rows, cudaMemcpyDeviceToDevice, as_stream(stream)));
}

// dgates: [batch, steps, G], h: [batch, steps, H] -> dw: [G, H] +=
template <class T>
void recurrent_weight_grad_accumulate(int64_t batch, int64_t steps, int64_t gate_cols,
                                      int64_t hidden, const T* dgates, const T* h, T* dw,
                                      void* stream) {
    require(batch >= 0 && steps >= 0 && gate_cols >= 0 && hidden >= 0,
            "recurrent_weight_grad_accumulate", "negative size");
    if (steps < 2) return;  // h_{-1} = 0: one step contributes nothing
    const int64_t G = gate_cols, H = hidden;
    if (steps - 1 >= batch) {
        // One sample's pairs (dgates[t], h[t-1]) are two dense row blocks, offset by one row.
        for (int64_t b = 0; b < batch; ++b)
            gemm<T>(true, false, G, H, steps - 1, T(1), dgates + (b * steps + 1) * G, G,
                    h + b * steps * H, H, T(1), dw, H, stream);
    } else {
        // One step's rows across the batch are `steps` rows apart.
        for (int64_t t = 1; t < steps; ++t)
            gemm<T>(true, false, G, H, batch, T(1), dgates + t * G, steps * G, h + (t - 1) * H,
                    steps * H, T(1), dw, H, stream);
    }
}

PARALAB_GPU_INSTANTIATE_FLOAT_TYPES(PARALAB_GPU_RECURRENT_OPS)

}  // namespace paralab::kernels::gpu
