#include "engine/nn/embedding.h"

#include <kernels/cpu/elementwise.h>

#include <cmath>
#include <sstream>

namespace paralab::nn {

namespace kc = kernels::cpu;

Embedding::Embedding(int64_t vocab, int64_t dim) : Layer("embedding"), m_vocab(vocab), m_dim(dim) {
    if (vocab < 1 || dim < 1)
        throw ConfigError("embedding: vocab and dim must be positive integers, got vocab " +
                          std::to_string(vocab) + " and dim " + std::to_string(dim));
}

// input: [T] -> [T, dim]
Shape Embedding::build_impl(const Shape& input) {
    if (input.rank() != 1) shape_error("token ids [T]", input);
    m_weight = &add_param("weight", Shape{m_vocab, m_dim});
    return Shape{input[0], m_dim};
}

void Embedding::reset_parameters_impl(Rng& rng) {
    dispatch_float(m_weight->value.dtype(), [&]<class T>() {
        for (T& v : m_weight->value.span<T>()) v = static_cast<T>(rng.normal());
    });
}

// x: [B, T] token ids -> y: [B, T, dim]
Tensor Embedding::forward_impl(const Tensor& x, Mode mode) {
    (void)mode;
    const int64_t n = x.numel();
    m_ids.resize(static_cast<size_t>(n));
    dispatch_float(x.dtype(), [&]<class T>() {
        const T* ids = x.data<T>();
        for (int64_t i = 0; i < n; ++i) {
            const T v = ids[i];
            // Written so that NaN fails too.
            if (!(v >= T(0) && v < static_cast<T>(m_vocab) && std::floor(v) == v)) {
                std::ostringstream msg;
                msg << label() << ": token id " << v << " (sample " << i / x.dim(1) << ", position "
                    << i % x.dim(1) << ") is not an integer in [0, " << m_vocab
                    << "): the vocabulary size is " << m_vocab;
                throw Error(msg.str());
            }
            m_ids[static_cast<size_t>(i)] = static_cast<int64_t>(v);
        }
    });
    Tensor y = new_activation(output_shape().with_batch(x.dim(0)));
    dispatch_float(x.dtype(), [&]<class T>() {
        kc::gather_rows<T>(n, m_dim, m_weight->value.data<T>(), m_ids.data(), y.data<T>());
    });
    return y;
}

// dy: [B, T, dim] -> no input gradient; dW[id] += dy at each position holding id
Tensor Embedding::backward_impl(const Tensor& dy) {
    dispatch_float(dy.dtype(), [&]<class T>() {
        kc::scatter_add_rows<T>(static_cast<int64_t>(m_ids.size()), m_dim, dy.data<T>(),
                                m_ids.data(), m_weight->grad.data<T>());
    });
    return Tensor();
}

}  // namespace paralab::nn
