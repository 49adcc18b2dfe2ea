#include "plan_command.h"
#include "cli_numbers.h"

#include "cli.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <optional>

#include <nlohmann/json.hpp>

#include "engine/plan/calibrate.h"
#include "engine/plan/compare.h"
#include "engine/plan/goodput.h"
#include "engine/plan/planner.h"
#include "engine/store/run_store.h"
#include "engine/util/error.h"

namespace paralab::app {

namespace {

using nlohmann::json;

void print_report(const plan::Prediction& p, const std::string& name, const plan::Cluster& c) {
    std::printf("%s on %s: %d node%s × %d = %d devices, stack %s\n", name.c_str(), c.name.c_str(),
                c.nodes, c.nodes == 1 ? "" : "s", c.gpus_per_node, p.devices, c.stack.name.c_str());
    std::printf("mesh: %s\n\n", plan::mesh_line(p.mesh, p.micro_batch).c_str());
    std::printf("step %.4g s   %.4g tokens/s   %.4g samples/s   MFU %.1f%%   %s\n\n", p.step_time_s,
                p.tokens_per_s, p.samples_per_s, 100 * p.mfu,
                p.fits ? "fits" : "DOES NOT FIT (out of memory)");
    std::printf("memory of the most loaded device (stage %d)\n", p.memory_stage);
    for (size_t i = 0; i < kMemCategoryCount; ++i)
        std::printf("  %-16s %12s\n",
                    std::string(mem_category_name(static_cast<MemCategory>(i))).c_str(),
                    human_bytes(p.memory[i]).c_str());
    std::printf("  %-16s %12s of %s\n\n", "total", human_bytes(p.memory_total).c_str(),
                human_bytes(p.memory_capacity).c_str());
    const plan::Breakdown& b = p.breakdown;
    const std::pair<const char*, double> rows[] = {
        {"compute", b.compute},     {"recompute", b.recompute}, {"tp_comm", b.tp_comm},
        {"pp_bubble", b.pp_bubble}, {"pp_comm", b.pp_comm},     {"dp_comm", b.dp_comm},
        {"optimizer", b.optimizer}};
    std::printf("where one step goes (the busiest device)\n");
    for (const auto& [what, s] : rows)
        std::printf("  %-16s %10.4f s %6.1f%%\n", what, s,
                    p.step_time_s > 0 ? 100 * s / p.step_time_s : 0.0);
    std::printf("  %-16s %10.4f s\n", "step", p.step_time_s);
}

// The goodput options read together (docs/planner.md, "Goodput"): none of them, or at least the
// failure rate, the storage bandwidth and the restart time.
std::optional<plan::GoodputInputs> goodput_inputs(const PlanArgs& a, const plan::Cluster& c) {
    const auto given = [](double x) { return !std::isnan(x); };
    const bool any = given(a.failure_rate) || given(a.storage_gbps) || given(a.restart_s) ||
                     given(a.tokens) || given(a.price_per_gpu_hour) || a.cost;
    if (!any) return std::nullopt;
    const char* missing = !given(a.failure_rate) ? "--failure-rate"
                          : !given(a.storage_gbps) ? "--storage-gbps"
                          : !given(a.restart_s)    ? "--restart-s"
                                                   : nullptr;
    if (missing)
        throw ConfigError(missing, "missing: goodput needs --failure-rate PER_GPU_HOUR, "
                                   "--storage-gbps G and --restart-s S together (and --tokens N "
                                   "for the time and cost to train)");
    plan::GoodputInputs in;
    in.failure_rate_per_gpu_hour = a.failure_rate;
    in.storage_bytes_per_s = a.storage_gbps * 1e9;
    in.restart_s = a.restart_s;
    if (given(a.tokens)) {
        if (!(a.tokens > 0)) throw ConfigError("--tokens", "expected a number of tokens above 0");
        in.tokens = a.tokens;
    }
    in.price_per_gpu_hour = c.price_per_gpu_hour;
    if (given(a.price_per_gpu_hour)) in.price_per_gpu_hour = a.price_per_gpu_hour;
    if (a.cost) {
        if (!in.price_per_gpu_hour)
            throw ConfigError("--cost", "the cluster " + c.name +
                                            " gives no price_per_gpu_hour; give "
                                            "--price-per-gpu-hour P or a cluster file with one");
        if (in.tokens <= 0) throw ConfigError("--cost", "needs --tokens N (the tokens to train)");
    }
    plan::check_goodput_inputs(in);
    return in;
}

void print_goodput(const plan::Goodput& g, const plan::GoodputInputs& in) {
    std::printf("\ngoodput at scale (Young/Daly checkpointing)\n");
    std::printf("  %-24s %s\n", "checkpoint", human_bytes(g.checkpoint_bytes).c_str());
    std::printf("  %-24s %.4g s\n", "checkpoint write", g.checkpoint_write_s);
    std::printf("  %-24s %.4g h\n", "mean time to failure", g.mtbf_s / 3600);
    std::printf("  %-24s %.4g s\n", "checkpoint interval", g.checkpoint_interval_s);
    std::printf("  %-24s %.2f%%\n", "goodput", 100 * g.goodput);
    if (in.tokens > 0)
        std::printf("  %-24s %.4g days (%.4g tokens)\n", "time to train", g.time_to_train_s / 86400,
                    in.tokens);
    if (g.cost) std::printf("  %-24s %.4g (at %.4g per GPU-hour)\n", "cost", *g.cost, *in.price_per_gpu_hour);
}

void print_sweep(const std::vector<plan::Prediction>& ps, const std::vector<std::string>& keys,
                 bool show_skipped, const std::optional<plan::GoodputInputs>& goodput) {
    const bool days = goodput && goodput->tokens > 0;
    std::printf("%4s", "rank");
    for (const auto& k : keys) std::printf(" %14s", k.c_str());
    std::printf(" %12s %14s %7s %12s %5s", "step_s", "tokens/s", "MFU", "memory", "fits");
    if (days) std::printf(" %14s", "days to train");
    std::printf("\n");
    int rank = 0;
    std::vector<const plan::Prediction*> skipped;
    for (const auto& p : ps) {
        if (!p.skipped.empty()) {
            skipped.push_back(&p);
            continue;
        }
        std::printf("%4d", ++rank);
        const json config = plan::to_json(p, keys)["config"];
        for (const auto& k : keys) {
            const json& v = config[k];
            std::printf(" %14s", v.is_string() ? v.get<std::string>().c_str() : v.dump().c_str());
        }
        std::printf(" %12.4g %14.4g %6.1f%% %12s %5s", p.step_time_s, p.tokens_per_s, 100 * p.mfu,
                    human_bytes(p.memory_total).c_str(), p.fits ? "yes" : "OOM");
        if (days) std::printf(" %14.4g", plan::goodput_of(p, *goodput).time_to_train_s / 86400);
        std::printf("\n");
    }
    if (!skipped.empty() && !show_skipped)
        std::printf("\n%zu configuration%s skipped (--show-skipped lists them and why)\n",
                    skipped.size(), skipped.size() == 1 ? "" : "s");
    if (!skipped.empty() && show_skipped) {
        std::printf("\nskipped:\n");
        for (const auto* p : skipped) {
            std::string config;
            const json values = plan::to_json(*p, keys)["config"];
            for (const auto& [k, v] : values.items())
                config += (config.empty() ? "" : " ") + k + "=" +
                          (v.is_string() ? v.get<std::string>() : v.dump());
            std::printf("  %s: %s\n", config.c_str(), p->skipped.c_str());
        }
    }
}

int plan(const PlanArgs& a) {
    const plan::PlanFile file = plan::read_plan_file(a.file);
    const auto mesh_of = [&](int devices) {
        try {
            return plan::mesh_of(file, devices);
        } catch (const ConfigError& e) {
            throw ConfigError(a.file + ": " + e.what());
        }
    };
    const std::string cluster_name = a.cluster.empty() ? "a100-80g" : a.cluster;
    plan::Cluster cluster = plan::load_cluster(cluster_name);
    const bool preset = !cluster_name.ends_with(".json");
    if (a.gpus_per_node > 0) cluster.gpus_per_node = a.gpus_per_node;
    if (!a.stack.empty()) cluster.stack = plan::stack_preset(a.stack);
    if (!a.grad_reduce.empty()) cluster.stack.grad_reduce_fp32 = a.grad_reduce == "fp32";
    if (a.nodes > 0) cluster.nodes = a.nodes;
    plan::check_cluster_size(cluster.nodes, cluster.gpus_per_node, a.nodes > 0 ? "--nodes" : "--gpus-per-node");
    std::vector<std::pair<std::string, std::vector<std::string>>> sweeps;
    std::vector<std::string> keys;
    for (const auto& s : a.sweeps) {
        sweeps.push_back(plan::parse_sweep(s));
        keys.push_back(sweeps.back().first);
    }
    // A preset is one node; without --nodes, the mesh says how many it uses (a part of one node
    // when it needs fewer devices than a node has).
    if (preset && a.nodes == 0) {
        const int64_t wanted = mesh_of(cluster.devices()).devices();
        if (wanted % cluster.gpus_per_node == 0)
            cluster.nodes = static_cast<int>(std::min<int64_t>(wanted / cluster.gpus_per_node, std::numeric_limits<int>::max()));
        else if (wanted < cluster.gpus_per_node && a.gpus_per_node == 0)
            cluster.gpus_per_node = static_cast<int>(wanted);
    }
    const plan::Mesh mesh = mesh_of(cluster.devices());
    const plan::PlanModel model = plan::plan_model(file.experiment);
    const std::optional<plan::GoodputInputs> goodput = goodput_inputs(a, cluster);
    if (sweeps.empty()) {
        const plan::Prediction p = plan::predict(file.experiment, model, cluster, mesh);
        if (!p.skipped.empty()) throw ConfigError("strategy", p.skipped);
        json out = plan::to_json(p);
        std::optional<plan::Goodput> g;
        if (goodput) {
            g = plan::goodput_of(p, *goodput);
            plan::add_goodput_json(out, *g, *goodput);
        }
        if (a.json) {
            std::cout << out.dump(2) << "\n";
        } else {
            print_report(p, file.experiment.name, cluster);
            if (g) print_goodput(*g, *goodput);
        }
        return 0;
    }
    plan::SweepOptions options;
    options.rank = plan::rank_from_name(a.rank);
    if (goodput) options.goodput = &*goodput;
    const auto ps = plan::sweep(file.experiment, model, cluster, mesh, sweeps, options);
    if (a.json) {
        json out = json::array();
        for (const auto& p : ps) {
            if (p.skipped.empty()) {
                json o = plan::to_json(p, keys);
                if (goodput) plan::add_goodput_json(o, plan::goodput_of(p, *goodput), *goodput);
                out.push_back(o);
            }
            else if (a.show_skipped)
                std::cerr << "paralab plan: skipped " << plan::to_json(p, keys)["config"].dump()
                          << ": " << p.skipped << "\n";
        }
        std::cout << out.dump(2) << "\n";
        return 0;
    }
    std::printf("%s on %s: %d node%s × %d = %d devices; base mesh %s\n\n",
                file.experiment.name.c_str(), cluster.name.c_str(), cluster.nodes,
                cluster.nodes == 1 ? "" : "s", cluster.gpus_per_node, cluster.devices(),
                plan::mesh_line(mesh, 0).c_str());
    print_sweep(ps, keys, a.show_skipped, goodput);
    return 0;
}

json number_or_null(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }

// `plan --compare RUN_ID [--cluster C]`: the stored run's experiment planned with the run's own
// devices on `local` or on C (the cluster a GPU run's devices are), beside what the run measured
// (plan::compare_run).
int compare(const PlanArgs& a) {
    const std::string db = a.db.empty() ? store::RunStore::default_path() : a.db;
    store::RunStore runs(db, store::RunStore::Access::read_only);
    const std::string id = std::to_string(a.compare);
    const auto row = runs.get_run(a.compare);
    if (!row) throw ConfigError("--compare", "run " + id + " is not in " + db);
    // A run still going (or one that ended without a summary) reads back with a partial summary
    // made from its records, without samples/s and memory.
    if (row->status == "running" || !row->summary.is_object() ||
        !row->summary.contains("peak_memory_bytes"))
        throw ConfigError("--compare", "run " + id + " has no summary (status " + row->status +
                                           "): compare a run that has ended");
    if (row->summary.value("steps", int64_t{0}) <= 0)
        throw ConfigError("--compare", "run " + id + " recorded no steps");
    std::vector<double> ends;
    for (const auto& point : runs.loss_curve(a.compare)) ends.push_back(point.wall_s);
    std::optional<plan::Cluster> on;
    if (!a.cluster.empty()) on = plan::load_cluster(a.cluster);
    const plan::RunComparison c =
        plan::compare_run(row->config, row->summary, ends, db + ": run " + id, on ? &*on : nullptr);
    const plan::Prediction& p = c.predicted;
    if (a.json) {
        json out{{"run_id", a.compare},
                 {"name", row->name},
                 {"strategy", c.strategy},
                 {"devices", c.devices},
                 {"cluster", c.cluster},
                 {"predicted",
                  {{"step_time_s", p.step_time_s},
                   {"samples_per_s", p.samples_per_s},
                   {"peak_memory_bytes", c.predicted_peak_bytes}}},
                 {"measured",
                  {{"step_time_s", c.step_s},
                   {"step_time_from", c.step_from},
                   {"samples_per_s", c.samples_per_s},
                   {"peak_memory_bytes", c.peak_bytes}}},
                 {"error",
                  {{"step_time", number_or_null(c.time_error)},
                   {"samples_per_s", number_or_null(c.rate_error)},
                   {"memory", number_or_null(c.memory_error)}}}};
        std::cout << out.dump(2) << "\n";
        return 0;
    }
    const auto percent = [](double e) {
        if (!std::isfinite(e)) return std::string("—");
        char buf[32];
        std::snprintf(buf, sizeof buf, "%+.1f%%", 100 * e);
        return std::string(buf);
    };
    std::printf("run %s (%s, %s on %d device%s) against its plan on %s\n", id.c_str(),
                row->name.c_str(), c.strategy.c_str(), c.devices,
                c.devices == 1 ? "" : "s", c.cluster.c_str());
    std::printf("mesh: %s\n\n", plan::mesh_line(p.mesh, p.micro_batch).c_str());
    std::printf("%-22s %14s %14s %9s\n", "", "predicted", "measured", "error");
    std::printf("%-22s %14.4g %14.4g %9s\n", "step time (s)", p.step_time_s, c.step_s,
                percent(c.time_error).c_str());
    std::printf("%-22s %14.4g %14.4g %9s\n", "samples/s", p.samples_per_s, c.samples_per_s,
                percent(c.rate_error).c_str());
    std::printf("%-22s %14s %14s %9s\n", "peak memory (busiest)", human_bytes(c.predicted_peak_bytes).c_str(),
                human_bytes(c.peak_bytes).c_str(), percent(c.memory_error).c_str());
    std::printf("\nmeasured step time: %s; memory: the tensors ParaLab allocated, the plan's without "
                "the cluster's reserved bytes; error = (predicted - measured) / measured\n",
                c.step_from.c_str());
    return 0;
}

}  // namespace

CLI::App* add_plan_command(CLI::App& app, PlanArgs& args) {
    auto* plan =
        app.add_subcommand("plan", "predict a configuration at cluster scale without running it");
    plan->add_option("file", args.file, "experiment file (*.paralab.json)");
    std::string presets;
    for (const auto& name : plan::preset_names()) presets += (presets.empty() ? "" : ", ") + name;
    plan->add_option(
        "--cluster", args.cluster,
        "a preset (" + presets +
            ") or a cluster file (*.json); default a100-80g "
            "(with --compare: local, which a run on GPUs must replace by its GPU's cluster)");
    add_integer_option(plan, "--nodes", args.nodes, 1, plan::kMaxNodes, "nodes (a preset: as many as the mesh needs)");
    add_integer_option(plan, "--gpus-per-node", args.gpus_per_node, 1, plan::kMaxGpusPerNode, "devices per node");
    plan->add_option("--sweep", args.sweeps,
                     "KEY=V1,V2,... (dp, tp, pp, zero, micro_batches, interleave, schedule, "
                     "sequence_parallel, "
                     "recompute); repeat for a grid")
        ->allow_extra_args(false);
    plan->add_flag("--json", args.json, "print JSON (an array with --sweep)");
    add_integer_option(plan, "--compare", args.compare, 1, INT64_MAX,
                       "RUN_ID: a stored run's step time and memory beside the plan of its "
                       "experiment on its own devices (the local cluster, or --cluster)");
    plan->add_option("--db", args.db, "run store of --compare (SQLite)");
    const double big = std::numeric_limits<double>::max();
    add_number_option(plan, "--failure-rate", args.failure_rate, -big, big,
                      "PER_GPU_HOUR: unexpected failures per GPU and hour, for goodput (with "
                      "--storage-gbps and --restart-s)");
    add_number_option(plan, "--storage-gbps", args.storage_gbps, -big, big,
                      "G: the checkpoint's write bandwidth, all devices together (GB/s)");
    add_number_option(plan, "--restart-s", args.restart_s, -big, big,
                      "S: seconds from a failure to training again");
    add_number_option(plan, "--tokens", args.tokens, -big, big,
                      "N: tokens to train, for the time (and cost) to train them");
    add_number_option(plan, "--price-per-gpu-hour", args.price_per_gpu_hour, 0, big,
                      "P: a device's price per hour (default: the cluster file's)");
    plan->add_option("--rank", args.rank,
                     "what a sweep ranks by: tokens_per_s (default), mfu, time_to_train (needs the "
                     "goodput options and --tokens)")
        ->check(CLI::IsMember({"tokens_per_s", "mfu", "time_to_train"}));
    plan->add_flag("--show-skipped", args.show_skipped,
                   "list a sweep's configurations that cannot run, with the reason");
    std::string stacks;
    for (const auto& name : plan::stack_names()) stacks += (stacks.empty() ? "" : ", ") + name;
    plan->add_option("--stack", args.stack,
                     "framework efficiency preset (" + stacks + "); default ideal");
    plan->add_option("--grad-reduce-precision", args.grad_reduce,
                     "the gradient all-reduce's precision: 16bit or fp32 (default: the stack's)")
        ->check(CLI::IsMember({"16bit", "fp32"}));
    plan->add_flag("--cost", args.cost,
                   "ask for the cost to train --tokens: refused when no price is known");
    return plan;
}

int run_plan_command(const PlanArgs& args) {
    try {
        if (args.compare > 0) {
            if (!args.file.empty() || !args.sweeps.empty() || args.nodes || args.gpus_per_node ||
                !std::isnan(args.failure_rate) || !std::isnan(args.storage_gbps) ||
                !std::isnan(args.restart_s) || !std::isnan(args.tokens) || args.cost)
                throw ConfigError("--compare",
                                  "plans the stored run's own experiment on its own devices; a "
                                  "file, --nodes, --gpus-per-node, --sweep and the goodput options do not "
                                  "go with it");
            return compare(args);
        }
        if (!args.db.empty()) throw ConfigError("--db", "goes with --compare RUN_ID");
        if (args.file.empty()) throw ConfigError("give an experiment file, or --compare RUN_ID");
        return plan(args);
    } catch (const std::exception& e) {
        std::string line = "paralab plan: ";
        line += e.what();
        line += '\n';
        std::fputs(line.c_str(), stderr);
        return 2;  // a bad file or bad arguments, as for every command
    }
}

int run_calibrate_command(bool as_json) {
    try {
        const plan::Calibration c = plan::measure_local();
        const std::string path = plan::calibration_path();
        plan::save_calibration(c, path);
        if (as_json) {
            std::cout << json{{"file", path},
                              {"gemm_gflops_fp32", c.gemm_flops / 1e9},
                              {"gemm_half_width", c.gemm_half_width},
                              {"memory_bandwidth_gbps", c.memory_bandwidth / 1e9},
                              {"copy_bandwidth_gbps", c.copy_bandwidth / 1e9},
                              {"allreduce_latency_us", c.allreduce_latency * 1e6},
                              {"allreduce_bandwidth_gbps", c.allreduce_bandwidth / 1e9},
                              {"gemm_library", c.gemm_library}}
                             .dump(2)
                      << "\n";
        } else {
            std::printf(
                "one virtual CPU device: fp32 GEMM n^3 at %.1f GFLOP/s · n / (n + %.0f) (%s, n = 64 "
                "... 512), memory %.1f GB/s (read + write), copy %.1f GB/s\nall-reduce of two "
                "devices: alpha %.1f us, beta %.1f GB/s\nkept in %s for `paralab plan --cluster "
                "local`\n",
                c.gemm_flops / 1e9, c.gemm_half_width, c.gemm_library.c_str(), c.memory_bandwidth / 1e9,
                c.copy_bandwidth / 1e9, c.allreduce_latency * 1e6, c.allreduce_bandwidth / 1e9,
                path.c_str());
        }
        return 0;
    } catch (const std::exception& e) {
        std::string line = "paralab bench --calibrate: ";
        line += e.what();
        line += '\n';
        std::fputs(line.c_str(), stderr);
        return 1;
    }
}

}  // namespace paralab::app
