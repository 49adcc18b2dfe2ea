// The lesson file (engine/lesson/lesson.h) through the entry the Lessons tab uses for a file on
// the disk: load_lesson. Its text and experiments are read beside it, inside its folder.
#include <cstddef>
#include <cstdint>

#include "engine/lesson/lesson.h"
#include "engine/util/error.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const paralab::fuzz::InputFile file(data, size);
    try {
        (void)paralab::lesson::load_lesson(file.path());
    } catch (const paralab::Error&) {
    }
    return 0;
}
