// Text from a next-token model: the continuation of a prompt, one token at a time, through a
// model of byte tokens with a fixed context of T positions ([T] ids -> [T, V] scores).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "engine/tensor/tensor.h"

namespace paralab {
class Device;
}

namespace paralab::run {

struct GenerateOptions {
    std::string prompt = "\n";
    int64_t tokens = 100;      // new tokens to draw
    double temperature = 0.8;  // 0: the most likely token each time (greedy)
    uint64_t seed = 0;         // the draws' random stream: a fixed seed makes a run's samples comparable
};

// `predict` maps ids [1, T] (floats, on `device`) to scores [1, T, V]. The context is the last
// T tokens of prompt + what was drawn so far, placed at the start of the window with zeros after
// (a causal model's output at the last real position does not see them); the next token is
// drawn from softmax(scores / temperature) there. Returns the new tokens only, as bytes.
std::string generate_text(const std::function<Tensor(const Tensor&)>& predict, Device& device, int64_t T,
                          const GenerateOptions& options);

// `text` with every byte that is not printable ASCII, a newline or a tab shown as '?', for
// terminals and tables.
std::string printable_text(const std::string& text);

}  // namespace paralab::run
