// The safetensors format (https://huggingface.co/docs/safetensors): named tensors in one file.
//
// Layout: an 8-byte little-endian header length N; N bytes of a UTF-8 JSON object
//   {"layers.0.weight": {"dtype": "F32", "shape": [4, 2], "data_offsets": [0, 32]}, ...,
//    "__metadata__": {"key": "value"}}
// padded with spaces; then the data area, every tensor's bytes little-endian and row-major at
// [begin, end) relative to the start of that area, the tensors covering it exactly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace paralab::io {

enum class StDType { F32, F64, F16, BF16, I64, I32, U8 };

size_t st_dtype_size(StDType t);
std::string_view st_dtype_name(StDType t);  // "F32", "BF16", ...: the names the header uses

struct StTensor {             // one tensor to write: its bytes are not copied
    std::string name;         // "layers.3.weight"
    StDType dtype = StDType::F32;
    std::vector<int64_t> shape;
    const void* data = nullptr;
    size_t bytes = 0;         // must equal numel(shape) * size(dtype)
};

// Writes `tensors` (data in name order) and `metadata` (as "__metadata__", left out when empty)
// atomically: a temporary file beside `path` ("PATH.tmp-XXXXXX"), fsync, rename over `path`,
// fsync of the folder.
// Throws Error "PATH: cause" (the errno text for a failed system call, a full disk included)
// and leaves neither a partial file nor the temporary one; an existing `path` is kept then.
// Refuses duplicate or empty names, "__metadata__" as a name, a negative dimension, and
// `bytes` other than numel(shape) * size(dtype).
void write_safetensors(const std::string& path, const std::vector<StTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

struct StEntry {
    std::string name;
    StDType dtype = StDType::F32;
    std::vector<int64_t> shape;
    size_t offset = 0, bytes = 0;  // in the data area
};

// A file read whole and checked: every entry's bytes lie in the data area, the entries cover it
// exactly without overlapping, and each holds numel(shape) * size(dtype) bytes.
class SafetensorsFile {
public:
    static SafetensorsFile read(const std::string& path);  // throws Error "PATH: cause"
    // The same checks on bytes in memory; errors start with `name_for_errors`.
    static SafetensorsFile parse(std::string_view bytes, const std::string& name_for_errors);

    const std::map<std::string, std::string>& metadata() const { return m_metadata; }
    const std::vector<StEntry>& entries() const { return m_entries; }  // in the order of their data
    const StEntry* find(const std::string& name) const;                // null when absent
    // The entry's first byte (not aligned for any type: copy it out with memcpy).
    const std::byte* data(const StEntry& e) const;

    // The largest header the reader accepts (the reference implementation's limit).
    static constexpr uint64_t max_header_bytes = 100'000'000;

private:
    std::string m_bytes;  // the whole file
    size_t m_data_start = 0;
    std::map<std::string, std::string> m_metadata;
    std::vector<StEntry> m_entries;
    std::map<std::string, size_t, std::less<>> m_index;  // name -> position in m_entries
};

}  // namespace paralab::io
