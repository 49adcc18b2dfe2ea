// What the programs run under mpirun by CTest share (label `mpi`): a fixture whose ranks agree
// on failures, so that rank 0's report names every rank that failed a test, a listener that
// makes the other ranks print only their failures, and the main that sets both up.
#pragma once

#include <gtest/gtest.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <cstdio>
#include <exception>
#include <vector>

#include "engine/comm/mpi.h"

namespace mpi_testing {

inline paralab::comm::Communicator& comm() {
    return paralab::comm::MpiGroup::world().communicator();
}

class AgreedTest : public ::testing::Test {
protected:
    void SetUp() override {
        if (!paralab::comm::MpiGroup::available()) GTEST_SKIP() << "this build has no MPI support";
    }

    // Every rank learns which ranks failed this test, so that rank 0's report names them.
    void TearDown() override {
        if (!paralab::comm::MpiGroup::available()) return;
        const int world = comm().world();
        std::vector<double> failed(static_cast<size_t>(world), 0.0);
        failed[size_t(comm().rank())] = HasFailure() ? 1.0 : 0.0;
        comm().all_gather(failed.data(), world, paralab::DType::f64);  // rank r's shard is element r
        for (int r = 0; r < world; ++r)
            if (r != comm().rank() && failed[size_t(r)] != 0)
                ADD_FAILURE() << "rank " << r << " failed this test (see its [rank " << r << "] lines)";
    }
};

// Ranks other than 0 print only what failed, prefixed with their rank.
class FailurePrinter : public ::testing::EmptyTestEventListener {
public:
    explicit FailurePrinter(int rank) : m_rank(rank) {}
    void OnTestPartResult(const ::testing::TestPartResult& result) override {
        if (!result.failed()) return;
        std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", m_rank,
                     result.file_name() ? result.file_name() : "?", result.line_number(), result.summary());
    }
    void OnTestEnd(const ::testing::TestInfo& info) override {
        if (info.result()->Failed())
            std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", m_rank, info.test_suite_name(), info.name());
    }

private:
    int m_rank;
};

// The body of main: MPI initialised before any test (in a build with MPI), the printers set.
inline int run_all(int argc, char** argv, const char* program) {
#if defined(__GLIBC__)
    // Keep freed blocks of 4-16 MB (inputs, and Open MPI's per-call temporary buffers) instead of
    // mapping them afresh, each page a fault, every time.
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
    ::testing::InitGoogleTest(&argc, argv);
    if (paralab::comm::MpiGroup::available()) {
        try {
            const paralab::comm::MpiGroup& group = paralab::comm::MpiGroup::world();
            if (group.rank() != 0) {
                auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
                delete listeners.Release(listeners.default_result_printer());
                listeners.Append(new FailurePrinter(group.rank()));
            }
        } catch (const std::exception& e) {
            std::fprintf(stderr, "%s: %s\n", program, e.what());
            return 1;
        }
    }
    return RUN_ALL_TESTS();
}

}  // namespace mpi_testing
