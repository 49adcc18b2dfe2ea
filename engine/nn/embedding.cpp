#include "engine/nn/embedding.h"

#include <kernels/cpu/elementwise.h>
#include <kernels/gpu/embedding.h>

#include <cmath>
#include <sstream>

#include "engine/device/device.h"
#include "engine/device/gpu_values.h"

namespace paralab::nn {

namespace kc = kernels::cpu;
namespace kg = kernels::gpu;

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
    fill_standard_normal(m_weight->value, rng);
}

// x: [B, T] token ids -> y: [B, T, dim]. On a GPU the ids are read back and checked on the
// host, then uploaded as int64 for the gather (and kept there for backward's scatter).
void Embedding::check_ids(const Tensor& x) {
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
}

void Embedding::stage_ids(const Tensor& host_x, const Tensor& input, Tensor& staged) {
    if (host_x.shape() != input.shape() || !input.queue())
        throw ShapeError(label() + ": staged ids " + host_x.shape().to_string() + " for an input " +
                         input.shape().to_string() + " on " + input.device().name());
    check_ids(host_x);
    gpu::upload_ids_into(m_ids, input.shape(), device(), staged, label());
    m_staged_input = input;
    m_staged_ids = staged;
}

Tensor Embedding::forward_impl(const Tensor& x_anywhere, Mode mode) {
    (void)mode;
    const bool staged = m_staged_input.defined() && x_anywhere.raw() == m_staged_input.raw() &&
                        x_anywhere.shape() == m_staged_input.shape();
    if (!staged) check_ids(gpu::on_host(x_anywhere));  // the staged batch's ids were checked by stage_ids
    const int64_t n = x_anywhere.numel();
    m_ids_on_gpu = Tensor();
    Tensor y = new_activation(output_shape().with_batch(x_anywhere.dim(0)));
    if (void* q = y.queue()) {
        m_ids_on_gpu = staged ? m_staged_ids : gpu::upload_ids(m_ids, device());
        dispatch_float(x_anywhere.dtype(), [&]<class T>() {
            kg::gather_rows<T>(n, m_dim, m_weight->value.data<T>(),
                               static_cast<const int64_t*>(m_ids_on_gpu.raw()), y.data<T>(), q);
        });
        return y;
    }
    dispatch_float(x_anywhere.dtype(), [&]<class T>() {
        kc::gather_rows<T>(n, m_dim, m_weight->value.data<T>(), m_ids.data(), y.data<T>());
    });
    return y;
}

// dy: [B, T, dim] -> no input gradient; dW[id] += dy at each position holding id, in order of
// position on the CPU and the GPU alike (the sums repeat from run to run)
Tensor Embedding::backward_impl(const Tensor& dy) {
    if (void* q = dy.queue()) {
        PARALAB_CHECK(m_ids_on_gpu.defined(), label() + ": backward without a forward on the GPU");
        dispatch_float(dy.dtype(), [&]<class T>() {
            kg::scatter_add_rows<T>(static_cast<int64_t>(m_ids.size()), m_vocab, m_dim, dy.data<T>(),
                                    static_cast<const int64_t*>(m_ids_on_gpu.raw()),
                                    m_weight->grad.data<T>(), q);
        });
        return Tensor();
    }
    dispatch_float(dy.dtype(), [&]<class T>() {
        kc::scatter_add_rows<T>(static_cast<int64_t>(m_ids.size()), m_dim, dy.data<T>(),
                                m_ids.data(), m_weight->grad.data<T>());
    });
    return Tensor();
}

}  // namespace paralab::nn
