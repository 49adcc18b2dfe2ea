// Composite layers (flatten, residual with and without projection, a whole model) against
// finite differences, and the model's shape errors, labels and summary.
#include <gtest/gtest.h>

#include "engine/device/device.h"
#include "engine/nn/activation.h"
#include "engine/nn/conv2d.h"
#include "engine/nn/factory.h"
#include "engine/nn/linear.h"
#include "engine/nn/model.h"
#include "engine/nn/norm.h"
#include "engine/nn/sequential.h"
#include "gradcheck.h"

using namespace paralab;
using namespace paralab::nn;
using paralab::testing::GradCase;

namespace {

template <class... L>
std::vector<std::unique_ptr<Layer>> layers(std::unique_ptr<L>... l) {
    std::vector<std::unique_ptr<Layer>> v;
    (v.push_back(std::move(l)), ...);
    return v;
}

class CompositeGrad : public ::testing::TestWithParam<GradCase> {};
TEST_P(CompositeGrad, MatchesFiniteDifferences) { paralab::testing::check_layer_gradients(GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    Grad, CompositeGrad,
    ::testing::Values(
        GradCase{"flatten_3x4x5", [] { return std::make_unique<Flatten>(); }, {3, 4, 5}, 2},
        GradCase{"flatten_batch1", [] { return std::make_unique<Flatten>(); }, {7}, 1},
        GradCase{"residual_identity",
                 [] {
                     return std::make_unique<Residual>(layers(std::make_unique<Linear>(6),
                                                              std::make_unique<Activation>(ActivationKind::tanh)));
                 },
                 {6}, 3},
        GradCase{"residual_linear_projection",
                 [] {
                     return std::make_unique<Residual>(layers(std::make_unique<Linear>(4),
                                                              std::make_unique<Activation>(ActivationKind::gelu)));
                 },
                 {7}, 2},
        GradCase{"residual_conv_projection",
                 [] {
                     return std::make_unique<Residual>(layers(std::make_unique<Conv2d>(4, 3, 2, 1, false),
                                                              std::make_unique<BatchNorm>(),
                                                              std::make_unique<Activation>(ActivationKind::relu)));
                 },
                 {2, 6, 6}, 3},
        GradCase{"residual_conv_same_shape",
                 [] {
                     return std::make_unique<Residual>(layers(std::make_unique<Conv2d>(3, 3, 1, 1),
                                                              std::make_unique<Activation>(ActivationKind::tanh)));
                 },
                 {3, 5, 4}, 2},
        GradCase{"sequential_mlp",
                 [] {
                     return std::make_unique<Sequential>(layers(std::make_unique<Flatten>(),
                                                                std::make_unique<Linear>(5),
                                                                std::make_unique<Activation>(ActivationKind::sigmoid),
                                                                std::make_unique<Linear>(3)));
                 },
                 {2, 3}, 4}),
    paralab::testing::GradCaseName{});

LayerSpec spec(std::string type) {
    LayerSpec s;
    s.type = std::move(type);
    return s;
}

TEST(Model, ShapeErrorNamesTheLayerAndBothShapes) {
    auto dev = make_cpu_device(0);
    LayerSpec conv = spec("conv2d");
    conv.out_channels = 4;
    conv.kernel = 3;
    LayerSpec lin = spec("linear");
    lin.out = 10;
    try {
        Model m({lin, conv}, Shape{784}, "cross_entropy", DType::f32, *dev);
        FAIL() << "expected a ShapeError";
    } catch (const ShapeError& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("model.layers[1] (conv2d)"), std::string::npos) << msg;
        EXPECT_NE(msg.find("[10]"), std::string::npos) << msg;
        EXPECT_NE(msg.find("[C, H, W]"), std::string::npos) << msg;
    }
}

TEST(Model, UnknownLayerTypeListsTheAllowedOnes) {
    auto dev = make_cpu_device(0);
    try {
        Model m({spec("lineer")}, Shape{4}, "mse", DType::f32, *dev);
        FAIL();
    } catch (const ConfigError& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("model.layers[0]"), std::string::npos) << msg;
        EXPECT_NE(msg.find("linear"), std::string::npos) << msg;
    }
}

TEST(Model, EmbeddingMustComeFirst) {
    auto dev = make_cpu_device(0);
    LayerSpec emb = spec("embedding");
    emb.vocab = 10;
    emb.dim = 4;
    EXPECT_THROW(Model({spec("relu"), emb}, Shape{5}, "mse", DType::f32, *dev), ConfigError);
}

TEST(Model, SummaryListsNestedLayersWithShapesAndParameters) {
    auto dev = make_cpu_device(0);
    LayerSpec conv = spec("conv2d");
    conv.out_channels = 8;
    conv.kernel = 3;
    conv.stride = 2;
    conv.padding = 1;
    LayerSpec res = spec("residual");
    res.layers = {conv, spec("relu")};
    LayerSpec lin = spec("linear");
    lin.out = 10;
    Model m({res, spec("global_avgpool"), lin}, Shape{1, 28, 28}, "cross_entropy", DType::f32, *dev);
    const auto rows = m.summary();
    // residual, its conv, its relu, its projection, global_avgpool, linear
    ASSERT_EQ(rows.size(), 6u);
    EXPECT_EQ(rows[0].path, "model.layers[0]");
    EXPECT_EQ(rows[0].output, (Shape{8, 14, 14}));
    EXPECT_EQ(rows[1].path, "model.layers[0].layers[0]");
    EXPECT_EQ(rows[1].depth, 1);
    EXPECT_EQ(rows[1].parameters, 8 * 1 * 9 + 8);
    EXPECT_EQ(rows[3].path, "model.layers[0].projection");
    EXPECT_EQ(rows[3].parameters, 8);  // 1x1 conv, 1 -> 8 channels, no bias
    EXPECT_EQ(rows[5].output, (Shape{10}));
    EXPECT_EQ(m.parameter_count(), 80 + 8 + 8 * 10 + 10);
    EXPECT_GT(m.flops_per_sample(), 2 * 8 * 9 * 14 * 14);
}

TEST(Model, FirstLayerComputesNoInputGradient) {
    auto dev = make_cpu_device(0);
    LayerSpec lin = spec("linear");
    lin.out = 3;
    Model m({lin}, Shape{4}, "mse", DType::f32, *dev);
    EXPECT_FALSE(m.net().at(0).needs_input_grad());
}

}  // namespace
