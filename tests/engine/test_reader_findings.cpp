// Inputs the fuzz targets (tests/fuzz) found, each refused with a clear message now: one test per
// finding, on the reader's public entry. The inputs are also kept in tests/fuzz/corpus/<reader>/,
// which the replay tests (label `fuzz`) run under the sanitizers' eyes in `make fuzz`.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "engine/data/idx.h"
#include "engine/util/error.h"

namespace fs = std::filesystem;
using namespace paralab;

namespace {

std::string error_of(const std::function<void()>& fn) {
    try {
        fn();
    } catch (const Error& e) {
        return e.what();
    }
    return "accepted";
}

// `bytes` in a file of its own, removed on the way out.
class InputFile {
public:
    explicit InputFile(const std::string& bytes) {
        static std::atomic<int> counter{0};
        m_path = (fs::temp_directory_path() /
                  ("paralab_finding_" + std::to_string(getpid()) + "_" + std::to_string(counter++)))
                     .string();
        std::ofstream(m_path, std::ios::binary) << bytes;
    }
    ~InputFile() { fs::remove(m_path); }
    const std::string& path() const { return m_path; }

private:
    std::string m_path;
};

}  // namespace

// An IDX file announcing 0 items of an implausible size (0xff038bfb x 0xfdffffff bytes): the
// count of 0 made the total 0, so the item size went unchecked and its product overflowed int64.
// corpus/idx/finding-empty-count-huge-item.idx3.
TEST(ReaderFindings, IdxWithNoItemsOfAnImplausibleSizeIsRefused) {
    const std::string bytes("\x00\x00\x08\x03" "\x00\x00\x00\x00" "\xff\x03\x8b\xfb" "\xfd\xff\xff\xff" "\xfd\x07", 18);
    const InputFile file(bytes);
    EXPECT_NE(error_of([&] { data::read_idx_header(file.path(), 3); }).find("implausible dimensions"),
              std::string::npos);
    EXPECT_NE(error_of([&] { data::read_idx(file.path(), 3); }).find("implausible dimensions"), std::string::npos);
}
