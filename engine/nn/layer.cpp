#include "engine/nn/layer.h"

#include "engine/device/device.h"
#include "engine/nn/checked_count.h"

namespace paralab::nn {

Layer::~Layer() = default;

Shape Layer::build(const Shape& input, DType dtype, Device& device) {
    if (built()) throw Error(m_label + ": layer is already built");
    if (device.is_gpu() && !runs_on_gpu())
        throw ConfigError(m_path, m_label + ": the " + m_type + " layer has no CUDA kernels in this version; "
                          "run this model on cpu devices");
    m_dtype = dtype;
    m_device = &device;
    m_input_shape = input;
    try {
        m_output_shape = build_impl(input);
    } catch (const ShapeError& err) {
        m_device = nullptr;
        m_params.clear();
        m_buffers.clear();
        if (!err.path().empty() || m_path.empty()) throw;
        throw ShapeError(m_path, m_label + ": " + err.what());  // a size overflow inside the layer
    } catch (...) {
        m_device = nullptr;
        m_params.clear();
        m_buffers.clear();
        throw;
    }
    for (int64_t d : m_output_shape.dims())
        if (d <= 0)
            throw ShapeError(m_path, m_label + ": input " + input.to_string() + " gives an empty output " +
                             m_output_shape.to_string());
    try {
        if (m_output_shape.numel() > kMaxTensorElements) throw ShapeError("");
    } catch (const ShapeError&) {
        m_device = nullptr;
        m_params.clear();
        m_buffers.clear();
        throw ShapeError(m_path, m_label + ": its output per example " + m_output_shape.to_string() +
                                     " passes 2^40 elements, the largest tensor a layer may make");
    }
    return m_output_shape;
}

void Layer::reset_parameters(Rng& rng) {
    PARALAB_CHECK(built(), m_label + ": reset_parameters before build");
    reset_parameters_impl(rng);
}

Tensor Layer::forward(const Tensor& x, Mode mode) {
    PARALAB_CHECK(built(), m_label + ": forward before build");
    if (x.rank() != m_input_shape.rank() + 1 || x.shape().drop_first() != m_input_shape)
        throw ShapeError(m_path, m_label + ": expects input [B, " +
                         m_input_shape.to_string().substr(1) + ", got " + x.shape().to_string());
    if (x.dtype() != m_dtype)
        throw Error(m_label + ": input is " + std::string(dtype_name(x.dtype())) +
                    ", layer is " + std::string(dtype_name(m_dtype)));
    m_last_batch = x.dim(0);
    return forward_impl(x, mode);
}

Tensor Layer::backward(const Tensor& dy) {
    PARALAB_CHECK(m_last_batch >= 0, m_label + ": backward before forward");
    if (dy.shape() != m_output_shape.with_batch(m_last_batch))
        throw ShapeError(m_path, m_label + ": backward expects gradient " +
                         m_output_shape.with_batch(m_last_batch).to_string() + ", got " +
                         dy.shape().to_string());
    return backward_impl(dy);
}

std::vector<Param*> Layer::parameters() {
    std::vector<Param*> out;
    for (auto& p : m_params) out.push_back(&p);
    for (Layer* c : children())
        for (Param* p : c->parameters()) out.push_back(p);
    return out;
}

std::vector<Tensor> Layer::buffers() {
    std::vector<Tensor> out = m_buffers;
    for (Layer* c : children())
        for (auto& b : c->buffers()) out.push_back(b);
    return out;
}

void Layer::zero_grad() {
    // A strategy may free gradients between steps and create them just before a layer's
    // backward (ZeRO stage 2): those have nothing to zero.
    for (Param* p : parameters())
        if (p->grad.defined()) p->grad.zero();
}

void Layer::release_saved() {
    release_saved_impl();
    for (Layer* c : children()) c->release_saved();
}

void Layer::defer_weight_grads(int64_t key) {
    m_weight_key = key < 0 ? -1 : key;
    for (Layer* c : children()) c->defer_weight_grads(key);
}

void Layer::run_weight_grads(int64_t key) {
    // Taken out before running: a piece of work may not queue another.
    std::deque<std::function<void()>> mine;
    for (auto it = m_weight_work.begin(); it != m_weight_work.end();)
        if (it->first == key) {
            mine.push_back(std::move(it->second));
            it = m_weight_work.erase(it);
        } else {
            ++it;
        }
    for (auto& work : mine) work();
    for (Layer* c : children()) c->run_weight_grads(key);
}

size_t Layer::queued_weight_grads() {
    size_t n = m_weight_work.size();
    for (Layer* c : children()) n += c->queued_weight_grads();
    return n;
}

void Layer::weight_grads(std::function<void()> work) {
    if (m_weight_key < 0) work();
    else m_weight_work.emplace_back(m_weight_key, std::move(work));
}

int64_t Layer::parameter_count() {
    int64_t n = 0;
    for (Param* p : parameters()) n = checked_sum(n, p->value.numel(), "parameters");
    return n;
}

void Layer::set_random_state(uint64_t seed, uint64_t step, int64_t sample_offset) {
    set_random_state_impl(seed, step, sample_offset);
    for (Layer* c : children()) c->set_random_state(seed, step, sample_offset);
}

bool Layer::draws_each_step() {
    if (draws_each_step_impl()) return true;
    for (Layer* c : children())
        if (c->draws_each_step()) return true;
    return false;
}

Param& Layer::add_param(std::string name, const Shape& shape) {
    // Thrown from build_impl: Layer::build names the layer.
    if (shape.numel() > kMaxTensorElements)
        throw ShapeError("its parameter " + name + " " + shape.to_string() +
                         " passes 2^40 elements, the largest tensor a layer may make");
    Param p;
    p.name = std::move(name);
    p.value = Tensor::zeros(shape, m_dtype, *m_device, MemCategory::parameters);
    p.grad = Tensor::zeros(shape, m_dtype, *m_device, MemCategory::gradients);
    m_params.push_back(std::move(p));
    return m_params.back();
}

Tensor& Layer::add_buffer(const Shape& shape) {
    m_buffers.push_back(Tensor::zeros(shape, m_dtype, *m_device, MemCategory::parameters));
    return m_buffers.back();
}

Tensor Layer::new_activation(const Shape& shape) const {
    return Tensor::empty(shape, m_dtype, *m_device, MemCategory::activations);
}

Tensor Layer::new_workspace(const Shape& shape) const {
    return Tensor::empty(shape, m_dtype, *m_device, MemCategory::workspace);
}

void Layer::shape_error(const std::string& expected, const Shape& got) const {
    throw ShapeError(m_path, m_label + ": expects " + expected + ", got " + got.to_string());
}

void fill_standard_normal(const Tensor& t, Rng& rng) {
    const Tensor host = t.on_gpu() ? Tensor::empty(t.shape(), t.dtype(), detached_host_device(),
                                                   MemCategory::workspace)
                                   : t;
    dispatch_float(host.dtype(), [&]<class T>() {
        for (T& v : host.span<T>()) v = static_cast<T>(rng.normal());
    });
    if (t.on_gpu()) t.copy_from(host);
}

}  // namespace paralab::nn
