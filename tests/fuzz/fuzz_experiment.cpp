// The experiment file (engine/run/experiment_file.h) through the entry `paralab validate` and `run`
// use for a file: load_experiment, then validate. An accepted experiment must survive its
// canonical JSON: parse_experiment(to_json(e)) accepts it and gives the same JSON back.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "engine/run/experiment_file.h"
#include "engine/util/error.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const paralab::fuzz::InputFile file(data, size);
    paralab::config::Experiment e;
    try {
        e = paralab::run::load_experiment(file.path());
    } catch (const paralab::Error&) {
        return 0;
    }
    try {
        paralab::run::validate(e);
    } catch (const paralab::Error&) {
    }
    const nlohmann::json j = paralab::run::to_json(e);
    const paralab::config::Experiment again = paralab::run::parse_experiment(j);  // must not throw
    if (paralab::run::to_json(again) != j) std::abort();
    return 0;
}
