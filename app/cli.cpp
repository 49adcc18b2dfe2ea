#include "cli.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "engine/device/device.h"

namespace paralab::app {

namespace {

int cmd_devices(bool as_json) {
    const auto devices = discover_devices();
    if (as_json) {
        nlohmann::json out = nlohmann::json::array();
        for (const auto& d : devices) {
            nlohmann::json j{{"name", d.name},
                             {"kind", d.kind == DeviceKind::cpu ? "cpu" : "cuda"},
                             {"description", d.description},
                             {"memory_bytes", d.memory_bytes},
                             {"cores", d.cores}};
            if (d.kind == DeviceKind::cuda)
                j["compute_capability"] = std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor);
            out.push_back(j);
        }
        std::cout << out.dump(2) << "\n";
        return 0;
    }
    for (const auto& d : devices) {
        if (d.kind == DeviceKind::cpu) {
            std::printf("cpu      %s, %d cores, %.1f GiB (virtual devices cpu:0, cpu:1, ...)\n",
                        d.description.c_str(), d.cores, d.memory_bytes / 1073741824.0);
        } else {
            std::printf("%-8s %s, %d SMs, %.1f GiB, compute capability %d.%d\n", d.name.c_str(),
                        d.description.c_str(), d.cores, d.memory_bytes / 1073741824.0, d.cc_major,
                        d.cc_minor);
        }
    }
    return 0;
}

}  // namespace

int run_cli(int argc, char** argv, int (*open_gui)(int argc, char** argv)) {
    CLI::App app{"ParaLab: a laboratory for parallel neural-network training"};
    app.require_subcommand(0, 1);

    bool devices_json = false;
    auto* devices = app.add_subcommand("devices", "list the devices found (GPUs, CPU)");
    devices->add_flag("--json", devices_json, "print JSON");

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        const int code = app.exit(e);
        return code == 0 ? 0 : 2;
    }

    try {
        if (devices->parsed()) return cmd_devices(devices_json);
        if (open_gui) return open_gui(argc, argv);
        std::cout << app.help();
        return 0;
    } catch (const std::exception& e) {
        std::cerr << "paralab: " << e.what() << "\n";
        return 2;
    }
}

}  // namespace paralab::app
