// One problem found in an experiment, with the JSON path of the value it concerns, as data:
// the GUI places the message under the field of that path, the CLI prints "path: message".
#pragma once

#include <string>

namespace paralab::config {

struct Issue {
    std::string path;     // "strategy.split[1]", "model.layers[3]"; "" for the file as a whole
    std::string message;  // without the path: "expected a positive integer, got -4"

    std::string text() const { return path.empty() ? message : path + ": " + message; }
};

}  // namespace paralab::config
