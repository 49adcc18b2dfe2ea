// The local all-reduce as DDP meets it (docs/benchmarks.md, "The ring on freshly written buffers"): every call
// reduces buffers that each rank has just written, as backward writes its gradients, so the
// ring reads data that sits in the other core's cache or in memory, not a buffer it reduced a
// moment ago (paralab bench's all-reduce table repeats calls on the same buffers). Not a test;
// its smoke run checks the sums.
//
//   ring_bench [--ranks N] [--floats COUNT] [--calls K] [--no-write] [--pieces BYTES]
//
// Each call: every rank writes its COUNT floats (unless --no-write), the ranks meet at a
// barrier, and each times its all_reduce (f32 sum). Prints the median, 10th and 90th percentile
// of rank 0's calls in ms. --pieces forces LocalGroup's ring pieces (0: automatic).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "engine/comm/communicator.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
    int ranks = 2;
    int64_t floats = 669706;  // the bench MLP's parameters: one ddp bucket of 2.6 MB
    int calls = 400;
    bool write = true;
    int64_t piece_bytes = 0;
};

[[noreturn]] void usage(const char* why) {
    std::fprintf(stderr,
                 "ring_bench: %s\nusage: ring_bench [--ranks N] [--floats COUNT] [--calls K] [--no-write] "
                 "[--pieces BYTES]\n",
                 why);
    std::exit(2);
}

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> long long {
            if (i + 1 >= argc) usage((a + " needs a value").c_str());
            char* end = nullptr;
            const long long v = std::strtoll(argv[++i], &end, 10);
            if (end == argv[i] || *end != '\0' || v < 0) usage((a + ": not a non-negative integer").c_str());
            return v;
        };
        if (a == "--ranks") o.ranks = int(value());
        else if (a == "--floats") o.floats = value();
        else if (a == "--calls") o.calls = int(value());
        else if (a == "--pieces") o.piece_bytes = value();
        else if (a == "--no-write") o.write = false;
        else usage(("unknown option " + a).c_str());
    }
    if (o.ranks < 1 || o.floats < 1 || o.calls < 1) usage("ranks, floats and calls must be >= 1");
    return o;
}

// What rank r writes at element k before every call.
float input(int r, int64_t k) {
    return float(k % 1000) * 1e-3f * float(r + 1);
}

}  // namespace

int main(int argc, char** argv) {
    const Options o = parse(argc, argv);
    try {
        paralab::comm::LocalGroup group(o.ranks, o.piece_bytes);
        std::vector<std::vector<double>> ms(size_t(o.ranks));
        std::vector<std::vector<float>> data(size_t(o.ranks), std::vector<float>(size_t(o.floats)));
        std::vector<std::exception_ptr> errors(size_t(o.ranks));
        std::vector<std::thread> threads;
        for (int r = 0; r < o.ranks; ++r)
            threads.emplace_back([&, r] {
                try {
                    auto& c = group.rank(r);
                    auto& d = data[size_t(r)];
                    for (int64_t k = 0; k < o.floats; ++k) d[size_t(k)] = input(r, k);
                    for (int call = 0; call < o.calls; ++call) {
                        if (o.write)
                            for (int64_t k = 0; k < o.floats; ++k) d[size_t(k)] = input(r, k);
                        c.barrier();
                        const auto t0 = Clock::now();
                        c.all_reduce(d.data(), o.floats, paralab::DType::f32, paralab::comm::ReduceOp::sum);
                        ms[size_t(r)].push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
                    }
                } catch (...) {
                    errors[size_t(r)] = std::current_exception();
                    group.abort("ring_bench: rank " + std::to_string(r) + " failed");
                }
            });
        for (auto& t : threads) t.join();
        for (auto& e : errors)
            if (e) std::rethrow_exception(e);
        // The last call's sums (written afresh: exact for every call; without writing, the
        // buffers went on summing, so only the ranks' agreement is checked).
        const double ranks_sum = o.ranks * (o.ranks + 1) / 2.0;
        for (int64_t k : {int64_t{0}, o.floats / 2, o.floats - 1}) {
            const double want = double(k % 1000) * 1e-3 * ranks_sum;
            for (int r = 0; r < o.ranks; ++r) {
                const double got = data[size_t(r)][size_t(k)];
                const bool agree = got == double(data[0][size_t(k)]);
                const bool right = !o.write || std::fabs(got - want) <= 1e-5 * std::max(1.0, std::fabs(want));
                if (!agree || !right) {
                    std::fprintf(stderr, "ring_bench: element %lld of rank %d is %.9g, expected %.9g\n",
                                 static_cast<long long>(k), r, got, o.write ? want : double(data[0][size_t(k)]));
                    return 1;
                }
            }
        }
        auto v = ms[0];
        std::sort(v.begin(), v.end());
        auto at = [&](double q) { return v[std::min(v.size() - 1, size_t(q * double(v.size())))]; };
        std::printf("ranks %d, %lld floats (%.2f MB), %d calls, %s: median %.3f ms, p10 %.3f, p90 %.3f\n", o.ranks,
                    static_cast<long long>(o.floats), double(o.floats) * 4 / 1e6, o.calls,
                    o.write ? "buffers written before each call" : "buffers not rewritten", at(0.5), at(0.1),
                    at(0.9));
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "ring_bench: %s\n", e.what());
        return 1;
    }
}
