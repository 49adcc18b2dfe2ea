// The CSV reader (engine/data/csv.h) on arbitrary bytes: it refuses them with paralab::Error
// (naming file and line), or returns a data set whose arrays match its shapes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "engine/data/csv.h"
#include "engine/util/error.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const paralab::fuzz::InputFile file(data, size);
    const std::string text(reinterpret_cast<const char*>(data), size);
    // The default label (the last column), and a column named by the input's first field.
    const auto first = paralab::data::split_csv_record(text.substr(0, text.find('\n')));
    for (const std::string& label : {std::string(), first.empty() ? std::string("y") : first[0]}) {
        try {
            paralab::data::check_csv_file(file.path(), label);
        } catch (const paralab::Error&) {
        }
        try {
            const paralab::data::Dataset ds = paralab::data::read_csv(file.path(), label);
            const int64_t n = ds.size();
            if (n < 0 || int64_t(ds.inputs.size()) != n * ds.sample_numel() ||
                int64_t(ds.targets.size()) != n * ds.target_numel())
                std::abort();
            if (ds.is_classification())
                for (float t : ds.targets)
                    if (!(t >= 0 && t < float(ds.num_classes))) std::abort();
        } catch (const paralab::Error&) {
        }
    }
    return 0;
}
