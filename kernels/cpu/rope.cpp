#include <kernels/cpu/rope.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace paralab::kernels::cpu {

namespace {

constexpr int64_t kParallelMin = int64_t{1} << 15;

// cos and sin of row t's angles: [T, Dh/2] each, in double, rounded to T; row t is at position
// positions[t], or t without them.
template <class T>
void rope_tables(int64_t T_, int64_t Dh, double theta, const int64_t* positions, std::vector<T>& cos_t,
                 std::vector<T>& sin_t) {
    const int64_t half = Dh / 2;
    cos_t.resize(static_cast<size_t>(T_ * half));
    sin_t.resize(cos_t.size());
    for (int64_t i = 0; i < half; ++i) {
        const double freq = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(Dh));
        for (int64_t t = 0; t < T_; ++t) {
            const double a = static_cast<double>(positions ? positions[t] : t) * freq;
            cos_t[static_cast<size_t>(t * half + i)] = static_cast<T>(std::cos(a));
            sin_t[static_cast<size_t>(t * half + i)] = static_cast<T>(std::sin(a));
        }
    }
}

// One head's Dh numbers at `from` turned by the angles (c, s) into `to`.
template <class T>
inline void rotate_head(int64_t half, const T* c, const T* s, const T* from, T* to) {
#pragma omp simd
    for (int64_t i = 0; i < half; ++i) {
        const T a = from[i], b = from[i + half];
        to[i] = a * c[i] - b * s[i];
        to[i + half] = b * c[i] + a * s[i];
    }
}

}  // namespace

// compact: [B, T, (H + 2KV) Dh] -> full: [B, T, 3 H Dh]
template <class T>
void qkv_expand_rope_at(int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t Dh, bool rope, double theta,
                        const int64_t* positions, const T* compact, T* full) {
    std::vector<T> cos_t, sin_t;
    if (rope) rope_tables(T_, Dh, theta, positions, cos_t, sin_t);
    const int64_t half = Dh / 2, group = H / KV, wc = (H + 2 * KV) * Dh, wf = 3 * H * Dh;
    const size_t head_bytes = static_cast<size_t>(Dh) * sizeof(T);
#pragma omp parallel for if (B * T_ * wf >= kParallelMin)
    for (int64_t row = 0; row < B * T_; ++row) {
        const int64_t t = row % T_;
        const T* c = rope ? cos_t.data() + t * half : nullptr;
        const T* s = rope ? sin_t.data() + t * half : nullptr;
        const T* src = compact + row * wc;
        T* dst = full + row * wf;
        for (int64_t h = 0; h < H; ++h) {
            const int64_t g = h / group;
            const T* q = src + h * Dh;
            const T* k = src + (H + g) * Dh;
            const T* v = src + (H + KV + g) * Dh;
            if (rope) {
                rotate_head(half, c, s, q, dst + h * Dh);
                rotate_head(half, c, s, k, dst + (H + h) * Dh);
            } else {
                std::memcpy(dst + h * Dh, q, head_bytes);
                std::memcpy(dst + (H + h) * Dh, k, head_bytes);
            }
            std::memcpy(dst + (2 * H + h) * Dh, v, head_bytes);
        }
    }
}

// dfull: [B, T, 3 H Dh] -> dcompact: [B, T, (H + 2KV) Dh]
template <class T>
void qkv_expand_rope_backward_at(int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t Dh, bool rope,
                                 double theta, const int64_t* positions, const T* dfull, T* dcompact) {
    std::vector<T> cos_t, sin_t;
    if (rope) rope_tables(T_, Dh, theta, positions, cos_t, sin_t);
    const int64_t half = Dh / 2, group = H / KV, wc = (H + 2 * KV) * Dh, wf = 3 * H * Dh;
#pragma omp parallel for if (B * T_ * wf >= kParallelMin)
    for (int64_t row = 0; row < B * T_; ++row) {
        const int64_t t = row % T_;
        const T* c = rope ? cos_t.data() + t * half : nullptr;
        const T* s = rope ? sin_t.data() + t * half : nullptr;
        const T* src = dfull + row * wf;
        T* dst = dcompact + row * wc;
        // The query heads' gradients, and each key/value head's as the sum over its group in
        // head order; the rotation is linear, so the sum is turned back once.
        for (int64_t i = 0; i < H * Dh; ++i) dst[i] = src[i];
        for (int64_t g = 0; g < KV; ++g) {
            T* dk = dst + (H + g) * Dh;
            T* dv = dst + (H + KV + g) * Dh;
            for (int64_t i = 0; i < Dh; ++i) dk[i] = dv[i] = T(0);
            for (int64_t h = g * group; h < (g + 1) * group; ++h) {
                const T* sk = src + (H + h) * Dh;
                const T* sv = src + (2 * H + h) * Dh;
#pragma omp simd
                for (int64_t i = 0; i < Dh; ++i) {
                    dk[i] += sk[i];
                    dv[i] += sv[i];
                }
            }
        }
        if (!rope) continue;
        for (int64_t h = 0; h < H + KV; ++h) {
            T* x = dst + h * Dh;
            for (int64_t i = 0; i < half; ++i) {
                const T a = x[i], b = x[i + half];
                x[i] = a * c[i] + b * s[i];
                x[i + half] = b * c[i] - a * s[i];
            }
        }
    }
}

template <class T>
void qkv_expand_rope(int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t Dh, bool rope, double theta,
                     const T* compact, T* full) {
    qkv_expand_rope_at(B, T_, H, KV, Dh, rope, theta, nullptr, compact, full);
}

template <class T>
void qkv_expand_rope_backward(int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t Dh, bool rope,
                              double theta, const T* dfull, T* dcompact) {
    qkv_expand_rope_backward_at(B, T_, H, KV, Dh, rope, theta, nullptr, dfull, dcompact);
}

#define PARALAB_INSTANTIATE_ROPE(T)                                                                     \
    template void qkv_expand_rope<T>(int64_t, int64_t, int64_t, int64_t, int64_t, bool, double, const T*, \
                                     T*);                                                               \
    template void qkv_expand_rope_backward<T>(int64_t, int64_t, int64_t, int64_t, int64_t, bool, double,  \
                                              const T*, T*);                                            \
    template void qkv_expand_rope_at<T>(int64_t, int64_t, int64_t, int64_t, int64_t, bool, double,        \
                                        const int64_t*, const T*, T*);                                  \
    template void qkv_expand_rope_backward_at<T>(int64_t, int64_t, int64_t, int64_t, int64_t, bool,       \
                                                 double, const int64_t*, const T*, T*);

PARALAB_INSTANTIATE_ROPE(float)
PARALAB_INSTANTIATE_ROPE(double)
#undef PARALAB_INSTANTIATE_ROPE

}  // namespace paralab::kernels::cpu
