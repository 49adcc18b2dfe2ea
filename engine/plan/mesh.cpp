#include "engine/plan/mesh.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/run/experiment_file.h"
#include "engine/run/json_reader.h"
#include "engine/strategy/registry.h"
#include "engine/util/error.h"

namespace paralab::plan {

using nlohmann::json;
namespace stages = strategy::stages;

namespace {


int positive(const std::string& key, const std::string& value, int min, int max) {
    try {
        size_t used = 0;
        const long v = std::stol(value, &used);
        if (used == value.size() && v >= min && v <= max) return static_cast<int>(v);
    } catch (const std::exception&) {
    }
    throw ConfigError("--sweep", key + "=" + value + ": expected an integer from " +
                                     std::to_string(min) + " to " + std::to_string(max));
}

}  // namespace

PlanFile read_plan_file(const std::string& path) {
    return plan_file_from_json(run::read_json_file(path, "experiment file"), path);
}

PlanFile plan_file_from_json(json j, const std::string& path) {
    PlanFile f;
    json strategy = json::object();
    if (j.is_object() && j.contains("strategy")) {
        strategy = j["strategy"];
        j.erase("strategy");
    }
    // `devices` is ignored by a plan, and half precision is accepted whatever the devices are.
    try {
        f.experiment = run::parse_experiment(j);
    } catch (const ConfigError& e) {
        throw ConfigError(path + ": " + e.what());
    }
    if (!strategy.is_object())
        throw ConfigError(path + ": strategy: expected an object, got " +
                          run::describe_json(strategy));
    f.strategy_type = strategy.value("type", std::string("single"));
    if (!strategy::find_strategy(f.strategy_type))
        throw ConfigError(
            path + ": strategy.type: unknown strategy \"" + f.strategy_type +
            "\"; a plan reads hybrid, single, data_parallel, ddp, zero, tensor_parallel, "
            "pipeline or model_parallel");
    // Its options parsed by the registry's rules.
    json whole = j;
    whole["strategy"] = strategy;
    try {
        f.experiment.strategy = run::parse_experiment(whole).strategy;
    } catch (const ConfigError& e) {
        throw ConfigError(path + ": " + e.what());
    }
    return f;
}

Mesh mesh_of(const PlanFile& file, int devices) {
    const config::Experiment& e = file.experiment;
    Mesh m;
    m.recompute = nn::recompute_from_name(e.train.recompute);
    m.precision = precision_from_name(e.train.precision);
    const std::string& type = file.strategy_type;
    if (type == "single") return m;
    if (type == "data_parallel" || type == "ddp") {
        m.dp = devices;
        if (type == "ddp") {
            m.bucket_mb = strategy::option<double>(e.strategy, "bucket_mb");
            m.overlap_grad_reduce = strategy::option<bool>(e.strategy, "overlap");
        }
        return m;
    }
    // hybrid's options: the file's, or those of the preset of hybrid its strategy is.
    config::StrategyConfig s = e.strategy;
    if (type != "hybrid") {
        const strategy::StrategyDescriptor* d = strategy::find_strategy(type);
        if (!d || !d->as_hybrid)
            throw ConfigError("strategy.type",
                              "a plan models hybrid, its presets (zero, tensor_parallel, pipeline, "
                              "model_parallel), single, data_parallel and ddp, not " + type);
        s = d->as_hybrid(e, devices);
    }
    m.dp = static_cast<int>(strategy::option<int64_t>(s, "dp"));
    m.tp = static_cast<int>(strategy::option<int64_t>(s, "tp"));
    m.pp = static_cast<int>(strategy::option<int64_t>(s, "pp"));
    m.zero = static_cast<int>(strategy::option<int64_t>(s, "zero"));
    m.micro_batches = static_cast<int>(strategy::option<int64_t>(s, "micro_batches"));
    m.schedule = stages::schedule_from_name(strategy::option<std::string>(s, "schedule"));
    m.interleave = static_cast<int>(strategy::option<int64_t>(s, "interleave"));
    m.sequence_parallel = strategy::option<bool>(s, "sequence_parallel");
    return m;
}

std::vector<std::string> sweep_keys() {
    return {"dp",
            "tp",
            "pp",
            "zero",
            "micro_batches",
            "interleave",
            "schedule",
            "sequence_parallel",
            "recompute"};
}

void set_mesh_key(Mesh& m, const std::string& key, const std::string& value) {
    if (key == "dp")
        m.dp = positive(key, value, 1, 1 << 20);
    else if (key == "tp")
        m.tp = positive(key, value, 1, 1 << 20);
    else if (key == "pp")
        m.pp = positive(key, value, 1, 1 << 20);
    else if (key == "zero")
        m.zero = positive(key, value, 0, 3);
    else if (key == "micro_batches")
        m.micro_batches = positive(key, value, 1, 1 << 20);
    else if (key == "interleave")
        m.interleave = positive(key, value, 1, 1024);
    else if (key == "schedule" || key == "recompute") {
        try {
            if (key == "schedule")
                m.schedule = stages::schedule_from_name(value, key);
            else
                m.recompute = nn::recompute_from_name(value, key);
        } catch (const ConfigError& e) {
            throw ConfigError("--sweep", key + "=" + value + ": " + e.reason());
        }
    } else if (key == "sequence_parallel") {
        if (value != "true" && value != "false")
            throw ConfigError("--sweep", key + "=" + value + ": expected one of true, false");
        m.sequence_parallel = value == "true";
    } else {
        std::string list;
        for (const auto& k : sweep_keys()) list += (list.empty() ? "" : ", ") + k;
        throw ConfigError("--sweep", "unknown sweep key \"" + key + "\"; the keys are " + list);
    }
}

std::pair<std::string, std::vector<std::string>> parse_sweep(const std::string& text) {
    const size_t eq = text.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
        throw ConfigError("--sweep", "\"" + text + "\": expected KEY=V1,V2,... such as tp=1,2,4");
    std::pair<std::string, std::vector<std::string>> out{text.substr(0, eq), {}};
    std::string rest = text.substr(eq + 1);
    size_t at = 0;
    while (at <= rest.size()) {
        const size_t comma = rest.find(',', at);
        const std::string v =
            rest.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
        if (v.empty()) throw ConfigError("--sweep", "\"" + text + "\": an empty value");
        out.second.push_back(v);
        if (comma == std::string::npos) break;
        at = comma + 1;
    }
    Mesh probe;
    for (const auto& v : out.second)
        set_mesh_key(probe, out.first, v);  // refuses bad keys and values now
    return out;
}

config::StrategyConfig hybrid_options(const Mesh& m) {
    config::StrategyConfig s = strategy::default_config("hybrid");
    s.options["dp"] = int64_t{m.dp};
    s.options["tp"] = int64_t{m.tp};
    s.options["pp"] = int64_t{m.pp};
    s.options["zero"] = int64_t{m.zero};
    s.options["micro_batches"] = int64_t{m.micro_batches};
    s.options["schedule"] = std::string(stages::schedule_name(m.schedule));
    s.options["interleave"] = int64_t{m.interleave};
    s.options["sequence_parallel"] = m.sequence_parallel;
    return s;
}

std::string mesh_line(const Mesh& m, int64_t micro_batch) {
    std::string s = "dp " + std::to_string(m.dp) + " · tp " + std::to_string(m.tp) + " · pp " +
                    std::to_string(m.pp);
    s += ", " + std::string(stages::schedule_name(m.schedule));
    if (m.schedule == stages::Schedule::interleaved_1f1b) s += " ×" + std::to_string(m.interleave);
    s += ", " + std::to_string(m.micro_batches) + (m.micro_batches == 1 ? " micro-batch" : " micro-batches");
    if (micro_batch > 0) s += " of " + std::to_string(micro_batch);
    s += ", zero " + std::to_string(m.zero);
    if (m.sequence_parallel) s += ", sequence parallel";
    s += ", recompute " + std::string(nn::recompute_name(m.recompute)) + ", " +
         precision_name(m.precision);
    return s;
}

}  // namespace paralab::plan
