#include "engine/plan/calibrate.h"

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

}  // namespace

Calibration measure_local(double seconds) {
    Calibration c;
    // A thread of its own, as a virtual device's rank thread is, with one compute thread.
    std::thread worker([&] {
        kernels::cpu::set_num_threads(1);
        // A GEMM of the size a small model's layers have: [512 x 512] · [512 x 512].
        const int64_t n = 512;
        std::vector<float> a(static_cast<size_t>(n * n), 0.5f), b(a), out(a.size(), 0.0f);
        c.gemm_flops = 2.0 * static_cast<double>(n * n * n) * rate_of(seconds, [&] {
                           kernels::cpu::gemm<float>(false, false, n, n, n, 1.0f, a.data(),
                                                     b.data(), 0.0f, out.data());
                       });
        // 64 MiB, well past the last-level cache: memory's rate.
        const size_t bytes = size_t{64} << 20;
        std::vector<char> src(bytes, 1), dst(bytes, 0);
        const double copies = rate_of(seconds, [&] { std::memcpy(dst.data(), src.data(), bytes); });
        c.copy_bandwidth = copies * static_cast<double>(bytes);
        c.memory_bandwidth = 2 * c.copy_bandwidth;  // each copy reads and writes its bytes
    });
    worker.join();
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
    const nlohmann::json j{{"gemm_gflops_fp32", c.gemm_flops / 1e9},
                           {"memory_bandwidth_gbps", c.memory_bandwidth / 1e9},
                           {"copy_bandwidth_gbps", c.copy_bandwidth / 1e9},
                           {"gemm_library", c.gemm_library}};
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
    std::ifstream in(path);
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(in);
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
        r.finish();
        return c;
    } catch (const nlohmann::json::parse_error& e) {
        throw ConfigError(path + ": not valid JSON (" + e.what() +
                          "); run `paralab bench --calibrate` again");
    } catch (const ConfigError& e) {
        throw ConfigError(path + ": " + e.what());
    }
}

}  // namespace paralab::plan
