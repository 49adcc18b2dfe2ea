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
#include <functional>
#include <map>
#include <optional>
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

// The checksums write_safetensors adds to "__metadata__" and SafetensorsFile verifies when a
// file holds them (a file from another writer without them is read unverified). Values are
// strings, as the format's metadata must be: 8 lowercase hexadecimal digits of zlib's CRC-32.
//   st_data_crc32_key:   the whole data area, every byte after the header.
//   st_header_crc32_key: the header as stored (every byte between the 8-byte length and the data,
//                        the padding included), this value's own 8 digits read as "00000000".
//                        It is found as the one "paralab_header_crc32":"..." after a '{' or ','.
inline constexpr const char* st_data_crc32_key = "paralab_data_crc32";
inline constexpr const char* st_header_crc32_key = "paralab_header_crc32";

// Writes `tensors` (data in name order) and `metadata` with the two checksums as
// "__metadata__" atomically: a temporary file in the folder of the file it replaces
// ("FILE.tmp-XXXXXX"), fsync, rename over that file, fsync of the folder.
// The file replaced: `path`; when `path` is a symbolic link, the file it leads to (the link
// stays, and leads to the new file). An existing file keeps its permission bits (and its owner
// and group where the writer may set them); a new one is 0644. A file with other hard links is
// replaced under this name alone: its other names keep the previous contents. `path` (or the link's target)
// that exists and is not a regular file (a FIFO, a device, a directory) is refused untouched.
// Throws Error "PATH: cause" (the errno text for a failed system call, a full disk included)
// and leaves neither a partial file nor the temporary one; an existing `path` is kept then.
// Refuses duplicate or empty names, "__metadata__" as a name, a negative dimension, `bytes`
// other than numel(shape) * size(dtype), and the checksum keys in `metadata`.
void write_safetensors(const std::string& path, const std::vector<StTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

struct StEntry {
    std::string name;
    StDType dtype = StDType::F32;
    std::vector<int64_t> shape;
    size_t offset = 0, bytes = 0;  // in the data area
};

// A file read whole and checked: every entry's bytes lie in the data area, the entries cover it
// exactly without overlapping, each holds numel(shape) * size(dtype) bytes, and the checksums
// match when the file holds them.
class SafetensorsFile {
public:
    // Called by read() once the header is parsed and checked, before the data area is read:
    // `file` has its entries and metadata, no data. It refuses the file by throwing; a reader
    // that knows which tensors it wants refuses a file that does not fit before anything is
    // allocated for its data.
    using HeaderCheck = std::function<void(const SafetensorsFile& file)>;

    // Reads a regular file (symbolic links followed); a FIFO, a device or a directory is
    // refused without blocking. The header is read and checked against the file's size first,
    // then `check` runs, then the data area is read. Throws Error "PATH: cause" (and what
    // `check` throws).
    static SafetensorsFile read(const std::string& path, const HeaderCheck& check = {});
    // The same checks on bytes in memory; errors start with `name_for_errors`.
    static SafetensorsFile parse(std::string_view bytes, const std::string& name_for_errors);

    // The "__metadata__" entries, the checksums left out.
    const std::map<std::string, std::string>& metadata() const { return m_metadata; }
    const std::vector<StEntry>& entries() const { return m_entries; }  // in the order of their data
    const StEntry* find(const std::string& name) const;                // null when absent
    // The entry's first byte (not aligned for any type: copy it out with memcpy).
    const std::byte* data(const StEntry& e) const;
    // Whether the file held both checksums (and they matched, or it would not have been read).
    bool checksummed() const { return m_data_crc32.has_value() && m_header_checked; }

    // The largest header the reader accepts (the reference implementation's limit).
    static constexpr uint64_t max_header_bytes = 100'000'000;

private:
    // The header's checks (JSON text of `header` bytes, a data area of `data_size` bytes).
    static SafetensorsFile from_header(std::string_view header, uint64_t data_size, const std::string& name);
    void check_data(const std::string& name) const;  // the data checksum, when the file has one

    std::string m_data;  // the data area, once read
    uint64_t m_data_size = 0;
    std::optional<uint32_t> m_data_crc32;  // as stored
    bool m_header_checked = false;
    std::map<std::string, std::string> m_metadata;
    std::vector<StEntry> m_entries;
    std::map<std::string, size_t, std::less<>> m_index;  // name -> position in m_entries
};

}  // namespace paralab::io
