#include "engine/nn/swiglu.h"
#include "engine/nn/checked_count.h"

#include <kernels/cpu/swiglu.h>
#include <kernels/gpu/swiglu.h>

#include "engine/nn/ops.h"

namespace paralab::nn {

namespace kc = kernels::cpu;
namespace kg = kernels::gpu;

SwiGLU::SwiGLU(int64_t ffn, bool bias)
    : Layer("swiglu"),
      m_ffn(ffn),
      m_gate(std::make_unique<Linear>(ffn, bias)),
      m_up(std::make_unique<Linear>(ffn, bias)),
      m_down(std::make_unique<Linear>(1, bias)) {  // width set in build_impl (D)
    if (ffn < 1) throw ConfigError("ffn", "expected a positive integer, got " + std::to_string(ffn));
}

void SwiGLU::set_shard(int world, std::function<void(const Tensor&)> all_reduce, SequenceSplit sequence) {
    PARALAB_CHECK(!built() && world >= 1 && m_ffn % world == 0, label() + ": set_shard after build or uneven");
    m_gate->set_out(m_ffn / world);
    m_up->set_out(m_ffn / world);
    // Their input is whole (gathered here) and their input gradients are joined here.
    const auto joined_here = [](const Tensor&) {};
    m_gate->set_shard({LinearShard::Split::column, {1}, joined_here, {}});
    m_up->set_shard({LinearShard::Split::column, {1}, joined_here, {}});
    m_down->set_shard({LinearShard::Split::row, {1}, all_reduce, sequence});
    m_all_reduce = std::move(all_reduce);
    m_sequence = std::move(sequence);
}

// input: [..., D] -> [..., D] (with sequence parallelism [T/N, D] both)
Shape SwiGLU::build_impl(const Shape& input) {
    if (input.rank() == 0 || input.back() < 1) shape_error("an input [..., features] with at least one feature", input);
    m_down->set_out(input.back());
    const char* names[] = {"gate", "up", "down"};
    size_t k = 0;
    for (Layer* c : children()) c->set_label(label() + "." + names[k++], path());
    m_gate->set_needs_input_grad(needs_input_grad());
    m_up->set_needs_input_grad(needs_input_grad());
    Shape whole = input;  // with sequence parallelism the input arrives as [T/N, D]
    if (m_sequence.on()) {
        if (input.rank() < 2) shape_error("a sequence [T, features] (sequence parallelism splits its positions)", input);
        whole[0] = input[0] * m_sequence.world;
    }
    const Shape hidden = m_gate->build(whole, dtype(), device());
    m_up->build(whole, dtype(), device());
    return m_down->build(hidden, dtype(), device());
}

void SwiGLU::reset_parameters_impl(Rng& rng) {
    for (Layer* c : children()) {
        Rng r = rng.split();
        c->reset_parameters(r);
    }
}

void SwiGLU::set_needs_input_grad_impl(bool needs) {
    if (m_gate) m_gate->set_needs_input_grad(needs);
    if (m_up) m_up->set_needs_input_grad(needs);
}

// x: [B, ..., D] -> g, u: [B, ..., ffn] -> h = silu(g) * u -> y = down(h): [B, ..., D]
Tensor SwiGLU::forward_impl(const Tensor& x_in, Mode mode) {
    const Tensor x = m_sequence.on() ? sequence_gather(x_in, m_sequence) : x_in;
    m_g = m_gate->forward(x, mode);
    m_u = m_up->forward(x, mode);
    Tensor h = new_activation(m_g.shape());
    dispatch_float(x.dtype(), [&]<class T>() {
        if (void* q = h.queue()) kg::swiglu_forward<T>(h.numel(), m_g.data<T>(), m_u.data<T>(), h.data<T>(), q);
        else kc::swiglu_forward<T>(h.numel(), m_g.data<T>(), m_u.data<T>(), h.data<T>());
    });
    return m_down->forward(h, mode);
}

// dy: [B, ..., D] -> dh -> dg, du -> dx = gate's input gradient + up's
Tensor SwiGLU::backward_impl(const Tensor& dy) {
    PARALAB_CHECK(m_g.defined(), label() + ": a second backward after one forward");
    const Tensor dh = m_down->backward(dy);
    Tensor dg = new_activation(m_g.shape()), du = new_activation(m_u.shape());
    dispatch_float(dy.dtype(), [&]<class T>() {
        if (void* q = dh.queue())
            kg::swiglu_backward<T>(dh.numel(), m_g.data<T>(), m_u.data<T>(), dh.data<T>(), dg.data<T>(), du.data<T>(), q);
        else
            kc::swiglu_backward<T>(dh.numel(), m_g.data<T>(), m_u.data<T>(), dh.data<T>(), dg.data<T>(), du.data<T>());
    });
    m_g = m_u = Tensor();
    const Tensor dx_gate = m_gate->backward(dg);
    const Tensor dx_up = m_up->backward(du);
    if (!dx_gate.defined()) return Tensor();
    Tensor dx = new_activation(dx_gate.shape());
    dispatch_float(dy.dtype(), [&]<class T>() {
        ops_for(dx).add<T>(dx.numel(), dx_gate.data<T>(), dx_up.data<T>(), dx.data<T>());
    });
    // A split MLP's input gradient is this device's part of the sum (Megatron's f).
    if (m_sequence.on()) return sequence_reduce_scatter(dx, m_sequence);
    if (m_all_reduce) m_all_reduce(dx);
    return dx;
}

// The three linears, and per hidden unit silu and the product (2).
int64_t SwiGLU::flops_impl() const {
    if (!built()) return 0;
    const int64_t linears = checked_sum(checked_sum(m_gate->flops_per_sample(), m_up->flops_per_sample(), "FLOPs"),
                                        m_down->flops_per_sample(), "FLOPs");
    return checked_sum(linears, checked_product({2, m_down->input_shape().numel()}, "FLOPs"), "FLOPs");
}

int64_t SwiGLU::activations_impl() {
    const int64_t hidden = m_down->input_shape().numel();
    return checked_sum(checked_sum(m_gate->activations_per_sample(), checked_product({2, hidden}, "activations"),
                                   "activations"),
                       m_down->activations_per_sample(), "activations");
}

}  // namespace paralab::nn
