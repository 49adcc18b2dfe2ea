// Reading and writing the experiment file (`*.paralab.json`, docs/experiment-format.md); the
// value types it fills are in engine/config/experiment.h.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/config/experiment.h"
#include "engine/config/issue.h"

namespace paralab::run {

// Validates and converts; throws ConfigError naming the JSON path of the first problem.
config::Experiment parse_experiment(const nlohmann::json& j);
// Reads a file: a missing file, a JSON syntax error (with line and column) or an invalid
// experiment each throw ConfigError naming the file.
config::Experiment load_experiment(const std::string& path);
// Canonical JSON of an experiment (every field, defaults filled in): what the run store keeps
// and what the GUI saves. parse_experiment(to_json(e)) gives e back.
nlohmann::json to_json(const config::Experiment& e);

// The checks an experiment gets before anything is loaded or allocated: every check of the
// parser (so an experiment edited in memory is held to the file's rules), the straggler among
// the devices, and the strategy's own rules on its devices and its options against the model
// (registry.h). Returns the first problem with its JSON path; empty when there is none. What
// this machine and build can run (check_device_list), the strategy's device count and what
// needs the data are checked by check_before_training (trainer.h): the window's panels edit
// devices and strategy one after the other and call only this.
std::vector<config::Issue> validate(const config::Experiment& e);

// The rules on the device list that need no device made: a CPU device listed twice, a GPU in a
// build without the CUDA backend, CPU and CUDA devices mixed, half precision on CPU devices.
// Throws ConfigError naming the path. The run makes the same checks before it makes devices.
void check_device_list(const config::Experiment& e);

// The straggler, when the experiment names one, must be one of the run's devices (`names`: the
// experiment's, or a job's "r<process>/<device>" world). Throws ConfigError naming the path.
void check_straggler(const config::Experiment& e, const std::vector<std::string>& names);

// The model's per-example input: model.input when given, else the data set's example shape
// (read from one example of each split, so it is cheap even for large sets).
Shape model_input_shape(const config::Experiment& e);

}  // namespace paralab::run
