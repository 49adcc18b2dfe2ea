// The local communicator: every collective against a double-precision reference for worlds
// 1..8 and sizes 0, 1, primes and large; results bit-identical across ranks and across runs;
// exact byte accounting; abort waking blocked ranks; argument errors; a long mixed sequence of
// calls on one group (the cross-call step numbering). all_to_all also through the expert groups
// of a device mesh (comm::SubGroups), shared-memory and messages.
#include <gtest/gtest.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <latch>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/comm/device_mesh.h"
#include "engine/comm/sub_groups.h"
#include "engine/data/loader.h"
#include "engine/device/device.h"
#include "comm_reference.h"

using namespace paralab;
using namespace paralab::comm;
using namespace comm_reference;

namespace {

#if defined(__GLIBC__)
// The large cases allocate a few GB in total, 4-64 MB at a time. By default glibc maps such
// blocks afresh and unmaps them when freed, so every test pays a page fault and a zeroed page
// per 4 KB, more than the collectives under test cost; keeping freed memory lets them reuse it.
const bool k_reuse_freed_memory = [] {
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    return true;
}();
#endif

#define EXPECT_CONTAINS(text, part) \
    EXPECT_NE(std::string(text).find(part), std::string::npos) << "message: " << (text)

template <class E, class Fn>
std::string error_of(Fn&& fn) {
    try {
        fn();
    } catch (const E& e) {
        return e.what();
    }
    ADD_FAILURE() << "no exception thrown";
    return {};
}

// Runs fn(comm) on every rank of `group`, each on its own thread, and rethrows the first
// failure (preferring the cause over the CommAborted it triggers in the other ranks). A
// watchdog aborts the group after 60 s, so that a deadlock fails the test instead of hanging.
void run_ranks(LocalGroup& group, const std::function<void(Communicator&)>& fn) {
    const int world = group.world();
    std::vector<std::exception_ptr> errors(static_cast<size_t>(world));
    std::mutex mutex;
    std::condition_variable all_done;
    int done = 0;  // guarded by mutex
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
        threads.emplace_back([&, r] {
            try {
                fn(group.rank(r));
            } catch (...) {
                errors[size_t(r)] = std::current_exception();
                group.abort("rank " + std::to_string(r) + " failed");
            }
            std::lock_guard lock(mutex);
            ++done;
            all_done.notify_all();
        });
    }
    {
        std::unique_lock lock(mutex);
        if (!all_done.wait_for(lock, std::chrono::seconds(60), [&] { return done == world; }))
            group.abort("watchdog: the ranks did not finish in 60 s");
    }
    for (auto& t : threads) t.join();
    std::exception_ptr first_abort;
    for (auto& e : errors) {
        if (!e) continue;
        try {
            std::rethrow_exception(e);
        } catch (const CommAborted&) {
            if (!first_abort) first_abort = e;
        }
    }
    if (first_abort) std::rethrow_exception(first_abort);
}

// piece_bytes: the ring's pieces (LocalGroup; 0: automatic).
void run_ranks(int world, const std::function<void(Communicator&)>& fn, int64_t piece_bytes = 0) {
    LocalGroup group(world, piece_bytes);
    run_ranks(group, fn);
}

// ---- all_reduce, reduce_scatter + all_gather: worlds 1..8 x sizes x ring pieces -------------

// (world, count, piece_bytes)
using WorldCount = std::tuple<int, int64_t, int64_t>;

class RingTest : public ::testing::TestWithParam<WorldCount> {};

std::string world_count_name(const ::testing::TestParamInfo<WorldCount>& info) {
    std::string name = "N";  // appended, not concatenated: GCC 12 warns (-Wrestrict) on a+b
    name += std::to_string(std::get<0>(info.param));
    name += "_count";
    name += std::to_string(std::get<1>(info.param));
    if (std::get<2>(info.param) > 0) {
        name += "_pieces";
        name += std::to_string(std::get<2>(info.param));
    }
    return name;
}

template <class T>
void check_all_reduce(int world, int64_t count, int64_t piece_bytes) {
    const auto inputs = make_inputs<T>(17, world, count);
    auto data = inputs;  // reused: fresh pages for every run would cost more than the runs
    std::vector<T> first;
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::average, ReduceOp::max}) {
        SCOPED_TRACE(std::string(op_name(op)) + (std::is_same_v<T, float> ? " f32" : " f64"));
        for (int run = 0; run < 2; ++run) {
            for (int r = 0; r < world; ++r)
                std::copy(inputs[size_t(r)].begin(), inputs[size_t(r)].end(),
                          data[size_t(r)].begin());
            std::vector<CommRecord> records(static_cast<size_t>(world));
            run_ranks(
                world,
                [&](Communicator& c) {
                    records[size_t(c.rank())] =
                        c.all_reduce(data[size_t(c.rank())].data(), count, dtype_of<T>(), op);
                },
                piece_bytes);
            for (int r = 0; r < world; ++r) {
                ASSERT_TRUE(same_bits(data[size_t(r)], data[0])) << "rank " << r << " differs";
                // Bytes read from peers: every chunk but r in reduce-scatter, every chunk but
                // r+1 in all-gather.
                const int64_t elems =
                    world == 1 ? 0
                               : 2 * count - chunk(count, r, world) - chunk(count, r + 1, world);
                EXPECT_EQ(records[size_t(r)].bytes, elems * int64_t(sizeof(T)));
                EXPECT_STREQ(records[size_t(r)].op, "all_reduce");
                EXPECT_LE(records[size_t(r)].t_begin, records[size_t(r)].t_end);
            }
            int64_t total = 0;
            for (const auto& rec : records) total += rec.bytes;
            EXPECT_EQ(total, 2 * (world - 1) * count * int64_t(sizeof(T)));  // 2(N-1)/N each
            if (run == 0) {
                expect_reduced(data[0], inputs, op);
                first = data[0];
            } else {
                EXPECT_TRUE(same_bits(data[0], first)) << "not bit-identical run to run";
            }
        }
    }
}

TEST_P(RingTest, AllReduceMatchesReferenceAndIsBitIdentical) {
    const auto [world, count, piece_bytes] = GetParam();
    check_all_reduce<float>(world, count, piece_bytes);
    check_all_reduce<double>(world, count, piece_bytes);
}

TEST_P(RingTest, ReduceScatterThenAllGatherRoundTrip) {
    const auto [world, count, piece_bytes] = GetParam();
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::average}) {
        const auto inputs = make_inputs<float>(29, world, count);
        auto data = inputs;
        run_ranks(
            world,
            [&](Communicator& c) {
                const int r = c.rank();
                auto& mine = data[size_t(r)];
                const auto rs = c.reduce_scatter(mine.data(), count, DType::f32, op);
                EXPECT_EQ(rs.bytes, (world == 1 ? 0 : count - chunk(count, r - 1, world)) * 4);
                const auto shard = data::shard_of_dataset(count, r, world);
                expect_reduced(mine, inputs, op, shard.offset, shard.offset + shard.count);
                const auto ag = c.all_gather(mine.data(), count, DType::f32);
                EXPECT_EQ(ag.bytes, (world == 1 ? 0 : count - chunk(count, r, world)) * 4);
            },
            piece_bytes);
        for (int r = 0; r < world; ++r) EXPECT_TRUE(same_bits(data[size_t(r)], data[0]));
        expect_reduced(data[0], inputs, op);
    }
}

TEST_P(RingTest, AllGatherCollectsEveryShard) {
    const auto [world, count, piece_bytes] = GetParam();
    const auto inputs = make_inputs<double>(31, world, count);
    std::vector<double> want(static_cast<size_t>(count));
    for (int r = 0; r < world; ++r) {
        const auto s = data::shard_of_dataset(count, r, world);
        for (int64_t i = s.offset; i < s.offset + s.count; ++i)
            want[size_t(i)] = inputs[size_t(r)][size_t(i)];
    }
    auto data = inputs;  // rank r's rows outside its shard are garbage to be overwritten
    run_ranks(
        world, [&](Communicator& c) { c.all_gather(data[size_t(c.rank())].data(), count, DType::f64); },
        piece_bytes);
    for (int r = 0; r < world; ++r) EXPECT_TRUE(same_bits(data[size_t(r)], want)) << "rank " << r;
}

// Automatic pieces: 256 KiB where the ranks fit the machine's hardware threads, whole chunks
// where they outnumber them.
INSTANTIATE_TEST_SUITE_P(Worlds, RingTest,
                         ::testing::Combine(::testing::Range(1, 9),
                                            ::testing::Values<int64_t>(0, 1, 2, 7, 13, 101,
                                                                       (1 << 20) + 3),
                                            ::testing::Values<int64_t>(0)),
                         world_count_name);
// Pieces of 8 bytes (2 floats, 1 double) on every world: many segments, chunks one element
// longer than others, segments where some chunks have nothing left.
INSTANTIATE_TEST_SUITE_P(Pieces, RingTest,
                         ::testing::Combine(::testing::Range(1, 9), ::testing::Values<int64_t>(1, 7, 13, 101),
                                            ::testing::Values<int64_t>(8)),
                         world_count_name);
// 393217 = 6 * 65536 + 1 elements at 3 ranks: chunk 0 is one element longer, so with 256 KiB
// pieces (65536 floats) its last segment is that one element and nothing of the others.
INSTANTIATE_TEST_SUITE_P(LastPiece, RingTest,
                         ::testing::Combine(::testing::Values(2, 3), ::testing::Values<int64_t>(393217),
                                            ::testing::Values<int64_t>(256 * 1024)),
                         world_count_name);

// ---- rooted collectives: every root of worlds 1..8 ------------------------------------------

class RootedTest : public ::testing::TestWithParam<int> {};

TEST_P(RootedTest, BroadcastFromEveryRoot) {
    const int world = GetParam();
    for (int64_t count : {int64_t(0), int64_t(1), int64_t(7), int64_t(101), int64_t(65537)}) {
        for (int root = 0; root < world; ++root) {
            auto data = make_inputs<float>(uint64_t(root), world, count);
            const auto want = data[size_t(root)];
            run_ranks(world, [&](Communicator& c) {
                const auto rec =
                    c.broadcast(data[size_t(c.rank())].data(), count, DType::f32, root);
                EXPECT_EQ(rec.bytes, c.rank() == root ? 0 : count * 4);
            });
            for (int r = 0; r < world; ++r)
                EXPECT_TRUE(same_bits(data[size_t(r)], want)) << "root " << root << " rank " << r;
        }
    }
}

TEST_P(RootedTest, ReduceToEveryRootInRankOrder) {
    const int world = GetParam();
    const int64_t count = 4099;  // crosses the root's 2048-element blocks
    const auto inputs = make_inputs<float>(41, world, count);
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::average, ReduceOp::max}) {
        for (int root = 0; root < world; ++root) {
            auto data = inputs;
            run_ranks(world, [&](Communicator& c) {
                c.reduce(data[size_t(c.rank())].data(), count, DType::f32, op, root);
            });
            expect_reduced(data[size_t(root)], inputs, op);
            std::vector<float> in_rank_order = inputs[0];  // the documented summation order
            for (int q = 1; q < world; ++q)
                for (int64_t i = 0; i < count; ++i)
                    in_rank_order[size_t(i)] =
                        op == ReduceOp::max
                            ? std::max(in_rank_order[size_t(i)], inputs[size_t(q)][size_t(i)])
                            : inputs[size_t(q)][size_t(i)] + in_rank_order[size_t(i)];
            if (op == ReduceOp::average)
                for (auto& x : in_rank_order) x /= float(world);
            EXPECT_TRUE(same_bits(data[size_t(root)], in_rank_order))
                << op_name(op) << " root " << root;
        }
    }
}

TEST_P(RootedTest, ScatterThenGatherWithUnevenCounts) {
    const int world = GetParam();
    std::vector<int64_t> counts(static_cast<size_t>(world));
    for (int r = 0; r < world; ++r) counts[size_t(r)] = (3 * r + 1) % 4 * 5;  // 5, 0, 15, 10, ...
    const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t(0));
    for (int root = 0; root < world; ++root) {
        std::vector<double> send(static_cast<size_t>(total)),
            gathered(static_cast<size_t>(total), -1.0);
        for (int64_t i = 0; i < total; ++i) send[size_t(i)] = double(i) + 0.25;
        run_ranks(world, [&](Communicator& c) {
            const int r = c.rank();
            std::vector<double> mine(static_cast<size_t>(counts[size_t(r)]), -1.0);
            c.scatter(r == root ? send.data() : nullptr, mine.data(), counts, DType::f64, root);
            const int64_t offset = std::accumulate(counts.begin(), counts.begin() + r, int64_t(0));
            for (int64_t i = 0; i < counts[size_t(r)]; ++i)
                EXPECT_EQ(mine[size_t(i)], double(offset + i) + 0.25);
            for (auto& x : mine) x *= 2;
            const auto rec = c.gather(mine.data(), r == root ? gathered.data() : nullptr, counts,
                                      DType::f64, root);
            EXPECT_EQ(rec.bytes, r == root ? (total - counts[size_t(root)]) * 8 : 0);
        });
        for (int64_t i = 0; i < total; ++i) EXPECT_EQ(gathered[size_t(i)], 2 * (double(i) + 0.25));
    }
}

INSTANTIATE_TEST_SUITE_P(Worlds, RootedTest, ::testing::Range(1, 9), [](const auto& info) {
    std::string name = "N";
    name += std::to_string(info.param);
    return name;
});

// ---- all_to_all -----------------------------------------------------------------------------

// The elements rank s sends rank d: 0, 3, 6 or 9, zeros on every row of a world above 1 (and
// rank 1's to itself in worlds above 1).
int64_t a2a_count(int s, int d) {
    return (3 * s + 5 * d + 1) % 4 * 3;
}

// Element i of what rank s sends rank d: exact in f32.
double a2a_value(int s, int d, int64_t i) {
    return 1000.0 * s + 100.0 * d + double(i) + 0.5;
}

class AllToAllTest : public ::testing::TestWithParam<int> {};

template <class T>
void check_all_to_all(int world) {
    std::vector<std::vector<T>> got(static_cast<size_t>(world));
    std::vector<CommRecord> records(static_cast<size_t>(world));
    run_ranks(world, [&](Communicator& c) {
        const int r = c.rank();
        std::vector<int64_t> send_counts, recv_counts;
        std::vector<T> send;
        for (int q = 0; q < world; ++q) {
            send_counts.push_back(a2a_count(r, q));
            recv_counts.push_back(a2a_count(q, r));
            for (int64_t i = 0; i < send_counts.back(); ++i) send.push_back(T(a2a_value(r, q, i)));
        }
        auto& recv = got[size_t(r)];
        recv.assign(size_t(std::accumulate(recv_counts.begin(), recv_counts.end(), int64_t(0))), T(-1));
        records[size_t(r)] = c.all_to_all(send.data(), send_counts, recv.data(), recv_counts, dtype_of<T>());
    });
    int64_t total = 0;
    for (int r = 0; r < world; ++r) {
        std::vector<T> want;
        int64_t sent = 0;
        for (int q = 0; q < world; ++q) {
            for (int64_t i = 0; i < a2a_count(q, r); ++i) want.push_back(T(a2a_value(q, r, i)));
            if (q != r) sent += a2a_count(r, q);
        }
        EXPECT_TRUE(same_bits(got[size_t(r)], want)) << "rank " << r;
        EXPECT_STREQ(records[size_t(r)].op, "all_to_all");
        EXPECT_EQ(records[size_t(r)].bytes, sent * int64_t(sizeof(T))) << "rank " << r;  // sum - own
        total += records[size_t(r)].bytes;
    }
    int64_t moved = 0;  // every element that changes rank, once
    for (int s = 0; s < world; ++s)
        for (int d = 0; d < world; ++d)
            if (s != d) moved += a2a_count(s, d);
    EXPECT_EQ(total, moved * int64_t(sizeof(T)));
}

TEST_P(AllToAllTest, UnevenCountsWithZerosArriveInRankOrder) {
    check_all_to_all<float>(GetParam());
    check_all_to_all<double>(GetParam());
}

// Every rank sends nothing: a valid call that moves and counts nothing.
TEST_P(AllToAllTest, EmptyExchange) {
    const int world = GetParam();
    run_ranks(world, [&](Communicator& c) {
        const std::vector<int64_t> none(size_t(c.world()), 0);
        EXPECT_EQ(c.all_to_all(nullptr, none, nullptr, none, DType::f32).bytes, 0);
    });
}

INSTANTIATE_TEST_SUITE_P(Worlds, AllToAllTest, ::testing::Range(1, 5), [](const auto& info) {
    std::string name = "N";
    name += std::to_string(info.param);
    return name;
});

// The expert groups of a mesh (dp 2 · tp 2 with ep 2: groups {0, 2} and {1, 3}) exchange among
// their members only, in member order; a sub-group of messages (what a group spanning processes
// uses) gives the same rows and byte counts.
TEST(LocalComm, AllToAllThroughTheExpertGroupsOfAMesh) {
    const DeviceMesh mesh({.dp = 2, .ep = 2, .tp = 2}, 4);
    ASSERT_EQ(mesh.members(0, {Axis::ep}), (std::vector<int>{0, 2}));
    const std::vector<Device*> hosts(4, &detached_host_device());
    LocalGroup world(4);
    const auto shared = mesh.communicators({Axis::ep}, hosts, &world, 7);
    SubGroups messages(hosts, mesh.groups({Axis::ep}), &world, 7, /*messages=*/true);
    EXPECT_EQ(messages.of(2).backend(), "messages");
    for (SubGroups* groups : {shared.get(), &messages}) {
        SCOPED_TRACE(groups->of(0).backend());
        std::vector<std::vector<float>> got(4);
        std::vector<int64_t> bytes(4, -1);
        std::vector<std::thread> threads;
        for (int r = 0; r < 4; ++r)
            threads.emplace_back([&, r] {
                Communicator& c = groups->of(r);
                const std::vector<int>& members = groups->members(groups->group_of(r));
                std::vector<int64_t> send_counts, recv_counts;
                std::vector<float> send;
                for (int q = 0; q < c.world(); ++q) {
                    send_counts.push_back(a2a_count(r, members[size_t(q)]));
                    recv_counts.push_back(a2a_count(members[size_t(q)], r));
                    for (int64_t i = 0; i < send_counts.back(); ++i)
                        send.push_back(float(a2a_value(r, members[size_t(q)], i)));
                }
                got[size_t(r)].assign(size_t(std::accumulate(recv_counts.begin(), recv_counts.end(), int64_t(0))), -1.0f);
                bytes[size_t(r)] = c.all_to_all(send.data(), send_counts, got[size_t(r)].data(), recv_counts, DType::f32).bytes;
            });
        for (auto& t : threads) t.join();
        for (int r = 0; r < 4; ++r) {
            std::vector<float> want;
            int64_t sent = 0;
            for (int q : mesh.members(r, {Axis::ep})) {
                for (int64_t i = 0; i < a2a_count(q, r); ++i) want.push_back(float(a2a_value(q, r, i)));
                if (q != r) sent += a2a_count(r, q);
            }
            EXPECT_TRUE(same_bits(got[size_t(r)], want)) << "rank " << r;
            EXPECT_EQ(bytes[size_t(r)], sent * 4) << "rank " << r;
        }
    }
}

// A receive count that is not its sender's count is refused on the rank that sees it, naming
// both, and the group is aborted so that its peer does not wait for it.
TEST(LocalComm, AllToAllWithCountsThatDisagreeIsRefused) {
    const auto message = error_of<Error>([] {
        run_ranks(2, [](Communicator& c) {
            float send[4] = {1, 2, 3, 4}, recv[4] = {};
            const std::vector<int64_t> send_counts{1, 2};  // rank 0 sends rank 1 two, which expects 3
            const std::vector<int64_t> recv_counts = c.rank() == 0 ? std::vector<int64_t>{1, 1}
                                                                   : std::vector<int64_t>{3, 2};
            c.all_to_all(send, send_counts, recv, recv_counts, DType::f32);
        });
    });
    EXPECT_CONTAINS(message, "all_to_all: rank 0 sends 2 elements to rank 1, which expects 3");
}

// ---- send / recv ----------------------------------------------------------------------------

TEST(LocalComm, MessagesArriveInOrderPerPeerAndTag) {
    run_ranks(2, [](Communicator& c) {
        if (c.rank() == 0) {
            for (float v : {1.0f, 2.0f}) c.send(&v, 1, DType::f32, 1, /*tag=*/1);
            const double pair[2] = {3, 4};
            EXPECT_EQ(c.send(pair, 2, DType::f64, 1, /*tag=*/2).bytes, 16);
        } else {
            double pair[2] = {};
            EXPECT_EQ(c.recv(pair, 2, DType::f64, 0, 2).bytes, 0);  // tag 2 first: not blocked
            EXPECT_EQ(pair[0], 3);
            EXPECT_EQ(pair[1], 4);
            float v = 0;
            c.recv(&v, 1, DType::f32, 0, 1);
            EXPECT_EQ(v, 1.0f);
            c.recv(&v, 1, DType::f32, 0, 1);
            EXPECT_EQ(v, 2.0f);
        }
    });
}

TEST(LocalComm, RingExchangeOfMessagesForEveryWorld) {
    for (int world = 1; world <= 8; ++world) {
        run_ranks(world, [world](Communicator& c) {
            const int r = c.rank();
            std::vector<float> out(13, float(r)), in(13, -1.0f);
            c.send(out.data(), 13, DType::f32, (r + 1) % world, 7);  // eager: no deadlock
            c.recv(in.data(), 13, DType::f32, (r + world - 1) % world, 7);
            EXPECT_EQ(in[12], float((r + world - 1) % world));
        });
    }
}

TEST(LocalComm, RecvOfAMismatchedMessageNamesBoth) {
    LocalGroup group(2);
    float v[3] = {1, 2, 3};
    group.rank(0).send(v, 3, DType::f32, 1, 5);
    double d[3];
    const auto message = error_of<Error>([&] { group.rank(1).recv(d, 3, DType::f64, 0, 5); });
    EXPECT_CONTAINS(message, "recv");
    EXPECT_CONTAINS(message, "3 f32");
    float got[3];
    group.rank(1).recv(got, 3, DType::f32, 0, 5);  // the message was left in the queue
    EXPECT_EQ(got[2], 3.0f);
}

// ---- abort ----------------------------------------------------------------------------------

TEST(LocalComm, AbortWakesRanksBlockedInAllReduce) {
    LocalGroup group(3);
    std::vector<std::string> messages(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)  // rank 2 never arrives
        threads.emplace_back([&, r] {
            std::vector<float> data(1000, 1.0f);
            messages[size_t(r)] = error_of<CommAborted>(
                [&] { group.rank(r).all_reduce(data.data(), 1000, DType::f32, ReduceOp::sum); });
        });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    group.abort("rank 2 failed: injected fault");
    for (auto& t : threads) t.join();
    for (const auto& m : messages) EXPECT_CONTAINS(m, "rank 2 failed: injected fault");
    group.abort("a second reason is ignored");
    const auto later = error_of<CommAborted>([&] { group.rank(2).barrier(); });
    EXPECT_CONTAINS(later, "rank 2 failed: injected fault");
}

// Ranks 0 and 1 call all_to_all and rank 2 never does: the abort, whether it finds them waiting
// for rank 2 or not yet entered, ends both with its reason.
TEST(LocalComm, AbortWakesRanksWaitingInAllToAll) {
    LocalGroup group(3);
    std::vector<std::string> messages(2);
    std::latch calling(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
        threads.emplace_back([&, r] {
            std::vector<float> send(30, float(r)), recv(30);
            const std::vector<int64_t> counts{10, 10, 10};
            calling.count_down();
            messages[size_t(r)] = error_of<CommAborted>([&] {
                group.rank(r).all_to_all(send.data(), counts, recv.data(), counts, DType::f32);
            });
        });
    calling.wait();
    group.abort("rank 2 failed: injected fault");
    for (auto& t : threads) t.join();
    for (const auto& m : messages) EXPECT_CONTAINS(m, "rank 2 failed: injected fault");
}

TEST(LocalComm, AbortWakesARankBlockedInRecv) {
    LocalGroup group(2);
    std::string message;
    std::thread receiver([&] {
        float v;
        message = error_of<CommAborted>([&] { group.rank(1).recv(&v, 1, DType::f32, 0); });
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    group.rank(0).abort("stop requested");
    receiver.join();
    EXPECT_CONTAINS(message, "stop requested");
}

// ---- argument errors ------------------------------------------------------------------------

TEST(LocalComm, ArgumentErrorsNameTheCallAndTheValue) {
    LocalGroup group(3);
    Communicator& c = group.rank(1);
    float buf[4] = {};
    EXPECT_CONTAINS(error_of<Error>([&] { c.broadcast(buf, 4, DType::f32, 3); }),
                    "broadcast: root 3");
    EXPECT_CONTAINS(error_of<Error>([&] { c.reduce(buf, 4, DType::f32, ReduceOp::sum, -1); }),
                    "reduce: root -1");
    EXPECT_CONTAINS(error_of<Error>([&] { c.all_reduce(buf, -2, DType::f32, ReduceOp::sum); }),
                    "all_reduce: count must be >= 0, got -2");
    EXPECT_CONTAINS(error_of<Error>([&] { c.all_gather(buf, 4, DType::bf16); }), "bf16");
    EXPECT_CONTAINS(error_of<Error>([&] {
                        c.scatter(buf, buf, {1, 1}, DType::f32, 0);
                    }),
                    "scatter: counts has 2 entries for a world of 3");
    EXPECT_CONTAINS(error_of<Error>([&] {
                        c.gather(buf, buf, {1, -1, 1}, DType::f32, 0);
                    }),
                    "counts[1] must be >= 0");
    EXPECT_CONTAINS(error_of<Error>([&] { c.all_to_all(buf, {1, 1}, buf, {1, 1, 1}, DType::f32); }),
                    "all_to_all: send_counts has 2 entries for a world of 3");
    EXPECT_CONTAINS(error_of<Error>([&] { c.all_to_all(buf, {1, 1, 1}, buf, {0, -1, 0}, DType::f32); }),
                    "all_to_all: recv_counts[1] must be >= 0, got -1");
    EXPECT_CONTAINS(error_of<Error>([&] { c.all_to_all(buf, {1, 1, 0}, buf + 1, {1, 1, 0}, DType::f32); }),
                    "all_to_all: send and recv overlap");
    EXPECT_CONTAINS(error_of<Error>([&] { c.all_to_all(nullptr, {0, 1, 0}, buf, {0, 1, 0}, DType::f32); }),
                    "all_to_all: send is null for 1 elements");
    EXPECT_CONTAINS(error_of<Error>([&] { c.send(buf, 1, DType::f32, 5); }), "send: peer 5");
    EXPECT_CONTAINS(error_of<Error>([&] { c.recv(buf, 1, DType::f32, -1); }), "recv: peer -1");
    EXPECT_CONTAINS(error_of<Error>([&] { group.rank(3); }), "3");
    EXPECT_CONTAINS(error_of<Error>([] { LocalGroup bad(0); }), "world must be >= 1");
    EXPECT_CONTAINS(error_of<Error>([] { LocalGroup bad(2, -1); }), "piece_bytes must be >= 0");
    EXPECT_EQ(c.totals().calls, 0);  // rejected calls are not counted
}

// ---- many mixed calls on one group ----------------------------------------------------------

TEST(LocalComm, TwoHundredMixedCallsOnOneGroup) {
    for (int world : {3, 4}) {
        LocalGroup group(world);
        std::vector<int64_t> bytes(static_cast<size_t>(world));
        run_ranks(group, [&](Communicator& c) {
            run_mixed_sequence(c);
            bytes[size_t(c.rank())] = c.totals().bytes;
        });
        for (int64_t b : bytes) EXPECT_GT(b, 0);
    }
}

}  // namespace
