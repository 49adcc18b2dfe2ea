// The cuDNN convolution (kernels/gpu/conv.h) against a plain direct convolution in double,
// written here from the definition (independent of the CPU's im2col + GEMM): forward with and
// without bias, the input gradient, and the weight and bias gradients ADDED to random starting
// values, for LeNet's two convolutions, strides, 1x1 and 3x3 kernels, batches of 1 and 3, a
// kernel wider than the input, in f32 (FMA math), TF32 and f64. Outputs are poisoned with NaN
// first, so an element cuDNN leaves unwritten fails. Also: dx = null skips the input gradient,
// reruns repeat bit for bit (deterministic algorithms), a non-default stream, two plans on one
// GPU from two threads at once, and the errors (bad geometry, no GPU) name the geometry.
#include <gtest/gtest.h>
#include <kernels/gpu/conv.h>
#include <kernels/gpu/error.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/gpu/gpu_testing.h"

using namespace paralab;
using namespace paralab::gpu_testing;
namespace kc = kernels::cpu;

namespace {

struct ConvCase {
    const char* name;
    int64_t N, C, H, W, K, kernel, stride, padding;
    bool bias;
    kc::Conv2dGeometry geometry() const { return kc::Conv2dGeometry{C, H, W, kernel, stride, padding}; }
};

const ConvCase kCases[] = {
    {"lenet_conv1", 64, 1, 28, 28, 16, 5, 1, 2, true},
    {"lenet_conv2", 64, 16, 14, 14, 32, 5, 1, 2, true},
    {"stride2_3x3_pad1_oblong", 8, 3, 17, 15, 8, 3, 2, 1, true},
    {"k3_pad1_batch3", 3, 4, 12, 12, 5, 3, 1, 1, true},
    {"k1_batch3", 3, 7, 9, 11, 6, 1, 1, 0, true},
    {"k3_nopad_batch1", 1, 2, 10, 10, 4, 3, 1, 0, true},
    {"no_bias", 5, 3, 8, 8, 4, 3, 1, 1, false},
    {"kernel_wider_than_input", 2, 2, 4, 3, 3, 5, 1, 2, true},
    {"stride3_k2_gaps", 4, 3, 11, 11, 5, 2, 3, 0, true},
};

enum class Precision { f32, tf32, f64 };

const char* name_of(Precision p) { return p == Precision::f32 ? "f32" : p == Precision::tf32 ? "tf32" : "f64"; }

// The direct convolution in double: y [N, K, OH, OW] = sum over c, i, j of
// x[n, c, oh*s - p + i, ow*s - p + j] * w[k, c, i, j] (+ b[k]); positions in the padding are 0.
struct Reference {
    std::vector<double> y, dx, dw, db;
};

Reference reference(const ConvCase& cc, const std::vector<double>& x, const std::vector<double>& w,
                    const std::vector<double>& b, const std::vector<double>& dy, std::vector<double> dw0,
                    std::vector<double> db0) {
    const auto g = cc.geometry();
    const int64_t OH = g.out_height(), OW = g.out_width(), k = cc.kernel;
    Reference r;
    r.y.assign(static_cast<size_t>(cc.N * cc.K * OH * OW), 0.0);
    r.dx.assign(x.size(), 0.0);
    r.dw = std::move(dw0);
    r.db = std::move(db0);
    for (int64_t n = 0; n < cc.N; ++n)
        for (int64_t o = 0; o < cc.K; ++o)
            for (int64_t oh = 0; oh < OH; ++oh)
                for (int64_t ow = 0; ow < OW; ++ow) {
                    const size_t yi = static_cast<size_t>(((n * cc.K + o) * OH + oh) * OW + ow);
                    double acc = cc.bias ? b[static_cast<size_t>(o)] : 0.0;
                    const double g_out = dy[yi];
                    for (int64_t c = 0; c < cc.C; ++c)
                        for (int64_t i = 0; i < k; ++i)
                            for (int64_t j = 0; j < k; ++j) {
                                const int64_t ih = oh * cc.stride - cc.padding + i;
                                const int64_t iw = ow * cc.stride - cc.padding + j;
                                if (ih < 0 || ih >= cc.H || iw < 0 || iw >= cc.W) continue;
                                const size_t xi = static_cast<size_t>(((n * cc.C + c) * cc.H + ih) * cc.W + iw);
                                const size_t wi = static_cast<size_t>(((o * cc.C + c) * k + i) * k + j);
                                acc += x[xi] * w[wi];
                                r.dx[xi] += g_out * w[wi];
                                r.dw[wi] += g_out * x[xi];
                            }
                    r.y[yi] = acc;
                    if (cc.bias) r.db[static_cast<size_t>(o)] += g_out;
                }
    return r;
}

template <class T>
std::vector<T> nans(int64_t n) {
    return std::vector<T>(static_cast<size_t>(n), std::numeric_limits<T>::quiet_NaN());
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// A workspace on GPU 0 of at least one byte.
struct Workspace {
    explicit Workspace(size_t bytes) : buffer(static_cast<int64_t>(bytes == 0 ? 1 : bytes)) {}
    DeviceBuffer<unsigned char> buffer;
    void* get() const { return buffer.get(); }
};

// Everything one case needs on the host: random inputs (never zeros), the starting gradients
// and the double reference.
template <class T>
struct Inputs {
    std::vector<T> x, w, b, dy, dw0, db0;
    Reference ref;
    Inputs(const ConvCase& cc, uint64_t seed) {
        const auto g = cc.geometry();
        const int64_t OH = g.out_height(), OW = g.out_width();
        x = random_normal<T>(cc.N * cc.C * cc.H * cc.W, seed + 1);
        w = random_normal<T>(cc.K * cc.C * cc.kernel * cc.kernel, seed + 2, 0.0, 0.5);
        b = random_normal<T>(cc.K, seed + 3);
        dy = random_normal<T>(cc.N * cc.K * OH * OW, seed + 4);
        dw0 = random_normal<T>(cc.K * cc.C * cc.kernel * cc.kernel, seed + 5);
        db0 = random_normal<T>(cc.K, seed + 6);
        ref = reference(cc, convert<double>(x), convert<double>(w), convert<double>(b), convert<double>(dy),
                        convert<double>(dw0), convert<double>(db0));
    }
};

// What one forward + backward on the GPU returned.
template <class T>
struct Outputs {
    std::vector<T> y, dx, dw, db;
};

template <class T>
Outputs<T> run_plan(const kg::CudnnConv2dPlan& plan, const ConvCase& cc, const Inputs<T>& in, bool want_dx,
                    void* stream = nullptr) {
    DeviceBuffer<T> x(in.x), w(in.w), b(in.b), dy(in.dy), dw(in.dw0), db(in.db0);
    DeviceBuffer<T> y(nans<T>(static_cast<int64_t>(in.ref.y.size()))), dx(nans<T>(static_cast<int64_t>(in.x.size())));
    Workspace ws(std::max(plan.forward_workspace_bytes(), plan.backward_workspace_bytes()));
    // The synchronous uploads ran on the legacy default stream, which a non-blocking stream
    // does not wait for.
    kg::synchronize_device(0);
    plan.forward(x.get(), w.get(), cc.bias ? b.get() : nullptr, y.get(), ws.get(), stream);
    plan.backward(x.get(), dy.get(), w.get(), want_dx ? dx.get() : nullptr, dw.get(), cc.bias ? db.get() : nullptr,
                  ws.get(), stream);
    return {y.download(), dx.download(), dw.download(), db.download()};
}

class GpuConv : public GpuParamTest<std::tuple<ConvCase, Precision>> {
protected:
    void SetUp() override {
        GpuParamTest::SetUp();
        if (IsSkipped()) return;
        if (!kg::cudnn_available())
            GTEST_SKIP() << "no cuDNN: this ParaLab was built without cuDNN (or -DPARALAB_CUDNN=OFF), or the "
                            "cuDNN found at run time has no convolutions";
    }
};

template <class T>
void check_case(const ConvCase& cc, Precision precision) {
    const Inputs<T> in(cc, 1000 + static_cast<uint64_t>(cc.N * 7 + cc.C * 13 + cc.kernel));
    const kg::CudnnConv2dPlan plan(0, cc.geometry(), cc.N, cc.K, cc.bias, precision == Precision::f64,
                                   precision == Precision::tf32);
    EXPECT_EQ(plan.batch(), cc.N);
    const Outputs<T> out = run_plan(plan, cc, in, true);
    // fp32 and fp64: each element against max(|expected|, rms); TF32 norm-wise, as for the
    // GEMMs (its input rounding, 2^-11, is random over a sum of up to 800 products).
    const double tol = precision == Precision::f64 ? kFp64Tol : precision == Precision::tf32 ? kTf32Tol : kFp32Tol;
    const Metric metric = precision == Precision::tf32 ? Metric::normwise : Metric::elementwise;
    std::cout << "  [" << cc.name << ", " << name_of(precision) << "] workspace fwd "
              << plan.forward_workspace_bytes() << " B, bwd " << plan.backward_workspace_bytes() << " B; "
              << plan.algorithms() << "\n";
    const auto report = [&](const char* what, const ::testing::AssertionResult& r) {
        std::cout << "    " << what << ": " << r.message() << "\n";
        EXPECT_TRUE(r) << what;
    };
    report("y", close_to(out.y, in.ref.y, tol, metric));
    report("dx", close_to(out.dx, in.ref.dx, tol, metric));
    report("dw (dw0 + grad)", close_to(out.dw, in.ref.dw, tol, metric));
    if (cc.bias) {
        report("db (db0 + grad)", close_to(out.db, in.ref.db, tol, metric));
    } else {
        EXPECT_TRUE(same_bits(out.db, in.db0)) << "db changed without a bias";
    }
}

}  // namespace

TEST_P(GpuConv, MatchesDirectConvolution) {
    const auto& [cc, precision] = GetParam();
    if (precision == Precision::f64)
        check_case<double>(cc, precision);
    else
        check_case<float>(cc, precision);
}

INSTANTIATE_TEST_SUITE_P(Cases, GpuConv,
                         ::testing::Combine(::testing::ValuesIn(kCases),
                                            ::testing::Values(Precision::f32, Precision::tf32, Precision::f64)),
                         [](const auto& info) {
                             return std::string(std::get<0>(info.param).name) + "_" +
                                    name_of(std::get<1>(info.param));
                         });

namespace {

class GpuConvPlan : public GpuTest {
protected:
    void SetUp() override {
        GpuTest::SetUp();
        if (IsSkipped()) return;
        if (!kg::cudnn_available())
            GTEST_SKIP() << "no cuDNN: this ParaLab was built without cuDNN (or -DPARALAB_CUDNN=OFF), or the "
                            "cuDNN found at run time has no convolutions";
    }
};

const ConvCase kLenet2 = kCases[1];

}  // namespace

// dx = null: the input gradient is skipped (dx untouched), the parameter gradients are not.
TEST_F(GpuConvPlan, NullDxSkipsTheInputGradient) {
    const Inputs<float> in(kLenet2, 77);
    const kg::CudnnConv2dPlan plan(0, kLenet2.geometry(), kLenet2.N, kLenet2.K, true, false);
    const Outputs<float> out = run_plan(plan, kLenet2, in, false);
    for (float v : out.dx) ASSERT_TRUE(std::isnan(v)) << "dx was written although it was null";
    EXPECT_TRUE(close_to(out.y, in.ref.y, kFp32Tol));
    EXPECT_TRUE(close_to(out.dw, in.ref.dw, kFp32Tol));
    EXPECT_TRUE(close_to(out.db, in.ref.db, kFp32Tol));
}

// Deterministic algorithms: a second run from the same start gives the same bits, in f32 and
// f64; and a plan made again chooses the same (the heuristics are a function of the problem).
TEST_F(GpuConvPlan, RerunsRepeatBitForBit) {
    for (const ConvCase& cc : {kCases[0], kCases[1], kCases[2]}) {
        SCOPED_TRACE(cc.name);
        const Inputs<float> in(cc, 91);
        const kg::CudnnConv2dPlan plan(0, cc.geometry(), cc.N, cc.K, cc.bias, false);
        const Outputs<float> a = run_plan(plan, cc, in, true), b = run_plan(plan, cc, in, true);
        const kg::CudnnConv2dPlan again(0, cc.geometry(), cc.N, cc.K, cc.bias, false);
        const Outputs<float> c = run_plan(again, cc, in, true);
        for (const Outputs<float>* o : {&b, &c}) {
            EXPECT_TRUE(same_bits(a.y, o->y));
            EXPECT_TRUE(same_bits(a.dx, o->dx));
            EXPECT_TRUE(same_bits(a.dw, o->dw));
            EXPECT_TRUE(same_bits(a.db, o->db));
        }
        const Inputs<double> ind(cc, 92);
        const kg::CudnnConv2dPlan pland(0, cc.geometry(), cc.N, cc.K, cc.bias, true);
        const Outputs<double> ad = run_plan(pland, cc, ind, true), bd = run_plan(pland, cc, ind, true);
        EXPECT_TRUE(same_bits(ad.y, bd.y));
        EXPECT_TRUE(same_bits(ad.dx, bd.dx));
        EXPECT_TRUE(same_bits(ad.dw, bd.dw));
        EXPECT_TRUE(same_bits(ad.db, bd.db));
    }
}

// On a stream of its own (non-blocking, as a CudaDevice's compute stream): the same bits as on
// the default stream.
TEST_F(GpuConvPlan, RunsOnTheGivenStream) {
    const Inputs<float> in(kLenet2, 55);
    const kg::CudnnConv2dPlan plan(0, kLenet2.geometry(), kLenet2.N, kLenet2.K, true, false);
    void* stream = kg::stream_create(0, true);
    const Outputs<float> on_stream = run_plan(plan, kLenet2, in, true, stream);
    kg::stream_destroy(stream);
    const Outputs<float> on_default = run_plan(plan, kLenet2, in, true, nullptr);
    EXPECT_TRUE(same_bits(on_stream.y, on_default.y));
    EXPECT_TRUE(same_bits(on_stream.dx, on_default.dx));
    EXPECT_TRUE(same_bits(on_stream.dw, on_default.dw));
    EXPECT_TRUE(same_bits(on_stream.db, on_default.db));
    EXPECT_TRUE(close_to(on_stream.y, in.ref.y, kFp32Tol));
}

// Two rank threads on one GPU, each with its own plan and stream, 20 steps at once: each gets
// what it gets alone (a handle per plan; nothing shared between plans).
TEST_F(GpuConvPlan, TwoPlansOnOneGpuFromTwoThreads) {
    const ConvCase cases[2] = {kCases[0], kCases[1]};
    std::vector<Outputs<float>> alone(2), together(2);
    std::vector<std::unique_ptr<Inputs<float>>> inputs;
    std::vector<std::unique_ptr<kg::CudnnConv2dPlan>> plans;
    for (int r = 0; r < 2; ++r) {
        inputs.push_back(std::make_unique<Inputs<float>>(cases[r], 300 + r));
        plans.push_back(std::make_unique<kg::CudnnConv2dPlan>(0, cases[r].geometry(), cases[r].N, cases[r].K, true,
                                                              false));
        alone[r] = run_plan(*plans[r], cases[r], *inputs[r], true);
    }
    std::vector<std::string> errors(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
        threads.emplace_back([&, r] {
            try {
                kg::set_device(0);
                void* stream = kg::stream_create(0, true);
                for (int step = 0; step < 20; ++step) together[r] = run_plan(*plans[r], cases[r], *inputs[r], true, stream);
                kg::stream_destroy(stream);
            } catch (const std::exception& e) {
                errors[r] = e.what();
            }
        });
    for (auto& t : threads) t.join();
    for (int r = 0; r < 2; ++r) {
        SCOPED_TRACE(cases[r].name);
        EXPECT_EQ(errors[r], "");
        EXPECT_TRUE(same_bits(alone[r].y, together[r].y));
        EXPECT_TRUE(same_bits(alone[r].dx, together[r].dx));
        EXPECT_TRUE(same_bits(alone[r].dw, together[r].dw));
        EXPECT_TRUE(same_bits(alone[r].db, together[r].db));
    }
}

// An empty batch: a plan is made and its calls do nothing.
TEST_F(GpuConvPlan, EmptyBatchDoesNothing) {
    const ConvCase cc{"empty", 0, 3, 8, 8, 4, 3, 1, 1, true};
    const kg::CudnnConv2dPlan plan(0, cc.geometry(), 0, cc.K, true, false);
    EXPECT_EQ(plan.batch(), 0);
    EXPECT_EQ(plan.forward_workspace_bytes(), 0u);
    EXPECT_EQ(plan.backward_workspace_bytes(), 0u);
    const auto dw0 = random_normal<float>(cc.K * cc.C * 9, 5), db0 = random_normal<float>(cc.K, 6);
    DeviceBuffer<float> x(1), w(cc.K * cc.C * 9), b(cc.K), y(1), dy(1), dx(1), dw(dw0), db(db0);
    plan.forward(x.get(), w.get(), b.get(), y.get(), nullptr, nullptr);
    plan.backward(x.get(), dy.get(), w.get(), dx.get(), dw.get(), db.get(), nullptr, nullptr);
    EXPECT_TRUE(same_bits(dw.download(), dw0));
    EXPECT_TRUE(same_bits(db.download(), db0));
}

// Misuse is refused before anything is queued, naming the plan.
TEST_F(GpuConvPlan, MisuseIsRefusedNamingThePlan) {
    const ConvCase cc = kCases[6];  // no bias
    const kg::CudnnConv2dPlan plan(0, cc.geometry(), cc.N, cc.K, false, false);
    DeviceBuffer<float> x(cc.N * cc.C * cc.H * cc.W), w(cc.K * cc.C * 9), b(cc.K), y(cc.N * cc.K * 64);
    Workspace ws(plan.forward_workspace_bytes());
    try {
        plan.forward(x.get(), w.get(), b.get(), y.get(), ws.get(), nullptr);
        FAIL() << "a bias given to a plan without one was accepted";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("no bias"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("conv2d of 5 x [3, 8, 8] into 4 channels"), std::string::npos) << e.what();
    }
    EXPECT_THROW(plan.backward(x.get(), y.get(), w.get(), nullptr, nullptr, b.get(), ws.get(), nullptr),
                 std::invalid_argument);
}

// ---- no GPU needed -------------------------------------------------------------------------

// A geometry without an output position, or a non-positive size, is refused with
// std::invalid_argument naming it, in every build and with or without a GPU.
TEST(GpuConvNoDevice, BadGeometryIsRefusedNamingIt) {
    const kc::Conv2dGeometry too_small{3, 2, 2, 5, 1, 1};  // 2 + 2*1 < 5
    try {
        kg::CudnnConv2dPlan plan(0, too_small, 4, 8, true, false);
        FAIL() << "a kernel larger than the padded input was accepted";
    } catch (const std::invalid_argument& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("conv2d of 4 x [3, 2, 2] into 8 channels, kernel 5, stride 1, padding 1"),
                  std::string::npos)
            << what;
    }
    EXPECT_THROW(kg::CudnnConv2dPlan(0, kc::Conv2dGeometry{3, 8, 8, 3, 0, 1}, 4, 8, true, false),
                 std::invalid_argument);  // stride 0
    EXPECT_THROW(kg::CudnnConv2dPlan(0, kc::Conv2dGeometry{3, 8, 8, 3, 1, 1}, 4, 0, true, false),
                 std::invalid_argument);  // no output channel
    EXPECT_THROW(kg::CudnnConv2dPlan(0, kc::Conv2dGeometry{3, 8, 8, 3, 1, 1}, -1, 4, true, false),
                 std::invalid_argument);  // negative batch
}

// Without a GPU (or without cuDNN) a plan cannot be made, and the error names the geometry.
TEST(GpuConvNoDevice, NoGpuOrNoCudnnThrowsNamingTheGeometry) {
    if (kg::device_count() > 0 && kg::cudnn_available())
        GTEST_SKIP() << "this machine has a GPU and cuDNN: the plan would be made (the other tests use it)";
    try {
        kg::CudnnConv2dPlan plan(0, kc::Conv2dGeometry{1, 28, 28, 5, 1, 2}, 64, 16, true, false);
        FAIL() << "a plan was made without a GPU or without cuDNN";
    } catch (const std::runtime_error& e) {  // GpuError is a runtime_error
        const std::string what = e.what();
        EXPECT_NE(what.find("conv2d of 64 x [1, 28, 28] into 16 channels, kernel 5, stride 1, padding 2"),
                  std::string::npos)
            << what;
    }
}
