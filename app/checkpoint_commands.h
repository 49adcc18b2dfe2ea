// `paralab export RUN_ID --weights FILE` and `paralab generate RUN_ID --prompt TEXT --tokens N`:
// a run's latest checkpoint (engine/run/checkpoint.h) as a weights file, or sampled as text.
#pragma once

#include <cstdint>
#include <string>

namespace paralab::app {

// Writes the parameters (and batchnorm statistics) of run `run_id`'s newest usable checkpoint
// to `file` (safetensors, the names `paralab run --init` reads). Returns the exit code.
int cmd_export_weights(const std::string& store, int64_t run_id, const std::string& file);

struct GenerateArgs {
    int64_t run_id = 0;
    std::string prompt;
    int64_t tokens = 100;
    double temperature = 0.8;
    uint64_t seed = 0;
};
// Prints `tokens` bytes drawn from a text model's newest checkpoint after `prompt`.
int cmd_generate(const std::string& store, const GenerateArgs& a);

}  // namespace paralab::app
