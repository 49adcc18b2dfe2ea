// Grouped-query key/value heads and rotary position embedding on the GPU
// (kernels/gpu/rope.h), after kernels/cpu/rope.cpp.
#include <kernels/gpu/rope.h>
#include <kernels/gpu/detail/op_lists.h>

#include "launch.cuh"

namespace paralab::kernels::gpu {

namespace {

using namespace detail;

// Number i of a head of width Dh at position t, rotated: its partner (i +- Dh/2) and the angle
// t theta^(-2 (i mod Dh/2) / Dh); `sign` -1 turns backwards (the transpose).
template <class T>
__device__ __forceinline__ T rotated(const T* head, int64_t i, int64_t Dh, int64_t t, double theta, T sign) {
    const int64_t half = Dh / 2, j = i % half;
    const double a = static_cast<double>(t) * pow(theta, -2.0 * static_cast<double>(j) / static_cast<double>(Dh));
    const T c = static_cast<T>(cos(a)), s = sign * static_cast<T>(sin(a));
    return i < half ? head[i] * c - head[i + half] * s : head[i] * c + head[i - half] * s;
}

// compact [B T, (H + 2KV) Dh] -> full [B T, 3 H Dh]: one thread per number of full.
template <class T>
__global__ void qkv_expand_rope_kernel(int64_t n, int64_t T_, int64_t H, int64_t KV, int64_t Dh, bool rope,
                                       double theta, const T* compact, T* full) {
    const int64_t wf = 3 * H * Dh, wc = (H + 2 * KV) * Dh, group = H / KV;
    PARALAB_GRID_STRIDE_LOOP(e, n) {
        const int64_t row = e / wf, col = e % wf, part = col / (H * Dh), h = (col % (H * Dh)) / Dh, i = col % Dh;
        const int64_t head = part == 0 ? h : part == 1 ? H + h / group : H + KV + h / group;
        const T* src = compact + row * wc + head * Dh;
        full[e] = rope && part < 2 ? rotated(src, i, Dh, row % T_, theta, T(1)) : src[i];
    }
}

// dfull [B T, 3 H Dh] -> dcompact [B T, (H + 2KV) Dh]: one thread per number of dcompact, the
// key/value heads summing their group in head order, then turned back.
template <class T>
__global__ void qkv_expand_rope_backward_kernel(int64_t n, int64_t T_, int64_t H, int64_t KV, int64_t Dh,
                                                bool rope, double theta, const T* dfull, T* dcompact) {
    const int64_t wf = 3 * H * Dh, wc = (H + 2 * KV) * Dh, group = H / KV, half = Dh / 2;
    PARALAB_GRID_STRIDE_LOOP(e, n) {
        const int64_t row = e / wc, col = e % wc, head = col / Dh, i = col % Dh;
        const T* src = dfull + row * wf;
        // The gradient at number k of compact head `head` before any rotation.
        const auto summed = [&](int64_t k) {
            if (head < H) return src[head * Dh + k];
            const bool value = head >= H + KV;
            const int64_t g = value ? head - H - KV : head - H;
            const T* from = src + (value ? 2 * H : H) * Dh;
            T sum = T(0);
            for (int64_t h = g * group; h < (g + 1) * group; ++h) sum += from[h * Dh + k];
            return sum;
        };
        if (!rope || head >= H + KV) {
            dcompact[e] = summed(i);
            continue;
        }
        const int64_t j = i % half;
        const double a = static_cast<double>(row % T_) *
                         pow(theta, -2.0 * static_cast<double>(j) / static_cast<double>(Dh));
        const T c = static_cast<T>(cos(a)), s = static_cast<T>(sin(a));
        const T x = summed(i);
        dcompact[e] = i < half ? x * c + summed(i + half) * s : x * c - summed(i - half) * s;
    }
}


}  // namespace

template <class T>
void qkv_expand_rope(int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t Dh, bool rope, double theta,
                     const T* compact, T* full, void* stream) {
    check_rope_sizes("qkv_expand_rope", B, T_, H, KV, Dh, rope);
    const int64_t n = B * T_ * 3 * H * Dh;
    if (n == 0) return;
    qkv_expand_rope_kernel<T><<<grid_for(n), kBlock, 0, as_stream(stream)>>>(n, T_, H, KV, Dh, rope, theta,
                                                                             compact, full);
    PARALAB_GPU_CHECK_LAUNCH("qkv_expand_rope_kernel");
}

template <class T>
void qkv_expand_rope_backward(int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t Dh, bool rope, double theta,
                              const T* dfull, T* dcompact, void* stream) {
    check_rope_sizes("qkv_expand_rope_backward", B, T_, H, KV, Dh, rope);
    const int64_t n = B * T_ * (H + 2 * KV) * Dh;
    if (n == 0) return;
    qkv_expand_rope_backward_kernel<T><<<grid_for(n), kBlock, 0, as_stream(stream)>>>(n, T_, H, KV, Dh, rope,
                                                                                      theta, dfull, dcompact);
    PARALAB_GPU_CHECK_LAUNCH("qkv_expand_rope_backward_kernel");
}

PARALAB_GPU_INSTANTIATE_FLOAT_TYPES(PARALAB_GPU_ROPE_OPS)

}  // namespace paralab::kernels::gpu
