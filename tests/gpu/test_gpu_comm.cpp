// The GPU communicators (engine/comm/gpu.h): NcclGroup on distinct GPUs and CudaLocalGroup on
// virtual GPUs (one card listed 1, 2, 4 times), every collective (all_to_all included) on device
// buffers copied back to the host and checked against tests/engine/comm_reference.h's
// reference; CudaLocalGroup's results equal the CPU LocalGroup's bit for bit (same summation
// order); NCCL's equal themselves on a rerun (NCCL_ALGO pinned). abort() frees every waiting
// rank with CommAborted. The backend choice for a run's devices is tested without a GPU. Without
// a GPU the rest reports SKIPPED.
#include <gtest/gtest.h>
#include <kernels/gpu/info.h>
#include <kernels/gpu/memory.h>
#include <kernels/gpu/nccl.h>
#include <kernels/gpu/stream.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <mutex>
#include <set>
#include <thread>

#include "engine/comm/gpu.h"
#include "engine/device/cuda_device.h"
#include "tests/engine/comm_reference.h"

namespace {

using namespace paralab;
using namespace paralab::comm;
using namespace comm_reference;
namespace kg = paralab::kernels::gpu;

// ---- the backend choice: no GPU needed ------------------------------------------------------

std::vector<DeviceId> ids(const std::vector<std::string>& names) {
    std::vector<DeviceId> out;
    for (const auto& n : names) out.push_back(parse_device_id(n));
    return out;
}

TEST(GpuCommChoice, CpuDevicesUseTheLocalGroup) {
    EXPECT_EQ(choose_device_group(ids({"cpu:0", "cpu:1"}), true).backend, DeviceGroupBackend::local);
}

TEST(GpuCommChoice, DistinctGpusUseNcclWhereBuilt) {
    EXPECT_EQ(choose_device_group(ids({"cuda:0", "cuda:1"}), true).backend, DeviceGroupBackend::nccl);
    EXPECT_EQ(choose_device_group(ids({"cuda:0"}), true).backend, DeviceGroupBackend::nccl);
    const auto without = choose_device_group(ids({"cuda:0", "cuda:1"}), false);
    EXPECT_EQ(without.backend, DeviceGroupBackend::cuda_local);
    EXPECT_NE(without.reason.find("without NCCL"), std::string::npos) << without.reason;
}

TEST(GpuCommChoice, AGpuListedTwiceUsesTheLocalCudaGroup) {
    const auto choice = choose_device_group(ids({"cuda:0", "cuda:1", "cuda:0"}), true);
    EXPECT_EQ(choice.backend, DeviceGroupBackend::cuda_local);
    EXPECT_NE(choice.reason.find("cuda:0 is listed 2 times"), std::string::npos) << choice.reason;
}

TEST(GpuCommChoice, MixingCpuAndCudaIsAConfigError) {
    try {
        choose_device_group(ids({"cuda:0", "cpu:0"}), true);
        FAIL() << "no ConfigError";
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("mixes cpu and cuda devices"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("cuda:0, cpu:0"), std::string::npos) << e.what();
    }
    EXPECT_THROW(choose_device_group({}, true), ConfigError);
}

TEST(GpuCommChoice, NcclAvailabilityIsReported) {
    // Either a version ("2.28.9") or the reason there is none; never a throw.
    const std::string version = kg::nccl::version();
    EXPECT_FALSE(version.empty());
    if (!kg::nccl::built()) {
        EXPECT_NE(version.find("without NCCL"), std::string::npos);
    }
}

// ---- on GPUs ----------------------------------------------------------------------------

// cuda_local: every rank on GPU 0 (virtual GPUs); cuda_local_spread: rank r on GPU r % count,
// the peer-copy path of CudaLocalGroup (a build without NCCL uses it for distinct GPUs).
enum class Backend { nccl, cuda_local, cuda_local_spread };
struct Case {
    Backend backend;
    int world;
};

void PrintTo(const Case& c, std::ostream* os) {
    *os << (c.backend == Backend::nccl ? "nccl" : c.backend == Backend::cuda_local ? "virtual GPUs" : "local CUDA group over GPUs")
        << " x" << c.world;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
    const Backend b = info.param.backend;
    return std::string(b == Backend::nccl ? "Nccl" : b == Backend::cuda_local ? "VirtualGpus" : "LocalCudaSpread") +
           std::to_string(info.param.world);
}

std::string skip_reason(const Case& c) {
    if (kg::device_count() == 0)
        return kg::backend_built()
                   ? "no CUDA device: this machine has no NVIDIA GPU or no driver "
                     "(kernels::gpu::device_count() == 0); run tests/gpu/run_on_gpu.sh on a GPU machine"
                   : "no CUDA device: this ParaLab was built without the CUDA backend";
    if (c.backend == Backend::nccl && !kg::nccl::available())
        return "no NCCL: " + kg::nccl::version();
    if (c.backend == Backend::nccl && c.world > kg::device_count())
        return "NCCL needs " + std::to_string(c.world) + " distinct GPUs; this machine has " +
               std::to_string(kg::device_count());
    if (c.backend == Backend::cuda_local_spread && kg::device_count() < 2)
        return "the local CUDA group's peer-copy path needs 2 GPUs; this machine has 1";
    return {};
}

// n elements of T on GPU `ordinal`; copies are synchronous, and every communicator call has
// finished its GPU work when it returns, so a copy after a call sees its result.
template <class T>
class DeviceArray {
public:
    DeviceArray(int ordinal, const std::vector<T>& host) : m_ordinal(ordinal), m_n(host.size()) {
        m_ptr = static_cast<T*>(kg::device_allocate(ordinal, std::max<size_t>(bytes(), 1)));
        if (!m_ptr) throw std::runtime_error("DeviceArray: GPU out of memory");
        if (m_n) kg::copy_host_to_device(m_ptr, host.data(), bytes());
    }
    ~DeviceArray() { kg::device_free(m_ordinal, m_ptr); }
    DeviceArray(const DeviceArray&) = delete;
    DeviceArray& operator=(const DeviceArray&) = delete;
    T* get() const { return m_ptr; }
    std::vector<T> download() const {
        std::vector<T> host(m_n);
        if (m_n) kg::copy_device_to_host(host.data(), m_ptr, bytes());
        return host;
    }

private:
    size_t bytes() const { return m_n * sizeof(T); }
    int m_ordinal;
    size_t m_n;
    T* m_ptr = nullptr;
};

// Runs body(rank) on one thread per rank; a rank that throws aborts the group (so that the
// others do not wait for it forever) and its exception fails the test.
void run_ranks(Group& group, const std::function<void(int)>& body) {
    std::mutex mutex;
    std::vector<std::string> errors;
    std::vector<std::thread> threads;
    for (int r = 0; r < group.world(); ++r)
        threads.emplace_back([&, r] {
            try {
                body(r);
            } catch (const std::exception& e) {
                {
                    std::lock_guard lock(mutex);
                    errors.push_back("rank " + std::to_string(r) + ": " + e.what());
                }
                group.abort("rank " + std::to_string(r) + " failed");
            }
        });
    for (auto& t : threads) t.join();
    for (const auto& e : errors) ADD_FAILURE() << e;
}

// One rank's call on a buffer it owns: the same function serves host (LocalGroup) and device.
template <class T>
using Call = std::function<void(Communicator&, T*, int64_t)>;

// Every rank's buffer after `call`: on the GPU group (device buffers) or, when group is the CPU
// LocalGroup, on host buffers.
template <class T>
std::vector<std::vector<T>> run_call(Group& group, const std::vector<int>& ordinals, bool on_gpu,
                                     const std::vector<std::vector<T>>& inputs, const Call<T>& call) {
    std::vector<std::vector<T>> out(inputs.size());
    run_ranks(group, [&](int r) {
        const auto& mine = inputs[size_t(r)];
        if (!on_gpu) {
            out[size_t(r)] = mine;
            call(group.rank(r), out[size_t(r)].data(), int64_t(mine.size()));
            return;
        }
        kg::set_device(ordinals[size_t(r)]);
        DeviceArray<T> buffer(ordinals[size_t(r)], mine);
        call(group.rank(r), buffer.get(), int64_t(mine.size()));
        out[size_t(r)] = buffer.download();
    });
    return out;
}

class GpuCommTest : public ::testing::TestWithParam<Case> {
protected:
    void SetUp() override {
        const std::string reason = skip_reason(GetParam());
        if (!reason.empty()) GTEST_SKIP() << reason;
        const int world = GetParam().world;
        for (int r = 0; r < world; ++r) {
            const Backend b = GetParam().backend;
            const int ordinal = b == Backend::nccl ? r : b == Backend::cuda_local ? 0 : r % kg::device_count();
            m_ordinals.push_back(ordinal);
            m_devices.push_back(
                make_cuda_device(ordinal, "cuda:" + std::to_string(ordinal) + "/" + std::to_string(r)));
        }
        m_group = make_group();
    }

    std::unique_ptr<Group> make_group() {
        std::vector<CudaDevice*> devices;
        for (auto& d : m_devices) devices.push_back(d.get());
        if (GetParam().backend == Backend::nccl) return std::make_unique<NcclGroup>(devices);
        return std::make_unique<CudaLocalGroup>(devices);
    }

    int world() const { return GetParam().world; }
    // The local CUDA group: the CPU LocalGroup's bits, whatever GPUs its ranks are on.
    bool virtual_gpus() const { return GetParam().backend != Backend::nccl; }

    template <class T>
    std::vector<std::vector<T>> on_gpu(const std::vector<std::vector<T>>& inputs, const Call<T>& call) {
        return run_call<T>(*m_group, m_ordinals, true, inputs, call);
    }
    template <class T>
    std::vector<std::vector<T>> on_cpu(const std::vector<std::vector<T>>& inputs, const Call<T>& call) {
        LocalGroup cpu(world());
        return run_call<T>(cpu, m_ordinals, false, inputs, call);
    }

    std::vector<int> m_ordinals;
    std::vector<std::unique_ptr<CudaDevice>> m_devices;
    std::unique_ptr<Group> m_group;
};

const int64_t k_counts[] = {0, 1, 5, 1000, 4099};

template <class T>
using Runner = std::function<std::vector<std::vector<T>>(const std::vector<std::vector<T>>&, const Call<T>&)>;

// Every op and count of an all-reduce in T; `partner` is the CPU LocalGroup (virtual GPUs: the
// same bits) or the GPU group again (NCCL: the same bits on a rerun).
template <class T>
void all_reduce_case(int world, bool virtual_gpus, const Runner<T>& gpu, const Runner<T>& partner) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::average, ReduceOp::max})
        for (int64_t count : k_counts) {
            SCOPED_TRACE(std::string(op_name(op)) + " count " + std::to_string(count));
            const auto inputs = make_inputs<T>(uint64_t(count) + 7, world, count);
            const Call<T> call = [op](Communicator& c, T* data, int64_t n) {
                c.all_reduce(data, n, dtype_of<T>(), op);
            };
            const auto got = gpu(inputs, call);
            for (int r = 0; r < world; ++r) expect_reduced(got[size_t(r)], inputs, op);
            const auto other = partner(inputs, call);
            for (int r = 0; r < world; ++r)
                EXPECT_TRUE(same_bits(got[size_t(r)], other[size_t(r)]))
                    << "rank " << r << " differs from "
                    << (virtual_gpus ? "the CPU LocalGroup" : "a rerun");
        }
}

#define GPU_AND_PARTNER(T)                                                                  \
    [&](const std::vector<std::vector<T>>& in, const Call<T>& call) { return on_gpu<T>(in, call); }, \
    [&](const std::vector<std::vector<T>>& in, const Call<T>& call) {                       \
        return virtual_gpus() ? on_cpu<T>(in, call) : on_gpu<T>(in, call);                  \
    }

TEST_P(GpuCommTest, AllReduceEveryOpAndDtype) {
    all_reduce_case<float>(world(), virtual_gpus(), GPU_AND_PARTNER(float));
    all_reduce_case<double>(world(), virtual_gpus(), GPU_AND_PARTNER(double));
}

TEST_P(GpuCommTest, ReduceScatterLeavesEachRankItsShard) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::average, ReduceOp::max})
        for (int64_t count : k_counts) {
            SCOPED_TRACE(std::string(op_name(op)) + " count " + std::to_string(count));
            const auto inputs = make_inputs<float>(uint64_t(count) + 11, world(), count);
            const Call<float> call = [op](Communicator& c, float* data, int64_t n) {
                c.reduce_scatter(data, n, DType::f32, op);
            };
            const auto got = on_gpu<float>(inputs, call);
            const auto other = virtual_gpus() ? on_cpu<float>(inputs, call) : on_gpu<float>(inputs, call);
            for (int r = 0; r < world(); ++r) {
                const auto s = data::shard_of_dataset(count, r, world());
                expect_reduced(got[size_t(r)], inputs, op, s.offset, s.offset + s.count);
                for (int64_t i = s.offset; i < s.offset + s.count; ++i)
                    ASSERT_EQ(std::memcmp(&got[size_t(r)][size_t(i)], &other[size_t(r)][size_t(i)], 4), 0)
                        << "rank " << r << " element " << i;
            }
        }
}

TEST_P(GpuCommTest, AllGatherAssemblesEveryShard) {
    for (int64_t count : k_counts) {
        SCOPED_TRACE("count " + std::to_string(count));
        auto inputs = make_inputs<double>(uint64_t(count) + 13, world(), count);
        // Only a rank's own shard is meaningful: the rest is NaN, which must be overwritten.
        std::vector<double> want(static_cast<size_t>(count));
        for (int r = 0; r < world(); ++r) {
            const auto s = data::shard_of_dataset(count, r, world());
            for (int64_t i = 0; i < count; ++i) {
                const bool mine = i >= s.offset && i < s.offset + s.count;
                if (mine) want[size_t(i)] = inputs[size_t(r)][size_t(i)];
                else inputs[size_t(r)][size_t(i)] = std::numeric_limits<double>::quiet_NaN();
            }
        }
        const auto got = on_gpu<double>(inputs, [](Communicator& c, double* data, int64_t n) {
            c.all_gather(data, n, DType::f64);
        });
        for (int r = 0; r < world(); ++r) EXPECT_TRUE(same_bits(got[size_t(r)], want)) << "rank " << r;
    }
}

TEST_P(GpuCommTest, BroadcastFromEveryRoot) {
    for (int root = 0; root < world(); ++root)
        for (int64_t count : k_counts) {
            SCOPED_TRACE("root " + std::to_string(root) + " count " + std::to_string(count));
            const auto inputs = make_inputs<float>(uint64_t(count) + 17 + uint64_t(root), world(), count);
            const auto got = on_gpu<float>(inputs, [root](Communicator& c, float* data, int64_t n) {
                c.broadcast(data, n, DType::f32, root);
            });
            for (int r = 0; r < world(); ++r)
                EXPECT_TRUE(same_bits(got[size_t(r)], inputs[size_t(root)])) << "rank " << r;
        }
}

TEST_P(GpuCommTest, ReduceToEveryRoot) {
    for (int root = 0; root < world(); ++root)
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::average, ReduceOp::max}) {
            SCOPED_TRACE("root " + std::to_string(root) + " " + op_name(op));
            const int64_t count = 4099;
            const auto inputs = make_inputs<double>(uint64_t(root) + 19, world(), count);
            const Call<double> call = [op, root](Communicator& c, double* data, int64_t n) {
                c.reduce(data, n, DType::f64, op, root);
            };
            const auto got = on_gpu<double>(inputs, call);
            expect_reduced(got[size_t(root)], inputs, op);
            const auto other = virtual_gpus() ? on_cpu<double>(inputs, call) : on_gpu<double>(inputs, call);
            EXPECT_TRUE(same_bits(got[size_t(root)], other[size_t(root)]));
        }
}

// counts: rank r gets 3r + 1 rows, and rank 1 none (an empty share must work).
TEST_P(GpuCommTest, ScatterAndGatherWithPerRankCounts) {
    std::vector<int64_t> counts;
    for (int r = 0; r < world(); ++r) counts.push_back(r == 1 ? 0 : 3 * r + 1);
    int64_t total = 0;
    for (int64_t c : counts) total += c;
    for (int root = 0; root < world(); ++root) {
        SCOPED_TRACE("root " + std::to_string(root));
        const auto all = make_inputs<float>(uint64_t(root) + 23, 1, total)[0];
        std::vector<std::vector<float>> scattered(static_cast<size_t>(world()));
        std::vector<float> gathered;
        run_ranks(*m_group, [&](int r) {
            kg::set_device(m_ordinals[size_t(r)]);
            DeviceArray<float> send(m_ordinals[size_t(r)], r == root ? all : std::vector<float>(1));
            DeviceArray<float> recv(m_ordinals[size_t(r)], std::vector<float>(size_t(std::max<int64_t>(counts[size_t(r)], 1))));
            m_group->rank(r).scatter(send.get(), recv.get(), counts, DType::f32, root);
            auto mine = recv.download();
            mine.resize(size_t(counts[size_t(r)]));
            scattered[size_t(r)] = mine;
            // Gather it back into a zeroed buffer on the root.
            DeviceArray<float> back(m_ordinals[size_t(r)], std::vector<float>(size_t(std::max<int64_t>(total, 1)), 0.0f));
            m_group->rank(r).gather(recv.get(), back.get(), counts, DType::f32, root);
            if (r == root) {
                gathered = back.download();
                gathered.resize(size_t(total));
            }
        });
        int64_t offset = 0;
        for (int r = 0; r < world(); ++r) {
            const std::vector<float> want(all.begin() + offset, all.begin() + offset + counts[size_t(r)]);
            EXPECT_TRUE(same_bits(scattered[size_t(r)], want)) << "rank " << r;
            offset += counts[size_t(r)];
        }
        EXPECT_TRUE(same_bits(gathered, all));
    }
}

// all_to_all with uneven counts, zeros among them (rank s sends rank d (3 s + 5 d + 1) % 4 * 3
// elements, each naming s, d and its place), and the bytes of what each rank sends the others.
TEST_P(GpuCommTest, AllToAllWithUnevenCounts) {
    const auto n = [](int s, int d) { return int64_t((3 * s + 5 * d + 1) % 4 * 3); };
    const auto value = [](int s, int d, int64_t i) { return float(1000 * s + 100 * d) + float(i) + 0.5f; };
    std::vector<std::vector<float>> got(static_cast<size_t>(world()));
    std::vector<int64_t> bytes(static_cast<size_t>(world()), -1);
    run_ranks(*m_group, [&](int r) {
        std::vector<int64_t> send_counts, recv_counts;
        std::vector<float> send;
        int64_t received = 0;
        for (int q = 0; q < world(); ++q) {
            send_counts.push_back(n(r, q));
            recv_counts.push_back(n(q, r));
            received += n(q, r);
            for (int64_t i = 0; i < n(r, q); ++i) send.push_back(value(r, q, i));
        }
        kg::set_device(m_ordinals[size_t(r)]);
        DeviceArray<float> from(m_ordinals[size_t(r)], send);
        DeviceArray<float> to(m_ordinals[size_t(r)], std::vector<float>(size_t(received), -1.0f));
        bytes[size_t(r)] = m_group->rank(r).all_to_all(from.get(), send_counts, to.get(), recv_counts, DType::f32).bytes;
        got[size_t(r)] = to.download();
    });
    for (int r = 0; r < world(); ++r) {
        std::vector<float> want;
        int64_t others = 0;
        for (int q = 0; q < world(); ++q) {
            for (int64_t i = 0; i < n(q, r); ++i) want.push_back(value(q, r, i));
            if (q != r) others += n(r, q);
        }
        EXPECT_TRUE(same_bits(got[size_t(r)], want)) << "rank " << r;
        EXPECT_EQ(bytes[size_t(r)], others * 4) << "rank " << r;
    }
}

// Every rank sends to the next (and to itself) twice with one tag: in order, eager (the sends
// return before any receive is posted).
TEST_P(GpuCommTest, SendRecvInOrderAndEager) {
    const int64_t count = 777;
    std::vector<std::vector<std::vector<double>>> got(static_cast<size_t>(world()));
    run_ranks(*m_group, [&](int r) {
        const int o = m_ordinals[size_t(r)];
        kg::set_device(o);
        Communicator& c = m_group->rank(r);
        const int next = (r + 1) % world(), prev = (r + world() - 1) % world();
        for (int k = 0; k < 2; ++k) {
            DeviceArray<double> out(o, make_inputs<double>(uint64_t(100 * r + k), 1, count)[0]);
            c.send(out.get(), count, DType::f64, next, 5);
            c.send(out.get(), count, DType::f64, r, 6);
        }
        for (int k = 0; k < 2; ++k)
            for (const auto& [from, tag] : {std::pair{prev, 5}, std::pair{r, 6}}) {
                DeviceArray<double> in(o, std::vector<double>(size_t(count)));
                c.recv(in.get(), count, DType::f64, from, tag);
                got[size_t(r)].push_back(in.download());
            }
    });
    for (int r = 0; r < world(); ++r) {
        const int prev = (r + world() - 1) % world();
        ASSERT_EQ(got[size_t(r)].size(), 4u);
        for (int k = 0; k < 2; ++k) {
            EXPECT_TRUE(same_bits(got[size_t(r)][size_t(2 * k)], make_inputs<double>(uint64_t(100 * prev + k), 1, count)[0]));
            EXPECT_TRUE(same_bits(got[size_t(r)][size_t(2 * k + 1)], make_inputs<double>(uint64_t(100 * r + k), 1, count)[0]));
        }
    }
}

// comm_reference's mixed sequence on device buffers: 200 calls of every kind, drawn alike on
// every rank, must not disturb each other.
TEST_P(GpuCommTest, MixedSequence) {
    run_ranks(*m_group, [&](int r) {
        const int o = m_ordinals[size_t(r)];
        kg::set_device(o);
        Communicator& c = m_group->rank(r);
        std::mt19937 pick(1234);
        for (int call = 0; call < 200; ++call) {
            const int kind = int(pick() % 7), root = int(pick() % uint32_t(world()));
            const int64_t count = int64_t(pick() % 300);
            SCOPED_TRACE("call " + std::to_string(call) + " kind " + std::to_string(kind));
            const auto inputs = make_inputs<double>(uint64_t(call), world(), count);
            DeviceArray<double> mine(o, inputs[size_t(r)]);
            if (kind == 0 || kind == 1) {
                const ReduceOp op = kind == 0 ? ReduceOp::sum : ReduceOp::max;
                c.all_reduce(mine.get(), count, DType::f64, op);
                expect_reduced(mine.download(), inputs, op);
            } else if (kind == 2) {
                c.reduce_scatter(mine.get(), count, DType::f64, ReduceOp::average);
                c.all_gather(mine.get(), count, DType::f64);
                expect_reduced(mine.download(), inputs, ReduceOp::average);
            } else if (kind == 3) {
                c.broadcast(mine.get(), count, DType::f64, root);
                EXPECT_TRUE(same_bits(mine.download(), inputs[size_t(root)]));
            } else if (kind == 4) {
                c.reduce(mine.get(), count, DType::f64, ReduceOp::sum, root);
                if (r == root) expect_reduced(mine.download(), inputs, ReduceOp::sum);
            } else if (kind == 5) {
                c.send(mine.get(), count, DType::f64, root, call);
                if (r == root)
                    for (int q = 0; q < world(); ++q) {
                        c.recv(mine.get(), count, DType::f64, q, call);
                        EXPECT_TRUE(same_bits(mine.download(), inputs[size_t(q)]));
                    }
            } else {
                c.barrier();
            }
        }
        EXPECT_GE(c.totals().calls, 200);
    });
}

// Ranks 1..N-1 wait in an all-reduce that rank 0 never joins (world 1: rank 0 waits for a
// message never sent); abort() frees them with CommAborted carrying the reason, and every
// later call throws CommAborted at once.
TEST_P(GpuCommTest, AbortUnblocksWaiters) {
    std::vector<std::string> caught(static_cast<size_t>(world()));
    std::vector<std::thread> waiters;
    const int64_t count = 1 << 16;
    std::vector<std::unique_ptr<DeviceArray<float>>> buffers;
    for (int r = 0; r < world(); ++r) {
        kg::set_device(m_ordinals[size_t(r)]);
        buffers.push_back(std::make_unique<DeviceArray<float>>(m_ordinals[size_t(r)], std::vector<float>(size_t(count), 1.0f)));
    }
    const int first_waiter = world() == 1 ? 0 : 1;
    for (int r = first_waiter; r < world(); ++r)
        waiters.emplace_back([&, r] {
            kg::set_device(m_ordinals[size_t(r)]);
            try {
                if (world() == 1)
                    m_group->rank(r).recv(buffers[size_t(r)]->get(), count, DType::f32, 0, 9);
                else
                    m_group->rank(r).all_reduce(buffers[size_t(r)]->get(), count, DType::f32, ReduceOp::sum);
                caught[size_t(r)] = "returned";
            } catch (const CommAborted& e) {
                caught[size_t(r)] = e.what();
            } catch (const std::exception& e) {
                caught[size_t(r)] = std::string("wrong exception: ") + e.what();
            }
        });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    m_group->abort("rank 0 failed on purpose");
    for (auto& w : waiters) w.join();
    for (int r = first_waiter; r < world(); ++r)
        EXPECT_NE(caught[size_t(r)].find("rank 0 failed on purpose"), std::string::npos)
            << "rank " << r << ": " << caught[size_t(r)];
    kg::set_device(m_ordinals[0]);
    EXPECT_THROW(m_group->rank(0).all_reduce(buffers[0]->get(), count, DType::f32, ReduceOp::sum),
                 CommAborted);
    EXPECT_THROW(m_group->rank(0).barrier(), CommAborted);
}

// DDP's shape: a second group from split() used by a second thread per rank at the same time
// as the first; the two threads' calls interleave differently on every rank, and neither group
// may deadlock or disturb the other (NCCL's split runs on streams of its own; the local CUDA
// group's only serialise on the shared stream).
TEST_P(GpuCommTest, SplitGroupRunsConcurrently) {
    std::unique_ptr<Group> second = m_group->split();
    const int64_t count = 3001;
    std::vector<std::thread> threads;
    std::mutex mutex;
    std::vector<std::string> errors;
    for (int g = 0; g < 2; ++g)
        for (int r = 0; r < world(); ++r)
            threads.emplace_back([&, g, r] {
                Group& group = g == 0 ? *m_group : *second;
                try {
                    const int o = m_ordinals[size_t(r)];
                    kg::set_device(o);
                    for (int call = 0; call < 20; ++call) {
                        const auto inputs = make_inputs<float>(uint64_t(1000 * g + call), world(), count);
                        DeviceArray<float> mine(o, inputs[size_t(r)]);
                        group.rank(r).all_reduce(mine.get(), count, DType::f32, ReduceOp::sum);
                        expect_reduced(mine.download(), inputs, ReduceOp::sum);
                    }
                } catch (const std::exception& e) {
                    std::lock_guard lock(mutex);
                    errors.push_back("group " + std::to_string(g) + " rank " + std::to_string(r) + ": " + e.what());
                    m_group->abort("a rank failed");
                    second->abort("a rank failed");
                }
            });
    for (auto& t : threads) t.join();
    for (const auto& e : errors) ADD_FAILURE() << e;
}

TEST_P(GpuCommTest, TheFactoryPicksThisBackend) {
    std::vector<Device*> devices;
    for (auto& d : m_devices) devices.push_back(d.get());
    // Distinct GPUs get NCCL; a GPU listed twice gets the local CUDA group (world 1 lists one
    // GPU once, and spreading 2 ranks over 2 GPUs lists each once: NCCL then).
    auto group = make_device_group(devices);
    std::set<int> distinct(m_ordinals.begin(), m_ordinals.end());
    const bool want_nccl = int(distinct.size()) == world();
    EXPECT_EQ(group->rank(0).backend(), want_nccl && kg::nccl::available() ? "nccl" : "cuda_local");
    EXPECT_EQ(group->world(), world());
}

INSTANTIATE_TEST_SUITE_P(Worlds, GpuCommTest,
                         ::testing::Values(Case{Backend::cuda_local, 1}, Case{Backend::cuda_local, 2},
                                           Case{Backend::cuda_local, 4},
                                           Case{Backend::cuda_local_spread, 2},
                                           Case{Backend::cuda_local_spread, 4}, Case{Backend::nccl, 1},
                                           Case{Backend::nccl, 2}, Case{Backend::nccl, 4}),
                         case_name);

}  // namespace
