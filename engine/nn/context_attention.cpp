// Context parallelism's attention (nn::ContextShard): ring attention and its all-gather variant
// over the zig-zag split, built from the fused kernel's passes (kernels/cpu/attention.h). A
// device's 2C rows are two chunks of the sequence; every pair of a query chunk and a key chunk
// is one fused pass of C queries against C keys (the causal mask only on a chunk against
// itself, a key chunk after the query chunk skipped), the passes of one query chunk merged by
// their log-sum-exp, and in backward each pair's pass given the merged output and log-sum-exp.
#include "engine/nn/attention.h"

#include <kernels/cpu/attention.h>
#include <kernels/cpu/rope.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "engine/nn/ops.h"

namespace paralab::nn {

namespace kc = kernels::cpu;

std::vector<int64_t> context_positions(int64_t T, int rank, int world, const std::string& key) {
    PARALAB_CHECK(world >= 1 && rank >= 0 && rank < world,
                  "context_positions: rank " + std::to_string(rank) + " of " + std::to_string(world));
    if (T % (2 * world) != 0)
        throw ConfigError(key, "a sequence of " + std::to_string(T) + " positions does not divide into 2·cp = " +
                                   std::to_string(2 * world) +
                                   " equal chunks (context parallelism gives each of the cp = " +
                                   std::to_string(world) + " devices two of them, zig-zag)");
    const int64_t C = T / (2 * world);
    std::vector<int64_t> out(static_cast<size_t>(2 * C));
    for (int64_t t = 0; t < C; ++t) {
        out[static_cast<size_t>(t)] = rank * C + t;
        out[static_cast<size_t>(C + t)] = (2 * world - 1 - rank) * C + t;
    }
    return out;
}

Tensor context_slice(const Tensor& x, int rank, int world) {
    PARALAB_CHECK(x.shape().rank() >= 2 && !x.on_gpu(), "context_slice: expects a cpu tensor [B, T, ...]");
    const int64_t B = x.dim(0), T = x.dim(1), width = x.numel() / (B * T);
    const std::vector<int64_t> rows = context_positions(T, rank, world, "context_slice");
    Shape shape = x.shape();
    shape[1] = static_cast<int64_t>(rows.size());
    Tensor out = Tensor::empty(shape, x.dtype(), x.device(), MemCategory::activations);
    const size_t row_bytes = static_cast<size_t>(width) * dtype_size(x.dtype());
    const auto* from = static_cast<const unsigned char*>(x.raw());
    auto* to = static_cast<unsigned char*>(out.raw());
    for (int64_t b = 0; b < B; ++b)
        for (size_t t = 0; t < rows.size(); ++t)
            std::memcpy(to + (b * shape[1] + static_cast<int64_t>(t)) * row_bytes, from + (b * T + rows[t]) * row_bytes,
                        row_bytes);
    return out;
}

void give_context_shard(Layer& layer, const ContextShard& shard) {
    if (auto* block = dynamic_cast<TransformerBlock*>(&layer)) return block->set_context_shard(shard);
    if (auto* attention = dynamic_cast<Attention*>(&layer)) return attention->set_context_shard(shard);
    if (dynamic_cast<PositionEmbedding*>(&layer))
        throw ConfigError(layer.path(), "position_embedding adds a table by row, and under context parallelism a "
                                        "device's rows are two chunks from the middle of the sequence; use "
                                        "\"rope\" positions in the attention instead");
    for (Layer* c : layer.children()) give_context_shard(*c, shard);
}

namespace {

// The chunk of the whole sequence (of 2·world) held in device `rank`'s rows [0, C) (local 0) or
// [C, 2C) (local 1).
int chunk_of(int rank, int world, int local) { return local == 0 ? rank : 2 * world - 1 - rank; }

// The shapes of one context-parallel attention: B sequences of T = 2C rows, H query heads and
// KV key/value heads of width Dh; inner = H Dh; a row of keys and values is W = 2 KV Dh wide
// (k of each key/value head, then v).
struct Geometry {
    int64_t B, T, C, H, KV, Dh, inner, W;

    // Rows [row0, row0 + rows) of each of n sequences of `from_len` rows `width` wide -> rows
    // [to0, to0 + rows) of sequences of `to_len` rows, copied (or added).
    template <class F>
    static void rows(int64_t n, int64_t rows, int64_t width, const F* from, int64_t from_len, int64_t from0, F* to,
                     int64_t to_len, int64_t to0, bool add = false) {
        for (int64_t s = 0; s < n; ++s) {
            const F* a = from + (s * from_len + from0) * width;
            F* b = to + (s * to_len + to0) * width;
            if (add) {
                for (int64_t i = 0; i < rows * width; ++i) b[i] += a[i];
            } else {
                std::copy(a, a + rows * width, b);
            }
        }
    }

    // This device's keys and values [B, T, W] from its expanded qkv [B, T, 3 inner]: the first
    // query head of each group holds its key/value head (rotated, as the passes read it).
    template <class F>
    void keys_values(const F* full, F* kv) const {
        const int64_t group = H / KV;
        for (int64_t r = 0; r < B * T; ++r)
            for (int64_t g = 0; g < KV; ++g) {
                const F* k = full + r * 3 * inner + inner + g * group * Dh;
                std::copy(k, k + Dh, kv + r * W + g * Dh);
                std::copy(k + inner, k + inner + Dh, kv + r * W + (KV + g) * Dh);
            }
    }

    // The fused passes' qkv [B, C, 3 inner] of local query chunk qi (from the expanded `full`)
    // and local key chunk kj of `kv` [B, T, W], each key/value head copied to its query heads.
    template <class F>
    void pack(const F* full, const F* kv, int qi, int kj, F* block) const {
        const int64_t group = H / KV;
        for (int64_t b = 0; b < B; ++b)
            for (int64_t t = 0; t < C; ++t) {
                F* out = block + (b * C + t) * 3 * inner;
                const F* q = full + (b * T + qi * C + t) * 3 * inner;
                const F* k = kv + (b * T + kj * C + t) * W;
                std::copy(q, q + inner, out);
                for (int64_t h = 0; h < H; ++h) {
                    const int64_t g = h / group;
                    std::copy(k + g * Dh, k + (g + 1) * Dh, out + inner + h * Dh);
                    std::copy(k + (KV + g) * Dh, k + (KV + g + 1) * Dh, out + 2 * inner + h * Dh);
                }
            }
    }

    // A pass's gradient dblock [B, C, 3 inner] added back: its q part to rows of local chunk qi
    // of dfull [B, T, 3 inner], its k and v parts, summed over each group's query heads, to
    // rows of local chunk kj of dkv [B, T, W].
    template <class F>
    void unpack_add(const F* dblock, int qi, int kj, F* dfull, F* dkv) const {
        const int64_t group = H / KV;
        for (int64_t b = 0; b < B; ++b)
            for (int64_t t = 0; t < C; ++t) {
                const F* d = dblock + (b * C + t) * 3 * inner;
                F* dq = dfull + (b * T + qi * C + t) * 3 * inner;
                F* dk = dkv + (b * T + kj * C + t) * W;
                for (int64_t i = 0; i < inner; ++i) dq[i] += d[i];
                for (int64_t h = 0; h < H; ++h) {
                    const int64_t g = h / group;
                    for (int64_t i = 0; i < Dh; ++i) {
                        dk[g * Dh + i] += d[inner + h * Dh + i];
                        dk[(KV + g) * Dh + i] += d[2 * inner + h * Dh + i];
                    }
                }
            }
    }
};

// The pairs of local query chunk qi with local key chunk kj of device `source`'s keys that
// attention computes: visits (qi, kj, diagonal) for each.
template <class Visit>
void for_each_pair(int rank, int source, int world, bool causal, const Visit& visit) {
    for (int qi = 0; qi < 2; ++qi)
        for (int kj = 0; kj < 2; ++kj) {
            const int q = chunk_of(rank, world, qi), k = chunk_of(source, world, kj);
            if (causal && k > q) continue;  // every key after every query
            visit(qi, kj, causal && k == q);
        }
}

}  // namespace

Tensor Attention::context_forward(Tensor compact) {
    const int64_t B = compact.dim(0), T = m_T, C = T / 2, Dh = m_D / m_heads;
    const Geometry g{B, T, C, m_H, m_KV, Dh, m_inner, 2 * m_KV * Dh};
    const int world = m_cp.world, rank = m_cp.rank;
    m_qkv_out = new_activation(Shape{B, T, 3 * m_inner});
    Tensor heads = new_activation(Shape{B, T, m_inner});
    m_lse = new_activation(Shape{B, g.H, T});
    m_work = {};
    const auto comm = [&](const Shape& shape) {
        return Tensor::empty(shape, dtype(), device(), MemCategory::communication);
    };
    const bool ring = m_cp.comm == ContextShard::Comm::ring;
    Tensor kv = comm(Shape{B, T, g.W});
    Tensor arriving = ring ? comm(Shape{B, T, g.W}) : comm(Shape{world, B, T, g.W});
    Tensor block = new_workspace(Shape{B, C, 3 * m_inner});
    Tensor block_out = new_workspace(Shape{B, C, m_inner}), block_lse = new_workspace(Shape{B, g.H, C});
    Tensor out = new_workspace(Shape{2, B, C, m_inner}), lse = new_workspace(Shape{2, B, g.H, C});
    dispatch_float(compact.dtype(), [&]<class F>() {
        F* full = m_qkv_out.data<F>();
        kc::qkv_expand_rope_at<F>(B, T, g.H, g.KV, Dh, m_rope, m_rope_theta, m_positions.data(), compact.data<F>(),
                                  full);
        g.keys_values(full, kv.data<F>());
        std::fill_n(lse.data<F>(), lse.numel(), -std::numeric_limits<F>::infinity());
        // Attention of this device's queries against device `source`'s keys and values.
        const auto against = [&](const F* keys, int source) {
            for_each_pair(rank, source, world, m_causal, [&](int qi, int kj, bool diagonal) {
                g.pack(full, keys, qi, kj, block.data<F>());
                kc::attention_fused_forward<F>(B, C, g.H, Dh, diagonal, block.data<F>(), block_out.data<F>(),
                                               block_lse.data<F>());
                kc::attention_merge<F>(B, C, g.H, Dh, block_out.data<F>(), block_lse.data<F>(),
                                       out.data<F>() + qi * B * C * m_inner, lse.data<F>() + qi * B * g.H * C);
                ++(diagonal ? m_work.diagonal : m_work.full);
            });
        };
        if (ring) {
            // Step r holds device rank − r's keys and values: passes them on, computes against
            // them, and takes the next block (sent before the previous device computed).
            Tensor held = kv, next = arriving;
            for (int r = 0; r < world; ++r) {
                const bool more = r + 1 < world;
                if (more) m_cp.send(held);
                against(held.data<F>(), (rank - r + world) % world);
                if (more) m_cp.recv(next);
                std::swap(held, next);
            }
        } else {
            const int64_t n = kv.numel();
            std::copy_n(kv.data<F>(), n, arriving.data<F>() + rank * n);
            m_cp.all_gather(arriving);
            for (int s = 0; s < world; ++s) against(arriving.data<F>() + s * n, s);
        }
        for (int qi = 0; qi < 2; ++qi) {
            Geometry::rows<F>(B, C, m_inner, out.data<F>() + qi * B * C * m_inner, C, 0, heads.data<F>(), T, qi * C);
            Geometry::rows<F>(B * g.H, C, 1, lse.data<F>() + qi * B * g.H * C, C, 0, m_lse.data<F>(), T, qi * C);
        }
    });
    return heads;
}

Tensor Attention::context_backward(const Tensor& dheads) {
    const int64_t B = dheads.dim(0), T = m_T, C = T / 2, Dh = m_D / m_heads;
    const Geometry g{B, T, C, m_H, m_KV, Dh, m_inner, 2 * m_KV * Dh};
    const int world = m_cp.world, rank = m_cp.rank;
    const auto comm = [&](const Shape& shape) {
        return Tensor::empty(shape, dtype(), device(), MemCategory::communication);
    };
    const bool ring = m_cp.comm == ContextShard::Comm::ring;
    Tensor dfull = new_activation(Shape{B, T, 3 * m_inner});
    Tensor dcompact = new_activation(Shape{B, T, (g.H + 2 * g.KV) * Dh});
    Tensor kv = comm(Shape{B, T, g.W}), dkv = comm(Shape{B, T, g.W});
    Tensor arriving = ring ? comm(Shape{B, T, g.W}) : comm(Shape{world, B, T, g.W});
    Tensor darriving = ring ? comm(Shape{B, T, g.W}) : comm(Shape{world, B, T, g.W});
    Tensor block = new_workspace(Shape{B, C, 3 * m_inner}), dblock = new_workspace(Shape{B, C, 3 * m_inner});
    // The merged outputs, their gradients and log-sum-exps of each local query chunk.
    Tensor out = new_workspace(Shape{2, B, C, m_inner}), dout = new_workspace(Shape{2, B, C, m_inner});
    Tensor lse = new_workspace(Shape{2, B, g.H, C});
    dispatch_float(dheads.dtype(), [&]<class F>() {
        const F* full = m_qkv_out.data<F>();
        for (int qi = 0; qi < 2; ++qi) {
            Geometry::rows<F>(B, C, m_inner, m_out.data<F>(), T, qi * C, out.data<F>() + qi * B * C * m_inner, C, 0);
            Geometry::rows<F>(B, C, m_inner, dheads.data<F>(), T, qi * C, dout.data<F>() + qi * B * C * m_inner, C, 0);
            Geometry::rows<F>(B * g.H, C, 1, m_lse.data<F>(), T, qi * C, lse.data<F>() + qi * B * g.H * C, C, 0);
        }
        std::fill_n(dfull.data<F>(), dfull.numel(), F(0));
        g.keys_values(full, kv.data<F>());
        // The gradients of this device's queries and of device `source`'s keys and values (added
        // to dkeys) from this device's queries.
        const auto against = [&](const F* keys, F* dkeys, int source) {
            for_each_pair(rank, source, world, m_causal, [&](int qi, int kj, bool diagonal) {
                g.pack(full, keys, qi, kj, block.data<F>());
                kc::attention_fused_backward<F>(B, C, g.H, Dh, diagonal, block.data<F>(),
                                                out.data<F>() + qi * B * C * m_inner,
                                                dout.data<F>() + qi * B * C * m_inner,
                                                lse.data<F>() + qi * B * g.H * C, dblock.data<F>());
                g.unpack_add(dblock.data<F>(), qi, kj, dfull.data<F>(), dkeys);
            });
        };
        const F* own = nullptr;  // this device's keys' and values' gradient, summed over the devices
        if (ring) {
            // Step r holds device rank − r's keys and values with their gradient so far; after the
            // last step the gradients go once more round, to their owner.
            Tensor held = kv, next = arriving, dheld = dkv, dnext = darriving;
            std::fill_n(dheld.data<F>(), dheld.numel(), F(0));
            for (int r = 0; r < world; ++r) {
                const bool more = r + 1 < world;
                if (more) m_cp.send(held);
                against(held.data<F>(), dheld.data<F>(), (rank - r + world) % world);
                m_cp.send(dheld);
                if (more) m_cp.recv(next);
                m_cp.recv(dnext);
                std::swap(held, next);
                std::swap(dheld, dnext);
            }
            own = dheld.data<F>();
        } else {
            const int64_t n = kv.numel();
            std::copy_n(kv.data<F>(), n, arriving.data<F>() + rank * n);
            m_cp.all_gather(arriving);
            std::fill_n(darriving.data<F>(), darriving.numel(), F(0));
            for (int s = 0; s < world; ++s) against(arriving.data<F>() + s * n, darriving.data<F>() + s * n, s);
            m_cp.reduce_scatter(darriving);
            own = darriving.data<F>() + rank * n;
        }
        // The keys' and values' gradients into the first query head of their group (the
        // expansion's backward sums each group), then the expansion and rotation undone.
        const int64_t group = g.H / g.KV;
        for (int64_t r = 0; r < B * T; ++r)
            for (int64_t kvh = 0; kvh < g.KV; ++kvh) {
                F* dk = dfull.data<F>() + r * 3 * m_inner + m_inner + kvh * group * Dh;
                std::copy_n(own + r * g.W + kvh * Dh, Dh, dk);
                std::copy_n(own + r * g.W + (g.KV + kvh) * Dh, Dh, dk + m_inner);
            }
        kc::qkv_expand_rope_backward_at<F>(B, T, g.H, g.KV, Dh, m_rope, m_rope_theta, m_positions.data(),
                                           dfull.data<F>(), dcompact.data<F>());
    });
    return dcompact;
}

}  // namespace paralab::nn
