#include "engine/plan/calibrate.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include <kernels/cpu/gemm.h>
#include <kernels/cpu/threads.h>
#include <nlohmann/json.hpp>

#include "engine/comm/communicator.h"
#include "engine/run/json_reader.h"
#include "engine/util/error.h"

namespace paralab::plan {

namespace {

using Clock = std::chrono::steady_clock;

// Runs `work` until `seconds` have passed (at least twice); returns calls per second.
template <class F>
double rate_of(double seconds, F&& work) {
    work();  // warm caches and the library's first-call setup
    int64_t calls = 0;
    const auto start = Clock::now();
    double elapsed = 0;
    do {
        work();
        ++calls;
        elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    } while (elapsed < seconds || calls < 2);
    return static_cast<double>(calls) / elapsed;
}

// Seconds per all-reduce of `floats` on a LocalGroup of two ranks (one thread each), over
// about `seconds`.
double all_reduce_seconds(int64_t floats, double seconds) {
    comm::LocalGroup group(2);
    std::vector<std::vector<float>> data(2, std::vector<float>(static_cast<size_t>(floats), 1.0f));
    std::vector<double> rates(2);
    std::vector<std::thread> ranks;
    for (int r = 0; r < 2; ++r)
        ranks.emplace_back([&, r] {
            // Both ranks call the same number of times: rank 0's count, from a probe of 10.
            comm::Communicator& c = group.rank(r);
            float* p = data[static_cast<size_t>(r)].data();
            const auto timed = [&](int64_t calls) {
                const auto start = Clock::now();
                for (int64_t i = 0; i < calls; ++i) c.all_reduce(p, floats, DType::f32, comm::ReduceOp::max);
                return std::chrono::duration<double>(Clock::now() - start).count() / static_cast<double>(calls);
            };
            timed(3);  // warm
            const double probe = timed(10);
            float calls = r == 0 ? static_cast<float>(std::clamp(seconds / std::max(probe, 1e-9), 10.0, 1e6)) : 0.0f;
            c.all_reduce(&calls, 1, DType::f32, comm::ReduceOp::max);
            rates[static_cast<size_t>(r)] = timed(static_cast<int64_t>(calls));
        });
    for (auto& t : ranks) t.join();
    return rates[0];
}

}  // namespace

std::pair<double, double> fit_gemm_curve(const std::vector<std::pair<double, double>>& points) {
    // y = 1/r against x = 1/n: y = a + b·x, peak = 1/a, w½ = b/a.
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    const double k = static_cast<double>(points.size());
    for (const auto& [n, rate] : points) {
        const double x = 1 / n, y = 1 / rate;
        sx += x, sy += y, sxx += x * x, sxy += x * y;
    }
    const double det = k * sxx - sx * sx;
    const double a = det != 0 ? (sxx * sy - sx * sxy) / det : 0, b = det != 0 ? (k * sxy - sx * sy) / det : 0;
    if (!(a > 0) || b < 0) {  // no such curve (the rate falls with size): the largest size's, flat
        const auto largest = std::max_element(points.begin(), points.end());
        return {largest == points.end() ? 0 : largest->second, 0};
    }
    return {1 / a, std::max(0.0, b / a)};
}

Calibration measure_local(double seconds) {
    Calibration c;
    // A thread of its own, as a virtual device's rank thread is, with one compute thread.
    std::thread worker([&] {
        kernels::cpu::set_num_threads(1);
        // Square GEMMs of the sizes small models' layers have, 64 to 512.
        std::vector<std::pair<double, double>> points;
        for (const int64_t n : {64, 128, 256, 512}) {
            std::vector<float> a(static_cast<size_t>(n * n), 0.5f), b(a), out(a.size(), 0.0f);
            points.emplace_back(static_cast<double>(n),
                                2.0 * static_cast<double>(n * n * n) * rate_of(seconds / 4, [&] {
                                    kernels::cpu::gemm<float>(false, false, n, n, n, 1.0f, a.data(),
                                                              b.data(), 0.0f, out.data());
                                }));
        }
        std::tie(c.gemm_flops, c.gemm_half_width) = fit_gemm_curve(points);
        // 64 MiB, well past the last-level cache: memory's rate.
        const size_t bytes = size_t{64} << 20;
        std::vector<char> src(bytes, 1), dst(bytes, 0);
        const double copies = rate_of(seconds, [&] { std::memcpy(dst.data(), src.data(), bytes); });
        c.copy_bandwidth = copies * static_cast<double>(bytes);
        c.memory_bandwidth = 2 * c.copy_bandwidth;  // each copy reads and writes its bytes
    });
    worker.join();
    // The ring of two ranks: t = 2α + bytes/β (each rank sends half the buffer twice), from a
    // 4-float and a 4 Mi-float all-reduce.
    const double small_bytes = 16, large_bytes = 16.0 * (1 << 20);
    const double t_small = all_reduce_seconds(4, seconds / 2), t_large = all_reduce_seconds(4 << 20, seconds / 2);
    c.allreduce_latency = std::max(t_small - small_bytes / std::max(1.0, c.copy_bandwidth), 0.0) / 2;
    // On a loaded machine the small all-reduce may wait as long as the large one: its latency is
    // then bounded by a quarter of the large one's time, which leaves the bytes a rate.
    c.allreduce_latency = std::min(c.allreduce_latency, t_large / 4);
    c.allreduce_bandwidth = t_large > 0 ? large_bytes / (t_large - 2 * c.allreduce_latency) : 0;
    c.gemm_library = kernels::cpu::gemm_library();
    return c;
}

std::string calibration_path() {
    if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && *xdg)
        return std::string(xdg) + "/ParaLab/calibration.json";
    const char* home = std::getenv("HOME");
    return std::string(home && *home ? home : ".") + "/.local/share/ParaLab/calibration.json";
}

void save_calibration(const Calibration& c, const std::string& path) {
    std::error_code ec;
    const auto folder = std::filesystem::path(path).parent_path();
    if (!folder.empty()) std::filesystem::create_directories(folder, ec);
    nlohmann::json j{{"gemm_gflops_fp32", c.gemm_flops / 1e9},
                     {"memory_bandwidth_gbps", c.memory_bandwidth / 1e9},
                     {"copy_bandwidth_gbps", c.copy_bandwidth / 1e9},
                     {"gemm_library", c.gemm_library}};
    if (c.gemm_half_width > 0) j["gemm_half_width"] = c.gemm_half_width;
    if (c.allreduce_latency > 0 && c.allreduce_bandwidth > 0) {
        j["allreduce_latency_us"] = c.allreduce_latency * 1e6;
        j["allreduce_bandwidth_gbps"] = c.allreduce_bandwidth / 1e9;
    }
    const std::string tmp = path + ".tmp";
    {
        std::ofstream out(tmp);
        out << j.dump(2) << "\n";
        if (!out) throw Error(path + ": cannot write the calibration");
    }
    std::filesystem::rename(tmp, path, ec);  // a reader never sees half a file
    if (ec) throw Error(path + ": cannot write the calibration: " + ec.message());
}

std::optional<Calibration> load_calibration(const std::string& path) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return std::nullopt;
    nlohmann::json j;
    try {
        j = run::read_json_file(path, "calibration file");
        run::JsonObjectReader r(j, "");
        Calibration c;
        const auto positive = [&](const std::string& key) {
            const auto v = r.number(key, 0, 1e30, false);
            if (!v) r.fail(key, "missing; run `paralab bench --calibrate` again");
            return *v * 1e9;
        };
        c.gemm_flops = positive("gemm_gflops_fp32");
        c.memory_bandwidth = positive("memory_bandwidth_gbps");
        c.copy_bandwidth = positive("copy_bandwidth_gbps");
        c.gemm_library = r.string("gemm_library", "");
        // Written by newer versions; an older file has none of them.
        c.gemm_half_width = r.number("gemm_half_width", 0.0, 0, 1e9);
        c.allreduce_latency = r.number("allreduce_latency_us", 0.0, 0, 1e9) * 1e-6;
        c.allreduce_bandwidth = r.number("allreduce_bandwidth_gbps", 0.0, 0, 1e30) * 1e9;
        r.finish();
        return c;
    } catch (const ConfigError& e) {
        // The reader's own errors name the file already.
        const std::string what = e.what();
        if (what.rfind(path + ":", 0) == 0) throw ConfigError(what + "; run `paralab bench --calibrate` again");
        throw ConfigError(path + ": " + what);
    }
}

}  // namespace paralab::plan
