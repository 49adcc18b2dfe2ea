#include "engine/nn/activation.h"

#include <kernels/cpu/elementwise.h>
#include <kernels/gpu/elementwise.h>

namespace paralab::nn {

namespace kc = kernels::cpu;
namespace kg = kernels::gpu;

std::string activation_name(ActivationKind kind) {
    switch (kind) {
        case ActivationKind::relu:
            return "relu";
        case ActivationKind::gelu:
            return "gelu";
        case ActivationKind::tanh:
            return "tanh";
        case ActivationKind::sigmoid:
            return "sigmoid";
    }
    throw Error("unknown activation kind " + std::to_string(static_cast<int>(kind)));
}

Activation::Activation(ActivationKind kind) : Layer(activation_name(kind)), m_kind(kind) {}

bool Activation::saves_output() const {
    return m_kind == ActivationKind::tanh || m_kind == ActivationKind::sigmoid;
}

// input: any shape -> the same shape
Shape Activation::build_impl(const Shape& input) {
    return input;
}

// x: [B, ...] -> y: [B, ...]
Tensor Activation::forward_impl(const Tensor& x, Mode mode) {
    (void)mode;
    Tensor y = new_activation(x.shape());
    const int64_t n = x.numel();
    dispatch_float(x.dtype(), [&]<class T>() {
        const T* in = x.data<T>();
        T* out = y.data<T>();
        if (void* q = y.queue()) {
            switch (m_kind) {
                case ActivationKind::relu: kg::relu_forward<T>(n, in, out, q); break;
                case ActivationKind::gelu: kg::gelu_forward<T>(n, in, out, q); break;
                case ActivationKind::tanh: kg::tanh_forward<T>(n, in, out, q); break;
                case ActivationKind::sigmoid: kg::sigmoid_forward<T>(n, in, out, q); break;
            }
            return;
        }
        switch (m_kind) {
            case ActivationKind::relu:
                kc::relu_forward<T>(n, in, out);
                break;
            case ActivationKind::gelu:
                kc::gelu_forward<T>(n, in, out);
                break;
            case ActivationKind::tanh:
                kc::tanh_forward<T>(n, in, out);
                break;
            case ActivationKind::sigmoid:
                kc::sigmoid_forward<T>(n, in, out);
                break;
        }
    });
    m_saved = saves_output() ? y : x;
    return y;
}

// dy: [B, ...] -> dx: [B, ...]
Tensor Activation::backward_impl(const Tensor& dy) {
    PARALAB_CHECK(m_saved.defined(), label() + ": a second backward after one forward");
    if (!needs_input_grad()) {
        m_saved = Tensor();
        return Tensor();
    }
    Tensor dx = new_activation(dy.shape());
    const int64_t n = dy.numel();
    dispatch_float(dy.dtype(), [&]<class T>() {
        const T* s = m_saved.data<T>();
        const T* g = dy.data<T>();
        T* d = dx.data<T>();
        if (void* q = dx.queue()) {
            switch (m_kind) {
                case ActivationKind::relu: kg::relu_backward<T>(n, s, g, d, q); break;
                case ActivationKind::gelu: kg::gelu_backward<T>(n, s, g, d, q); break;
                case ActivationKind::tanh: kg::tanh_backward<T>(n, s, g, d, q); break;
                case ActivationKind::sigmoid: kg::sigmoid_backward<T>(n, s, g, d, q); break;
            }
            return;
        }
        switch (m_kind) {
            case ActivationKind::relu:
                kc::relu_backward<T>(n, s, g, d);
                break;
            case ActivationKind::gelu:
                kc::gelu_backward<T>(n, s, g, d);
                break;
            case ActivationKind::tanh:
                kc::tanh_backward<T>(n, s, g, d);
                break;
            case ActivationKind::sigmoid:
                kc::sigmoid_backward<T>(n, s, g, d);
                break;
        }
    });
    m_saved = Tensor();
    return dx;
}

// One per element: the transcendental functions are not weighted by their cost.
int64_t Activation::flops_impl() const {
    return built() ? input_shape().numel() : 0;
}

}  // namespace paralab::nn
