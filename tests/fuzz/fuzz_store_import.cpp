// The hand-in import (engine/store/run_store.h, RunStore::import_runs): a file given as a
// student's store, imported into a store of this process. A file that is refused leaves the
// store as it was; one that is imported reads back whole.
#include <stdlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "engine/store/run_store.h"
#include "engine/util/error.h"

namespace {

struct Place {
    std::string dir, store, input;
    Place() {
        char tmpl[] = "/tmp/paralab_fuzz_import_XXXXXX";
        dir = mkdtemp(tmpl);
        store = dir + "/class.db";
        input = dir + "/handin.db";
    }
    ~Place() { std::filesystem::remove_all(dir); }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static Place place;
    static paralab::store::RunStore store(place.store);
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) std::filesystem::remove(place.input + suffix);
    std::ofstream(place.input, std::ios::binary).write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    const size_t before = store.list_runs().size();
    try {
        const auto ids = store.import_runs(place.input);
        std::vector<paralab::store::SkippedRun> skipped;
        if (store.list_runs(&skipped).size() != before + ids.size() || !skipped.empty()) std::abort();
        for (const int64_t id : ids) store.delete_run(id);
    } catch (const paralab::Error&) {
        if (store.list_runs().size() != before) std::abort();
    }
    return 0;
}
