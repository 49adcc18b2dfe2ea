// Elementwise GPU kernels against the CPU reference (kernels/cpu/elementwise.h) on fresh random
// inputs: activations forward and backward (NaN and inf included), bias rows, column sums,
// products, the squared error, embedding rows and dropout's mask (bit for bit). The reference
// runs in double on the same inputs; float results must be within 1e-5, double within 1e-12.
#include <gtest/gtest.h>
#include <kernels/cpu/elementwise.h>
#include <kernels/gpu/dropout.h>
#include <kernels/gpu/elementwise.h>
#include <kernels/gpu/embedding.h>
#include <kernels/gpu/reduce.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "engine/util/rng.h"
#include "tests/gpu/gpu_testing.h"

using namespace paralab;
using namespace paralab::gpu_testing;
namespace kc = kernels::cpu;

namespace {

template <class T>
class GpuElementwise : public GpuTest {};
TYPED_TEST_SUITE(GpuElementwise, FloatTypes);

template <class T>
struct ActivationCase {
    const char* name;
    void (*gpu_forward)(int64_t, const T*, T*, void*);
    void (*cpu_forward)(int64_t, const double*, double*);
    void (*gpu_backward)(int64_t, const T*, const T*, T*, void*);
    void (*cpu_backward)(int64_t, const double*, const double*, double*);
    bool backward_reads_output;  // tanh, sigmoid: dx from y; relu, gelu: dx from x
};

template <class T>
std::vector<ActivationCase<T>> activations() {
    namespace kg = kernels::gpu;
    return {
        {"relu", kg::relu_forward<T>, kc::relu_forward<double>, kg::relu_backward<T>, kc::relu_backward<double>, false},
        {"gelu", kg::gelu_forward<T>, kc::gelu_forward<double>, kg::gelu_backward<T>, kc::gelu_backward<double>, false},
        {"tanh", kg::tanh_forward<T>, kc::tanh_forward<double>, kg::tanh_backward<T>, kc::tanh_backward<double>, true},
        {"sigmoid", kg::sigmoid_forward<T>, kc::sigmoid_forward<double>, kg::sigmoid_backward<T>,
         kc::sigmoid_backward<double>, true},
    };
}

// NaN exactly where the reference has NaN, then close elsewhere.
template <class G>
::testing::AssertionResult same_nans_then_close(std::vector<G> got, std::vector<double> ref, double tol) {
    for (size_t i = 0; i < got.size(); ++i) {
        const bool gn = std::isnan(static_cast<double>(got[i])), rn = std::isnan(ref[i]);
        if (gn != rn)
            return ::testing::AssertionFailure() << "NaN mismatch at " << i << ": computed " << got[i]
                                                 << ", expected " << ref[i];
        if (gn) got[i] = G(0), ref[i] = 0;
    }
    return close_to(got, ref, tol);
}

}  // namespace

TYPED_TEST(GpuElementwise, ActivationsMatchCpu) {
    using T = TypeParam;
    for (const auto& act : activations<T>()) {
        for (int64_t n : {int64_t{1}, int64_t{1000}, (int64_t{1} << 20) + 3}) {
            SCOPED_TRACE(std::string(act.name) + " n=" + std::to_string(n));
            const auto x = random_normal<T>(n, 1000 + n, 0.0, 3.0);
            const auto dy = random_normal<T>(n, 2000 + n);
            const auto xd = convert<double>(x), dyd = convert<double>(dy);
            std::vector<double> y_ref(x.size()), dx_ref(x.size());
            act.cpu_forward(n, xd.data(), y_ref.data());
            // Both backwards read the same y, the reference's rounded to T: 1 - y^2 and y (1 - y)
            // cancel near saturation, and a forward's last-bit difference would show there.
            const auto y_in = convert<T>(y_ref);
            const auto y_ind = convert<double>(y_in);
            act.cpu_backward(n, act.backward_reads_output ? y_ind.data() : xd.data(), dyd.data(), dx_ref.data());

            DeviceBuffer<T> d_x(x), d_dy(dy), d_y(n), d_dx(n), d_y_in(y_in);
            act.gpu_forward(n, d_x.get(), d_y.get(), nullptr);
            EXPECT_TRUE(close_to(d_y.download(), y_ref, tolerance<T>()));
            act.gpu_backward(n, act.backward_reads_output ? d_y_in.get() : d_x.get(), d_dy.get(), d_dx.get(), nullptr);
            EXPECT_TRUE(close_to(d_dx.download(), dx_ref, tolerance<T>()));
        }
    }
}

TYPED_TEST(GpuElementwise, ActivationsTreatNanAndInfAsTheCpu) {
    using T = TypeParam;
    const T nan = std::numeric_limits<T>::quiet_NaN(), inf = std::numeric_limits<T>::infinity();
    const std::vector<T> x{nan, inf, -inf, T(0), T(-0.0), T(1e-30), T(-50), T(50), T(1e30), T(-1e30)};
    const int64_t n = static_cast<int64_t>(x.size());
    const std::vector<T> dy(x.size(), T(1.5));
    const auto xd = convert<double>(x), dyd = convert<double>(dy);
    for (const auto& act : activations<T>()) {
        SCOPED_TRACE(act.name);
        std::vector<double> y_ref(x.size()), dx_ref(x.size());
        act.cpu_forward(n, xd.data(), y_ref.data());
        const auto y_in = convert<T>(y_ref);  // the same y for both backwards (see above)
        const auto y_ind = convert<double>(y_in);
        act.cpu_backward(n, act.backward_reads_output ? y_ind.data() : xd.data(), dyd.data(), dx_ref.data());
        DeviceBuffer<T> d_x(x), d_dy(dy), d_y(n), d_dx(n);
        act.gpu_forward(n, d_x.get(), d_y.get(), nullptr);
        EXPECT_TRUE(same_nans_then_close(d_y.download(), y_ref, tolerance<T>()));
        DeviceBuffer<T> d_yref(y_in);
        act.gpu_backward(n, act.backward_reads_output ? d_yref.get() : d_x.get(), d_dy.get(), d_dx.get(), nullptr);
        EXPECT_TRUE(same_nans_then_close(d_dx.download(), dx_ref, tolerance<T>()));
    }
}

TYPED_TEST(GpuElementwise, BiasRowsAndColumnSumsMatchCpu) {
    using T = TypeParam;
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {7, 300}, {4096, 10}, {513, 1031}}) {
        SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols));
        const auto bias = random_normal<T>(cols, 11);
        const auto y0 = random_normal<T>(rows * cols, 12);
        const auto sums0 = random_normal<T>(cols, 13);
        const auto biasd = convert<double>(bias), y0d = convert<double>(y0);

        std::vector<double> broadcast_ref(y0.size()), add_ref = y0d, sums_ref = convert<double>(sums0);
        kc::bias_broadcast_rows<double>(rows, cols, biasd.data(), broadcast_ref.data());
        kc::bias_add_rows<double>(rows, cols, biasd.data(), add_ref.data());
        kc::column_sums_accumulate<double>(rows, cols, y0d.data(), sums_ref.data());

        DeviceBuffer<T> d_bias(bias), d_y(rows * cols), d_add(y0), d_x(y0), d_sums(sums0);
        kg::bias_broadcast_rows<T>(rows, cols, d_bias.get(), d_y.get(), nullptr);
        kg::bias_add_rows<T>(rows, cols, d_bias.get(), d_add.get(), nullptr);
        kg::column_sums_accumulate<T>(rows, cols, d_x.get(), d_sums.get(), nullptr);
        EXPECT_TRUE(close_to(d_y.download(), broadcast_ref, 0.0));  // a copy: exact
        EXPECT_TRUE(close_to(d_add.download(), add_ref, tolerance<T>()));
        EXPECT_TRUE(close_to(d_sums.download(), sums_ref, tolerance<T>()));
    }
}

TYPED_TEST(GpuElementwise, ProductAndSquaredErrorMatchCpu) {
    using T = TypeParam;
    const int64_t n = 300001;
    const auto a = random_normal<T>(n, 21), b = random_normal<T>(n, 22);
    const auto ad = convert<double>(a), bd = convert<double>(b);
    std::vector<double> prod_ref(a.size()), grad_ref(a.size());
    kc::multiply_elementwise<double>(n, ad.data(), bd.data(), prod_ref.data());
    const double sum_ref = kc::squared_error_sum<double>(n, ad.data(), bd.data());
    kc::squared_error_backward<double>(n, ad.data(), bd.data(), 2.0 / n, grad_ref.data());

    DeviceBuffer<T> d_a(a), d_b(b), d_prod(n), d_grad(n);
    DeviceBuffer<double> d_sum(1), scratch(kg::kReduceScratch);
    kg::multiply_elementwise<T>(n, d_a.get(), d_b.get(), d_prod.get(), nullptr);
    kg::squared_error_sum<T>(n, d_a.get(), d_b.get(), d_sum.get(), scratch.get(), nullptr);
    kg::squared_error_backward<T>(n, d_a.get(), d_b.get(), static_cast<T>(2.0 / n), d_grad.get(), nullptr);
    EXPECT_TRUE(close_to(d_prod.download(), prod_ref, tolerance<T>()));
    EXPECT_TRUE(close_to(d_sum.download(), std::vector<double>{sum_ref}, tolerance<T>()));
    EXPECT_TRUE(close_to(d_grad.download(), grad_ref, tolerance<T>()));
}

TYPED_TEST(GpuElementwise, EmbeddingGatherAndScatterAddMatchCpu) {
    using T = TypeParam;
    const int64_t vocab = 50, cols = 129, n = 4000;  // ids repeat ~80 times each
    const auto table = random_normal<T>(vocab * cols, 31);
    const auto src = random_normal<T>(n * cols, 32);
    std::vector<int64_t> index(static_cast<size_t>(n));
    std::mt19937_64 gen(33);
    for (auto& i : index) i = static_cast<int64_t>(gen() % vocab);
    const auto tabled = convert<double>(table), srcd = convert<double>(src);
    std::vector<double> gathered_ref(static_cast<size_t>(n * cols)), table_ref = tabled;
    kc::gather_rows<double>(n, cols, tabled.data(), index.data(), gathered_ref.data());
    kc::scatter_add_rows<double>(n, cols, srcd.data(), index.data(), table_ref.data());

    DeviceBuffer<T> d_table(table), d_out(n * cols), d_src(src);
    DeviceBuffer<int64_t> d_index(index);
    kg::gather_rows<T>(n, cols, d_table.get(), d_index.get(), d_out.get(), nullptr);
    EXPECT_TRUE(close_to(d_out.download(), gathered_ref, 0.0));  // copies: exact
    kg::scatter_add_rows<T>(n, vocab, cols, d_src.get(), d_index.get(), d_table.get(), nullptr);
    // ~80 additions per entry, in order of i as the CPU adds them: the CPU's bits in T.
    const std::vector<T> got = d_table.download();
    EXPECT_TRUE(close_to(got, table_ref, sizeof(T) == 4 ? 1e-5 : 1e-12));
    std::vector<T> cpu = table;
    kc::scatter_add_rows<T>(n, cols, src.data(), index.data(), cpu.data());
    EXPECT_EQ(0, std::memcmp(got.data(), cpu.data(), cpu.size() * sizeof(T))) << "not the CPU's order";
}

// The GPU draws the engine's mask: for the same key and element index, the same keep/drop
// decision as engine/util/rng.h's hash_uniform (what engine/nn/dropout.cpp uses), bit for bit.
TYPED_TEST(GpuElementwise, DropoutDrawsTheCpuMaskBitForBit) {
    using T = TypeParam;
    const int64_t n = (int64_t{1} << 20) + 17;
    for (double p : {0.0, 0.1, 0.5, 0.9}) {
        SCOPED_TRACE("p=" + std::to_string(p));
        const uint64_t key = splitmix64(splitmix64(1234 ^ 0xabcdef) ^ 7);  // (seed, label, step)
        const uint64_t first = 3 * static_cast<uint64_t>(n);                // a later batch
        const auto x = random_normal<T>(n, 41);
        const T scale = static_cast<T>(1.0 / (1.0 - p));
        std::vector<T> mask_ref(x.size()), y_ref(x.size());
        for (int64_t i = 0; i < n; ++i)
            mask_ref[i] = hash_uniform(key, first + static_cast<uint64_t>(i)) >= p ? scale : T(0);
        kc::multiply_elementwise<T>(n, x.data(), mask_ref.data(), y_ref.data());

        DeviceBuffer<T> d_x(x), d_mask(n), d_y(n), d_dx(n);
        kg::dropout_forward<T>(n, key, first, p, d_x.get(), d_mask.get(), d_y.get(), nullptr);
        const auto mask = d_mask.download();
        int64_t differing = 0;
        for (int64_t i = 0; i < n; ++i) differing += mask[i] != mask_ref[i];
        EXPECT_EQ(differing, 0);
        EXPECT_TRUE(close_to(d_y.download(), y_ref, 0.0));
        kg::dropout_backward<T>(n, d_x.get(), d_mask.get(), d_dx.get(), nullptr);  // dy = x
        EXPECT_TRUE(close_to(d_dx.download(), y_ref, 0.0));
    }
    DeviceBuffer<T> d(1);
    EXPECT_THROW(kg::dropout_forward<T>(1, 0, 0, 1.0, d.get(), d.get(), d.get(), nullptr), std::invalid_argument);
}
