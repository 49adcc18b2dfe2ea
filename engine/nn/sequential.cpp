#include "engine/nn/sequential.h"
#include "engine/nn/checked_count.h"

#include "engine/nn/conv2d.h"
#include "engine/nn/linear.h"
#include "engine/nn/ops.h"
#include "engine/nn/recompute.h"

namespace paralab::nn {

namespace {
// out = a + b elementwise, all three shaped alike on the layer's device.
void add_into(const Tensor& a, const Tensor& b, const Tensor& out) {
    dispatch_float(out.dtype(), [&]<class T>() {
        ops_for(out).add<T>(out.numel(), a.data<T>(), b.data<T>(), out.data<T>());
    });
}
}  // namespace

// ---- Sequential ------------------------------------------------------------------------------

Sequential::Sequential(std::vector<std::unique_ptr<Layer>> layers, std::string type)
    : Layer(std::move(type)), m_layers(std::move(layers)) {}

std::vector<Layer*> Sequential::children() {
    std::vector<Layer*> out;
    for (auto& l : m_layers) out.push_back(l.get());
    return out;
}

Shape Sequential::build_impl(const Shape& input) {
    Shape shape = input;
    for (auto& l : m_layers) shape = l->build(shape, dtype(), device());
    // The first layer's input gradient is needed only if ours is.
    if (!m_layers.empty()) m_layers.front()->set_needs_input_grad(needs_input_grad());
    return shape;
}

void Sequential::reset_parameters_impl(Rng& rng) {
    for (auto& l : m_layers) {
        Rng layer_rng = rng.split();
        l->reset_parameters(layer_rng);
    }
}

Tensor Sequential::forward_impl(const Tensor& x, Mode mode) {
    m_mode = mode;
    m_inputs.clear();
    const bool recompute = m_recompute && mode == Mode::train;
    Tensor h = x;
    for (size_t i = 0; i < m_layers.size(); ++i) {
        if (m_before_forward) m_before_forward(i);
        if (recompute && i + 1 < m_layers.size()) m_inputs.push_back(h);
        h = m_layers[i]->forward(h, mode);
        if (recompute && i + 1 < m_layers.size()) m_layers[i]->release_saved();
        if (m_after_forward) m_after_forward(i);
    }
    return h;
}

void Sequential::recompute_before_backward(size_t i) {
    if (i >= m_inputs.size() || !m_inputs[i].defined()) return;
    {
        RecomputeScope recompute;
        m_layers[i]->forward(m_inputs[i], m_mode);
    }
    m_inputs[i] = Tensor();
}

Tensor Sequential::backward_impl(const Tensor& dy) {
    Tensor g = dy;
    for (size_t i = m_layers.size(); i-- > 0;) {
        recompute_before_backward(i);
        g = m_layers[i]->backward(g);
        // Only the first layer may end the chain (no input gradient wanted, or token ids).
        if (!g.defined()) {
            if (i != 0) throw Error(m_layers[i]->label() + " gives no input gradient, so it "
                                    "must be the first layer");
            break;
        }
    }
    return needs_input_grad() ? g : Tensor();
}

int64_t Sequential::flops_impl() const {
    int64_t f = 0;
    for (auto& l : m_layers) f = checked_sum(f, l->flops_per_sample(), "FLOPs");
    return f;
}

int64_t Sequential::activations_impl() {
    int64_t n = 0;
    for (auto& l : m_layers) n += l->activations_per_sample();
    return n;
}

void Sequential::set_needs_input_grad_impl(bool needs) {
    if (!m_layers.empty()) m_layers.front()->set_needs_input_grad(needs);
}

// ---- Residual --------------------------------------------------------------------------------

Residual::Residual(std::vector<std::unique_ptr<Layer>> body)
    : Layer("residual"), m_body(std::make_unique<Sequential>(std::move(body))) {}

std::vector<Layer*> Residual::children() {
    std::vector<Layer*> out{m_body.get()};
    if (m_projection) out.push_back(m_projection.get());
    return out;
}

Shape Residual::build_impl(const Shape& input) {
    m_body->set_label(label(), path());
    auto body = m_body->children();
    for (size_t i = 0; i < body.size(); ++i)
        if (body[i]->label() == body[i]->type())  // not named by the model: name it here
            body[i]->set_label(label() + ".layers[" + std::to_string(i) + "] (" + body[i]->type() + ")",
                               path().empty() ? std::string() : path() + ".layers[" + std::to_string(i) + "]");
    const Shape out = m_body->build(input, dtype(), device());
    if (out == input) return out;

    if (input.rank() == 3 && out.rank() == 3 && input[1] % out[1] == 0 &&
        input[2] % out[2] == 0 && input[1] / out[1] == input[2] / out[2]) {
        m_projection = std::make_unique<Conv2d>(out[0], 1, input[1] / out[1], 0, false);
    } else if (input.rank() == out.rank() && input.rank() >= 1 &&
               std::equal(input.dims().begin(), input.dims().end() - 1, out.dims().begin())) {
        m_projection = std::make_unique<Linear>(out.back(), true);
    } else {
        throw ShapeError(path(), label() + ": the body maps " + input.to_string() + " to " +
                         out.to_string() + ", which no projection of the input can match "
                         "(a 1x1 strided convolution or a linear map of the last dimension)");
    }
    m_projection->set_label(label() + ".projection (" + m_projection->type() + ")", path());
    const Shape projected = m_projection->build(input, dtype(), device());
    if (projected != out)
        throw ShapeError(path(), label() + ": projection gives " + projected.to_string() +
                         " but the body gives " + out.to_string());
    return out;
}

void Residual::reset_parameters_impl(Rng& rng) {
    Rng body_rng = rng.split();
    m_body->reset_parameters(body_rng);
    if (m_projection) {
        Rng proj_rng = rng.split();
        m_projection->reset_parameters(proj_rng);
    }
}

// x: [B, ...in] -> y: [B, ...out]
Tensor Residual::forward_impl(const Tensor& x, Mode mode) {
    Tensor body = m_body->forward(x, mode);
    Tensor y = new_activation(body.shape());
    Tensor skip = m_projection ? m_projection->forward(x, mode) : x;
    add_into(body, skip, y);
    return y;
}

Tensor Residual::backward_impl(const Tensor& dy) {
    // Both paths receive dy; their input gradients add.
    Tensor dx_body = m_body->backward(dy);
    if (!needs_input_grad()) {
        if (m_projection) m_projection->backward(dy);
        return Tensor();
    }
    Tensor dx_skip = m_projection ? m_projection->backward(dy) : dy;
    Tensor dx = new_activation(dx_body.shape());
    add_into(dx_body, dx_skip, dx);
    return dx;
}

void Residual::set_needs_input_grad_impl(bool needs) {
    m_body->set_needs_input_grad(needs);
    if (m_projection) m_projection->set_needs_input_grad(needs);
}

int64_t Residual::flops_impl() const {
    const int64_t adds = output_shape().numel();
    return checked_sum(checked_sum(m_body->flops_per_sample(), m_projection ? m_projection->flops_per_sample() : 0,
                                   "FLOPs"),
                       adds, "FLOPs");
}

int64_t Residual::activations_impl() {  // the sum keeps nothing
    return m_body->activations_per_sample() + (m_projection ? m_projection->activations_per_sample() : 0);
}

// ---- Flatten ---------------------------------------------------------------------------------

Shape Flatten::build_impl(const Shape& input) { return Shape{input.numel()}; }

// x: [B, d0, d1, ...] -> [B, d0*d1*...], same storage
Tensor Flatten::forward_impl(const Tensor& x, Mode) {
    return x.reshape(output_shape().with_batch(x.dim(0)));
}

Tensor Flatten::backward_impl(const Tensor& dy) {
    if (!needs_input_grad()) return Tensor();
    return dy.reshape(input_shape().with_batch(dy.dim(0)));
}

}  // namespace paralab::nn
