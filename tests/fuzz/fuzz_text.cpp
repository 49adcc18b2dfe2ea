// The text data set (engine/data/text.h) on arbitrary bytes: the first two bytes choose the
// context length (1..32) and the test share (1..99 %), the rest is the corpus. It refuses
// with paralab::Error, or returns splits whose every window lies inside its own split.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "engine/data/text.h"
#include "engine/util/error.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 2) return 0;
    const paralab::fuzz::InputFile file(data + 2, size - 2);
    paralab::data::DataConfig cfg;
    cfg.dataset = "text";
    cfg.path = file.path();
    cfg.seq_len = 1 + data[0] % 32;
    cfg.val_fraction = (1 + data[1] % 99) / 100.0;
    try {
        paralab::data::check_text_corpus(cfg);
    } catch (const paralab::Error&) {
    }
    try {
        const paralab::data::DataSplits s = paralab::data::load_text(cfg);
        for (const paralab::data::Dataset* ds : {&s.train, &s.test}) {
            if (!ds->is_text() || ds->window != cfg.seq_len) std::abort();
            if (ds->text_begin < 0 || ds->text_end > int64_t(ds->text->size())) std::abort();
            for (int64_t k = 0; k < ds->windows && k < 64; ++k) {
                const int64_t at = paralab::data::text_window_offset(*ds, 7, 1, k);
                if (at < ds->text_begin || at + ds->window + 1 > ds->text_end) std::abort();
            }
        }
        if (s.train.text_end > s.test.text_begin) std::abort();
    } catch (const paralab::Error&) {
    }
    return 0;
}
