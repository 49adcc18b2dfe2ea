// Bad experiment files in tests: the message and JSON path a file is refused with, and a named
// edit of a good file with the path and words its refusal must give.
#pragma once

#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/nn/model.h"
#include "engine/run/experiment_file.h"
#include "engine/util/error.h"

namespace paralab::testing {

// The error parsing `j` and summarising its model gives ("" when none), and its JSON path.
inline std::string error_of(const nlohmann::json& j, std::string* path = nullptr) {
    try {
        const auto e = run::parse_experiment(j);
        nn::summarize(e.layers, *e.input, e.loss);
    } catch (const ConfigError& err) {
        if (path) *path = err.path();
        return err.what();
    } catch (const ShapeError& err) {
        if (path) *path = err.path();
        return err.what();
    }
    return "";
}

// `edit` applied to a good file's model.layers makes it refused at `path`, saying `says`.
struct BadCase {
    const char* name;
    std::function<void(nlohmann::json&)> edit;
    const char* path;
    const char* says;
};

}  // namespace paralab::testing
