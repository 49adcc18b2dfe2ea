// The IDX reader (engine/data/idx.h) on arbitrary bytes, plain or gzip: it refuses them with
// paralab::Error, or returns as many bytes as its dimensions say.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "engine/data/idx.h"
#include "engine/util/error.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const paralab::fuzz::InputFile file(data, size);
    for (int rank : {1, 3}) {
        try {
            paralab::data::read_idx_header(file.path(), rank);
        } catch (const paralab::Error&) {
        }
        for (int64_t max_items : {int64_t{0}, int64_t{2}}) {
            try {
                const paralab::data::IdxArray a = paralab::data::read_idx(file.path(), rank, max_items);
                if (a.dims.size() != size_t(rank) || a.count < 0 || a.count > a.dims[0]) std::abort();
                if (max_items > 0 && a.count > max_items) std::abort();
                uint64_t item = 1;
                for (size_t i = 1; i < a.dims.size(); ++i) item *= uint64_t(a.dims[i]);
                if (a.data.size() != item * uint64_t(a.count)) std::abort();
            } catch (const paralab::Error&) {
            }
        }
    }
    return 0;
}
