// Convolution, pooling and normalization layers: gradients against finite differences (the
// GradCase tables), conv forward against a direct nested-loop convolution, shapes, parameter
// counts, FLOPs, shape errors and the batch-norm running statistics.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <kernels/cpu/threads.h>

#include "engine/device/device.h"
#include "engine/nn/conv2d.h"
#include "engine/nn/norm.h"
#include "engine/nn/pool.h"
#include "gradcheck.h"

namespace paralab {
namespace {

using nn::Mode;
using testing::GradCase;
using testing::GradCaseName;

using testing::make;

// ---- gradients ---------------------------------------------------------------------------

class Conv2dGrad : public ::testing::TestWithParam<GradCase> {};
TEST_P(Conv2dGrad, MatchesFiniteDifferences) {
    testing::check_layer_gradients(GetParam());
}
INSTANTIATE_TEST_SUITE_P(
    Grad, Conv2dGrad,
    ::testing::Values(GradCase{"k3_s1_p0", make<nn::Conv2d>(4, 3), Shape{2, 6, 6}},
                      GradCase{"k3_s2_p1", make<nn::Conv2d>(3, 3, 2, 1), Shape{2, 6, 7}},
                      GradCase{"k1_pointwise", make<nn::Conv2d>(5, 1), Shape{3, 4, 4}},
                      GradCase{"k1_s2_p1", make<nn::Conv2d>(2, 1, 2, 1), Shape{3, 5, 4}},
                      GradCase{"odd_3x7x5_k3", make<nn::Conv2d>(4, 3), Shape{3, 7, 5}},
                      GradCase{"k2_s3_p2_odd", make<nn::Conv2d>(3, 2, 3, 2), Shape{2, 5, 7}},
                      GradCase{"batch1", make<nn::Conv2d>(3, 3, 1, 1), Shape{2, 5, 5}, 1},
                      GradCase{"no_bias", make<nn::Conv2d>(3, 3, 1, 1, false), Shape{2, 5, 4}},
                      GradCase{"kernel_is_input", make<nn::Conv2d>(4, 5), Shape{2, 5, 5}, 3}),
    GradCaseName{});

// The same proofs with the batch split over 3 compute threads (Conv2d's per-chunk column
// buffers and gradient partials, kernels::cpu::parallel_chunks), on batches that do not divide.
class Conv2dGradThreads : public ::testing::TestWithParam<GradCase> {};

TEST_P(Conv2dGradThreads, MatchesFiniteDifferences) {
    kernels::cpu::set_num_threads(3);
    testing::check_layer_gradients(GetParam());
    kernels::cpu::set_num_threads(1);
}

INSTANTIATE_TEST_SUITE_P(
    Grad3Threads, Conv2dGradThreads,
    ::testing::Values(GradCase{"lenet_k5_p2", make<nn::Conv2d>(3, 5, 1, 2), Shape{2, 6, 5}, 5},
                      GradCase{"k3_s2_p1", make<nn::Conv2d>(3, 3, 2, 1), Shape{2, 6, 7}, 4},
                      GradCase{"k1_pointwise", make<nn::Conv2d>(5, 1), Shape{3, 4, 4}, 7},
                      GradCase{"no_bias_batch2", make<nn::Conv2d>(3, 3, 1, 1, false), Shape{2, 5, 4}, 2}),
    GradCaseName{});

class MaxPool2dGrad : public ::testing::TestWithParam<GradCase> {};
TEST_P(MaxPool2dGrad, MatchesFiniteDifferences) {
    testing::check_layer_gradients(GetParam());
}
INSTANTIATE_TEST_SUITE_P(
    Grad, MaxPool2dGrad,
    ::testing::Values(GradCase{"k2", make<nn::MaxPool2d>(2), Shape{3, 6, 4}},
                      GradCase{"k2_odd", make<nn::MaxPool2d>(2), Shape{2, 5, 7}},
                      GradCase{"k3_s2_odd", make<nn::MaxPool2d>(3, 2), Shape{2, 7, 5}},
                      GradCase{"batch1", make<nn::MaxPool2d>(2, 1), Shape{1, 4, 5}, 1}),
    GradCaseName{});

class AvgPool2dGrad : public ::testing::TestWithParam<GradCase> {};
TEST_P(AvgPool2dGrad, MatchesFiniteDifferences) {
    testing::check_layer_gradients(GetParam());
}
INSTANTIATE_TEST_SUITE_P(
    Grad, AvgPool2dGrad,
    ::testing::Values(GradCase{"k2", make<nn::AvgPool2d>(2), Shape{3, 6, 4}},
                      GradCase{"k3_s2_odd", make<nn::AvgPool2d>(3, 2), Shape{2, 7, 5}},
                      GradCase{"k2_s1_batch1", make<nn::AvgPool2d>(2, 1), Shape{2, 3, 5}, 1}),
    GradCaseName{});

class GlobalAvgPoolGrad : public ::testing::TestWithParam<GradCase> {};
TEST_P(GlobalAvgPoolGrad, MatchesFiniteDifferences) {
    testing::check_layer_gradients(GetParam());
}
INSTANTIATE_TEST_SUITE_P(
    Grad, GlobalAvgPoolGrad,
    ::testing::Values(GradCase{"c4_5x3", make<nn::GlobalAvgPool>(), Shape{4, 5, 3}},
                      GradCase{"batch1_1x1", make<nn::GlobalAvgPool>(), Shape{3, 1, 1}, 1}),
    GradCaseName{});

class BatchNormGrad : public ::testing::TestWithParam<GradCase> {};
TEST_P(BatchNormGrad, MatchesFiniteDifferences) {
    testing::check_layer_gradients(GetParam());
}
INSTANTIATE_TEST_SUITE_P(
    Grad, BatchNormGrad,
    ::testing::Values(GradCase{"train_C", make<nn::BatchNorm>(), Shape{5}, 4},
                      GradCase{"train_C_batch2", make<nn::BatchNorm>(), Shape{3}, 2},
                      GradCase{"train_CL", make<nn::BatchNorm>(), Shape{3, 5}, 2},
                      GradCase{"train_CHW", make<nn::BatchNorm>(), Shape{3, 4, 5}, 2},
                      GradCase{"train_CHW_batch1", make<nn::BatchNorm>(), Shape{2, 3, 3}, 1},
                      GradCase{"train_batch3", make<nn::BatchNorm>(1e-3, 0.2), Shape{4, 3}, 3},
                      GradCase{"eval_C", make<nn::BatchNorm>(), Shape{5}, 3, Mode::eval},
                      GradCase{"eval_CHW", make<nn::BatchNorm>(), Shape{3, 4, 3}, 2, Mode::eval}),
    GradCaseName{});

class LayerNormGrad : public ::testing::TestWithParam<GradCase> {};
TEST_P(LayerNormGrad, MatchesFiniteDifferences) {
    testing::check_layer_gradients(GetParam());
}
INSTANTIATE_TEST_SUITE_P(Grad, LayerNormGrad,
                         ::testing::Values(GradCase{"d8", make<nn::LayerNorm>(), Shape{8}},
                                           GradCase{"t3_d5", make<nn::LayerNorm>(), Shape{3, 5}},
                                           GradCase{"d7_batch1_eval", make<nn::LayerNorm>(),
                                                    Shape{7}, 1, Mode::eval}),
                         GradCaseName{});

// ---- helpers for the plain tests ----------------------------------------------------------

struct Fixture {
    std::unique_ptr<Device> device = make_cpu_device(0);
    Rng rng{42};

    Tensor random(const Shape& shape, DType dtype = DType::f64) {
        Tensor t = Tensor::empty(shape, DType::f64, *device, MemCategory::activations);
        for (double& v : t.span<double>()) v = rng.normal();
        return t.to(dtype);
    }
    Tensor values(const Shape& shape, const std::vector<double>& v, DType dtype = DType::f64) {
        Tensor t = Tensor::empty(shape, DType::f64, *device, MemCategory::activations);
        std::copy(v.begin(), v.end(), t.data<double>());
        return t.to(dtype);
    }
};

double at(const Tensor& t, int64_t i) {
    return dispatch_float(t.dtype(), [&]<class T>() { return double(t.data<T>()[i]); });
}

// The ShapeError that building `layer` on `input` throws ("" when none).
std::string build_error(nn::Layer& layer, const Shape& input, Device& device) {
    layer.set_label("layer 2 (" + layer.type() + ")");
    try {
        layer.build(input, DType::f32, device);
    } catch (const ShapeError& e) {
        return e.what();
    }
    return "";
}

// ---- conv2d --------------------------------------------------------------------------------

TEST(Conv2d, OutputShapeParameterCountAndFlops) {
    Fixture f;
    nn::Conv2d lenet(6, 5);
    EXPECT_EQ(lenet.build(Shape{1, 28, 28}, DType::f32, *f.device), (Shape{6, 24, 24}));
    EXPECT_EQ(lenet.parameter_count(), 6 * 1 * 5 * 5 + 6);
    EXPECT_EQ(lenet.flops_per_sample(), 6 * 24 * 24 * (2 * 25 + 1));

    // OH = (7 + 2 - 3) / 2 + 1 = 4, OW = (5 + 2 - 3) / 2 + 1 = 3
    nn::Conv2d strided(8, 3, 2, 1, false);
    EXPECT_EQ(strided.build(Shape{3, 7, 5}, DType::f32, *f.device), (Shape{8, 4, 3}));
    EXPECT_EQ(strided.parameter_count(), 8 * 3 * 3 * 3);
    EXPECT_EQ(strided.flops_per_sample(), 2 * 8 * 3 * 9 * 4 * 3);
    auto params = strided.parameters();
    ASSERT_EQ(params.size(), 1u);
    EXPECT_EQ(params[0]->name, "weight");
    EXPECT_EQ(params[0]->value.shape(), (Shape{8, 3, 3, 3}));

    nn::Conv2d whole(4, 5);  // a kernel the size of the input gives 1 x 1
    EXPECT_EQ(whole.build(Shape{2, 5, 5}, DType::f32, *f.device), (Shape{4, 1, 1}));
}

TEST(Conv2d, InitialisationIsUniformInTheFanInBound) {
    Fixture f;
    nn::Conv2d conv(16, 3);
    conv.build(Shape{4, 8, 8}, DType::f64, *f.device);
    conv.reset_parameters(f.rng);
    const double bound = 1.0 / std::sqrt(4.0 * 9.0);
    for (nn::Param* p : conv.parameters()) {
        double largest = 0;
        for (double v : p->value.span<double>()) {
            EXPECT_LE(std::abs(v), bound) << p->name;
            largest = std::max(largest, std::abs(v));
        }
        EXPECT_GT(largest, 0.5 * bound) << p->name << " looks not drawn";
    }
}

TEST(Conv2d, ShapeErrorsNameTheLayerAndBothShapes) {
    Fixture f;
    nn::Conv2d flat(4, 3);
    const std::string e1 = build_error(flat, Shape{784}, *f.device);
    EXPECT_NE(e1.find("layer 2 (conv2d)"), std::string::npos) << e1;
    EXPECT_NE(e1.find("[C, H, W]"), std::string::npos) << e1;
    EXPECT_NE(e1.find("[784]"), std::string::npos) << e1;

    nn::Conv2d big(4, 5);
    const std::string e2 = build_error(big, Shape{1, 3, 3}, *f.device);
    EXPECT_NE(e2.find("layer 2 (conv2d)"), std::string::npos) << e2;
    EXPECT_NE(e2.find("[C, H, W]"), std::string::npos) << e2;
    EXPECT_NE(e2.find("[1, 3, 3]"), std::string::npos) << e2;
    EXPECT_NE(e2.find("kernel 5"), std::string::npos) << e2;

    nn::Conv2d padded(4, 5, 1, 1);  // padding 1 makes a 3 x 3 input just big enough
    EXPECT_EQ(build_error(padded, Shape{1, 3, 3}, *f.device), "");
    EXPECT_THROW(nn::Conv2d(0, 3), ConfigError);
    EXPECT_THROW(nn::Conv2d(4, 3, 0), ConfigError);
    EXPECT_THROW(nn::Conv2d(4, 3, 1, -1), ConfigError);
}

// y[b, k, oh, ow] = bias[k] + sum over c, i, j of w[k, c, i, j] * x[b, c, oh*s - p + i, ow*s - p +
// j]
Tensor direct_conv(const Tensor& x, const Tensor& w, const Tensor* bias, int64_t s, int64_t p,
                   Device& device) {
    const int64_t B = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
    const int64_t K = w.dim(0), k = w.dim(2);
    const int64_t OH = (H + 2 * p - k) / s + 1, OW = (W + 2 * p - k) / s + 1;
    Tensor y = Tensor::zeros(Shape{B, K, OH, OW}, DType::f64, device, MemCategory::activations);
    const double* xs = x.data<double>();
    const double* ws = w.data<double>();
    double* ys = y.data<double>();
    for (int64_t b = 0; b < B; ++b)
        for (int64_t o = 0; o < K; ++o)
            for (int64_t oh = 0; oh < OH; ++oh)
                for (int64_t ow = 0; ow < OW; ++ow) {
                    double acc = bias ? bias->data<double>()[o] : 0.0;
                    for (int64_t c = 0; c < C; ++c)
                        for (int64_t i = 0; i < k; ++i)
                            for (int64_t j = 0; j < k; ++j) {
                                const int64_t h = oh * s - p + i, v = ow * s - p + j;
                                if (h < 0 || h >= H || v < 0 || v >= W) continue;
                                acc += ws[((o * C + c) * k + i) * k + j] *
                                       xs[((b * C + c) * H + h) * W + v];
                            }
                    ys[((b * K + o) * OH + oh) * OW + ow] = acc;
                }
    return y;
}

TEST(Conv2d, ForwardMatchesDirectConvolution) {
    struct Geometry {
        int64_t K, k, s, p;
        bool bias;
        Shape input;
    };
    for (const Geometry& g :
         {Geometry{4, 3, 1, 0, true, Shape{3, 7, 5}}, Geometry{5, 3, 2, 1, true, Shape{2, 8, 9}},
          Geometry{3, 5, 1, 2, false, Shape{2, 6, 6}}, Geometry{6, 1, 1, 0, true, Shape{4, 3, 5}},
          Geometry{2, 4, 3, 3, true, Shape{1, 5, 4}}}) {
        Fixture f;
        nn::Conv2d conv(g.K, g.k, g.s, g.p, g.bias);
        conv.build(g.input, DType::f64, *f.device);
        conv.reset_parameters(f.rng);
        Tensor x = f.random(g.input.with_batch(3));
        Tensor y = conv.forward(x, Mode::train);
        auto params = conv.parameters();
        Tensor expected = direct_conv(x, params[0]->value, g.bias ? &params[1]->value : nullptr,
                                      g.s, g.p, *f.device);
        ASSERT_EQ(y.shape(), expected.shape());
        for (int64_t i = 0; i < y.numel(); ++i)
            ASSERT_NEAR(y.data<double>()[i], expected.data<double>()[i], 1e-12)
                << "K" << g.K << " k" << g.k << " s" << g.s << " p" << g.p << " at " << i;
    }
}

// Splitting the batch over threads changes no output and no input gradient (each sample is
// computed alone), and the parameter gradients only by the order of the per-chunk sums.
TEST(Conv2d, ThreadCountChangesOnlyTheRoundingOfParameterGradients) {
    Fixture f;
    const Shape input{3, 9, 8};
    Tensor x = f.random(input.with_batch(7));
    Tensor dy;
    std::vector<std::vector<double>> ys, dxs, grads;
    for (int threads : {1, 2, 3}) {
        kernels::cpu::set_num_threads(threads);
        nn::Conv2d conv(4, 5, 1, 2);
        const Shape out = conv.build(input, DType::f64, *f.device);
        Rng rng(5);
        conv.reset_parameters(rng);
        if (!dy.defined()) dy = f.random(out.with_batch(7));
        Tensor y = conv.forward(x, Mode::train);
        Tensor dx = conv.backward(dy);
        ys.emplace_back(y.data<double>(), y.data<double>() + y.numel());
        dxs.emplace_back(dx.data<double>(), dx.data<double>() + dx.numel());
        std::vector<double> g;
        for (nn::Param* p : conv.parameters())
            g.insert(g.end(), p->grad.data<double>(), p->grad.data<double>() + p->grad.numel());
        grads.push_back(g);
    }
    kernels::cpu::set_num_threads(1);
    for (size_t t = 1; t < ys.size(); ++t) {
        EXPECT_EQ(ys[t], ys[0]) << "threads " << t + 1;
        EXPECT_EQ(dxs[t], dxs[0]) << "threads " << t + 1;
        ASSERT_EQ(grads[t].size(), grads[0].size());
        for (size_t i = 0; i < grads[0].size(); ++i)
            EXPECT_NEAR(grads[t][i], grads[0][i], 1e-11 * (1 + std::abs(grads[0][i])))
                << "threads " << t + 1 << " at " << i;
    }
}

// Single precision runs through oneDNN where the build has it (kernels/cpu/dnnl_conv.h): its
// plan is made per batch size and kept, its parameter gradients are added into the grads
// (never overwrite them), and it must agree with the double-precision im2col path at every
// batch size it meets, LeNet's layers included, on 1 and 2 threads.
struct ConvRun {
    std::vector<double> y, dx, dw, db;
};

ConvRun run_conv(nn::Conv2d& conv, const Tensor& x, const Tensor& dy, DType dtype) {
    auto to_vec = [](const Tensor& t) {
        Tensor d = t.to(DType::f64);
        return std::vector<double>(d.data<double>(), d.data<double>() + d.numel());
    };
    conv.zero_grad();
    Tensor y = conv.forward(x.to(dtype), Mode::train);
    Tensor dx = conv.backward(dy.to(dtype));
    auto params = conv.parameters();
    return {to_vec(y), dx.defined() ? to_vec(dx) : std::vector<double>{}, to_vec(params[0]->grad),
            params.size() > 1 ? to_vec(params[1]->grad) : std::vector<double>{}};
}

void expect_close(const std::vector<double>& a, const std::vector<double>& b, const std::string& what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    double scale = 1e-3;
    for (double v : b) scale = std::max(scale, std::abs(v));
    for (size_t i = 0; i < a.size(); ++i)
        ASSERT_NEAR(a[i], b[i], 2e-5 * scale) << what << " at " << i;
}

TEST(Conv2d, SinglePrecisionMatchesTheDoublePrecisionPathAtEveryBatchSize) {
    struct Geometry {
        int64_t K, k, s, p;
        bool bias;
        Shape input;
    };
    for (int threads : {1, 2}) {
        kernels::cpu::set_num_threads(threads);
        for (const Geometry& g : {Geometry{16, 5, 1, 2, true, Shape{1, 28, 28}},   // LeNet conv 1
                                  Geometry{32, 5, 1, 2, true, Shape{16, 14, 14}},  // LeNet conv 2
                                  Geometry{5, 3, 2, 1, false, Shape{3, 9, 8}},
                                  Geometry{7, 1, 1, 0, true, Shape{20, 4, 5}}}) {
            Fixture f;
            nn::Conv2d c32(g.K, g.k, g.s, g.p, g.bias), c64(g.K, g.k, g.s, g.p, g.bias);
            const Shape out = c64.build(g.input, DType::f64, *f.device);
            c32.build(g.input, DType::f32, *f.device);
            c64.reset_parameters(f.rng);
            for (size_t i = 0; i < c64.parameters().size(); ++i)
                c32.parameters()[i]->value.copy_from(c64.parameters()[i]->value);
            const std::string name = "K" + std::to_string(g.K) + " k" + std::to_string(g.k) +
                                     " threads " + std::to_string(threads);
            for (int64_t batch : {64, 3, 64, 1}) {  // a new plan, another, the first one again
                Tensor x = f.random(g.input.with_batch(batch));
                Tensor dy = f.random(out.with_batch(batch));
                const ConvRun a = run_conv(c32, x, dy, DType::f32);
                const ConvRun b = run_conv(c64, x, dy, DType::f64);
                const std::string at = name + " batch " + std::to_string(batch);
                expect_close(a.y, b.y, "y, " + at);
                expect_close(a.dx, b.dx, "dx, " + at);
                expect_close(a.dw, b.dw, "dw, " + at);
                expect_close(a.db, b.db, "db, " + at);
            }
        }
    }
    kernels::cpu::set_num_threads(1);
}

TEST(Conv2d, SinglePrecisionBackwardAddsIntoTheGradients) {
    Fixture f;
    nn::Conv2d conv(8, 5, 1, 2);
    const Shape out = conv.build(Shape{4, 10, 10}, DType::f32, *f.device);
    conv.reset_parameters(f.rng);
    Tensor x = f.random(Shape{4, 10, 10}.with_batch(6), DType::f32);
    Tensor dy = f.random(out.with_batch(6), DType::f32);
    conv.zero_grad();
    conv.forward(x, Mode::train);
    conv.backward(dy);
    std::vector<std::vector<float>> once;
    for (nn::Param* p : conv.parameters())
        once.emplace_back(p->grad.data<float>(), p->grad.data<float>() + p->grad.numel());
    conv.forward(x, Mode::train);
    conv.backward(dy);  // no zero_grad: the second step's gradients add to the first's
    auto params = conv.parameters();
    for (size_t k = 0; k < params.size(); ++k)
        for (int64_t i = 0; i < params[k]->grad.numel(); ++i)
            ASSERT_FLOAT_EQ(params[k]->grad.data<float>()[i], 2 * once[k][i]) << params[k]->name << " at " << i;
}

TEST(Conv2d, BackwardWithoutInputGradientStillAccumulatesParameterGradients) {
    Fixture f;
    nn::Conv2d a(3, 3, 2, 1), b(3, 3, 2, 1);
    for (nn::Conv2d* c : {&a, &b}) {
        c->build(Shape{2, 6, 5}, DType::f64, *f.device);
        Rng rng(7);
        c->reset_parameters(rng);
    }
    b.set_needs_input_grad(false);
    Tensor x = f.random(Shape{2, 2, 6, 5});
    Tensor dy = f.random(Shape{2, 3, 3, 3});
    a.forward(x, Mode::train);
    EXPECT_TRUE(a.backward(dy).defined());
    b.forward(x, Mode::train);
    EXPECT_FALSE(b.backward(dy).defined());
    for (size_t k = 0; k < 2; ++k)
        for (int64_t i = 0; i < a.parameters()[k]->grad.numel(); ++i)
            EXPECT_EQ(at(a.parameters()[k]->grad, i), at(b.parameters()[k]->grad, i));
}

// Backward adds into Param::grad: two steps without zero_grad give twice one step's gradient.
TEST(ConvAndNorm, BackwardAccumulatesParameterGradients) {
    std::vector<std::pair<std::function<std::unique_ptr<nn::Layer>()>, Shape>> layers = {
        {make<nn::Conv2d>(3, 3, 1, 1), Shape{2, 4, 4}},
        {make<nn::Conv2d>(3, 1), Shape{2, 4, 4}},
        {make<nn::BatchNorm>(), Shape{3, 2, 2}},
        {make<nn::LayerNorm>(), Shape{2, 5}}};
    for (auto& [factory, shape] : layers) {
        Fixture f;
        auto layer = factory();
        const Shape out = layer->build(shape, DType::f64, *f.device);
        layer->reset_parameters(f.rng);
        Tensor x = f.random(shape.with_batch(3));
        Tensor dy = f.random(out.with_batch(3));
        layer->forward(x, Mode::train);
        layer->backward(dy);
        std::vector<Tensor> once;
        for (nn::Param* p : layer->parameters())
            once.push_back(p->grad.clone(MemCategory::workspace));
        layer->forward(x, Mode::train);
        layer->backward(dy);
        auto params = layer->parameters();
        for (size_t k = 0; k < params.size(); ++k)
            for (int64_t i = 0; i < once[k].numel(); ++i)
                EXPECT_NEAR(at(params[k]->grad, i), 2 * at(once[k], i), 1e-12)
                    << layer->type() << " " << params[k]->name << "[" << i << "]";
    }
}

// ---- pooling -------------------------------------------------------------------------------

TEST(Pool, OutputShapesAndErrors) {
    Fixture f;
    nn::MaxPool2d max2(2);
    EXPECT_EQ(max2.build(Shape{3, 7, 5}, DType::f32, *f.device), (Shape{3, 3, 2}));
    nn::MaxPool2d max3(3, 2);
    EXPECT_EQ(max3.build(Shape{2, 7, 5}, DType::f32, *f.device), (Shape{2, 3, 2}));
    nn::AvgPool2d avg;  // kernel 2, stride 2
    EXPECT_EQ(avg.build(Shape{4, 8, 6}, DType::f32, *f.device), (Shape{4, 4, 3}));
    nn::GlobalAvgPool gap;
    EXPECT_EQ(gap.build(Shape{16, 5, 5}, DType::f32, *f.device), (Shape{16}));
    EXPECT_EQ(max2.parameter_count() + avg.parameter_count() + gap.parameter_count(), 0);

    nn::MaxPool2d small(3);
    const std::string e1 = build_error(small, Shape{2, 2, 4}, *f.device);
    EXPECT_NE(e1.find("layer 2 (maxpool2d)"), std::string::npos) << e1;
    EXPECT_NE(e1.find("[C, H, W]"), std::string::npos) << e1;
    EXPECT_NE(e1.find("[2, 2, 4]"), std::string::npos) << e1;
    nn::AvgPool2d flat(2);
    const std::string e2 = build_error(flat, Shape{10}, *f.device);
    EXPECT_NE(e2.find("layer 2 (avgpool2d)"), std::string::npos) << e2;
    EXPECT_NE(e2.find("[10]"), std::string::npos) << e2;
    nn::GlobalAvgPool gflat;
    const std::string e3 = build_error(gflat, Shape{4, 4}, *f.device);
    EXPECT_NE(e3.find("layer 2 (global_avgpool)"), std::string::npos) << e3;
    EXPECT_NE(e3.find("[4, 4]"), std::string::npos) << e3;
    EXPECT_THROW(nn::MaxPool2d(0), ConfigError);
}

TEST(Pool, MaxPoolTiesGoToTheFirstMaximum) {
    Fixture f;
    nn::MaxPool2d pool(2);
    pool.build(Shape{1, 2, 4}, DType::f32, *f.device);
    // Window 0 is all equal; window 1 has its maximum 5 twice, at (0, 3) and (1, 2).
    Tensor x = f.values(Shape{1, 1, 2, 4}, {1, 1, 2, 5, 1, 1, 5, 0}, DType::f32);
    Tensor y = pool.forward(x, Mode::train);
    EXPECT_EQ(at(y, 0), 1);
    EXPECT_EQ(at(y, 1), 5);
    Tensor dx = pool.backward(f.values(Shape{1, 1, 1, 2}, {10, 20}, DType::f32));
    const std::vector<double> expected = {10, 0, 0, 20, 0, 0, 0, 0};
    for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(at(dx, i), expected[i]) << i;
}

// ---- batch norm ----------------------------------------------------------------------------

TEST(BatchNorm, BuildCreatesParametersAndValidBuffers) {
    Fixture f;
    nn::BatchNorm bn;
    EXPECT_EQ(bn.build(Shape{6, 4, 4}, DType::f32, *f.device), (Shape{6, 4, 4}));
    auto params = bn.parameters();
    ASSERT_EQ(params.size(), 2u);
    EXPECT_EQ(params[0]->name, "weight");
    EXPECT_EQ(params[1]->name, "bias");
    EXPECT_EQ(bn.parameter_count(), 12);
    auto buffers = bn.buffers();
    ASSERT_EQ(buffers.size(), 2u);
    for (int64_t c = 0; c < 6; ++c) {
        EXPECT_EQ(at(params[0]->value, c), 1.0);
        EXPECT_EQ(at(params[1]->value, c), 0.0);
        EXPECT_EQ(at(buffers[0], c), 0.0);  // running_mean
        EXPECT_EQ(at(buffers[1], c), 1.0);  // running_var, valid before any reset
    }
    nn::BatchNorm rank4;
    const std::string e = build_error(rank4, Shape{2, 3, 4, 5}, *f.device);
    EXPECT_NE(e.find("layer 2 (batchnorm)"), std::string::npos) << e;
    EXPECT_NE(e.find("[C, H, W]"), std::string::npos) << e;
    EXPECT_NE(e.find("[2, 3, 4, 5]"), std::string::npos) << e;
}

class BatchNormStats : public ::testing::TestWithParam<DType> {};

// One train step against hand-computed values: running = 0.9 * running + 0.1 * batch, with
// the unbiased batch variance; the output uses the biased one.
TEST_P(BatchNormStats, OneTrainStepUpdatesRunningStatistics) {
    const DType dtype = GetParam();
    const double tol = dtype == DType::f64 ? 1e-12 : 1e-6;
    Fixture f;
    nn::BatchNorm bn;  // eps 1e-5, momentum 0.1
    bn.build(Shape{2}, dtype, *f.device);
    bn.reset_parameters(f.rng);
    // channel 0: 1, 2, 6 -> mean 3, biased var 14/3, unbiased 7
    // channel 1: 0, 0, 3 -> mean 1, biased var 2, unbiased 3
    Tensor x = f.values(Shape{3, 2}, {1, 0, 2, 0, 6, 3}, dtype);
    Tensor y = bn.forward(x, Mode::train);
    EXPECT_NEAR(at(bn.running_mean(), 0), 0.3, tol);
    EXPECT_NEAR(at(bn.running_var(), 0), 0.9 + 0.7, tol);
    EXPECT_NEAR(at(bn.running_mean(), 1), 0.1, tol);
    EXPECT_NEAR(at(bn.running_var(), 1), 0.9 + 0.3, tol);
    EXPECT_NEAR(at(y, 0), (1 - 3) / std::sqrt(14.0 / 3 + 1e-5), tol);
    EXPECT_NEAR(at(y, 5), (3 - 1) / std::sqrt(2.0 + 1e-5), tol);

    // [C, H, W]: statistics over batch and plane. Values 1..8 -> mean 4.5, unbiased var 6.
    nn::BatchNorm bn2(1e-5, 0.1);
    bn2.build(Shape{1, 2, 2}, dtype, *f.device);
    bn2.forward(f.values(Shape{2, 1, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8}, dtype), Mode::train);
    EXPECT_NEAR(at(bn2.running_mean(), 0), 0.45, tol);
    EXPECT_NEAR(at(bn2.running_var(), 0), 0.9 + 0.6, tol);
    // A second step compounds: 0.9 * 0.45 + 0.1 * 4.5, 0.9 * 1.5 + 0.1 * 6.
    bn2.forward(f.values(Shape{2, 1, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8}, dtype), Mode::train);
    EXPECT_NEAR(at(bn2.running_mean(), 0), 0.855, tol);
    EXPECT_NEAR(at(bn2.running_var(), 0), 1.95, tol);
}

TEST_P(BatchNormStats, EvalUsesRunningStatistics) {
    const DType dtype = GetParam();
    const double tol = dtype == DType::f64 ? 1e-12 : 1e-6;
    Fixture f;
    nn::BatchNorm bn(1e-3);
    bn.build(Shape{2, 3}, dtype, *f.device);
    bn.running_mean().copy_from(f.values(Shape{2}, {0.5, -1.0}));
    bn.running_var().copy_from(f.values(Shape{2}, {4.0, 0.25}));
    auto params = bn.parameters();
    params[0]->value.copy_from(f.values(Shape{2}, {2.0, 3.0}));
    params[1]->value.copy_from(f.values(Shape{2}, {0.1, -0.2}));
    Tensor x = f.random(Shape{1, 2, 3}, dtype);  // batch 1 is fine in eval mode
    Tensor y = bn.forward(x, Mode::eval);
    const double mean[2] = {0.5, -1.0}, var[2] = {4.0, 0.25}, w[2] = {2.0, 3.0}, b[2] = {0.1, -0.2};
    for (int64_t c = 0; c < 2; ++c)
        for (int64_t l = 0; l < 3; ++l) {
            const int64_t i = c * 3 + l;
            EXPECT_NEAR(at(y, i), (at(x, i) - mean[c]) / std::sqrt(var[c] + 1e-3) * w[c] + b[c],
                        tol);
        }
    // Eval leaves the running statistics alone.
    EXPECT_EQ(at(bn.running_mean(), 0), 0.5);
    EXPECT_EQ(at(bn.running_var(), 1), 0.25);
    // Eval backward is affine: dx = dy * w / sqrt(var + eps).
    Tensor dy = f.random(Shape{1, 2, 3}, dtype);
    Tensor dx = bn.backward(dy);
    for (int64_t i = 0; i < 6; ++i)
        EXPECT_NEAR(at(dx, i), at(dy, i) * w[i / 3] / std::sqrt(var[i / 3] + 1e-3), tol);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, BatchNormStats, ::testing::Values(DType::f64, DType::f32),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(BatchNorm, TrainModeNeedsMoreThanOneValuePerChannel) {
    Fixture f;
    nn::BatchNorm bn;
    bn.set_label("layer 1 (batchnorm)");
    bn.build(Shape{4}, DType::f32, *f.device);
    Tensor one = f.random(Shape{1, 4}, DType::f32);
    try {
        bn.forward(one, Mode::train);
        ADD_FAILURE() << "no error for a batch of 1 in train mode";
    } catch (const Error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("expected more than 1 value per channel when training"),
                  std::string::npos)
            << what;
        EXPECT_NE(what.find("layer 1 (batchnorm)"), std::string::npos) << what;
    }
    EXPECT_EQ(at(bn.running_mean(), 0), 0.0);  // the failed step changed nothing
    EXPECT_NO_THROW(bn.forward(one, Mode::eval));

    nn::BatchNorm spatial;  // [C, H, W] with batch 1 has H*W values per channel
    spatial.build(Shape{2, 2, 2}, DType::f32, *f.device);
    EXPECT_NO_THROW(spatial.forward(f.random(Shape{1, 2, 2, 2}, DType::f32), Mode::train));
    EXPECT_THROW(nn::BatchNorm(0.0), ConfigError);
    EXPECT_THROW(nn::BatchNorm(1e-5, 1.5), ConfigError);
}

// ---- layer norm ----------------------------------------------------------------------------

TEST(LayerNorm, NormalizesTheLastDimension) {
    Fixture f;
    nn::LayerNorm ln;
    EXPECT_EQ(ln.build(Shape{3, 4}, DType::f64, *f.device), (Shape{3, 4}));
    EXPECT_EQ(ln.parameter_count(), 8);
    ln.reset_parameters(f.rng);
    // Row (1, 2, 3, 6): mean 3, biased var (4 + 1 + 0 + 9) / 4 = 3.5.
    Tensor x = f.values(Shape{1, 3, 4}, {1, 2, 3, 6, 0, 0, 0, 0, 5, 5, 5, 9});
    Tensor y = ln.forward(x, Mode::train);
    const double inv = 1 / std::sqrt(3.5 + 1e-5);
    EXPECT_NEAR(at(y, 0), -2 * inv, 1e-12);
    EXPECT_NEAR(at(y, 3), 3 * inv, 1e-12);
    EXPECT_NEAR(at(y, 4), 0.0, 1e-12);  // a constant row maps to bias (0)
    nn::LayerNorm scalar;
    const std::string e = build_error(scalar, Shape{}, *f.device);
    EXPECT_NE(e.find("layer 2 (layernorm)"), std::string::npos) << e;
    EXPECT_NE(e.find("[..., D]"), std::string::npos) << e;
}

}  // namespace
}  // namespace paralab
