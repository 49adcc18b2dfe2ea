#include "engine/nn/dropout.h"

#include <kernels/cpu/elementwise.h>
#include <kernels/gpu/dropout.h>

#include <sstream>

namespace paralab::nn {

namespace kc = kernels::cpu;
namespace kg = kernels::gpu;

namespace {
// FNV-1a: a hash of the label that is the same in every process and build (std::hash is not).
uint64_t stable_hash(const std::string& text) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ull;
    return h;
}
}  // namespace

Dropout::Dropout(double p) : Layer("dropout"), m_p(p) {
    if (!(p >= 0.0 && p < 1.0)) {  // also refuses NaN
        std::ostringstream msg;
        msg << "dropout: p must be in [0, 1), got " << p;
        throw ConfigError(msg.str());
    }
}

// input: any shape -> the same shape
Shape Dropout::build_impl(const Shape& input) {
    return input;
}

void Dropout::set_sequence_slice(int rank, int world) {
    PARALAB_CHECK(world >= 1 && rank >= 0 && rank < world, label() + ": a sequence slice " + std::to_string(rank) +
                                                                " of " + std::to_string(world));
    m_slice_rank = rank;
    m_slice_world = world;
}

void Dropout::set_random_state_impl(uint64_t seed, uint64_t step, int64_t sample_offset) {
    PARALAB_CHECK(sample_offset >= 0, label() + ": negative sample offset");
    m_seed = seed;
    m_step = step;
    m_sample_offset = sample_offset;
}

// x: [B, ...] -> y: [B, ...]
Tensor Dropout::forward_impl(const Tensor& x, Mode mode) {
    m_identity = mode == Mode::eval || m_p == 0.0;
    if (m_identity) {
        m_mask = Tensor();
        return x;  // as PyTorch: no copy when nothing is dropped
    }
    // Every layer of a model gets the same (seed, step); the label (the layer's place in the
    // model, identical in every replica) keeps two dropouts of equal width from sharing masks.
    const uint64_t key = splitmix64(splitmix64(m_seed ^ stable_hash(label())) ^ m_step);
    const int64_t batch = x.dim(0);
    const int64_t per_sample = input_shape().numel();
    // Element i of this batch is global element first + i; of a sequence slice, element k of
    // sample b is element rank P + k of the whole sample, world P wide.
    const bool sliced = m_slice_world > 1;
    const int64_t runs = sliced ? batch : 1, run = sliced ? per_sample : batch * per_sample;
    const auto first_of = [&](int64_t r) {
        return sliced ? static_cast<uint64_t>((m_sample_offset + r) * per_sample * m_slice_world +
                                              m_slice_rank * per_sample)
                      : static_cast<uint64_t>(m_sample_offset * per_sample);
    };
    m_mask = new_activation(x.shape());
    Tensor y = new_activation(x.shape());
    if (void* q = y.queue()) {
        // The GPU kernel draws hash_uniform(key, first + i) >= p itself: the CPU's mask bits.
        dispatch_float(x.dtype(), [&]<class T>() {
            for (int64_t r = 0; r < runs; ++r)
                kg::dropout_forward<T>(run, key, first_of(r), m_p, x.data<T>() + r * run,
                                       m_mask.data<T>() + r * run, y.data<T>() + r * run, q);
        });
        return y;
    }
    dispatch_float(x.dtype(), [&]<class T>() {
        const T scale = static_cast<T>(1.0 / (1.0 - m_p));
        T* mask = m_mask.data<T>();
        const int64_t n = batch * per_sample;
        // The hash lives in the engine (kernels do not see rng.h), so the mask is drawn here
        // and applied by a kernel.
        for (int64_t r = 0; r < runs; ++r) {
            const uint64_t first = first_of(r);
            T* m = mask + r * run;
#pragma omp parallel for if (run >= (int64_t{1} << 16))
            for (int64_t i = 0; i < run; ++i)
                m[i] = hash_uniform(key, first + static_cast<uint64_t>(i)) >= m_p ? scale : T(0);
        }
        kc::multiply_elementwise<T>(n, x.data<T>(), mask, y.data<T>());
    });
    return y;
}

// dy: [B, ...] -> dx: [B, ...] = dy * mask
Tensor Dropout::backward_impl(const Tensor& dy) {
    if (m_identity) return needs_input_grad() ? dy : Tensor();
    PARALAB_CHECK(m_mask.defined(), label() + ": a second backward after one forward");
    Tensor dx;
    if (needs_input_grad()) {
        dx = new_activation(dy.shape());
        dispatch_float(dy.dtype(), [&]<class T>() {
            if (void* q = dx.queue()) {
                kg::dropout_backward<T>(dy.numel(), dy.data<T>(), m_mask.data<T>(), dx.data<T>(), q);
                return;
            }
            kc::multiply_elementwise<T>(dy.numel(), dy.data<T>(), m_mask.data<T>(), dx.data<T>());
        });
    }
    m_mask = Tensor();
    return dx;
}

// One multiply per element (the mask draw is not counted).
int64_t Dropout::flops_impl() const {
    return built() ? input_shape().numel() : 0;
}

}  // namespace paralab::nn
