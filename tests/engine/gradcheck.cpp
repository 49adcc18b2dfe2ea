#include "gradcheck.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/device/device.h"
#include "engine/nn/linear.h"

namespace paralab::testing {

namespace {

// At most `limit` element indices of a tensor of `n` elements, spread over all of it.
std::vector<int64_t> probe_indices(int64_t n, int64_t limit, Rng& rng) {
    std::vector<int64_t> idx;
    if (n <= limit) {
        for (int64_t i = 0; i < n; ++i) idx.push_back(i);
    } else {
        for (int64_t i = 0; i < limit; ++i) idx.push_back(static_cast<int64_t>(rng.below(n)));
    }
    return idx;
}

double weighted_sum(const Tensor& y, const Tensor& w) {
    const double* a = y.data<double>();
    const double* b = w.data<double>();
    double s = 0;
    for (int64_t i = 0; i < y.numel(); ++i) s += a[i] * b[i];
    return s;
}

void expect_close(double analytic, double numeric, const GradCase& c, const std::string& what) {
    const double tol = c.atol + c.rtol * std::max(std::abs(analytic), std::abs(numeric));
    EXPECT_LE(std::abs(analytic - numeric), tol)
        << what << ": analytic " << analytic << " vs finite difference " << numeric;
}

void expect_f32_matches(const Tensor& t32, const Tensor& t64, const std::string& what) {
    ASSERT_EQ(t32.shape(), t64.shape()) << what;
    const float* a = t32.data<float>();
    const double* b = t64.data<double>();
    double scale = 1e-3;
    for (int64_t i = 0; i < t64.numel(); ++i) scale = std::max(scale, std::abs(b[i]));
    int reported = 0;
    for (int64_t i = 0; i < t64.numel(); ++i) {
        const double err = std::abs(static_cast<double>(a[i]) - b[i]);
        if (err > 2e-4 * scale && reported++ < 5)
            ADD_FAILURE() << what << "[" << i << "]: f32 " << a[i] << " vs f64 " << b[i];
    }
}

// True when `layer` is a linear or holds one (with parameters of its own: a tied one has none).
bool holds_linear(nn::Layer& layer) {
    if (dynamic_cast<nn::Linear*>(&layer) && !layer.parameters().empty()) return true;
    for (nn::Layer* c : layer.children())
        if (holds_linear(*c)) return true;
    return false;
}

bool same_bits(const Tensor& a, const Tensor& b) {
    return a.defined() == b.defined() &&
           (!a.defined() || (a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0));
}

// B then W (nn::Layer::defer_weight_grads) as a zero-bubble pipeline runs two micro-batches: the
// forward and B of x, the forward and B of x2 (the layer's saved state is x2's by then), then
// the W of x, then of x2. The input gradients and the accumulated parameter gradients are the
// plain backwards' bit for bit; a linear, or a layer holding one, queues work, and a layer that
// queued work has left some weight gradient to W, one that queued none did all of it in B.
void check_deferred_weight_grads(nn::Layer& layer, const Tensor& x, const Tensor& w, const GradCase& c,
                                 Rng& rng) {
    Tensor x2 = x.clone(MemCategory::activations), w2 = w.clone(MemCategory::activations);
    if (c.token_vocab == 0)
        for (double& v : x2.span<double>()) v += 0.5 * rng.normal();
    for (double& v : w2.span<double>()) v = rng.normal();
    const auto params = layer.parameters();
    const auto grads_now = [&] {
        std::vector<Tensor> out;
        for (nn::Param* p : params) out.push_back(p->grad.clone(MemCategory::workspace));
        return out;
    };
    const auto backward = [&](const Tensor& in, const Tensor& out_grad, int64_t key) {
        layer.forward(in, c.mode);
        layer.defer_weight_grads(key);
        Tensor dx = layer.backward(out_grad);
        layer.defer_weight_grads(-1);
        return dx.defined() ? dx.clone(MemCategory::workspace) : Tensor();
    };

    layer.zero_grad();
    const Tensor plain1 = backward(x, w, -1);
    const std::vector<Tensor> plain_first = grads_now();
    const Tensor plain2 = backward(x2, w2, -1);
    const std::vector<Tensor> plain = grads_now();

    layer.zero_grad();
    const Tensor b1 = backward(x, w, 1);
    const std::vector<Tensor> after_b = grads_now();
    const Tensor b2 = backward(x2, w2, 2);
    const size_t queued = layer.queued_weight_grads();
    layer.run_weight_grads(1);
    layer.run_weight_grads(2);
    EXPECT_EQ(layer.queued_weight_grads(), 0u);
    EXPECT_TRUE(same_bits(b1, plain1)) << "B's input gradient differs from the plain backward's";
    EXPECT_TRUE(same_bits(b2, plain2)) << "the second B's input gradient differs from the plain backward's";
    bool deferred_some = false;
    for (size_t k = 0; k < params.size(); ++k) {
        EXPECT_TRUE(same_bits(params[k]->grad, plain[k])) << "B then W: d/d" << params[k]->name << " differs";
        deferred_some = deferred_some || !same_bits(after_b[k], plain_first[k]);
    }
    EXPECT_EQ(queued > 0, holds_linear(layer)) << queued << " pieces of W queued";
    if (!params.empty()) {
        EXPECT_EQ(queued > 0, deferred_some) << queued << " pieces of W queued";
    }
}

}  // namespace

void check_layer_gradients(const GradCase& c) {
    auto device = make_cpu_device(0);
    Rng rng(1234);

    // --- the f64 reference -------------------------------------------------------------
    auto layer = c.make();
    layer->set_label("layer 0 (" + layer->type() + ")");
    layer->build(c.input, DType::f64, *device);
    layer->reset_parameters(rng);
    // Move every parameter off its tidy initial value (ones, zeros) so that the check sees
    // general values.
    for (nn::Param* p : layer->parameters())
        for (double& v : p->value.span<double>()) v += 0.2 * rng.normal();
    layer->set_needs_input_grad(c.token_vocab == 0);
    layer->set_random_state(99, 5, 0);

    Tensor x = Tensor::empty(c.input.with_batch(c.batch), DType::f64, *device,
                             MemCategory::activations);
    for (double& v : x.span<double>())
        v = c.token_vocab > 0 ? static_cast<double>(rng.below(c.token_vocab)) : rng.normal();

    Tensor y = layer->forward(x, c.mode);
    ASSERT_EQ(y.shape(), layer->output_shape().with_batch(c.batch));
    Tensor w = Tensor::empty(y.shape(), DType::f64, *device, MemCategory::activations);
    for (double& v : w.span<double>()) v = rng.normal();

    check_deferred_weight_grads(*layer, x, w, c, rng);

    layer->forward(x, c.mode);
    layer->zero_grad();
    Tensor dx = layer->backward(w).clone(MemCategory::workspace);
    std::vector<Tensor> grads;
    for (nn::Param* p : layer->parameters()) grads.push_back(p->grad.clone(MemCategory::workspace));

    const double eps = 1e-6;
    auto loss_at = [&]() {
        const double sum = weighted_sum(layer->forward(x, c.mode), w);
        return c.added_loss ? sum + c.added_loss(*layer) : sum;
    };

    if (c.token_vocab == 0) {
        ASSERT_TRUE(dx.defined()) << "layer returned no input gradient";
        double* xs = x.data<double>();
        for (int64_t i : probe_indices(x.numel(), 256, rng)) {
            const double saved = xs[i];
            xs[i] = saved + eps;
            const double lp = loss_at();
            xs[i] = saved - eps;
            const double lm = loss_at();
            xs[i] = saved;
            expect_close(dx.data<double>()[i], (lp - lm) / (2 * eps), c,
                         "d/dx[" + std::to_string(i) + "]");
        }
    }
    auto params = layer->parameters();
    for (size_t k = 0; k < params.size(); ++k) {
        double* ps = params[k]->value.data<double>();
        for (int64_t i : probe_indices(params[k]->value.numel(), 128, rng)) {
            const double saved = ps[i];
            ps[i] = saved + eps;
            const double lp = loss_at();
            ps[i] = saved - eps;
            const double lm = loss_at();
            ps[i] = saved;
            expect_close(grads[k].data<double>()[i], (lp - lm) / (2 * eps), c,
                         "d/d" + params[k]->name + "[" + std::to_string(i) + "]");
        }
    }

    // --- the f32 engine against the reference -------------------------------------------
    auto layer32 = c.make();
    layer32->set_label("layer 0 (" + layer32->type() + ")");
    layer32->build(c.input, DType::f32, *device);
    auto params32 = layer32->parameters();
    ASSERT_EQ(params32.size(), params.size());
    for (size_t k = 0; k < params.size(); ++k) params32[k]->value.copy_from(params[k]->value);
    auto buffers64 = layer->buffers(), buffers32 = layer32->buffers();
    ASSERT_EQ(buffers32.size(), buffers64.size());
    for (size_t k = 0; k < buffers64.size(); ++k) buffers32[k].copy_from(buffers64[k]);
    layer32->set_needs_input_grad(c.token_vocab == 0);
    layer32->set_random_state(99, 5, 0);

    Tensor y64 = layer->forward(x, c.mode);
    layer->zero_grad();
    Tensor dx64 = layer->backward(w);
    Tensor x32 = x.to(DType::f32);
    Tensor y32 = layer32->forward(x32, c.mode);
    expect_f32_matches(y32, y64, "f32 forward");
    layer32->zero_grad();
    Tensor dx32 = layer32->backward(w.to(DType::f32));
    if (c.token_vocab == 0) expect_f32_matches(dx32, dx64, "f32 d/dx");
    for (size_t k = 0; k < params.size(); ++k)
        expect_f32_matches(params32[k]->grad, params[k]->grad, "f32 d/d" + params[k]->name);
}

}  // namespace paralab::testing
