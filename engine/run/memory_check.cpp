#include "engine/run/memory_check.h"

#include <algorithm>
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

std::optional<int64_t> host_available() {
    std::ifstream in("/proc/meminfo");
    std::string key;
    int64_t kb = 0;
    while (in >> key >> kb) {
        if (key == "MemAvailable:") return kb * 1024;
        in.ignore(256, '\n');
    }
    return std::nullopt;
}

}  // namespace

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
    if (id.kind == DeviceKind::cpu) return host_available();
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
        throw ConfigError("model", "needs " + gib_text(largest) + " per device" + shared + ", " +
                                       gib_text(static_cast<double>(*available)) + " available" +
                                       (key == "host" ? "" : " on " + key) +
                                       " (parameters, gradients, optimizer state and the activations of a batch of " +
                                       std::to_string(e.data.batch_size) +
                                       ", as the strategy's memory model predicts); use a smaller model or batch, "
                                       "or a strategy that splits the model");
    }
}

}  // namespace paralab::run
