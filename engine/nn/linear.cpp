#include "engine/nn/linear.h"
#include "engine/nn/checked_count.h"

#include "engine/nn/ops.h"

#include <cmath>

namespace paralab::nn {

// ---- sequence parallelism's moves --------------------------------------------------------------

namespace {

// A tensor [B, T, ...] as B samples of T positions of `width` numbers each.
struct SequenceLayout {
    int64_t batch, positions, width;
};

SequenceLayout layout_of(const Tensor& t) {
    PARALAB_CHECK(t.rank() >= 3, "sequence parallelism: a tensor " + t.shape().to_string() +
                                     " has no sequence dimension after its batch");
    const int64_t b = t.dim(0), n = t.dim(1);
    return {b, n, b * n == 0 ? 0 : t.numel() / (b * n)};
}

Shape with_positions(const Shape& shape, int64_t positions) {
    Shape out = shape;
    out[1] = positions;
    return out;
}

// Chunk c of N ([B, T/N, width] in a buffer of N such chunks) <-> positions [c T/N, (c+1) T/N)
// of every sample of a [B, T, width] tensor.
template <class F>
void chunk_to_positions(const Ops& ops, const SequenceLayout& whole, int64_t per, int64_t c,
                        const F* chunk, F* to) {
    ops.strided_rows_copy<F>(whole.batch, per * whole.width, chunk, per * whole.width,
                             to + c * per * whole.width, whole.positions * whole.width);
}
template <class F>
void positions_to_chunk(const Ops& ops, const SequenceLayout& whole, int64_t per, int64_t c,
                        const F* from, F* chunk) {
    ops.strided_rows_copy<F>(whole.batch, per * whole.width, from + c * per * whole.width,
                             whole.positions * whole.width, chunk, per * whole.width);
}

}  // namespace

Tensor sequence_slice(const Tensor& whole, int rank, int world) {
    const SequenceLayout w = layout_of(whole);
    PARALAB_CHECK(world >= 1 && w.positions % world == 0,
                  "sequence_slice: " + std::to_string(w.positions) + " positions over " +
                      std::to_string(world) + " devices");
    const int64_t per = w.positions / world;
    Tensor out = Tensor::empty(with_positions(whole.shape(), per), whole.dtype(), whole.device(),
                               MemCategory::activations);
    const Ops ops = ops_for(whole);
    dispatch_float(whole.dtype(), [&]<class F>() {
        positions_to_chunk<F>(ops, w, per, rank, whole.data<F>(), out.data<F>());
    });
    return out;
}

Tensor sequence_gather(const Tensor& local, const SequenceSplit& s) {
    PARALAB_CHECK(s.on(), "sequence_gather: sequence parallelism is off");
    const SequenceLayout l = layout_of(local);
    const int64_t chunk = local.numel();
    Tensor buffer = Tensor::empty(Shape{s.world * chunk}, local.dtype(), local.device(),
                                  MemCategory::workspace);
    Tensor out = Tensor::empty(with_positions(local.shape(), l.positions * s.world),
                               local.dtype(), local.device(), MemCategory::activations);
    const SequenceLayout w{l.batch, l.positions * s.world, l.width};
    const Ops ops = ops_for(local);
    dispatch_float(local.dtype(), [&]<class F>() {
        ops.strided_rows_copy<F>(1, chunk, local.data<F>(), chunk, buffer.data<F>() + s.rank * chunk, chunk);
    });
    s.all_gather(buffer);
    dispatch_float(local.dtype(), [&]<class F>() {
        for (int64_t c = 0; c < s.world; ++c)
            chunk_to_positions<F>(ops, w, l.positions, c, buffer.data<F>() + c * chunk, out.data<F>());
    });
    return out;
}

Tensor sequence_reduce_scatter(const Tensor& whole, const SequenceSplit& s) {
    PARALAB_CHECK(s.on(), "sequence_reduce_scatter: sequence parallelism is off");
    const SequenceLayout w = layout_of(whole);
    PARALAB_CHECK(w.positions % s.world == 0,
                  "sequence_reduce_scatter: " + std::to_string(w.positions) + " positions over " +
                      std::to_string(s.world) + " devices");
    const int64_t per = w.positions / s.world, chunk = whole.numel() / s.world;
    Tensor buffer = Tensor::empty(Shape{whole.numel()}, whole.dtype(), whole.device(), MemCategory::workspace);
    Tensor out = Tensor::empty(with_positions(whole.shape(), per), whole.dtype(), whole.device(),
                               MemCategory::activations);
    const Ops ops = ops_for(whole);
    dispatch_float(whole.dtype(), [&]<class F>() {
        for (int64_t c = 0; c < s.world; ++c)
            positions_to_chunk<F>(ops, w, per, c, whole.data<F>(), buffer.data<F>() + c * chunk);
    });
    s.reduce_scatter(buffer);
    dispatch_float(whole.dtype(), [&]<class F>() {
        ops.strided_rows_copy<F>(1, chunk, buffer.data<F>() + s.rank * chunk, chunk, out.data<F>(), chunk);
    });
    return out;
}

// ---- Linear ------------------------------------------------------------------------------------


Linear::Linear(int64_t out, bool bias) : Layer("linear"), m_out(out), m_has_bias(bias) {
    if (out < 1)
        throw ConfigError("linear: out must be a positive integer, got " + std::to_string(out));
}

void Linear::set_out(int64_t out) {
    PARALAB_CHECK(!built() && out >= 1, label() + ": set_out after build or with a width below 1");
    m_out = out;
}

void Linear::set_shard(LinearShard shard) {
    PARALAB_CHECK(!built() && shard.all_reduce && !shard.parts.empty(),
                  label() + ": set_shard after build or without an all-reduce");
    for (const int64_t p : shard.parts) PARALAB_CHECK(p >= 1, label() + ": set_shard with an empty part");
    m_shard = std::move(shard);
}

void Linear::tie_to(Layer& embedding) {
    PARALAB_CHECK(!built() && embedding.type() == "embedding", label() + ": tie_to after build or not to an embedding");
    m_tied_to = &embedding;
}

const SequenceSplit* Linear::sequence() const {
    return m_shard && m_shard->sequence.on() ? &m_shard->sequence : nullptr;
}

int64_t Linear::gemm_rows_per_sample() const {
    const int64_t rows = input_shape().numel() / m_in;
    const SequenceSplit* seq = sequence();
    return seq && m_shard->split == LinearShard::Split::column ? rows * seq->world : rows;
}

// input: [..., in] -> [..., out]
Shape Linear::build_impl(const Shape& input) {
    if (input.rank() == 0 || input.back() < 1)
        shape_error("an input [..., features] with at least one feature", input);
    m_in = input.back();
    if (m_tied_to) {
        PARALAB_CHECK(m_tied_to->built() && !m_shard, label() + ": tied to an embedding not built before it");
        Param* table = m_tied_to->parameters().front();
        const Shape& vocab_by_dim = table->value.shape();
        if (vocab_by_dim[0] != m_out)
            throw ConfigError(path().empty() ? "out" : path() + ".out",
                              "expected the vocabulary of the embedding it shares its table with (" +
                                  std::to_string(vocab_by_dim[0]) + "; tie_embeddings), got " + std::to_string(m_out));
        if (vocab_by_dim[1] != m_in)
            shape_error("an input [..., " + std::to_string(vocab_by_dim[1]) +
                            "] as wide as the embedding it shares its table with (tie_embeddings)",
                        input);
        m_weight = table;
    } else {
        m_weight = &add_param("weight", Shape{m_out, m_in});
    }
    m_bias = m_has_bias ? &add_param("bias", Shape{m_out}) : nullptr;
    Shape output = input;
    output[output.rank() - 1] = m_out;
    if (const SequenceSplit* seq = sequence()) {  // the sequence: [T/N, in] <-> [T, out]
        if (input.rank() < 2)
            shape_error("a sequence [T, features] (sequence parallelism splits its positions)", input);
        if (m_shard->split == LinearShard::Split::column) {
            output[0] = input[0] * seq->world;
        } else {
            if (input[0] % seq->world != 0)
                throw ConfigError(path(), label() + ": " + std::to_string(input[0]) +
                                              " positions do not divide over " +
                                              std::to_string(seq->world) + " devices");
            output[0] = input[0] / seq->world;
        }
    }
    return output;
}

void Linear::reset_parameters_impl(Rng& rng) {
    // kaiming_uniform(a = sqrt 5) on the weight reduces to this bound, the bias uses it too.
    const double bound = 1.0 / std::sqrt(static_cast<double>(m_in));
    for (Param* p : {m_tied_to ? nullptr : m_weight, m_bias}) {  // a shared table is its embedding's
        if (!p) continue;
        dispatch_float(p->value.dtype(), [&]<class T>() {
            for (T& v : p->value.span<T>()) v = static_cast<T>(rng.uniform(-bound, bound));
        });
    }
}

// x: [B, ..., in] -> y: [B, ..., out]; the leading dims fold into the GEMM's rows.
Tensor Linear::forward_impl(const Tensor& x, Mode mode) {
    (void)mode;
    if (m_tied_to && !m_weight->value.defined())
        throw ConfigError(path().empty() ? "tie_embeddings" : path() + ".tie_embeddings",
                          "the output layer reads the embedding's table, which this strategy does not keep "
                          "whole on its device between the embedding's uses (it shards or frees it)");
    const SequenceSplit* seq = sequence();
    const bool column = m_shard && m_shard->split == LinearShard::Split::column;
    // A sequence-parallel column shard multiplies the whole sequence: gathered first.
    const Tensor in = seq && column ? sequence_gather(x, *seq) : x;
    const int64_t rows = in.numel() / m_in;
    // A row-parallel shard's output is a partial sum: the bias goes on after the all-reduce
    // (or the reduce-scatter, onto this device's positions).
    const bool partial = m_shard && m_shard->split == LinearShard::Split::row;
    Shape gemm_shape = in.shape();
    gemm_shape[gemm_shape.rank() - 1] = m_out;
    Tensor y = new_activation(gemm_shape);
    const Ops ops = ops_for(y);
    dispatch_float(x.dtype(), [&]<class T>() {
        T beta = T(0);
        if (m_bias && !partial) {
            // y starts as the bias rows and the GEMM adds x W^T to them: one pass over y.
            ops.bias_broadcast_rows<T>(rows, m_out, m_bias->value.data<T>(), y.data<T>());
            beta = T(1);
        }
        ops.gemm<T>(false, true, rows, m_out, m_in, T(1), in.data<T>(), m_weight->value.data<T>(),
                    beta, y.data<T>());
    });
    if (partial) {
        if (seq) y = sequence_reduce_scatter(y, *seq);
        else m_shard->all_reduce(y);
        if (m_bias)
            dispatch_float(y.dtype(), [&]<class T>() {
                ops.bias_add_rows<T>(y.numel() / m_out, m_out, m_bias->value.data<T>(), y.data<T>());
            });
    }
    m_x = in;
    return y;
}

// dy: [B, ..., out] -> dx: [B, ..., in]; dW += dy^T x, db += column sums of dy. The input
// gradient dx = dy W is B; the weight and bias gradients are W (weight_grads: now, or queued with
// x and dy when deferred).
Tensor Linear::backward_impl(const Tensor& dy) {
    PARALAB_CHECK(m_x.defined(), label() + ": a second backward after one forward");
    PARALAB_CHECK(m_weight->grad.defined(), label() + ": the embedding table it shares has no gradient here");
    const SequenceSplit* seq = sequence();
    const bool column = m_shard && m_shard->split == LinearShard::Split::column;
    const Ops ops = ops_for(dy);
    // A sequence-parallel row shard's bias saw this device's positions; its weight needs the
    // gradient of the whole sequence: gathered.
    const Tensor g_all = seq && !column ? sequence_gather(dy, *seq) : dy;
    const int64_t rows = g_all.numel() / m_out;
    Tensor dx;
    if (needs_input_grad()) {
        dx = new_activation(m_x.shape());
        dispatch_float(dy.dtype(), [&]<class T>() {
            ops.gemm<T>(false, false, rows, m_in, m_out, T(1), g_all.data<T>(), m_weight->value.data<T>(), T(0),
                        dx.data<T>());
        });
    }
    // The saved input goes to the weight gradient's work: the layer's own is dead once its
    // gradients are out (or queued).
    weight_grads([this, ops, dy, g_all, x = std::move(m_x), rows] {
        PARALAB_CHECK(m_weight->grad.defined(), label() + ": its weight gradient is gone before its W ran");
        dispatch_float(dy.dtype(), [&]<class T>() {
            if (m_bias) ops.column_sums_accumulate<T>(dy.numel() / m_out, m_out, dy.data<T>(), m_bias->grad.data<T>());
            ops.gemm<T>(true, false, m_out, m_in, rows, T(1), g_all.data<T>(), x.data<T>(), T(1),
                        m_weight->grad.data<T>());
        });
    });
    m_x = Tensor();
    // A column-parallel shard's input gradient is this shard's part of the sum: all-reduced, or
    // reduce-scattered to this device's positions.
    if (dx.defined() && column) {
        if (seq) dx = sequence_reduce_scatter(dx, *seq);
        else m_shard->all_reduce(dx);
    }
    return dx;
}

// 2 per multiply-add of x W^T, 1 per bias add; per output row, times the rows of a sample.
int64_t Linear::flops_impl() const {
    if (!built()) return 0;
    return checked_product({gemm_rows_per_sample(), m_out, 2 * m_in + (m_has_bias ? 1 : 0)}, "FLOPs");
}

// The input it keeps: a sequence-parallel column shard keeps the gathered, whole sequence.
int64_t Linear::activations_impl() {
    return checked_product({gemm_rows_per_sample(), m_in}, "activations");
}

}  // namespace paralab::nn
