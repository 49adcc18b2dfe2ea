// The check macro (kernels/cuda/check.cuh) and the tests' own comparison helper. These need no
// GPU: a CUDA call that fails (here: there is no such device) and the libraries' status strings
// work without one, and the helper is plain host code. So they run, and pass, on the build
// machine too.
#include <cublas_v2.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <limits>
#include <string>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/cublas_api.cuh"
#include "kernels/cuda/shared_library.cuh"
#ifdef PARALAB_TEST_CUDNN
#include <kernels/gpu/conv.h>

#include "kernels/cuda/check_cudnn.cuh"
#endif
#ifdef PARALAB_TEST_NCCL
#include <kernels/gpu/nccl.h>

#include "kernels/cuda/check_nccl.cuh"
#endif
#include "tests/gpu/gpu_testing.h"

using namespace paralab;
using namespace paralab::gpu_testing;
using kernels::gpu::GpuError;

namespace {
bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

// What PARALAB_GPU_CHECK throws for a failed library status (a test failure when it throws
// nothing), so that each library's test states only what it expects of the error.
template <class Status>
GpuError error_of(Status failed) {
    try {
        PARALAB_GPU_CHECK(failed);
    } catch (const GpuError& e) {
        return e;
    }
    ADD_FAILURE() << "a failed status should throw";
    return GpuError("", 0, "", "", "", 0);
}
}  // namespace

// A runtime call that fails inside the library: the device after the last one (GPU 0 where
// there is none) cannot be made current.
TEST(GpuCheck, FailedRuntimeCallThrowsStatementFileLineAndCudaString) {
    const int missing = kg::device_count();
    try {
        kg::set_device(missing);
        FAIL() << "set_device(" << missing << ") should have thrown";
    } catch (const GpuError& e) {
        EXPECT_EQ(e.library(), "CUDA");
        EXPECT_NE(e.status(), 0);
        EXPECT_TRUE(contains(e.statement(), "cudaSetDevice")) << e.statement();
        EXPECT_TRUE(contains(e.file(), "runtime.cu")) << e.file();
        EXPECT_GT(e.line(), 0);
        EXPECT_TRUE(contains(e.status_text(), "cudaError")) << e.status_text();
        const std::string what = e.what();
        EXPECT_TRUE(contains(what, e.statement()) && contains(what, e.file()) &&
                    contains(what, std::to_string(e.line())) && contains(what, e.status_text()))
            << what;
    }
}

TEST(GpuCheck, MacroNamesTheStatementAndThisFile) {
    try {
        PARALAB_GPU_CHECK(static_cast<cudaError_t>(cudaErrorInvalidValue));
        FAIL() << "a failed status should throw";
    } catch (const GpuError& e) {
        EXPECT_EQ(e.status(), static_cast<int>(cudaErrorInvalidValue));
        EXPECT_TRUE(contains(e.statement(), "cudaErrorInvalidValue")) << e.statement();
        EXPECT_TRUE(contains(e.file(), "test_gpu_check.cpp")) << e.file();
        EXPECT_TRUE(contains(e.status_text(), "cudaErrorInvalidValue")) << e.status_text();
    }
    EXPECT_NO_THROW(PARALAB_GPU_CHECK(cudaSuccess));
}

TEST(GpuCheck, CublasStatusNamesCublas) {
    const GpuError e = error_of(CUBLAS_STATUS_NOT_INITIALIZED);
    EXPECT_EQ(e.library(), "cuBLAS");
    EXPECT_EQ(e.status(), static_cast<int>(CUBLAS_STATUS_NOT_INITIALIZED));
    EXPECT_TRUE(contains(e.status_text(), "CUBLAS_STATUS_NOT_INITIALIZED")) << e.status_text();
    EXPECT_NO_THROW(PARALAB_GPU_CHECK(CUBLAS_STATUS_SUCCESS));
}

// Whether the process has a library whose file name contains `name` mapped.
bool mapped(const std::string& name) {
    std::ifstream maps("/proc/self/maps");
    for (std::string line; std::getline(maps, line);)
        if (contains(line, name)) return true;
    return false;
}

// Why cuBLAS cannot be opened, or empty once it is.
std::string cublas_load_error() {
    try {
        kernels::gpu::detail::cublas();
        return {};
    } catch (const GpuError& e) {
        return e.status_text();
    }
}

// cuBLAS is opened at its first use, not at start-up (kernels/cuda/cublas_api.cuh): a process
// that runs no GPU GEMM never maps it. In a fresh process (a death test re-runs this program):
// not mapped at first, mapped once a cuBLAS status is named (where it can be opened).
TEST(GpuCheckDeathTest, CublasIsOpenedAtItsFirstUse) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(
        {
            if (mapped("libcublas")) std::_Exit(1);
            (void)error_of(CUBLAS_STATUS_NOT_INITIALIZED);
            const bool mapped_by_the_check = mapped("libcublas");
            const bool opened = cublas_load_error().empty();
            std::_Exit(mapped_by_the_check == opened ? 0 : 2);
        },
        ::testing::ExitedWithCode(0), "");
    const std::string why = cublas_load_error();
    if (!why.empty()) GTEST_SKIP() << "cuBLAS cannot be opened here, so only its absence was seen: " << why;
}

// A library opened at first use (kernels/cuda/shared_library.cuh) that is not there, or lacks a
// function: the error names the library, the file and the loader's reason.
TEST(GpuCheck, AMissingLibraryIsNamedWithTheLoadersReason) {
    using kernels::gpu::detail::SharedLibrary;
    const SharedLibrary missing{"Nothing", "libparalab_no_such_library.so.1", "/nonexistent",
                                "install nothing"};
    try {
        kernels::gpu::detail::open_shared_library(missing);
        FAIL() << "a missing library was opened";
    } catch (const GpuError& e) {
        EXPECT_EQ(e.library(), "Nothing");
        EXPECT_TRUE(contains(e.status_text(), "cannot open libparalab_no_such_library.so.1")) << e.status_text();
        EXPECT_TRUE(contains(e.status_text(), "No such file")) << e.status_text();  // dlerror()'s words
        EXPECT_TRUE(contains(e.status_text(), "install nothing")) << e.status_text();
    }
    const SharedLibrary libc{"the C library", "libc.so.6", "/nonexistent", "install libc6"};
    void* handle = kernels::gpu::detail::open_shared_library(libc);
    ASSERT_NE(handle, nullptr);
    EXPECT_NE(kernels::gpu::detail::shared_library_symbol(libc, handle, "strlen"), nullptr);
    try {
        kernels::gpu::detail::shared_library_symbol(libc, handle, "paralab_no_such_function");
        FAIL() << "a missing function was found";
    } catch (const GpuError& e) {
        EXPECT_EQ(e.library(), "the C library");
        EXPECT_TRUE(contains(e.status_text(), "libc.so.6 has no paralab_no_such_function")) << e.status_text();
    }
}

#ifdef PARALAB_TEST_CUDNN
// cuDNN is opened at its first use (kernels/cuda/cudnn_api.cuh), like cuBLAS: in a fresh process
// not mapped at first; cudnn_available() opens it, and then it is mapped exactly when it opened.
TEST(GpuCheckDeathTest, CudnnIsOpenedAtItsFirstUse) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(
        {
            if (mapped("libcudnn")) std::_Exit(1);
            (void)kg::cudnn_available();
            const bool mapped_by_the_query = mapped("libcudnn");
            const bool opened = kernels::gpu::detail::cudnn_load_error().empty();
            std::_Exit(mapped_by_the_query == opened ? 0 : 2);
        },
        ::testing::ExitedWithCode(0), "");
    const std::string why = kernels::gpu::detail::cudnn_load_error();
    if (!why.empty()) GTEST_SKIP() << "cuDNN cannot be opened here, so only its absence was seen: " << why;
}

TEST(GpuCheck, CudnnStatusNamesCudnn) {
    const GpuError e = error_of(CUDNN_STATUS_BAD_PARAM);
    EXPECT_EQ(e.library(), "cuDNN");
    EXPECT_FALSE(e.status_text().empty());
    EXPECT_NO_THROW(PARALAB_GPU_CHECK(CUDNN_STATUS_SUCCESS));
}
#endif

#ifdef PARALAB_TEST_NCCL
// NCCL too: not mapped until nccl::available() (or any other call of kernels/gpu/nccl.h) asks,
// then mapped exactly when it opened.
TEST(GpuCheckDeathTest, NcclIsOpenedAtItsFirstUse) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(
        {
            if (mapped("libnccl")) std::_Exit(1);
            const bool available = kg::nccl::available();
            const bool mapped_by_the_query = mapped("libnccl");
            const bool opened = kernels::gpu::detail::nccl_load_error().empty();
            std::_Exit(available == opened && mapped_by_the_query == opened ? 0 : 2);
        },
        ::testing::ExitedWithCode(0), "");
    const std::string why = kernels::gpu::detail::nccl_load_error();
    if (!why.empty()) GTEST_SKIP() << "NCCL cannot be opened here, so only its absence was seen: " << why;
}

TEST(GpuCheck, NcclResultNamesNccl) {
    const GpuError e = error_of(ncclInvalidArgument);
    EXPECT_EQ(e.library(), "NCCL");
    EXPECT_FALSE(e.status_text().empty());
    EXPECT_NO_THROW(PARALAB_GPU_CHECK(ncclSuccess));
}
#endif

// ---- the comparison helper: a NaN never passes ------------------------------------------------

TEST(GpuCompareHelper, NanOnEitherSideFails) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    EXPECT_FALSE(close_to(std::vector<double>{1.0, nan}, std::vector<double>{1.0, 2.0}, 1.0));
    EXPECT_FALSE(close_to(std::vector<double>{1.0, 2.0}, std::vector<double>{1.0, nan}, 1.0));
    EXPECT_FALSE(close_to(std::vector<float>{nanf("")}, std::vector<double>{nan}, 1.0));
    EXPECT_FALSE(close_to(std::vector<double>{nan}, std::vector<double>{nan}, 1.0, Metric::normwise));
}

TEST(GpuCompareHelper, InfPassesOnlyAgainstTheSameInf) {
    const double inf = std::numeric_limits<double>::infinity();
    EXPECT_TRUE(close_to(std::vector<double>{inf, 1.0}, std::vector<double>{inf, 1.0}, 1e-12));
    EXPECT_FALSE(close_to(std::vector<double>{inf}, std::vector<double>{-inf}, 1.0));
    EXPECT_FALSE(close_to(std::vector<double>{1e300}, std::vector<double>{inf}, 1.0));
}

TEST(GpuCompareHelper, RelativeBoundsAreRelative) {
    EXPECT_TRUE(close_to(std::vector<double>{1000.0 * (1 + 5e-6)}, std::vector<double>{1000.0}, 1e-5));
    EXPECT_FALSE(close_to(std::vector<double>{1000.0 * (1 + 2e-5)}, std::vector<double>{1000.0}, 1e-5));
    // An entry near zero is measured against the array's rms, not against itself.
    EXPECT_TRUE(close_to(std::vector<double>{1.0, 1e-7}, std::vector<double>{1.0, 0.0}, 1e-5));
    EXPECT_FALSE(close_to(std::vector<float>{1.0f}, std::vector<float>{1.0f, 2.0f}, 1.0));
}
