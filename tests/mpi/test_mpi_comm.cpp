// The MPI communicator, run as N processes by `mpirun -np N` (tests/mpi/run_mpi_test.sh; CTest
// label `mpi`): every collective against the same double-precision reference as
// tests/engine/test_comm.cpp (sizes 0, 1, 7, 101, 2^20 + 3; f32 and f64), all_reduce
// bit-identical across ranks and run to run and equal to the local backend's result to float
// rounding, all_to_all with uneven counts (also between the devices of MpiDeviceGroup),
// send/recv ordering and eagerness, a second communicator used by a second thread, and a long
// mixed sequence of calls. Each rank runs every test; rank 0 prints the usual report and names
// any other rank that failed a test, the others print only their failures. In a build without
// MPI the program reports SKIPPED (and checks the stub's message).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/comm/mpi.h"
#include "engine/data/loader.h"
#include "../engine/comm_reference.h"
#include "mpi_testing.h"

using namespace paralab;
using namespace paralab::comm;
using namespace comm_reference;

namespace {

// ---- the group, and a fixture that agrees on failures (mpi_testing.h) ----------------------

using mpi_testing::comm;

// True on every rank when `data` is bit for bit rank 0's (root 0 broadcasts its copy).
template <class T>
bool same_bits_as_rank0(const std::vector<T>& data) {
    std::vector<T> root = data;
    comm().broadcast(root.data(), int64_t(root.size()), dtype_of<T>(), 0);
    return same_bits(root, data);
}

using MpiCommTest = mpi_testing::AgreedTest;

// ---- collectives x sizes --------------------------------------------------------------------

class MpiCollectiveTest : public MpiCommTest, public ::testing::WithParamInterface<int64_t> {};

template <class T>
void check_all_reduce(int64_t count) {
    Communicator& c = comm();
    const int world = c.world(), r = c.rank();
    const auto inputs = make_inputs<T>(17, world, count);
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::average, ReduceOp::max}) {
        SCOPED_TRACE(std::string(op_name(op)) + (std::is_same_v<T, float> ? " f32" : " f64"));
        std::vector<T> first;
        for (int run = 0; run < 2; ++run) {
            std::vector<T> data = inputs[size_t(r)];
            const CommRecord rec = c.all_reduce(data.data(), count, dtype_of<T>(), op);
            EXPECT_STREQ(rec.op, "all_reduce");
            EXPECT_EQ(
                rec.bytes,
                (world == 1 ? 0 : 2 * count - chunk(count, r, world) - chunk(count, r + 1, world)) *
                    int64_t(sizeof(T)));
            EXPECT_TRUE(same_bits_as_rank0(data)) << "rank " << r << " differs from rank 0";
            if (run == 0) {
                expect_reduced(data, inputs, op);
                first = data;
            } else {
                EXPECT_TRUE(same_bits(data, first)) << "not bit-identical run to run";
            }
        }
        if (r == 0) {  // the local backend on the same inputs, as threads of this process
            auto local = inputs;
            LocalGroup group(world);
            std::vector<std::thread> threads;
            for (int q = 0; q < world; ++q)
                threads.emplace_back([&, q] {
                    group.rank(q).all_reduce(local[size_t(q)].data(), count, dtype_of<T>(), op);
                });
            for (auto& t : threads) t.join();
            expect_reduced(first, inputs, op, 0, -1, &local[0], 2);
        }
    }
}

TEST_P(MpiCollectiveTest, AllReduceMatchesReferenceLocalBackendAndIsBitIdentical) {
    check_all_reduce<float>(GetParam());
    check_all_reduce<double>(GetParam());
}

template <class T>
void check_reduce_scatter_all_gather(int64_t count) {
    Communicator& c = comm();
    const int world = c.world(), r = c.rank();
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::average, ReduceOp::max}) {
        SCOPED_TRACE(op_name(op));
        const auto inputs = make_inputs<T>(29, world, count);
        std::vector<T> data = inputs[size_t(r)];
        const auto rs = c.reduce_scatter(data.data(), count, dtype_of<T>(), op);
        EXPECT_EQ(rs.bytes,
                  (world == 1 ? 0 : count - chunk(count, r - 1, world)) * int64_t(sizeof(T)));
        const auto shard = data::shard_of_dataset(count, r, world);
        expect_reduced(data, inputs, op, shard.offset, shard.offset + shard.count);
        const auto ag = c.all_gather(data.data(), count, dtype_of<T>());
        EXPECT_EQ(ag.bytes, (world == 1 ? 0 : count - chunk(count, r, world)) * int64_t(sizeof(T)));
        expect_reduced(data, inputs, op);
        EXPECT_TRUE(same_bits_as_rank0(data));
    }
}

TEST_P(MpiCollectiveTest, ReduceScatterThenAllGatherRoundTrip) {
    check_reduce_scatter_all_gather<float>(GetParam());
    check_reduce_scatter_all_gather<double>(GetParam());
}

template <class T>
void check_all_gather(int64_t count) {
    Communicator& c = comm();
    const int world = c.world();
    const auto inputs = make_inputs<T>(31, world, count);
    std::vector<T> want(static_cast<size_t>(count));
    for (int r = 0; r < world; ++r) {
        const auto s = data::shard_of_dataset(count, r, world);
        for (int64_t i = s.offset; i < s.offset + s.count; ++i)
            want[size_t(i)] = inputs[size_t(r)][size_t(i)];
    }
    std::vector<T> data = inputs[size_t(c.rank())];  // rows outside the shard: overwritten
    c.all_gather(data.data(), count, dtype_of<T>());
    EXPECT_TRUE(same_bits(data, want));
}

TEST_P(MpiCollectiveTest, AllGatherCollectsEveryShard) {
    check_all_gather<float>(GetParam());
    check_all_gather<double>(GetParam());
}

template <class T>
void check_broadcast_and_reduce(int64_t count) {
    Communicator& c = comm();
    const int world = c.world(), r = c.rank();
    for (int root = 0; root < world; ++root) {
        SCOPED_TRACE("root " + std::to_string(root));
        const auto inputs = make_inputs<T>(uint64_t(41 + root), world, count);
        std::vector<T> data = inputs[size_t(r)];
        const auto rec = c.broadcast(data.data(), count, dtype_of<T>(), root);
        EXPECT_EQ(rec.bytes, r == root ? 0 : count * int64_t(sizeof(T)));
        EXPECT_TRUE(same_bits(data, inputs[size_t(root)]));
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::average, ReduceOp::max}) {
            data = inputs[size_t(r)];
            c.reduce(data.data(), count, dtype_of<T>(), op, root);
            if (r == root) expect_reduced(data, inputs, op);
        }
    }
}

TEST_P(MpiCollectiveTest, BroadcastAndReduceWithEveryRoot) {
    check_broadcast_and_reduce<float>(GetParam());
    check_broadcast_and_reduce<double>(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Sizes, MpiCollectiveTest,
                         ::testing::Values<int64_t>(0, 1, 7, 101, (1 << 20) + 3),
                         [](const auto& info) { return "count" + std::to_string(info.param); });

// ---- rooted variable counts, messages, threads, sequences -----------------------------------

TEST_F(MpiCommTest, ScatterThenGatherWithUnevenCountsFromEveryRoot) {
    Communicator& c = comm();
    const int world = c.world(), r = c.rank();
    std::vector<int64_t> counts(static_cast<size_t>(world));
    for (int q = 0; q < world; ++q) counts[size_t(q)] = (3 * q + 1) % 4 * 5;  // 5, 0, 15, ...
    const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t(0));
    const int64_t offset = std::accumulate(counts.begin(), counts.begin() + r, int64_t(0));
    for (int root = 0; root < world; ++root) {
        std::vector<double> send(static_cast<size_t>(total)),
            gathered(static_cast<size_t>(total), -1.0);
        for (int64_t i = 0; i < total; ++i) send[size_t(i)] = double(i) + 0.25;
        std::vector<double> mine(static_cast<size_t>(counts[static_cast<size_t>(r)]), -1.0);
        c.scatter(r == root ? send.data() : nullptr, mine.data(), counts, DType::f64, root);
        for (int64_t i = 0; i < counts[size_t(r)]; ++i)
            EXPECT_EQ(mine[size_t(i)], double(offset + i) + 0.25) << "root " << root;
        for (auto& x : mine) x *= 2;
        const auto rec =
            c.gather(mine.data(), r == root ? gathered.data() : nullptr, counts, DType::f64, root);
        EXPECT_EQ(rec.bytes, r == root ? (total - counts[size_t(root)]) * 8 : 0);
        if (r == root) {
            for (int64_t i = 0; i < total; ++i)
                EXPECT_EQ(gathered[size_t(i)], 2 * (double(i) + 0.25)) << "root " << root;
        }
    }
    // The root's own rows may alias its send/recv buffers, as with the local backend.
    std::vector<float> rows(static_cast<size_t>(total), 0.0f);
    for (int64_t i = 0; i < total; ++i) rows[size_t(i)] = float(i);
    std::vector<float> mine(static_cast<size_t>(counts[static_cast<size_t>(r)]));
    float* own = r == 0 ? rows.data() + offset : mine.data();
    c.scatter(rows.data(), own, counts, DType::f32, 0);
    for (int64_t i = 0; i < counts[size_t(r)]; ++i) EXPECT_EQ(own[i], float(offset + i));
    c.gather(own, rows.data(), counts, DType::f32, 0);
    if (r == 0) {
        for (int64_t i = 0; i < total; ++i) EXPECT_EQ(rows[size_t(i)], float(i));
    }
}

// MPI_Alltoallv: rank s sends rank d (3 s + 5 d + 1) % 4 * 3 elements (zeros among them), each
// naming its sender, receiver and place; the bytes count what a rank sends to the others.
TEST_F(MpiCommTest, AllToAllWithUnevenCountsArrivesInRankOrder) {
    Communicator& c = comm();
    const int world = c.world(), r = c.rank();
    const auto n = [](int s, int d) { return int64_t((3 * s + 5 * d + 1) % 4 * 3); };
    const auto value = [](int s, int d, int64_t i) { return 1000.0 * s + 100.0 * d + double(i) + 0.5; };
    std::vector<int64_t> send_counts, recv_counts;
    std::vector<double> send, want;
    int64_t others = 0;
    for (int q = 0; q < world; ++q) {
        send_counts.push_back(n(r, q));
        recv_counts.push_back(n(q, r));
        for (int64_t i = 0; i < n(r, q); ++i) send.push_back(value(r, q, i));
        for (int64_t i = 0; i < n(q, r); ++i) want.push_back(value(q, r, i));
        if (q != r) others += n(r, q);
    }
    std::vector<double> got(want.size(), -1.0);
    const CommRecord rec = c.all_to_all(send.data(), send_counts, got.data(), recv_counts, DType::f64);
    EXPECT_STREQ(rec.op, "all_to_all");
    EXPECT_EQ(rec.bytes, others * 8);
    EXPECT_TRUE(same_bits(got, want));
}

// The same exchange over MpiDeviceGroup, two devices (threads) per process: rows between devices
// of one process and of different processes alike.
TEST_F(MpiCommTest, AllToAllBetweenTheDevicesOfEveryProcess) {
    const int processes = comm().world(), me = comm().rank();
    MpiDeviceGroup group(std::vector<int>(size_t(processes), 2));
    const int world = group.world();
    const auto n = [](int s, int d) { return int64_t((3 * s + 5 * d + 1) % 4 * 3); };
    const auto value = [](int s, int d, int64_t i) { return float(1000 * s + 100 * d) + float(i) + 0.5f; };
    std::vector<std::vector<float>> got(2), want(2);
    std::vector<int64_t> bytes(2, -1), others(2, 0);
    std::vector<std::thread> threads;
    for (int l = 0; l < 2; ++l)
        threads.emplace_back([&, l] {
            const int r = 2 * me + l;
            std::vector<int64_t> send_counts, recv_counts;
            std::vector<float> send;
            for (int q = 0; q < world; ++q) {
                send_counts.push_back(n(r, q));
                recv_counts.push_back(n(q, r));
                for (int64_t i = 0; i < n(r, q); ++i) send.push_back(value(r, q, i));
                for (int64_t i = 0; i < n(q, r); ++i) want[size_t(l)].push_back(value(q, r, i));
                if (q != r) others[size_t(l)] += n(r, q);
            }
            got[size_t(l)].assign(want[size_t(l)].size(), -1.0f);
            bytes[size_t(l)] =
                group.rank(r).all_to_all(send.data(), send_counts, got[size_t(l)].data(), recv_counts, DType::f32).bytes;
        });
    for (auto& t : threads) t.join();
    for (int l = 0; l < 2; ++l) {
        EXPECT_TRUE(same_bits(got[size_t(l)], want[size_t(l)])) << "device " << l;
        EXPECT_EQ(bytes[size_t(l)], others[size_t(l)] * 4) << "device " << l;
    }
}

TEST_F(MpiCommTest, MessagesArriveInOrderPerPeerAndTag) {
    Communicator& c = comm();
    if (c.rank() == 0) {
        for (int peer = 1; peer < c.world(); ++peer) {
            for (float v : {1.0f, 2.0f}) c.send(&v, 1, DType::f32, peer, /*tag=*/1);
            const double pair[2] = {3, double(peer)};
            EXPECT_EQ(c.send(pair, 2, DType::f64, peer, /*tag=*/2).bytes, 16);
        }
    } else {
        double pair[2] = {};
        EXPECT_EQ(c.recv(pair, 2, DType::f64, 0, 2).bytes, 0);  // tag 2 first: not blocked
        EXPECT_EQ(pair[0], 3);
        EXPECT_EQ(pair[1], c.rank());
        float v = 0;
        c.recv(&v, 1, DType::f32, 0, 1);
        EXPECT_EQ(v, 1.0f);
        c.recv(&v, 1, DType::f32, 0, 1);
        EXPECT_EQ(v, 2.0f);
    }
    c.barrier();
}

TEST_F(MpiCommTest, LargeRingExchangeIsEager) {
    // Every rank sends 4 MB to the next before receiving from the previous: a blocking send of
    // that size would wait for a receiver that is itself sending, so this deadlocks unless send
    // returns once its data is copied out.
    Communicator& c = comm();
    const int world = c.world(), r = c.rank();
    const int64_t count = (1 << 20) + 3;
    for (int round = 0; round < 3; ++round) {
        std::vector<float> out(static_cast<size_t>(count), float(r + round)),
            in(static_cast<size_t>(count), -1.0f);
        c.send(out.data(), count, DType::f32, (r + 1) % world, 7);
        out.assign(out.size(), -2.0f);  // the message was copied when send returned
        c.recv(in.data(), count, DType::f32, (r + world - 1) % world, 7);
        EXPECT_EQ(in.front(), float((r + world - 1) % world + round));
        EXPECT_EQ(in.back(), float((r + world - 1) % world + round));
    }
    c.barrier();
}

TEST_F(MpiCommTest, RecvOfAMismatchedMessageNamesBothAndLeavesIt) {
    Communicator& c = comm();
    if (c.world() < 2) GTEST_SKIP() << "needs 2 ranks";
    if (c.rank() == 0) {
        const float v[3] = {1, 2, 3};
        c.send(v, 3, DType::f32, 1, 5);
    } else if (c.rank() == 1) {
        double d[3];
        std::string message;
        try {
            c.recv(d, 3, DType::f64, 0, 5);
        } catch (const Error& e) {
            message = e.what();
        }
        EXPECT_NE(message.find("expects 3 f64 from rank 0 (tag 5)"), std::string::npos) << message;
        EXPECT_NE(message.find("holds 12 bytes"), std::string::npos) << message;
        float got[3] = {};
        c.recv(got, 3, DType::f32, 0, 5);
        EXPECT_EQ(got[2], 3.0f);
    }
    c.barrier();
}

TEST_F(MpiCommTest, ArgumentErrorsAreThrownBeforeAnyMpiCall) {
    Communicator& c = comm();
    float buf[4] = {};
    const auto message_of = [](auto&& fn) -> std::string {
        try {
            fn();
        } catch (const Error& e) {
            return e.what();
        }
        return "no exception";
    };
    const int world = c.world();
    EXPECT_NE(message_of([&] { c.broadcast(buf, 4, DType::f32, world); }).find("root"),
              std::string::npos);
    EXPECT_NE(message_of([&] { c.send(buf, 1, DType::f32, 0, -1); }).find("tag -1 is outside"),
              std::string::npos);
    EXPECT_NE(message_of([&] { c.all_gather(buf, 4, DType::bf16); }).find("bf16"),
              std::string::npos);
    EXPECT_EQ(c.backend(), "mpi");
    EXPECT_EQ(c.rank(), MpiGroup::world().rank());
    EXPECT_EQ(c.world(), MpiGroup::world().size());
    if (const char* size = std::getenv("OMPI_COMM_WORLD_SIZE")) {  // set by Open MPI's mpirun
        EXPECT_EQ(c.world(), std::atoi(size));
    }
}

TEST_F(MpiCommTest, SplitCommunicatorWorksBesideTheFirstOnAnotherThread) {
    auto second = MpiGroup::world().split_communicator();
    Communicator& first = comm();
    const int world = first.world(), r = first.rank();
    const int64_t count = 10007;
    const auto inputs_a = make_inputs<float>(51, world, count);
    const auto inputs_b = make_inputs<double>(52, world, count);
    std::vector<float> a = inputs_a[size_t(r)];
    std::vector<double> b = inputs_b[size_t(r)];
    std::thread bucket_thread([&] {
        for (int i = 0; i < 20; ++i) {
            b = inputs_b[size_t(r)];
            second->all_reduce(b.data(), count, DType::f64, ReduceOp::sum);
        }
    });
    for (int i = 0; i < 20; ++i) {
        a = inputs_a[size_t(r)];
        first.all_reduce(a.data(), count, DType::f32, ReduceOp::max);
    }
    bucket_thread.join();
    expect_reduced(a, inputs_a, ReduceOp::max);
    expect_reduced(b, inputs_b, ReduceOp::sum);
    EXPECT_EQ(second->backend(), "mpi");
    EXPECT_EQ(second->totals().calls, 20);
}

TEST_F(MpiCommTest, TwoHundredMixedCallsInOneSequence) {
    run_mixed_sequence(comm());
}

// ---- the build's MPI support ----------------------------------------------------------------

TEST(MpiBuild, AvailabilityMatchesTheBuild) {
#ifdef PARALAB_HAVE_MPI
    EXPECT_TRUE(MpiGroup::available());
    EXPECT_GE(MpiGroup::world().size(), 1);
#else
    EXPECT_FALSE(MpiGroup::available());
    std::string message;
    try {
        MpiGroup::world();
    } catch (const Error& e) {
        message = e.what();
    }
    EXPECT_NE(message.find("this build has no MPI support"), std::string::npos) << message;
#endif
}

}  // namespace

int main(int argc, char** argv) {
    return mpi_testing::run_all(argc, argv, "test_mpi_comm");
}
