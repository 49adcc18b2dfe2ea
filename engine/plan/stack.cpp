#include "engine/plan/stack.h"

#include <nlohmann/json.hpp>

#include "engine/run/json_reader.h"
#include "engine/util/error.h"

namespace paralab::plan {

namespace {

constexpr const char* kWhere = "resources/plan/stacks.json";

const nlohmann::json& presets() {
    static const nlohmann::json j = run::parse_json_text(stacks_text(), kWhere);
    return j;
}

Stack read_stack(const std::string& name, const nlohmann::json& j) {
    run::JsonObjectReader r(j, name);
    Stack s;
    s.name = name;
    r.string("description", "");
    s.compute_efficiency = r.number("compute_efficiency", 1.0, 0.01, 1.0);
    const std::string kernel = r.choice("attention_kernel", "fused", {"fused", "materialized", "engine"});
    s.fused_attention = kernel == "fused";
    s.engine_attention = kernel == "engine";
    s.grad_reduce_fp32 = r.choice("grad_reduce_precision", "16bit", {"16bit", "fp32"}) == "fp32";
    s.engine_memory = r.choice("memory_model", "published", {"published", "engine"}) == "engine";
    if (r.has("sources")) {
        run::JsonObjectReader sources(r.raw("sources"), name + ".sources");
        for (const char* key : {"compute_efficiency", "attention_kernel", "grad_reduce_precision", "memory_model"})
            if (sources.has(key) && sources.string(key, "").empty())
                sources.fail(key, "expected the source of " + std::string(key));
        sources.finish();
    }
    r.finish();
    return s;
}

}  // namespace

std::vector<std::string> stack_names() {
    std::vector<std::string> out;
    for (const auto& [name, value] : presets()["stacks"].items()) out.push_back(name);
    return out;
}

Stack stack_preset(const std::string& name) {
    const nlohmann::json& stacks = presets()["stacks"];
    if (!stacks.contains(name)) {
        std::string known;
        for (const auto& n : stack_names()) known += (known.empty() ? "" : ", ") + n;
        throw ConfigError("--stack", "unknown stack \"" + name + "\"; the presets are " + known);
    }
    try {
        return read_stack(name, stacks[name]);
    } catch (const ConfigError& e) {
        throw ConfigError(std::string(kWhere) + ": stacks." + e.what());
    }
}

}  // namespace paralab::plan
