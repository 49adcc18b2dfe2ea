// Softmax + cross-entropy and the row argmax on the GPU against kernels/cpu/softmax.h, on
// fresh random logits: shapes from a 2-class toy to a language model's vocabulary.
#include <gtest/gtest.h>
#include <kernels/cpu/softmax.h>
#include <kernels/gpu/softmax.h>

#include <limits>

#include "tests/gpu/gpu_testing.h"

using namespace paralab;
using namespace paralab::gpu_testing;
namespace kc = kernels::cpu;

namespace {
struct Shape {
    int64_t rows, classes;
};
void PrintTo(const Shape& s, std::ostream* out) { *out << s.rows << "x" << s.classes; }
class GpuSoftmax : public GpuParamTest<Shape> {};

template <class T>
void check_softmax_cross_entropy(int64_t rows, int64_t classes) {
    const auto logits = random_normal<T>(rows * classes, 51 + rows, 0.0, 4.0);
    std::vector<int64_t> targets(static_cast<size_t>(rows));
    std::mt19937_64 gen(52);
    for (auto& t : targets) t = static_cast<int64_t>(gen() % classes);
    const auto ld = convert<double>(logits);
    std::vector<double> probs_ref(ld.size()), dlogits_ref(ld.size());
    const double loss_ref = kc::softmax_cross_entropy_forward<double>(rows, classes, ld.data(), targets.data(),
                                                                      probs_ref.data());
    kc::softmax_cross_entropy_backward<double>(rows, classes, probs_ref.data(), targets.data(), 1.0 / rows,
                                               dlogits_ref.data());
    std::vector<int64_t> argmax_ref(static_cast<size_t>(rows));
    kc::argmax_rows<double>(rows, classes, ld.data(), argmax_ref.data());

    DeviceBuffer<T> d_logits(logits), d_probs(rows * classes), d_dlogits(rows * classes);
    DeviceBuffer<int64_t> d_targets(targets), d_argmax(rows);
    DeviceBuffer<double> d_row_loss(rows), d_loss(1);
    kg::softmax_cross_entropy_forward<T>(rows, classes, d_logits.get(), d_targets.get(), d_probs.get(),
                                         d_row_loss.get(), d_loss.get(), nullptr);
    kg::softmax_cross_entropy_backward<T>(rows, classes, d_probs.get(), d_targets.get(), static_cast<T>(1.0 / rows),
                                          d_dlogits.get(), nullptr);
    kg::argmax_rows<T>(rows, classes, d_logits.get(), d_argmax.get(), nullptr);
    EXPECT_TRUE(close_to(d_probs.download(), probs_ref, tolerance<T>()));
    EXPECT_TRUE(close_to(d_loss.download(), std::vector<double>{loss_ref}, tolerance<T>()));
    EXPECT_TRUE(close_to(d_dlogits.download(), dlogits_ref, tolerance<T>()));
    EXPECT_EQ(d_argmax.download(), argmax_ref);
}
}  // namespace

TEST_P(GpuSoftmax, Fp32MatchesCpu) { check_softmax_cross_entropy<float>(GetParam().rows, GetParam().classes); }
TEST_P(GpuSoftmax, Fp64MatchesCpu) { check_softmax_cross_entropy<double>(GetParam().rows, GetParam().classes); }

INSTANTIATE_TEST_SUITE_P(Shapes, GpuSoftmax,
                         ::testing::Values(Shape{1, 2}, Shape{64, 10}, Shape{1000, 3}, Shape{33, 1000},
                                           Shape{8, 50257}),
                         [](const auto& info) {
                             return std::to_string(info.param.rows) + "x" + std::to_string(info.param.classes);
                         });

class GpuArgmax : public GpuTest {};

// Ties take the first; a NaN at column 0 wins (std::max_element keeps it), elsewhere it never
// does: the CPU's answers, row by row.
TEST_F(GpuArgmax, TiesAndNansAsTheCpu) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const int64_t cols = 4;
    const std::vector<float> x{1, 3, 3, 2,        // tie: first of the maxima
                               nan, 5, 6, 7,      // NaN first: 0
                               1, nan, 0, 1,      // NaN elsewhere: ignored, tie -> 0
                               -1, -2, nan, -0.5f};
    const int64_t rows = 4;
    std::vector<int64_t> ref(rows);
    kc::argmax_rows<float>(rows, cols, x.data(), ref.data());
    DeviceBuffer<float> d_x(x);
    DeviceBuffer<int64_t> d_out(rows);
    kg::argmax_rows<float>(rows, cols, d_x.get(), d_out.get(), nullptr);
    EXPECT_EQ(d_out.download(), ref);
}
