#include "engine/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/util/error.h"

namespace paralab::io {

// The format is little-endian; tensors are written and read as the host holds them.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

using nlohmann::json;

namespace {

constexpr const char* metadata_key = "__metadata__";
// A valid header nests three levels (root, tensor, shape); deeper input is refused while parsing.
constexpr int max_header_depth = 8;

struct DTypeInfo {
    StDType type;
    const char* name;
    size_t size;
};
constexpr DTypeInfo dtype_table[] = {
    {StDType::F32, "F32", 4}, {StDType::F64, "F64", 8}, {StDType::F16, "F16", 2},
    {StDType::BF16, "BF16", 2}, {StDType::I64, "I64", 8}, {StDType::I32, "I32", 4},
    {StDType::U8, "U8", 1},
};

std::string errno_text(int err) { return std::strerror(err); }

std::string shape_text(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) {
        if (i) s += ", ";
        s += std::to_string(shape[i]);
    }
    return s + "]";
}

// numel(shape) * element_size, or false when a dimension is negative or the product overflows.
bool byte_count(const std::vector<int64_t>& shape, size_t element_size, size_t& out) {
    size_t n = element_size;
    for (int64_t d : shape) {
        if (d < 0) return false;
        if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return false;
    }
    out = n;
    return true;
}

// Closes a descriptor and removes the temporary file unless released.
struct TempFile {
    int fd = -1;
    std::string path;
    bool keep = false;
    ~TempFile() {
        if (fd >= 0) ::close(fd);
        if (!keep && !path.empty()) ::unlink(path.c_str());
    }
};

void write_all(int fd, const void* data, size_t bytes, const std::string& path) {
    const char* p = static_cast<const char*>(data);
    while (bytes > 0) {
        const ssize_t n = ::write(fd, p, std::min<size_t>(bytes, size_t{1} << 30));
        if (n < 0) {
            if (errno == EINTR) continue;
            throw Error(path + ": cannot write: " + errno_text(errno));
        }
        if (n == 0) throw Error(path + ": cannot write: no progress");
        p += n;
        bytes -= static_cast<size_t>(n);
    }
}

std::string parent_folder(const std::string& path) {
    const std::filesystem::path parent = std::filesystem::path(path).parent_path();
    return parent.empty() ? std::string(".") : parent.string();
}

}  // namespace

size_t st_dtype_size(StDType t) {
    for (const auto& d : dtype_table)
        if (d.type == t) return d.size;
    throw Error("safetensors: unknown dtype value " + std::to_string(static_cast<int>(t)));
}

std::string_view st_dtype_name(StDType t) {
    for (const auto& d : dtype_table)
        if (d.type == t) return d.name;
    throw Error("safetensors: unknown dtype value " + std::to_string(static_cast<int>(t)));
}

void write_safetensors(const std::string& path, const std::vector<StTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
    // Name order for the data; the header is a JSON object whose keys nlohmann sorts too.
    std::map<std::string, const StTensor*> by_name;
    for (const StTensor& t : tensors) {
        if (t.name.empty()) throw Error(path + ": a tensor has an empty name");
        if (t.name == metadata_key) throw Error(path + ": \"__metadata__\" is not a valid tensor name");
        if (!by_name.emplace(t.name, &t).second)
            throw Error(path + ": tensor \"" + t.name + "\" is given twice");
        size_t expected = 0;
        if (!byte_count(t.shape, st_dtype_size(t.dtype), expected))
            throw Error(path + ": tensor \"" + t.name + "\": invalid shape " + shape_text(t.shape));
        if (t.bytes != expected)
            throw Error(path + ": tensor \"" + t.name + "\": " + std::to_string(t.bytes) +
                        " bytes given, shape " + shape_text(t.shape) + " of " +
                        std::string(st_dtype_name(t.dtype)) + " needs " + std::to_string(expected));
        if (t.bytes > 0 && t.data == nullptr)
            throw Error(path + ": tensor \"" + t.name + "\" has no data");
    }

    json header = json::object();
    uint64_t offset = 0;
    for (const auto& [name, t] : by_name) {
        header[name] = {{"dtype", st_dtype_name(t->dtype)},
                        {"shape", t->shape},
                        {"data_offsets", {offset, offset + t->bytes}}};
        offset += t->bytes;
    }
    if (!metadata.empty()) header[metadata_key] = metadata;
    std::string text;
    try {
        text = header.dump();
    } catch (const json::exception&) {
        throw Error(path + ": a tensor name or metadata string is not valid UTF-8");
    }
    // Padding to a multiple of 8 keeps the data area 8-byte aligned in a mapped file.
    text.append((8 - text.size() % 8) % 8, ' ');
    unsigned char length[8];
    for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(uint64_t(text.size()) >> (8 * i));

    TempFile tmp;
    tmp.path = path + ".tmp-XXXXXX";
    tmp.fd = ::mkstemp(tmp.path.data());
    if (tmp.fd < 0) {
        const int err = errno;
        tmp.path.clear();
        throw Error(path + ": cannot create a temporary file beside it: " + errno_text(err));
    }
    ::fchmod(tmp.fd, 0644);  // mkstemp's 0600 would hide the weights from other users' tools
    write_all(tmp.fd, length, sizeof length, path);
    write_all(tmp.fd, text.data(), text.size(), path);
    for (const auto& [name, t] : by_name) write_all(tmp.fd, t->data, t->bytes, path);
    if (::fsync(tmp.fd) != 0) throw Error(path + ": cannot write (fsync): " + errno_text(errno));
    const int fd = tmp.fd;
    tmp.fd = -1;
    if (::close(fd) != 0) throw Error(path + ": cannot write (close): " + errno_text(errno));
    if (::rename(tmp.path.c_str(), path.c_str()) != 0)
        throw Error(path + ": cannot replace it: " + errno_text(errno));
    tmp.keep = true;
    // The rename is durable once the folder is synced; a file system that cannot sync a folder
    // (EINVAL) has nothing to flush.
    const std::string folder = parent_folder(path);
    const int dir = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) throw Error(path + ": cannot open its folder to sync it: " + errno_text(errno));
    const int rc = ::fsync(dir);
    const int err = errno;
    ::close(dir);
    if (rc != 0 && err != EINVAL) throw Error(path + ": cannot sync its folder: " + errno_text(err));
}

SafetensorsFile SafetensorsFile::read(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error(path + ": cannot open: " + errno_text(errno));
    std::string bytes;
    struct stat st {};
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) bytes.reserve(static_cast<size_t>(st.st_size));
    char buffer[1 << 16];
    for (;;) {
        const ssize_t n = ::read(fd, buffer, sizeof buffer);
        if (n < 0) {
            if (errno == EINTR) continue;
            const int err = errno;
            ::close(fd);
            throw Error(path + ": cannot read: " + errno_text(err));
        }
        if (n == 0) break;
        bytes.append(buffer, static_cast<size_t>(n));
    }
    ::close(fd);
    SafetensorsFile f = parse(bytes, path);
    return f;
}

SafetensorsFile SafetensorsFile::parse(std::string_view bytes, const std::string& name) {
    auto fail = [&](const std::string& cause) -> Error { return Error(name + ": " + cause); };
    if (bytes.size() < 8)
        throw fail("not a safetensors file: " + std::to_string(bytes.size()) +
                   " bytes, shorter than the 8-byte header length");
    uint64_t header_bytes = 0;
    for (int i = 0; i < 8; ++i)
        header_bytes |= uint64_t(static_cast<unsigned char>(bytes[size_t(i)])) << (8 * i);
    if (header_bytes > max_header_bytes)
        throw fail("header length " + std::to_string(header_bytes) + " is above the limit of " +
                   std::to_string(max_header_bytes) + " bytes");
    if (header_bytes > bytes.size() - 8)
        throw fail("header length " + std::to_string(header_bytes) + " runs past the end of the file (" +
                   std::to_string(bytes.size()) + " bytes)");
    const std::string_view text = bytes.substr(8, header_bytes);
    if (text.empty() || text.front() != '{') throw fail("header is not a JSON object (it must start with '{')");

    // nlohmann keeps the last of duplicate keys: the callback sees every key, and each object's
    // keys are checked as they come.
    struct Refusal {
        std::string cause;
    };
    std::vector<std::set<std::string>> open_objects;
    json header;
    try {
        header = json::parse(
            text.begin(), text.end(),
            [&](int depth, json::parse_event_t event, json& parsed) {
                switch (event) {
                    case json::parse_event_t::object_start:
                    case json::parse_event_t::array_start:
                        if (depth >= max_header_depth) throw Refusal{"header nests too deeply"};
                        if (event == json::parse_event_t::object_start) open_objects.emplace_back();
                        break;
                    case json::parse_event_t::object_end: open_objects.pop_back(); break;
                    case json::parse_event_t::key: {
                        const std::string& key = parsed.get_ref<const std::string&>();
                        if (!open_objects.back().insert(key).second)
                            throw Refusal{"header: key \"" + key + "\" appears twice" +
                                          (depth == 1 ? std::string(" (duplicate tensor name)") : std::string())};
                        break;
                    }
                    default: break;
                }
                return true;
            });
    } catch (const Refusal& r) {
        throw fail(r.cause);
    } catch (const json::exception& e) {
        throw fail(std::string("header is not valid JSON: ") + e.what());
    }
    if (!header.is_object()) throw fail("header is not a JSON object");

    SafetensorsFile f;
    f.m_bytes.assign(bytes.data(), bytes.size());
    f.m_data_start = 8 + static_cast<size_t>(header_bytes);
    const size_t data_size = bytes.size() - f.m_data_start;

    for (const auto& [key, value] : header.items()) {
        if (key == metadata_key) {
            if (!value.is_object()) throw fail("header: \"__metadata__\" is not an object");
            for (const auto& [mk, mv] : value.items()) {
                if (!mv.is_string())
                    throw fail("header: __metadata__ \"" + mk + "\" is not a string");
                f.m_metadata.emplace(mk, mv.get<std::string>());
            }
            continue;
        }
        const std::string where = "tensor \"" + key + "\": ";
        if (!value.is_object()) throw fail(where + "not an object");
        for (const char* field : {"dtype", "shape", "data_offsets"})
            if (!value.contains(field)) throw fail(where + "no \"" + field + "\"");
        StEntry e;
        e.name = key;
        const json& dtype = value["dtype"];
        if (!dtype.is_string()) throw fail(where + "dtype is not a string");
        const std::string& dtype_text = dtype.get_ref<const std::string&>();
        const DTypeInfo* info = nullptr;
        for (const auto& d : dtype_table)
            if (dtype_text == d.name) info = &d;
        if (!info)
            throw fail(where + "unknown or unsupported dtype \"" + dtype_text +
                       "\" (supported: F32, F64, F16, BF16, I64, I32, U8)");
        e.dtype = info->type;
        const json& shape = value["shape"];
        if (!shape.is_array()) throw fail(where + "shape is not an array");
        for (const json& d : shape) {
            if (d.is_number_integer() && !d.is_number_unsigned() && d.get<int64_t>() < 0)
                throw fail(where + "shape has a negative dimension (" + std::to_string(d.get<int64_t>()) + ")");
            if (!d.is_number_unsigned() || d.get<uint64_t>() > uint64_t(INT64_MAX))
                throw fail(where + "shape holds something other than a dimension: " + d.dump());
            e.shape.push_back(d.get<int64_t>());
        }
        size_t expected = 0;
        if (!byte_count(e.shape, info->size, expected))
            throw fail(where + "shape " + shape_text(e.shape) + " overflows the size of a tensor");
        const json& offsets = value["data_offsets"];
        if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
            !offsets[1].is_number_unsigned())
            throw fail(where + "data_offsets is not [begin, end] of two non-negative integers");
        const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
        if (begin > end)
            throw fail(where + "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                       "] end before they begin");
        if (end > data_size)
            throw fail(where + "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                       "] lie outside the data area of " + std::to_string(data_size) + " bytes");
        if (end - begin != expected)
            throw fail(where + "data_offsets hold " + std::to_string(end - begin) + " bytes, shape " +
                       shape_text(e.shape) + " of " + dtype_text + " needs " + std::to_string(expected));
        e.offset = static_cast<size_t>(begin);
        e.bytes = static_cast<size_t>(end - begin);
        f.m_entries.push_back(std::move(e));
    }

    std::stable_sort(f.m_entries.begin(), f.m_entries.end(), [](const StEntry& a, const StEntry& b) {
        return a.offset != b.offset ? a.offset < b.offset : a.bytes < b.bytes;
    });
    size_t cursor = 0;
    const StEntry* previous = nullptr;
    for (const StEntry& e : f.m_entries) {
        if (e.offset < cursor)
            throw fail("tensor \"" + e.name + "\" overlaps tensor \"" + previous->name + "\" in the data area");
        if (e.offset > cursor)
            throw fail("the data area has " + std::to_string(e.offset - cursor) +
                       " bytes that no tensor covers, before tensor \"" + e.name + "\"");
        cursor = e.offset + e.bytes;
        previous = &e;
    }
    if (cursor != data_size)
        throw fail("the data area has " + std::to_string(data_size - cursor) +
                   " bytes after the last tensor that no tensor covers");
    for (size_t i = 0; i < f.m_entries.size(); ++i) f.m_index.emplace(f.m_entries[i].name, i);
    return f;
}

const StEntry* SafetensorsFile::find(const std::string& name) const {
    const auto it = m_index.find(name);
    return it == m_index.end() ? nullptr : &m_entries[it->second];
}

const std::byte* SafetensorsFile::data(const StEntry& e) const {
    PARALAB_CHECK(e.offset + e.bytes <= m_bytes.size() - m_data_start, "entry outside this file's data area");
    return reinterpret_cast<const std::byte*>(m_bytes.data() + m_data_start + e.offset);
}

}  // namespace paralab::io
