// The safetensors reader (engine/io/safetensors.h) on arbitrary bytes: it either refuses them
// with paralab::Error or returns entries whose bytes lie inside the input and cover its data
// area exactly. Anything else (a crash, another exception, a read out of bounds) is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "engine/io/safetensors.h"
#include "engine/util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using paralab::io::SafetensorsFile;
    try {
        const SafetensorsFile f =
            SafetensorsFile::parse(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
        size_t covered = 0;
        unsigned checksum = 0;
        for (const auto& e : f.entries()) {
            if (f.find(e.name) != &e) std::abort();
            const std::byte* p = f.data(e);
            for (size_t i = 0; i < e.bytes; ++i) checksum += static_cast<unsigned>(p[i]);
            covered += e.bytes;
        }
        uint64_t header = 0;
        for (int i = 0; i < 8; ++i) header |= uint64_t(data[i]) << (8 * i);
        if (covered != size - 8 - header) std::abort();
        (void)checksum;
    } catch (const paralab::Error&) {
    }
    return 0;
}
