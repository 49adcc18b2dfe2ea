#include "engine/run/memory_check.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <vector>

#include "engine/device/device.h"
#include "engine/strategy/registry.h"

namespace paralab::run {

namespace {

std::optional<int64_t> forced_available() {
    const char* text = std::getenv("PARALAB_AVAILABLE_MEMORY");
    if (!text || !*text) return std::nullopt;
    char* end = nullptr;
    double v = std::strtod(text, &end);
    double unit = 1;
    switch (end && *end ? *end : '\0') {
        case '\0': break;
        case 'K': case 'k': unit = 1024.0, ++end; break;
        case 'M': case 'm': unit = 1024.0 * 1024, ++end; break;
        case 'G': case 'g': unit = 1024.0 * 1024 * 1024, ++end; break;
        case 'T': case 't': unit = 1024.0 * 1024 * 1024 * 1024, ++end; break;
        default: end = nullptr;
    }
    if (end && (*end == 'i' || *end == 'B')) end += *end == 'i' ? 1 : 0;
    if (end && *end == 'B') ++end;
    v *= unit;
    if (!end || *end || !std::isfinite(v) || v < 0 || v > 9.2e18)
        throw ConfigError("PARALAB_AVAILABLE_MEMORY", std::string("expected a number of bytes such as 8G, got \"") +
                                                          std::string(text).substr(0, 40) + "\"");
    return static_cast<int64_t>(v);
}

std::optional<int64_t> mem_available(const std::string& root) {
    std::ifstream in(root + "proc/meminfo");
    std::string key;
    int64_t kb = 0;
    while (in >> key >> kb) {
        if (key == "MemAvailable:") return kb * 1024;
        in.ignore(256, '\n');
    }
    return std::nullopt;
}

// The first line of a small file ("" when it cannot be read).
std::string first_line(const std::string& path) {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    return line;
}

// A byte count of a cgroup file; nullopt for "max", an unlimited v1 value (2^63 rounded down
// to a page) or a file that is not there.
std::optional<int64_t> cgroup_bytes(const std::string& path) {
    const std::string text = first_line(path);
    if (text.empty() || text == "max") return std::nullopt;
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(text.c_str(), &end, 10);
    if (errno != 0 || end == text.c_str() || v < 0 || v >= (int64_t{1} << 62)) return std::nullopt;
    return static_cast<int64_t>(v);
}

// What a cgroup's limit leaves: the limit less the usage (its usage unknown: the limit).
std::optional<int64_t> left_in(const std::string& limit_file, const std::string& usage_file) {
    const auto limit = cgroup_bytes(limit_file);
    if (!limit) return std::nullopt;
    const int64_t used = cgroup_bytes(usage_file).value_or(0);
    return std::max<int64_t>(0, *limit - used);
}

std::optional<int64_t> least_of(std::optional<int64_t> a, std::optional<int64_t> b) {
    if (!a) return b;
    if (!b) return a;
    return std::min(*a, *b);
}

std::optional<int64_t> cgroup_left(const std::string& root) {
    std::ifstream in(root + "proc/self/cgroup");
    std::optional<int64_t> least;
    // "0::/user.slice/x" (v2), "4:memory:/docker/abc" (v1, the memory controller).
    for (std::string line; std::getline(in, line);) {
        const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
        if (b == std::string::npos) continue;
        const std::string controllers = line.substr(a + 1, b - a - 1);
        std::string path = line.substr(b + 1);
        if (path.find("..") != std::string::npos) continue;
        if (controllers.empty()) {
            // v2: this cgroup and every one above it bound it.
            for (;;) {
                const std::string dir = root + "sys/fs/cgroup" + (path == "/" ? "" : path);
                least = least_of(least, left_in(dir + "/memory.max", dir + "/memory.current"));
                if (path == "/" || path.empty()) break;
                path = path.substr(0, path.rfind('/'));
                if (path.empty()) path = "/";
            }
        } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
            // v1: the cgroup's folder, or the mount's root when the process sees its own cgroup
            // there (a container's namespace).
            for (const std::string& dir : {root + "sys/fs/cgroup/memory" + (path == "/" ? "" : path),
                                           root + "sys/fs/cgroup/memory"})
                if (const auto left = left_in(dir + "/memory.limit_in_bytes", dir + "/memory.usage_in_bytes")) {
                    least = least_of(least, left);
                    break;
                }
        }
    }
    return least;
}

std::optional<int64_t> address_space_left(const std::string& root) {
    rlimit limit{};
    if (getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return std::nullopt;
    // /proc/self/statm's first figure: the pages of address space mapped now.
    std::ifstream in(root + "proc/self/statm");
    int64_t pages = 0;
    in >> pages;
    const int64_t mapped = pages * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
    const auto cap = static_cast<int64_t>(std::min<rlim_t>(limit.rlim_cur, static_cast<rlim_t>(INT64_MAX)));
    return std::max<int64_t>(0, cap - mapped);
}

}  // namespace

std::optional<int64_t> HostMemoryLimits::least() const {
    return least_of(least_of(mem_available, address_space_left), cgroup_left);
}

std::string HostMemoryLimits::least_name() const {
    const auto l = least();
    if (!l) return "";
    if (cgroup_left == l) return "the cgroup's memory limit";
    if (address_space_left == l) return "RLIMIT_AS";
    return "MemAvailable";
}

HostMemoryLimits host_memory_limits(const std::string& root) {
    HostMemoryLimits h;
    h.mem_available = mem_available(root);
    h.address_space_left = address_space_left(root);
    h.cgroup_left = cgroup_left(root);
    return h;
}

std::string gib_text(double bytes) {
    char buf[48];
    const double gib = bytes / (1024.0 * 1024 * 1024);
    if (gib >= 1e6) std::snprintf(buf, sizeof buf, "%.3g GiB", gib);
    else std::snprintf(buf, sizeof buf, gib < 10 ? "%.2f GiB" : "%.1f GiB", gib);
    return buf;
}

std::optional<int64_t> available_memory_bytes(const std::string& device) {
    if (auto forced = forced_available()) return forced;
    const DeviceId id = parse_device_id(device);
    if (id.kind == DeviceKind::cpu) return host_memory_limits().least();
    for (const DeviceInfo& d : discover_devices())
        if (d.kind != DeviceKind::cpu && d.name == id.to_string() && d.memory_bytes > 0) return d.memory_bytes;
    return std::nullopt;
}

void check_memory_fits(const config::Experiment& e, const Shape& input) {
    const strategy::ModelCost cost = strategy::model_cost(e, input);
    const size_t devices = std::max<size_t>(1, e.devices.size());
    // A whole replica, in floating point: the products of a model of absurd sizes (2^40
    // activations per example, a batch of 2^31) do not fit an int64 count of bytes.
    double parameters = 0, activations = 0;
    for (int64_t p : cost.layer_parameters) parameters += static_cast<double>(p);
    for (int64_t a : cost.layer_activations) activations += static_cast<double>(a);
    const double whole = 4.0 * (parameters * (2 + strategy::optimizer_state_per_parameter(e.optimizer)) +
                                (activations + static_cast<double>(cost.output_numel)) *
                                    static_cast<double>(e.data.batch_size));
    // Per device and grouped by the memory they share: the host's for every CPU device, a GPU's
    // for each of its listings.
    struct Group {
        std::string first_device;
        size_t devices = 0;
        double bytes = 0;
    };
    std::map<std::string, Group> groups;
    double largest = 0;
    if (whole > 0x1p56) {
        // Beyond the strategies' int64 arithmetic (a device may hold a whole replica), and beyond
        // any machine: a lower bound, the replica shared perfectly among at most 1,024 devices
        // (64 TiB each), is enough to refuse.
        largest = whole / static_cast<double>(devices);
        for (size_t i = 0; i < devices; ++i) {
            const std::string name = i < e.devices.size() ? e.devices[i] : "cpu:0";
            Group& g = groups[parse_device_id(name).kind == DeviceKind::cpu ? "host" : name];
            if (g.devices++ == 0) g.first_device = name;
            g.bytes += largest;
        }
    } else {
        const auto estimates = strategy::estimate_memory(e, cost);
        for (size_t i = 0; i < estimates.size(); ++i) {
            const std::string& name = estimates[i].device;
            const double bytes = static_cast<double>(estimates[i].total());
            Group& g = groups[parse_device_id(name).kind == DeviceKind::cpu ? "host" : name];
            if (g.devices++ == 0) g.first_device = name;
            g.bytes += bytes;
            largest = std::max(largest, bytes);
        }
    }
    for (const auto& [key, g] : groups) {
        const std::optional<int64_t> available = available_memory_bytes(g.first_device);
        if (!available || g.bytes <= static_cast<double>(*available)) continue;
        std::string shared;
        if (g.devices > 1)
            shared = " (" + gib_text(g.bytes) + " for the " + std::to_string(g.devices) +
                     (key == "host" ? " CPU devices, which share the host's memory)"
                                    : " listings of " + key + ", which share its memory)");
        std::string bound;
        if (key == "host" && !forced_available()) {
            const std::string name = host_memory_limits().least_name();
            if (!name.empty() && name != "MemAvailable") bound = " (the bound of " + name + ")";
        }
        throw ConfigError("model", "needs " + gib_text(largest) + " per device" + shared + ", " +
                                       gib_text(static_cast<double>(*available)) + " available" +
                                       (key == "host" ? bound : " on " + key) +
                                       " (parameters, gradients, optimizer state and the activations of a batch of " +
                                       std::to_string(e.data.batch_size) +
                                       ", as the strategy's memory model predicts); use a smaller model or batch, "
                                       "or a strategy that splits the model");
    }
}

}  // namespace paralab::run
