// Dense layers, activations, dropout and embedding: gradients against finite differences (one
// GradCase row per variant), then shapes, counts, values, errors and the dropout-mask contract.
#include <gtest/gtest.h>
#include <kernels/cpu/elementwise.h>

#include <cmath>
#include <memory>
#include <sstream>
#include <vector>

#include "engine/device/device.h"
#include "engine/nn/activation.h"
#include "engine/nn/dropout.h"
#include "engine/nn/embedding.h"
#include "engine/nn/linear.h"
#include "engine/util/rng.h"
#include "gradcheck.h"

using namespace paralab;
using nn::ActivationKind;
using nn::Mode;
namespace pt = paralab::testing;
using pt::GradCase;

namespace {

using pt::make;

// ---- gradient checks --------------------------------------------------------------------

class LinearGrad : public ::testing::TestWithParam<GradCase> {};
TEST_P(LinearGrad, MatchesFiniteDifferences) {
    pt::check_layer_gradients(GetParam());
}
INSTANTIATE_TEST_SUITE_P(
    Grad, LinearGrad,
    ::testing::Values(GradCase{"in5_out3", make<nn::Linear>(int64_t{3}), Shape{5}},
                      GradCase{"in5_out3_nobias", make<nn::Linear>(int64_t{3}, false), Shape{5}},
                      GradCase{"in1_out1", make<nn::Linear>(int64_t{1}), Shape{1}},
                      GradCase{"batch1", make<nn::Linear>(int64_t{7}), Shape{9}, 1},
                      GradCase{"sequence4x6_out5", make<nn::Linear>(int64_t{5}), Shape{4, 6}, 3},
                      GradCase{"sequence4x6_out5_nobias", make<nn::Linear>(int64_t{5}, false),
                               Shape{4, 6}}),
    pt::GradCaseName{});

class ActivationGrad : public ::testing::TestWithParam<GradCase> {};
TEST_P(ActivationGrad, MatchesFiniteDifferences) {
    pt::check_layer_gradients(GetParam());
}
INSTANTIATE_TEST_SUITE_P(
    Grad, ActivationGrad,
    ::testing::Values(
        GradCase{"relu_7", make<nn::Activation>(ActivationKind::relu), Shape{7}},
        GradCase{"relu_2x3x5", make<nn::Activation>(ActivationKind::relu), Shape{2, 3, 5}},
        GradCase{"gelu_7", make<nn::Activation>(ActivationKind::gelu), Shape{7}},
        GradCase{"gelu_2x3x5", make<nn::Activation>(ActivationKind::gelu), Shape{2, 3, 5}},
        GradCase{"tanh_7", make<nn::Activation>(ActivationKind::tanh), Shape{7}},
        GradCase{"tanh_2x3x5", make<nn::Activation>(ActivationKind::tanh), Shape{2, 3, 5}},
        GradCase{"sigmoid_7", make<nn::Activation>(ActivationKind::sigmoid), Shape{7}},
        GradCase{"sigmoid_2x3x5", make<nn::Activation>(ActivationKind::sigmoid), Shape{2, 3, 5}},
        GradCase{"gelu_batch1", make<nn::Activation>(ActivationKind::gelu), Shape{3}, 1}),
    pt::GradCaseName{});

class DropoutGrad : public ::testing::TestWithParam<GradCase> {};
TEST_P(DropoutGrad, MatchesFiniteDifferences) {
    pt::check_layer_gradients(GetParam());
}
INSTANTIATE_TEST_SUITE_P(
    Grad, DropoutGrad,
    ::testing::Values(GradCase{"p03_train", make<nn::Dropout>(0.3), Shape{4, 5}, 3},
                      GradCase{"p03_eval", make<nn::Dropout>(0.3), Shape{4, 5}, 2, Mode::eval},
                      GradCase{"p0_train", make<nn::Dropout>(0.0), Shape{6}},
                      GradCase{"p09_train_batch1", make<nn::Dropout>(0.9), Shape{17}, 1}),
    pt::GradCaseName{});

class EmbeddingGrad : public ::testing::TestWithParam<GradCase> {};
TEST_P(EmbeddingGrad, MatchesFiniteDifferences) {
    pt::check_layer_gradients(GetParam());
}
INSTANTIATE_TEST_SUITE_P(
    Grad, EmbeddingGrad,
    ::testing::Values(
        GradCase{"vocab11_dim4", make<nn::Embedding>(int64_t{11}, int64_t{4}), Shape{6}, 2,
                 Mode::train, 11},
        // 3 ids from a vocabulary of 2 over 5 samples: repeated ids must add their gradients.
        GradCase{"vocab2_repeats", make<nn::Embedding>(int64_t{2}, int64_t{3}), Shape{3}, 5,
                 Mode::train, 2}),
    pt::GradCaseName{});

// ---- helpers for the plain tests --------------------------------------------------------

class DenseTest : public ::testing::Test {
protected:
    std::unique_ptr<Device> m_device = make_cpu_device(0);

    Tensor tensor(const Shape& shape, const std::vector<double>& values, DType dtype = DType::f64) {
        Tensor t = Tensor::empty(shape, DType::f64, *m_device, MemCategory::activations);
        EXPECT_EQ(static_cast<int64_t>(values.size()), t.numel());
        for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = values[i];
        return t.to(dtype);
    }
    Tensor random(const Shape& shape, uint64_t seed) {
        Rng rng(seed);
        Tensor t = Tensor::empty(shape, DType::f64, *m_device, MemCategory::activations);
        for (double& v : t.span<double>()) v = rng.normal();
        return t;
    }
    // Samples [first, first + count) of x.
    Tensor slice(const Tensor& x, int64_t first, int64_t count) {
        Shape s = x.shape();
        s[0] = count;
        Tensor t = Tensor::empty(s, DType::f64, *m_device, MemCategory::activations);
        const int64_t per = x.numel() / x.dim(0);
        for (int64_t i = 0; i < count * per; ++i)
            t.data<double>()[i] = x.data<double>()[first * per + i];
        return t;
    }
    template <class L>
    std::unique_ptr<L> built(std::unique_ptr<L> layer, const Shape& input,
                             DType dtype = DType::f64) {
        layer->set_label("layer 4 (" + layer->type() + ")");
        layer->build(input, dtype, *m_device);
        Rng rng(7);
        layer->reset_parameters(rng);
        return layer;
    }
};

// ---- Linear -------------------------------------------------------------------------------

TEST_F(DenseTest, LinearParametersAndFlops) {
    auto fc = built(std::make_unique<nn::Linear>(3), Shape{5});
    EXPECT_EQ(fc->type(), "linear");
    EXPECT_EQ(fc->output_shape(), Shape{3});
    auto params = fc->parameters();
    ASSERT_EQ(params.size(), 2u);
    EXPECT_EQ(params[0]->name, "weight");
    EXPECT_EQ(params[0]->value.shape(), (Shape{3, 5}));
    EXPECT_EQ(params[1]->name, "bias");
    EXPECT_EQ(params[1]->value.shape(), Shape{3});
    EXPECT_EQ(fc->parameter_count(), 18);
    EXPECT_EQ(fc->flops_per_sample(), 2 * 5 * 3 + 3);

    auto nobias = built(std::make_unique<nn::Linear>(3, false), Shape{5});
    ASSERT_EQ(nobias->parameters().size(), 1u);
    EXPECT_EQ(nobias->parameter_count(), 15);
    EXPECT_EQ(nobias->flops_per_sample(), 30);

    // Four rows per sample: four times the work, the same parameters.
    auto seq = built(std::make_unique<nn::Linear>(5), Shape{4, 6});
    EXPECT_EQ(seq->output_shape(), (Shape{4, 5}));
    EXPECT_EQ(seq->parameter_count(), 35);
    EXPECT_EQ(seq->flops_per_sample(), 4 * (2 * 6 * 5 + 5));
}

TEST_F(DenseTest, LinearInitWithinPytorchBound) {
    auto fc = built(std::make_unique<nn::Linear>(40), Shape{25});
    const double bound = 1.0 / 5.0;
    for (nn::Param* p : fc->parameters()) {
        double max_abs = 0;
        for (double v : p->value.span<double>()) max_abs = std::max(max_abs, std::abs(v));
        EXPECT_LE(max_abs, bound) << p->name;
        EXPECT_GT(max_abs, 0.5 * bound) << p->name << " looks unset";
    }
}

TEST_F(DenseTest, LinearForwardHandComputed) {
    auto fc = built(std::make_unique<nn::Linear>(2), Shape{2});
    fc->parameters()[0]->value.copy_from(tensor(Shape{2, 2}, {1, 2, 3, 4}));
    fc->parameters()[1]->value.copy_from(tensor(Shape{2}, {0.5, -1}));
    Tensor y = fc->forward(tensor(Shape{2, 2}, {1, 1, 2, -1}), Mode::train);
    // [1, 1] -> [1+2+0.5, 3+4-1]; [2, -1] -> [2-2+0.5, 6-4-1]
    const std::vector<double> expected{3.5, 6, 0.5, 1};
    for (int i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(y.data<double>()[i], expected[i]) << i;
}

TEST_F(DenseTest, LinearAppliesToTheLastDimOfAnyRank) {
    // Per-sample [2, 3, 4]: every one of the 6 rows of a sample goes through the same W, b.
    auto fc = built(std::make_unique<nn::Linear>(3), Shape{2, 3, 4});
    EXPECT_EQ(fc->output_shape(), (Shape{2, 3, 3}));
    Tensor x = random(Shape{2, 2, 3, 4}, 11);
    Tensor y = fc->forward(x, Mode::eval);
    ASSERT_EQ(y.shape(), (Shape{2, 2, 3, 3}));
    const double* w = fc->parameters()[0]->value.data<double>();
    const double* b = fc->parameters()[1]->value.data<double>();
    for (int64_t r = 0; r < 12; ++r)
        for (int64_t o = 0; o < 3; ++o) {
            double s = b[o];
            for (int64_t k = 0; k < 4; ++k) s += x.data<double>()[r * 4 + k] * w[o * 4 + k];
            EXPECT_NEAR(y.data<double>()[r * 3 + o], s, 1e-12) << r << "," << o;
        }
}

TEST_F(DenseTest, LinearBackwardAccumulates) {
    auto fc = built(std::make_unique<nn::Linear>(3), Shape{4});
    Tensor x = random(Shape{2, 4}, 3), dy = random(Shape{2, 3}, 4);
    fc->zero_grad();
    fc->forward(x, Mode::train);
    fc->backward(dy);
    std::vector<Tensor> once;
    for (nn::Param* p : fc->parameters()) once.push_back(p->grad.clone(MemCategory::workspace));
    fc->forward(x, Mode::train);
    fc->backward(dy);
    auto params = fc->parameters();
    for (size_t k = 0; k < params.size(); ++k)
        for (int64_t i = 0; i < once[k].numel(); ++i)
            EXPECT_NEAR(params[k]->grad.data<double>()[i], 2 * once[k].data<double>()[i], 1e-12);
}

TEST_F(DenseTest, LinearNoInputGradWhenFirstLayer) {
    auto fc = built(std::make_unique<nn::Linear>(3), Shape{4});
    fc->set_needs_input_grad(false);
    fc->forward(random(Shape{2, 4}, 1), Mode::train);
    EXPECT_FALSE(fc->backward(random(Shape{2, 3}, 2)).defined());
}

TEST_F(DenseTest, LinearShapeErrorsNameLayerAndShapes) {
    nn::Linear fc(3);
    fc.set_label("layer 2 (linear)");
    try {
        fc.build(Shape{}, DType::f32, *m_device);
        FAIL() << "no ShapeError for a scalar input";
    } catch (const ShapeError& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("layer 2 (linear)"), std::string::npos) << msg;
        EXPECT_NE(msg.find("[..., features]"), std::string::npos) << msg;
        EXPECT_NE(msg.find("got []"), std::string::npos) << msg;
    }
    EXPECT_THROW(nn::Linear(0), ConfigError);
}

// ---- Activation -----------------------------------------------------------------------------

TEST_F(DenseTest, ActivationValues) {
    const Tensor x = tensor(Shape{1, 5}, {-1000, -1, 0, 1, 1000});
    struct Row {
        ActivationKind kind;
        const char* type;
        std::vector<double> y;
    };
    const std::vector<Row> rows{
        {ActivationKind::relu, "relu", {0, 0, 0, 1, 1000}},
        {ActivationKind::gelu, "gelu", {0, -0.15865525393145707, 0, 0.8413447460685429, 1000}},
        {ActivationKind::tanh, "tanh", {-1, -0.7615941559557649, 0, 0.7615941559557649, 1}},
        {ActivationKind::sigmoid, "sigmoid", {0, 0.2689414213699951, 0.5, 0.7310585786300049, 1}},
    };
    for (const Row& r : rows) {
        for (DType dtype : {DType::f64, DType::f32}) {
            auto act = built(std::make_unique<nn::Activation>(r.kind), Shape{5}, dtype);
            EXPECT_EQ(act->type(), r.type);
            EXPECT_EQ(act->parameter_count(), 0);
            Tensor y = act->forward(x.to(dtype), Mode::train).to(DType::f64);
            for (int i = 0; i < 5; ++i)
                EXPECT_NEAR(y.data<double>()[i], r.y[i], 1e-6) << r.type << " at " << i;
        }
    }
}

// ---- Dropout ------------------------------------------------------------------------------

TEST_F(DenseTest, DropoutSplitBatchDrawsTheSameMasks) {
    // One device with the batch of 4 against two devices with samples [0, 2) and [2, 4).
    auto whole = built(std::make_unique<nn::Dropout>(0.5), Shape{3, 5});
    auto first = built(std::make_unique<nn::Dropout>(0.5), Shape{3, 5});
    auto second = built(std::make_unique<nn::Dropout>(0.5), Shape{3, 5});
    whole->set_random_state(42, 7, 0);
    first->set_random_state(42, 7, 0);
    second->set_random_state(42, 7, 2);
    const Tensor x = random(Shape{4, 3, 5}, 5), dy = random(Shape{4, 3, 5}, 6);

    const Tensor y = whole->forward(x, Mode::train);
    const Tensor y0 = first->forward(slice(x, 0, 2), Mode::train);
    const Tensor y1 = second->forward(slice(x, 2, 2), Mode::train);
    const Tensor dx = whole->backward(dy);
    const Tensor dx0 = first->backward(slice(dy, 0, 2));
    const Tensor dx1 = second->backward(slice(dy, 2, 2));
    int dropped = 0;
    for (int64_t i = 0; i < 30; ++i) {
        EXPECT_EQ(y.data<double>()[i], y0.data<double>()[i]) << i;
        EXPECT_EQ(y.data<double>()[30 + i], y1.data<double>()[i]) << i;
        EXPECT_EQ(dx.data<double>()[i], dx0.data<double>()[i]) << i;
        EXPECT_EQ(dx.data<double>()[30 + i], dx1.data<double>()[i]) << i;
    }
    for (int64_t i = 0; i < 60; ++i) dropped += y.data<double>()[i] == 0;
    EXPECT_GT(dropped, 0);
    EXPECT_LT(dropped, 60);
    // Both halves must not draw the mask of samples [0, 2): the offset has to matter.
    auto unshifted = built(std::make_unique<nn::Dropout>(0.5), Shape{3, 5});
    unshifted->set_random_state(42, 7, 0);
    const Tensor y1_wrong = unshifted->forward(slice(x, 2, 2), Mode::train);
    int differ = 0;
    for (int64_t i = 0; i < 30; ++i) differ += y1_wrong.data<double>()[i] != y1.data<double>()[i];
    EXPECT_GT(differ, 0);
}

TEST_F(DenseTest, DropoutKeepsOneMinusPScaledAndChangesWithStep) {
    const double p = 0.3;
    // 2 x 50000 elements: enough for the mask to be drawn by several threads.
    auto drop = built(std::make_unique<nn::Dropout>(p), Shape{50000});
    Tensor x = Tensor::empty(Shape{2, 50000}, DType::f64, *m_device, MemCategory::activations);
    x.fill(1.0);
    drop->set_random_state(1, 0, 0);
    const Tensor a = drop->forward(x, Mode::train).clone(MemCategory::workspace);
    int64_t kept = 0;
    for (double v : a.span<double>()) {
        if (v != 0) {
            EXPECT_DOUBLE_EQ(v, 1.0 / (1.0 - p));
            ++kept;
        }
    }
    EXPECT_NEAR(static_cast<double>(kept) / 100000.0, 1 - p, 0.01);

    drop->set_random_state(1, 1, 0);
    const Tensor b = drop->forward(x, Mode::train);
    int64_t differ = 0;
    for (int64_t i = 0; i < 100000; ++i) differ += a.data<double>()[i] != b.data<double>()[i];
    EXPECT_GT(differ, 10000) << "the next step drew the same mask";

    const Tensor e = drop->forward(x, Mode::eval);
    for (double v : e.span<double>()) ASSERT_EQ(v, 1.0);
}

TEST_F(DenseTest, DropoutLayersOfOneModelDrawDifferentMasks) {
    // A model hands every layer the same (seed, step, offset); the label tells them apart.
    auto a = built(std::make_unique<nn::Dropout>(0.5), Shape{64});
    auto b = built(std::make_unique<nn::Dropout>(0.5), Shape{64});
    a->set_label("model.layers[1] (dropout)");
    b->set_label("model.layers[3] (dropout)");
    a->set_random_state(3, 1, 0);
    b->set_random_state(3, 1, 0);
    Tensor x = Tensor::empty(Shape{1, 64}, DType::f64, *m_device, MemCategory::activations);
    x.fill(1.0);
    const Tensor ya = a->forward(x, Mode::train), yb = b->forward(x, Mode::train);
    int differ = 0;
    for (int64_t i = 0; i < 64; ++i) differ += ya.data<double>()[i] != yb.data<double>()[i];
    EXPECT_GT(differ, 8);
}

TEST_F(DenseTest, DropoutPOutOfRangeThrows) {
    EXPECT_THROW(nn::Dropout(-0.1), ConfigError);
    EXPECT_THROW(nn::Dropout(1.0), ConfigError);
    EXPECT_THROW(nn::Dropout(1.5), ConfigError);
    EXPECT_THROW(nn::Dropout(std::nan("")), ConfigError);
    EXPECT_NO_THROW(nn::Dropout(0.0));
    EXPECT_NO_THROW(nn::Dropout(0.99));
    EXPECT_EQ(nn::Dropout(0.5).type(), "dropout");
}

// ---- Embedding ------------------------------------------------------------------------------

TEST_F(DenseTest, EmbeddingGathersRowsAndScattersGradients) {
    auto emb = built(std::make_unique<nn::Embedding>(5, 3), Shape{4});
    EXPECT_EQ(emb->type(), "embedding");
    EXPECT_EQ(emb->output_shape(), (Shape{4, 3}));
    EXPECT_EQ(emb->parameter_count(), 15);
    const double* w = emb->parameters()[0]->value.data<double>();
    const std::vector<int> ids{4, 0, 4, 2};
    Tensor y = emb->forward(tensor(Shape{1, 4}, {4, 0, 4, 2}), Mode::train);
    for (int t = 0; t < 4; ++t)
        for (int c = 0; c < 3; ++c)
            EXPECT_EQ(y.data<double>()[t * 3 + c], w[ids[t] * 3 + c]) << t << "," << c;

    emb->zero_grad();
    EXPECT_FALSE(
        emb->backward(tensor(Shape{1, 4, 3}, {1, 1, 1, 2, 2, 2, 10, 10, 10, 3, 3, 3})).defined());
    const double* g = emb->parameters()[0]->grad.data<double>();
    const std::vector<double> expected{2, 0, 3, 0, 11};  // per row; id 4 appears twice
    for (int r = 0; r < 5; ++r)
        for (int c = 0; c < 3; ++c) EXPECT_EQ(g[r * 3 + c], expected[r]) << r << "," << c;
}

TEST_F(DenseTest, EmbeddingInitIsStandardNormal) {
    auto emb = built(std::make_unique<nn::Embedding>(100, 50), Shape{1});
    double sum = 0, sq = 0;
    for (double v : emb->parameters()[0]->value.span<double>()) sum += v, sq += v * v;
    EXPECT_NEAR(sum / 5000, 0.0, 0.05);
    EXPECT_NEAR(sq / 5000, 1.0, 0.08);
}

TEST_F(DenseTest, EmbeddingBadIdThrowsWithClearMessage) {
    auto emb = built(std::make_unique<nn::Embedding>(11, 4), Shape{3});
    for (double bad : {12.0, -1.0, 2.5}) {
        try {
            emb->forward(tensor(Shape{1, 3}, {1, bad, 0}), Mode::train);
            FAIL() << "no error for id " << bad;
        } catch (const Error& e) {
            const std::string msg = e.what();
            std::ostringstream id;
            id << "token id " << bad;
            EXPECT_NE(msg.find("layer 4 (embedding)"), std::string::npos) << msg;
            EXPECT_NE(msg.find(id.str()), std::string::npos) << msg;
            EXPECT_NE(msg.find("vocabulary size is 11"), std::string::npos) << msg;
        }
    }
    EXPECT_THROW(nn::Embedding(0, 4), ConfigError);
    nn::Embedding wrong_rank(11, 4);
    EXPECT_THROW(wrong_rank.build(Shape{2, 3}, DType::f32, *m_device), ShapeError);
}

// ---- kernels the layers above do not reach ---------------------------------------------------

TEST(ElementwiseKernels, BiasAddRowsAndColumnSumsMatchLoops) {
    // 600 columns: more than one column block; 37 x 600 is serial, 150 x 600 crosses the
    // kernels' threshold for threads.
    for (int64_t rows : {37, 150}) {
        const int64_t cols = 600;
        Rng rng(9);
        std::vector<double> x(rows * cols), bias(cols), y, sums(cols, 1.0);
        for (double& v : x) v = rng.normal();
        for (double& v : bias) v = rng.normal();
        y = x;
        kernels::cpu::bias_add_rows<double>(rows, cols, bias.data(), y.data());
        kernels::cpu::column_sums_accumulate<double>(rows, cols, x.data(), sums.data());
        for (int64_t c = 0; c < cols; ++c) {
            double s = 1.0;
            for (int64_t r = 0; r < rows; ++r) {
                ASSERT_EQ(y[r * cols + c], x[r * cols + c] + bias[c]);
                s += x[r * cols + c];
            }
            ASSERT_NEAR(sums[c], s, 1e-12) << c;
        }
    }
}

}  // namespace
