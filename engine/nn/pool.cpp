#include "engine/nn/pool.h"
#include "engine/nn/checked_count.h"

#include <cstdint>

#include <kernels/gpu/pool.h>

#include "engine/device/device.h"

namespace paralab::nn {

namespace kc = kernels::cpu;
namespace kg = kernels::gpu;

// The layer's GPU queue (nullptr on a CPU device).
static void* queue_of(const Layer& l) { return l.device().queue(); }

Pool2dBase::Pool2dBase(std::string type, int64_t kernel, int64_t stride)
    : Layer(std::move(type)), m_kernel(kernel), m_stride(stride == 0 ? kernel : stride) {
    if (kernel < 1)
        throw ConfigError(this->type() + ": kernel must be a positive integer, got " +
                          std::to_string(kernel));
    if (stride < 0)
        throw ConfigError(this->type() + ": stride must be a positive integer (0 = kernel), got " +
                          std::to_string(stride));
}

// input: [C, H, W] -> [C, OH, OW]
Shape Pool2dBase::build_impl(const Shape& input) {
    const std::string k = std::to_string(m_kernel);
    if (input.rank() != 3 || input[0] < 1 || input[1] < m_kernel || input[2] < m_kernel)
        shape_error("an input [C, H, W] with H, W >= " + k + " (kernel " + k + ")", input);
    const kc::Pool2dGeometry g = geometry(1);
    return Shape{input[0], g.out_height(), g.out_width()};
}

kc::Pool2dGeometry Pool2dBase::geometry(int64_t batch) const {
    const Shape& in = input_shape();
    return kc::Pool2dGeometry{batch * in[0], in[1], in[2], m_kernel, m_stride};
}

// One comparison or add per window element.
int64_t Pool2dBase::flops_impl() const {
    return checked_product({output_shape().numel(), m_kernel, m_kernel}, "FLOPs");
}

// ---- MaxPool2d ---------------------------------------------------------------------------

MaxPool2d::MaxPool2d(int64_t kernel, int64_t stride) : Pool2dBase("maxpool2d", kernel, stride) {}

// x: [B, C, H, W] -> y: [B, C, OH, OW]; the argmax of each window is kept for backward.
Tensor MaxPool2d::forward_impl(const Tensor& x, Mode mode) {
    (void)mode;
    const kc::Pool2dGeometry g = geometry(x.dim(0));
    Tensor y = new_activation(output_shape().with_batch(x.dim(0)));
    // int32 positions in f32-sized slots: tensors have no integer dtype, and the positions
    // should count as activations in the memory accounting like the rest of the layer's state.
    static_assert(sizeof(int32_t) == sizeof(float));
    PARALAB_CHECK(g.height * g.width <= INT32_MAX, label() + ": input plane too large for int32");
    m_argmax = Tensor::empty(y.shape(), DType::f32, device(), MemCategory::activations);
    int32_t* argmax = static_cast<int32_t*>(m_argmax.raw());
    dispatch_float(x.dtype(), [&]<class T>() {
        if (void* q = queue_of(*this)) kg::maxpool2d_forward<T>(g, x.data<T>(), y.data<T>(), argmax, q);
        else kc::maxpool2d_forward<T>(g, x.data<T>(), y.data<T>(), argmax);
    });
    return y;
}

// dy: [B, C, OH, OW] -> dx: [B, C, H, W]
Tensor MaxPool2d::backward_impl(const Tensor& dy) {
    PARALAB_CHECK(m_argmax.defined(), label() + ": a second backward after one forward");
    Tensor dx;
    if (needs_input_grad()) {
        dx = new_activation(input_shape().with_batch(dy.dim(0)));
        const int32_t* argmax = static_cast<const int32_t*>(m_argmax.raw());
        dispatch_float(dy.dtype(), [&]<class T>() {
            if (void* q = queue_of(*this)) kg::maxpool2d_backward<T>(geometry(dy.dim(0)), argmax, dy.data<T>(), dx.data<T>(), q);
            else kc::maxpool2d_backward<T>(geometry(dy.dim(0)), argmax, dy.data<T>(), dx.data<T>());
        });
    }
    m_argmax = Tensor();
    return dx;
}

// ---- AvgPool2d ---------------------------------------------------------------------------

AvgPool2d::AvgPool2d(int64_t kernel, int64_t stride) : Pool2dBase("avgpool2d", kernel, stride) {}

// x: [B, C, H, W] -> y: [B, C, OH, OW]
Tensor AvgPool2d::forward_impl(const Tensor& x, Mode mode) {
    (void)mode;
    Tensor y = new_activation(output_shape().with_batch(x.dim(0)));
    dispatch_float(x.dtype(), [&]<class T>() {
        if (void* q = queue_of(*this)) kg::avgpool2d_forward<T>(geometry(x.dim(0)), x.data<T>(), y.data<T>(), q);
        else kc::avgpool2d_forward<T>(geometry(x.dim(0)), x.data<T>(), y.data<T>());
    });
    return y;
}

// dy: [B, C, OH, OW] -> dx: [B, C, H, W]; needs nothing from the forward.
Tensor AvgPool2d::backward_impl(const Tensor& dy) {
    if (!needs_input_grad()) return Tensor();
    Tensor dx = new_activation(input_shape().with_batch(dy.dim(0)));
    dispatch_float(dy.dtype(), [&]<class T>() {
        if (void* q = queue_of(*this)) kg::avgpool2d_backward<T>(geometry(dy.dim(0)), dy.data<T>(), dx.data<T>(), q);
        else kc::avgpool2d_backward<T>(geometry(dy.dim(0)), dy.data<T>(), dx.data<T>());
    });
    return dx;
}

// ---- GlobalAvgPool -----------------------------------------------------------------------

GlobalAvgPool::GlobalAvgPool() : Layer("global_avgpool") {}

// input: [C, H, W] -> [C]
Shape GlobalAvgPool::build_impl(const Shape& input) {
    if (input.rank() != 3 || input.numel() == 0) shape_error("an input [C, H, W]", input);
    return Shape{input[0]};
}

// x: [B, C, H, W] -> y: [B, C]
Tensor GlobalAvgPool::forward_impl(const Tensor& x, Mode mode) {
    (void)mode;
    const Shape& in = input_shape();
    Tensor y = new_activation(output_shape().with_batch(x.dim(0)));
    dispatch_float(x.dtype(), [&]<class T>() {
        if (void* q = queue_of(*this)) kg::global_avgpool_forward<T>(x.dim(0) * in[0], in[1] * in[2], x.data<T>(), y.data<T>(), q);
        else kc::global_avgpool_forward<T>(x.dim(0) * in[0], in[1] * in[2], x.data<T>(), y.data<T>());
    });
    return y;
}

// dy: [B, C] -> dx: [B, C, H, W]
Tensor GlobalAvgPool::backward_impl(const Tensor& dy) {
    if (!needs_input_grad()) return Tensor();
    const Shape& in = input_shape();
    Tensor dx = new_activation(in.with_batch(dy.dim(0)));
    dispatch_float(dy.dtype(), [&]<class T>() {
        if (void* q = queue_of(*this)) kg::global_avgpool_backward<T>(dy.dim(0) * in[0], in[1] * in[2], dy.data<T>(),
                                       dx.data<T>(), q);
        else kc::global_avgpool_backward<T>(dy.dim(0) * in[0], in[1] * in[2], dy.data<T>(),
                                       dx.data<T>());
    });
    return dx;
}

// One add per input element.
int64_t GlobalAvgPool::flops_impl() const {
    return input_shape().numel();
}

}  // namespace paralab::nn
