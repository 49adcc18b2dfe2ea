// What the gpu tests share: skipping (with the reason) where there is no GPU, a typed device
// buffer, random inputs, and the comparison every kernel test makes against the CPU reference.
// Header-only; Qt-free.
#pragma once

#include <gtest/gtest.h>
#include <kernels/gpu/info.h>
#include <kernels/gpu/memory.h>
#include <kernels/gpu/stream.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace paralab::gpu_testing {

namespace kg = kernels::gpu;

inline std::string no_gpu_reason() {
    return kg::backend_built()
               ? "no CUDA device: this machine has no NVIDIA GPU or no driver "
                 "(kernels::gpu::device_count() == 0); run tests/gpu/run_on_gpu.sh on a GPU machine"
               : "no CUDA device: this ParaLab was built without the CUDA backend";
}

// Every gpu test derives from this (or calls PARALAB_REQUIRE_GPU first): SKIPPED, not passed,
// without a GPU; GPU 0 current otherwise.
class GpuTest : public ::testing::Test {
protected:
    void SetUp() override {
        if (kg::device_count() == 0) GTEST_SKIP() << no_gpu_reason();
        kg::set_device(0);
    }
};

// The element types every templated kernel is instantiated for: TYPED_TEST_SUITE(Suite, FloatTypes).
using FloatTypes = ::testing::Types<float, double>;

template <class Param>
class GpuParamTest : public ::testing::TestWithParam<Param> {
protected:
    void SetUp() override {
        if (kg::device_count() == 0) GTEST_SKIP() << no_gpu_reason();
        kg::set_device(0);
    }
};

// n elements of T on GPU 0, freed with the object; copies are synchronous.
template <class T>
class DeviceBuffer {
public:
    explicit DeviceBuffer(int64_t n) : m_n(n) {
        m_ptr = static_cast<T*>(kg::device_allocate(0, bytes() == 0 ? 1 : bytes()));
        if (!m_ptr) throw std::runtime_error("DeviceBuffer: GPU 0 is out of memory");
    }
    explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(static_cast<int64_t>(host.size())) {
        upload(host);
    }
    ~DeviceBuffer() { kg::device_free(0, m_ptr); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    T* get() const { return m_ptr; }
    int64_t size() const { return m_n; }
    size_t bytes() const { return static_cast<size_t>(m_n) * sizeof(T); }

    void upload(const std::vector<T>& host) {
        if (static_cast<int64_t>(host.size()) != m_n) throw std::invalid_argument("DeviceBuffer: size");
        kg::copy_host_to_device(m_ptr, host.data(), bytes());
    }
    // Waits for the device first, so that kernels on any stream have finished.
    std::vector<T> download() const {
        kg::synchronize_device(0);
        std::vector<T> host(static_cast<size_t>(m_n));
        kg::copy_device_to_host(host.data(), m_ptr, bytes());
        return host;
    }

private:
    int64_t m_n;
    T* m_ptr = nullptr;
};

// Normal(mean, stddev) values from a fixed seed: a failure reproduces.
template <class T>
std::vector<T> random_normal(int64_t n, uint64_t seed, double mean = 0.0, double stddev = 1.0) {
    std::mt19937_64 gen(seed);
    std::normal_distribution<double> dist(mean, stddev);
    std::vector<T> v(static_cast<size_t>(n));
    for (auto& x : v) x = static_cast<T>(dist(gen));
    return v;
}

template <class T>
std::vector<T> random_uniform(int64_t n, uint64_t seed, double lo, double hi) {
    std::mt19937_64 gen(seed);
    std::uniform_real_distribution<double> dist(lo, hi);
    std::vector<T> v(static_cast<size_t>(n));
    for (auto& x : v) x = static_cast<T>(dist(gen));
    return v;
}

template <class To, class From>
std::vector<To> convert(const std::vector<From>& v) {
    return std::vector<To>(v.begin(), v.end());
}

// Relative error bounds by precision: fp32 ~1e-5, tf32 ~1e-3, bf16 ~1e-2.
constexpr double kFp32Tol = 1e-5;
constexpr double kFp64Tol = 1e-12;
constexpr double kTf32Tol = 1e-3;
constexpr double kBf16Tol = 1e-2;

// elementwise: max over i of |got - ref| / max(|ref_i|, rms(ref)) (the floor keeps an entry
// that cancelled to ~0 from dividing by ~0); normwise: ||got - ref||_2 / ||ref||_2 (for GEMMs,
// whose rounding errors are random over a sum). A NaN on either side never passes, nor does an
// inf unless both sides hold the same inf.
enum class Metric { elementwise, normwise };

template <class G, class R>
::testing::AssertionResult close_to(const std::vector<G>& got, const std::vector<R>& ref, double tol,
                                    Metric metric = Metric::elementwise) {
    if (got.size() != ref.size())
        return ::testing::AssertionFailure()
               << "sizes differ: " << got.size() << " computed, " << ref.size() << " expected";
    double sq_ref = 0;
    for (const auto& r : ref)
        if (std::isfinite(static_cast<double>(r))) sq_ref += static_cast<double>(r) * static_cast<double>(r);
    const double rms = ref.empty() ? 0.0 : std::sqrt(sq_ref / static_cast<double>(ref.size()));
    double worst = 0, sq_diff = 0;
    size_t worst_i = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        const double g = static_cast<double>(got[i]), r = static_cast<double>(ref[i]);
        if (std::isnan(g) || std::isnan(r))
            return ::testing::AssertionFailure()
                   << "NaN at " << i << ": computed " << g << ", expected " << r;
        if (std::isinf(g) || std::isinf(r)) {
            if (g == r) continue;
            return ::testing::AssertionFailure()
                   << "inf at " << i << ": computed " << g << ", expected " << r;
        }
        const double d = std::abs(g - r);
        sq_diff += d * d;
        const double denom = std::max(std::abs(r), rms);
        const double e = denom > 0 ? d / denom : d;
        if (e > worst) {
            worst = e;
            worst_i = i;
        }
    }
    const double error = metric == Metric::elementwise ? worst
                         : sq_ref > 0                 ? std::sqrt(sq_diff / sq_ref)
                                                      : std::sqrt(sq_diff);
    std::ostringstream what;
    what << (metric == Metric::elementwise ? "max elementwise" : "normwise") << " relative error "
         << error << " (bound " << tol << ")";
    if (!got.empty())
        what << "; worst at " << worst_i << ": computed " << static_cast<double>(got[worst_i])
             << ", expected " << static_cast<double>(ref[worst_i]);
    if (error <= tol) return ::testing::AssertionSuccess() << what.str();
    return ::testing::AssertionFailure() << what.str();
}

// The bound for T: fp32 or fp64.
template <class T>
constexpr double tolerance() {
    return sizeof(T) == 4 ? kFp32Tol : kFp64Tol;
}

}  // namespace paralab::gpu_testing
