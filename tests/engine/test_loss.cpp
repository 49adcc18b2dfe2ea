// Losses: hand-computed values, numerical stability, gradients against finite differences in
// f64, the denominator contract of data-parallel replicas, accuracy counts and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "engine/device/device.h"
#include "engine/nn/loss.h"
#include "engine/util/rng.h"

using namespace paralab;

namespace {

class LossTest : public ::testing::Test {
protected:
    std::unique_ptr<Device> m_device = make_cpu_device(0);

    Tensor tensor(const Shape& shape, const std::vector<double>& values, DType dtype = DType::f64) {
        Tensor t = Tensor::empty(shape, DType::f64, *m_device, MemCategory::activations);
        EXPECT_EQ(static_cast<int64_t>(values.size()), t.numel());
        for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = values[i];
        return t.to(dtype);
    }
    Tensor random(const Shape& shape, uint64_t seed, double scale = 1.0) {
        Rng rng(seed);
        Tensor t = Tensor::empty(shape, DType::f64, *m_device, MemCategory::activations);
        for (double& v : t.span<double>()) v = scale * rng.normal();
        return t;
    }

    // Central differences of loss.forward(pred, target, denominator) against loss.backward().
    void expect_gradient_matches(nn::Loss& loss, Tensor pred, const Tensor& target,
                                 int64_t denominator = 0) {
        loss.forward(pred, target, denominator);
        const Tensor grad = loss.backward();
        ASSERT_EQ(grad.shape(), pred.shape());
        const double eps = 1e-6;
        double* p = pred.data<double>();
        for (int64_t i = 0; i < pred.numel(); ++i) {
            const double saved = p[i];
            p[i] = saved + eps;
            const double lp = loss.forward(pred, target, denominator);
            p[i] = saved - eps;
            const double lm = loss.forward(pred, target, denominator);
            p[i] = saved;
            const double numeric = (lp - lm) / (2 * eps);
            EXPECT_NEAR(grad.data<double>()[i], numeric, 1e-6 + 1e-5 * std::abs(numeric))
                << loss.name() << " d/dpred[" << i << "]";
        }
    }
};

// ---- cross-entropy --------------------------------------------------------------------------

TEST_F(LossTest, CrossEntropyHandComputed) {
    nn::CrossEntropyLoss ce;
    EXPECT_EQ(ce.name(), "cross_entropy");
    // log(e^1 + e^2 + e^3) - 3
    EXPECT_NEAR(ce.forward(tensor(Shape{1, 3}, {1, 2, 3}), tensor(Shape{1}, {2})), 0.40760596444,
                1e-10);
    // Two rows: the mean of log(e^1+e^2+e^3) - 1 = 2.40760596 and log 2 (equal logits).
    const double two =
        ce.forward(tensor(Shape{2, 3}, {1, 2, 3, 5, 5, -1e9}), tensor(Shape{2}, {0, 1}));
    EXPECT_NEAR(two, (2.40760596444 + std::log(2.0)) / 2, 1e-10);
    // f32 logits and f32 targets give the same value to float precision.
    EXPECT_NEAR(
        ce.forward(tensor(Shape{1, 3}, {1, 2, 3}, DType::f32), tensor(Shape{1}, {2}, DType::f32)),
        0.40760596444, 1e-6);
}

TEST_F(LossTest, CrossEntropyBackwardHandComputed) {
    nn::CrossEntropyLoss ce;
    ce.forward(tensor(Shape{1, 3}, {1, 2, 3}), tensor(Shape{1}, {2}));
    const Tensor g = ce.backward();
    const double s = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
    EXPECT_NEAR(g.data<double>()[0], std::exp(1.0) / s, 1e-12);
    EXPECT_NEAR(g.data<double>()[1], std::exp(2.0) / s, 1e-12);
    EXPECT_NEAR(g.data<double>()[2], std::exp(3.0) / s - 1, 1e-12);
}

TEST_F(LossTest, CrossEntropyInvariantToAddedConstant) {
    nn::CrossEntropyLoss ce;
    const Tensor logits = random(Shape{4, 7}, 1), target = tensor(Shape{4}, {0, 6, 3, 3});
    const double base = ce.forward(logits, target);
    const Tensor g0 = ce.backward();
    Tensor shifted = logits.clone(MemCategory::activations);
    for (double& v : shifted.span<double>()) v += 123.25;
    EXPECT_NEAR(ce.forward(shifted, target), base, 1e-12);
    const Tensor g1 = ce.backward();
    for (int64_t i = 0; i < g0.numel(); ++i)
        EXPECT_NEAR(g1.data<double>()[i], g0.data<double>()[i], 1e-12) << i;
}

TEST_F(LossTest, CrossEntropyHugeLogitsStayFinite) {
    for (DType dtype : {DType::f32, DType::f64}) {
        nn::CrossEntropyLoss ce;
        // Right class far ahead: loss ~0; wrong class far ahead: loss ~2000.
        const Tensor logits = tensor(Shape{2, 3}, {1000, -1000, 0, 1000, -1000, 0}, dtype);
        const double loss = ce.forward(logits, tensor(Shape{2}, {0, 1}, dtype));
        ASSERT_TRUE(std::isfinite(loss)) << dtype_name(dtype);
        EXPECT_NEAR(loss, 1000.0, 1e-3) << dtype_name(dtype);
        const Tensor g = ce.backward().to(DType::f64);
        for (double v : g.span<double>()) EXPECT_TRUE(std::isfinite(v)) << dtype_name(dtype);
        EXPECT_NEAR(g.data<double>()[0], 0.0, 1e-6);
        EXPECT_NEAR(g.data<double>()[3], 0.5, 1e-6);   // (1 - 0) / 2
        EXPECT_NEAR(g.data<double>()[4], -0.5, 1e-6);  // (0 - 1) / 2
    }
}

TEST_F(LossTest, CrossEntropyBackwardMatchesFiniteDifferences) {
    nn::CrossEntropyLoss ce;
    expect_gradient_matches(ce, random(Shape{5, 4}, 2, 3.0), tensor(Shape{5}, {0, 3, 1, 1, 2}));
    expect_gradient_matches(ce, random(Shape{1, 9}, 3), tensor(Shape{1}, {8}));
    expect_gradient_matches(ce, random(Shape{3, 1}, 4), tensor(Shape{3}, {0, 0, 0}));
}

TEST_F(LossTest, DenominatorSplitsTheBatchLikeOneDevice) {
    // Two replicas with half the batch each, dividing by the global batch, sum to the loss
    // and the gradient of one device with the whole batch.
    nn::CrossEntropyLoss whole, half;
    const Tensor logits = random(Shape{4, 3}, 5), target = tensor(Shape{4}, {2, 0, 1, 2});
    const double full = whole.forward(logits, target);
    const Tensor g = whole.backward();
    const double l_default = half.forward(logits, target, 0);
    EXPECT_DOUBLE_EQ(l_default, full);
    const double l_doubled = half.forward(logits, target, 8);
    EXPECT_NEAR(l_doubled, full / 2, 1e-14);
    const Tensor g2 = half.backward();
    for (int64_t i = 0; i < g.numel(); ++i)
        EXPECT_NEAR(g2.data<double>()[i], g.data<double>()[i] / 2, 1e-15) << i;
    expect_gradient_matches(half, random(Shape{3, 4}, 6), tensor(Shape{3}, {1, 2, 3}), 7);
}

TEST_F(LossTest, CrossEntropyBadTargetNamesIt) {
    nn::CrossEntropyLoss ce;
    const Tensor logits = random(Shape{3, 4}, 7);
    for (double bad : {4.0, -1.0, 1.5}) {
        try {
            ce.forward(logits, tensor(Shape{3}, {0, bad, 2}));
            FAIL() << "no error for target " << bad;
        } catch (const Error& e) {
            std::ostringstream want;
            want << "target " << bad << " at row 1";
            const std::string msg = e.what();
            EXPECT_NE(msg.find("cross_entropy"), std::string::npos) << msg;
            EXPECT_NE(msg.find(want.str()), std::string::npos) << msg;
            EXPECT_NE(msg.find("[0, 4)"), std::string::npos) << msg;
        }
    }
}

// ---- mse ------------------------------------------------------------------------------------

TEST_F(LossTest, MseHandComputed) {
    nn::MseLoss mse;
    EXPECT_EQ(mse.name(), "mse");
    // Sample 0: ((1-0)^2 + (2-4)^2) / 2 = 2.5; sample 1: ((0-0)^2 + (-3-0)^2) / 2 = 4.5.
    const Tensor pred = tensor(Shape{2, 2}, {1, 2, 0, -3}),
                 target = tensor(Shape{2, 2}, {0, 4, 0, 0});
    EXPECT_DOUBLE_EQ(mse.forward(pred, target), 3.5);  // = torch MSELoss mean over 4 elements
    const Tensor g = mse.backward();
    // 2 (pred - target) / 4
    const std::vector<double> expected{0.5, -1, 0, -1.5};
    for (int i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(g.data<double>()[i], expected[i]) << i;
    EXPECT_DOUBLE_EQ(mse.forward(pred, target, 4), 3.5 * 2 / 4);
    // Targets in f32 against f64 predictions are converted, not refused.
    EXPECT_DOUBLE_EQ(mse.forward(pred, target.to(DType::f32)), 3.5);
}

TEST_F(LossTest, MseBackwardMatchesFiniteDifferences) {
    nn::MseLoss mse;
    expect_gradient_matches(mse, random(Shape{3, 2, 5}, 8), random(Shape{3, 2, 5}, 9));
    expect_gradient_matches(mse, random(Shape{1, 1}, 10), random(Shape{1, 1}, 11), 3);
}

// ---- shared contract -----------------------------------------------------------------------

TEST_F(LossTest, ShapeMismatchNamesBothShapes) {
    nn::CrossEntropyLoss ce;
    nn::MseLoss mse;
    struct Row {
        nn::Loss* loss;
        Shape pred, target;
    };
    const std::vector<Row> rows{
        {&ce, Shape{4, 3}, Shape{3}},    {&ce, Shape{4, 3}, Shape{4, 1}},
        {&ce, Shape{4, 3, 2}, Shape{4}}, {&mse, Shape{4, 3}, Shape{4, 2}},
        {&mse, Shape{4, 3}, Shape{12}},
    };
    for (const Row& r : rows) {
        try {
            r.loss->forward(
                Tensor::zeros(r.pred, DType::f32, *m_device, MemCategory::activations),
                Tensor::zeros(r.target, DType::f32, *m_device, MemCategory::activations));
            FAIL() << r.loss->name() << " accepted " << r.pred.to_string() << " with "
                   << r.target.to_string();
        } catch (const ShapeError& e) {
            const std::string msg = e.what();
            EXPECT_NE(msg.find(r.loss->name()), std::string::npos) << msg;
            EXPECT_NE(msg.find(r.pred.to_string()), std::string::npos) << msg;
            EXPECT_NE(msg.find(r.target.to_string()), std::string::npos) << msg;
        }
    }
}

TEST_F(LossTest, BackwardBeforeForwardAndBadDenominatorThrow) {
    nn::MseLoss mse;
    EXPECT_THROW(mse.backward(), Error);
    const Tensor x = random(Shape{2, 3}, 12);
    EXPECT_THROW(mse.forward(x, x, -1), Error);
    const Tensor empty =
        Tensor::zeros(Shape{0, 3}, DType::f64, *m_device, MemCategory::activations);
    EXPECT_THROW(mse.forward(empty, empty), Error);
    // A replica with no samples this step still passes the global batch: loss 0.
    EXPECT_EQ(mse.forward(empty, empty, 4), 0.0);
}

TEST_F(LossTest, CountCorrect) {
    const Tensor logits = tensor(Shape{4, 3}, {0.1, 0.9, 0.0,  // argmax 1
                                               5, -1, 2,       // argmax 0
                                               1, 1, 0,        // tie: the first, 0
                                               -3, -2, -1});   // argmax 2
    EXPECT_EQ(nn::count_correct(logits, tensor(Shape{4}, {1, 0, 0, 2})), 4);
    EXPECT_EQ(nn::count_correct(logits, tensor(Shape{4}, {1, 2, 1, 2})), 2);
    EXPECT_EQ(nn::count_correct(logits.to(DType::f32), tensor(Shape{4}, {0, 1, 2, 0}, DType::f32)),
              0);
    EXPECT_THROW(nn::count_correct(logits, tensor(Shape{3}, {1, 0, 0})), ShapeError);
    EXPECT_THROW(nn::count_correct(logits, tensor(Shape{4}, {1, 0, 3, 0})), Error);
}

TEST_F(LossTest, MakeLossByName) {
    EXPECT_EQ(nn::make_loss("cross_entropy")->name(), "cross_entropy");
    EXPECT_EQ(nn::make_loss("mse")->name(), "mse");
    EXPECT_NE(dynamic_cast<nn::CrossEntropyLoss*>(nn::make_loss("cross_entropy").get()), nullptr);
    try {
        nn::make_loss("hinge");
        FAIL() << "no ConfigError";
    } catch (const ConfigError& e) {
        EXPECT_STREQ(e.what(), "unknown loss 'hinge': expected cross_entropy or mse");
    }
}

}  // namespace
