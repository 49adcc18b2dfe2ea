#include "engine/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <unordered_set>

#include <nlohmann/json.hpp>
#include <zlib.h>

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

// What a path that is not a regular file is, for messages.
std::string kind_of(mode_t mode) {
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a regular file";
}

// "PATH" for a path that is no symbolic link, "PATH (a link to TARGET)" for one.
std::string named(const std::string& path, const std::string& target) {
    return target == path ? path : path + " (a link to " + target + ")";
}

// `crc` continued over `bytes` bytes at `data` (0 starts a checksum). No bytes leave it as it is
// (zlib's crc32 would answer a null `data` with its initial value, restarting the sum).
uint32_t crc32_of(uint32_t crc, const void* data, size_t bytes) {
    if (bytes == 0) return crc;
    return static_cast<uint32_t>(::crc32_z(crc, static_cast<const Bytef*>(data), bytes));
}

std::string crc_text(uint32_t crc) {
    char hex[9];
    std::snprintf(hex, sizeof hex, "%08x", static_cast<unsigned>(crc));
    return hex;
}

// A checksum's stored value: exactly 8 hexadecimal digits.
std::optional<uint32_t> parse_crc(const std::string& text) {
    if (text.size() != 8) return std::nullopt;
    uint32_t v = 0;
    for (char c : text) {
        int d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return std::nullopt;
        v = v << 4 | static_cast<uint32_t>(d);
    }
    return v;
}

// The file write_safetensors replaces: `path`, or the file its chain of symbolic links ends at
// (relative targets taken from the link's folder, as the kernel does). A path that does not
// exist (nor the folder it would be in) is written as it is named.
struct WriteTarget {
    std::string path;
    bool exists = false;
    struct stat st {};
};

WriteTarget write_target(const std::string& path) {
    namespace fs = std::filesystem;
    fs::path p = path;
    for (int links = 0;; ++links) {
        WriteTarget t;
        t.path = p.string();
        if (::lstat(t.path.c_str(), &t.st) != 0) {
            if (errno == ENOENT || errno == ENOTDIR) return t;
            throw Error(named(path, t.path) + ": cannot look at it: " + errno_text(errno));
        }
        if (!S_ISLNK(t.st.st_mode)) {
            if (!S_ISREG(t.st.st_mode))
                throw Error(named(path, t.path) + " is " + kind_of(t.st.st_mode) +
                            ", not a regular file: not replaced");
            t.exists = true;
            return t;
        }
        if (links == 40) throw Error(path + ": too many levels of symbolic links");
        std::error_code ec;
        const fs::path to = fs::read_symlink(p, ec);
        if (ec) throw Error(path + ": cannot read the symbolic link " + t.path + ": " + ec.message());
        p = to.is_absolute() ? to : p.parent_path() / to;
    }
}

// Opens `path` for reading when it (or the file its symbolic links lead to) is a regular file:
// a FIFO blocks open() and read() forever, a device or a directory holds no tensors. The type
// is checked before opening, and again on the descriptor, opened with O_NONBLOCK so that a FIFO
// swapped in between cannot block the open. Fills `st` with the open file's status.
int open_regular_file(const std::string& path, struct stat& st) {
    std::error_code ec;
    std::string target = path;
    struct stat link {};
    if (::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode)) {
        const std::filesystem::path resolved = std::filesystem::canonical(path, ec);
        if (!ec) target = resolved.string();
    }
    struct stat before {};
    if (::stat(path.c_str(), &before) != 0) throw Error(path + ": cannot open: " + errno_text(errno));
    if (!S_ISREG(before.st_mode))
        throw Error(named(path, target) + " is " + kind_of(before.st_mode) + ", not a regular file");
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) throw Error(path + ": cannot open: " + errno_text(errno));
    if (::fstat(fd, &st) != 0) {
        const int err = errno;
        ::close(fd);
        throw Error(path + ": cannot open: " + errno_text(err));
    }
    if (!S_ISREG(st.st_mode) || st.st_dev != before.st_dev || st.st_ino != before.st_ino) {
        ::close(fd);
        throw Error(path + ": changed while it was opened" +
                    (S_ISREG(st.st_mode) ? std::string() : " (it is " + kind_of(st.st_mode) + " now)"));
    }
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    return fd;
}

// Reads `bytes` bytes at `offset` of `fd` into `out`; a file shorter than that is an error.
void read_at(int fd, uint64_t offset, char* out, size_t bytes, const std::string& path) {
    while (bytes > 0) {
        const ssize_t n = ::pread(fd, out, std::min<size_t>(bytes, size_t{1} << 30), static_cast<off_t>(offset));
        if (n < 0) {
            if (errno == EINTR) continue;
            throw Error(path + ": cannot read: " + errno_text(errno));
        }
        if (n == 0) throw Error(path + ": cannot read: the file ended early (it shrank while it was read)");
        out += n;
        offset += static_cast<uint64_t>(n);
        bytes -= static_cast<size_t>(n);
    }
}

struct FileDescriptor {
    int fd = -1;
    ~FileDescriptor() {
        if (fd >= 0) ::close(fd);
    }
};

// A header parsed in one pass (nlohmann's SAX interface), in time linear in its size: each
// top-level value (a tensor's entry, "__metadata__") is built as a small document of its own and
// handed to `on_value` once it ends; no document of the whole header is built. (nlohmann's
// parser callbacks rescan the enclosing object at every object's end: quadratic in the number of
// tensors.) Refused while parsing: nesting deeper than max_header_depth, and a key twice in one
// object (nlohmann would keep the last silently).
class HeaderParser {
public:
    using OnValue = std::function<void(const std::string& key, const json& value)>;
    explicit HeaderParser(OnValue on_value) : m_on_value(std::move(on_value)) {}

    std::string refusal;  // why the header was refused
    std::string error;    // the JSON parser's message for text that is not JSON

    bool null() { return value(json(nullptr)); }
    bool boolean(bool b) { return value(json(b)); }
    bool number_integer(json::number_integer_t v) { return value(json(v)); }
    bool number_unsigned(json::number_unsigned_t v) { return value(json(v)); }
    bool number_float(json::number_float_t v, const std::string&) { return value(json(v)); }
    bool string(std::string& s) { return value(json(std::move(s))); }
    bool binary(json::binary_t& b) { return value(json::binary(std::move(b))); }
    bool start_object(std::size_t) {
        if (!value(json::object())) return false;
        m_keys.emplace_back();
        return true;
    }
    bool start_array(std::size_t) { return value(json::array()); }
    bool key(std::string& k) {
        if (!m_keys.back().insert(k).second) {
            refusal = "header: key \"" + k + "\" appears twice" +
                      (m_depth == 1 ? std::string(" (duplicate tensor name)") : std::string());
            return false;
        }
        (m_depth == 1 ? m_top_key : m_key) = k;
        return true;
    }
    bool end_object() {
        m_keys.pop_back();
        return close();
    }
    bool end_array() { return close(); }
    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
        error = e.what();
        return false;
    }

private:
    // A value at the current position: the root object, a top-level value, or one inside it.
    bool value(json v) {
        const bool container = v.is_structured();
        if (container && m_depth >= max_header_depth) {
            refusal = "header nests too deeply";
            return false;
        }
        if (m_depth == 0) {  // the root object: the text starts with '{'
            ++m_depth;
            return true;
        }
        json* placed;
        if (m_depth == 1) {
            m_top = std::move(v);
            placed = &m_top;
        } else if (json& parent = *m_open.back(); parent.is_array()) {
            parent.push_back(std::move(v));
            placed = &parent.back();
        } else {
            placed = &(parent[m_key] = std::move(v));
        }
        if (container) {
            ++m_depth;
            m_open.push_back(placed);
        } else if (m_depth == 1) {
            m_on_value(m_top_key, m_top);
        }
        return true;
    }
    bool close() {
        --m_depth;
        if (m_depth == 0) return true;  // the root object
        m_open.pop_back();
        if (m_depth == 1) m_on_value(m_top_key, m_top);
        return true;
    }

    OnValue m_on_value;
    int m_depth = 0;                // containers open, the root object included
    std::vector<json*> m_open;      // the open containers inside the top-level value
    json m_top;                     // the top-level value being built
    std::string m_top_key, m_key;   // its key; the key of the value next placed in an object
    std::vector<std::unordered_set<std::string>> m_keys;  // of each open object
};

// Where the header checksum's 8 digits start in `text`, the header as written: the one place
// where the key "paralab_header_crc32" is followed by a string (as a key, a quote outside any
// string follows '{' or ','), and its value is `stored`. npos when there is not exactly one.
size_t header_crc_position(std::string_view text, std::string_view stored) {
    const std::string pattern = "\"" + std::string(st_header_crc32_key) + "\":\"";
    size_t found = std::string_view::npos;
    for (size_t at = text.find(pattern); at != std::string_view::npos; at = text.find(pattern, at + 1)) {
        if (at == 0 || (text[at - 1] != '{' && text[at - 1] != ',')) continue;
        if (found != std::string_view::npos) return std::string_view::npos;
        found = at + pattern.size();
    }
    if (found == std::string_view::npos || text.substr(found, 9) != std::string(stored) + "\"")
        return std::string_view::npos;
    return found;
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

    for (const char* key : {st_data_crc32_key, st_header_crc32_key})
        if (metadata.count(key))
            throw Error(path + ": metadata \"" + key + "\" is the writer's own checksum, not a value to give");

    json header = json::object();
    uint64_t offset = 0;
    uint32_t data_crc = 0;
    for (const auto& [name, t] : by_name) {
        header[name] = {{"dtype", st_dtype_name(t->dtype)},
                        {"shape", t->shape},
                        {"data_offsets", {offset, offset + t->bytes}}};
        offset += t->bytes;
        data_crc = crc32_of(data_crc, t->data, t->bytes);
    }
    json& meta = header[metadata_key] = metadata;
    meta[st_data_crc32_key] = crc_text(data_crc);
    meta[st_header_crc32_key] = "00000000";  // while the header's checksum is computed
    std::string text;
    try {
        text = header.dump();
    } catch (const json::exception&) {
        throw Error(path + ": a tensor name or metadata string is not valid UTF-8");
    }
    // Padding to a multiple of 8 keeps the data area 8-byte aligned in a mapped file.
    text.append((8 - text.size() % 8) % 8, ' ');
    const size_t crc_at = header_crc_position(text, "00000000");
    PARALAB_CHECK(crc_at != std::string::npos, "the header's checksum is not where the writer put it");
    text.replace(crc_at, 8, crc_text(crc32_of(0, text.data(), text.size())));
    unsigned char length[8];
    for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(uint64_t(text.size()) >> (8 * i));

    // The file replaced is the one `path` names or leads to: a link stays a link, and what is not
    // a regular file (a device, a FIFO) is never replaced. An existing file's other hard links
    // keep its previous contents: writing in place would keep them together, but a failure part
    // way (a full disk, a kill) would then leave a torn file under every name, and the atomic
    // replace is what keeps the old file whole until the new one is complete.
    const WriteTarget target = write_target(path);
    TempFile tmp;
    tmp.path = target.path + ".tmp-XXXXXX";
    tmp.fd = ::mkstemp(tmp.path.data());
    if (tmp.fd < 0) {
        const int err = errno;
        tmp.path.clear();
        throw Error(path + ": cannot create a temporary file beside it: " + errno_text(err));
    }
    if (target.exists) {
        // The owner first: a change of owner clears the set-user-ID bits fchmod then restores.
        // Only a privileged writer may give a file away; anyone else's new file is their own.
        if (target.st.st_uid != ::geteuid() || target.st.st_gid != ::getegid())
            (void)::fchown(tmp.fd, target.st.st_uid, target.st.st_gid);
        if (::fchmod(tmp.fd, target.st.st_mode & 07777) != 0)
            throw Error(path + ": cannot give the new file the mode of the old: " + errno_text(errno));
    } else {
        ::fchmod(tmp.fd, 0644);  // mkstemp's 0600 would hide the weights from other users' tools
    }
    write_all(tmp.fd, length, sizeof length, path);
    write_all(tmp.fd, text.data(), text.size(), path);
    for (const auto& [name, t] : by_name) write_all(tmp.fd, t->data, t->bytes, path);
    if (::fsync(tmp.fd) != 0) throw Error(path + ": cannot write (fsync): " + errno_text(errno));
    const int fd = tmp.fd;
    tmp.fd = -1;
    if (::close(fd) != 0) throw Error(path + ": cannot write (close): " + errno_text(errno));
    if (::rename(tmp.path.c_str(), target.path.c_str()) != 0)
        throw Error(path + ": cannot replace it: " + errno_text(errno));
    tmp.keep = true;
    // The rename is durable once the folder is synced; a file system that cannot sync a folder
    // (EINVAL) has nothing to flush.
    const std::string folder = parent_folder(target.path);
    const int dir = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) throw Error(path + ": cannot open its folder to sync it: " + errno_text(errno));
    const int rc = ::fsync(dir);
    const int err = errno;
    ::close(dir);
    if (rc != 0 && err != EINVAL) throw Error(path + ": cannot sync its folder: " + errno_text(err));
}

SafetensorsFile SafetensorsFile::read(const std::string& path, const HeaderCheck& check) {
    struct stat st {};
    FileDescriptor file;
    file.fd = open_regular_file(path, st);
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    auto fail = [&](const std::string& cause) -> Error { return Error(path + ": " + cause); };
    if (size < 8)
        throw fail("not a safetensors file: " + std::to_string(size) +
                   " bytes, shorter than the 8-byte header length");
    char length[8];
    read_at(file.fd, 0, length, 8, path);
    uint64_t header_bytes = 0;
    for (int i = 0; i < 8; ++i) header_bytes |= uint64_t(static_cast<unsigned char>(length[i])) << (8 * i);
    if (header_bytes > max_header_bytes)
        throw fail("header length " + std::to_string(header_bytes) + " is above the limit of " +
                   std::to_string(max_header_bytes) + " bytes");
    if (header_bytes > size - 8)
        throw fail("header length " + std::to_string(header_bytes) + " runs past the end of the file (" +
                   std::to_string(size) + " bytes)");
    const uint64_t data_size = size - 8 - header_bytes;
    try {
        std::string text(static_cast<size_t>(header_bytes), '\0');
        read_at(file.fd, 8, text.data(), text.size(), path);
        SafetensorsFile f = from_header(text, data_size, path);
        if (check) check(f);
        // Every entry lies in the file's data area and covers it exactly: what is allocated here
        // is what the file holds, no more.
        f.m_data.resize(static_cast<size_t>(data_size));
        read_at(file.fd, 8 + header_bytes, f.m_data.data(), f.m_data.size(), path);
        f.check_data(path);
        return f;
    } catch (const std::bad_alloc&) {
        throw fail("not enough memory to read it (a data area of " + std::to_string(data_size) + " bytes)");
    }
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
    SafetensorsFile f = from_header(bytes.substr(8, header_bytes), bytes.size() - 8 - header_bytes, name);
    f.m_data.assign(bytes.substr(8 + static_cast<size_t>(header_bytes)));
    f.check_data(name);
    return f;
}

void SafetensorsFile::check_data(const std::string& name) const {
    if (!m_data_crc32) return;
    const uint32_t crc = crc32_of(0, m_data.data(), m_data.size());
    if (crc != *m_data_crc32)
        throw Error(name + ": the checksum of the data does not match (CRC-32 " + crc_text(crc) + ", " +
                    st_data_crc32_key + " " + crc_text(*m_data_crc32) + "): the file is corrupt");
}

SafetensorsFile SafetensorsFile::from_header(std::string_view text, uint64_t data_size, const std::string& name) {
    auto fail = [&](const std::string& cause) -> Error { return Error(name + ": " + cause); };
    if (text.empty() || text.front() != '{') throw fail("header is not a JSON object (it must start with '{')");

    SafetensorsFile f;
    f.m_data_size = data_size;
    std::string stored_header_crc;
    auto add_metadata = [&](const json& value) {
        if (!value.is_object()) throw fail("header: \"__metadata__\" is not an object");
        for (const auto& [mk, mv] : value.items()) {
            if (!mv.is_string()) throw fail("header: __metadata__ \"" + mk + "\" is not a string");
            if (mk == st_data_crc32_key || mk == st_header_crc32_key) {
                const std::optional<uint32_t> crc = parse_crc(mv.get<std::string>());
                if (!crc) throw fail("header: __metadata__ \"" + mk + "\" is not 8 hexadecimal digits");
                if (mk == st_data_crc32_key) f.m_data_crc32 = crc;
                else stored_header_crc = mv.get<std::string>();
                continue;
            }
            f.m_metadata.emplace(mk, mv.get<std::string>());
        }
    };
    auto add_tensor = [&](const std::string& key, const json& value) {
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
    };
    HeaderParser parser([&](const std::string& key, const json& value) {
        if (key == metadata_key) add_metadata(value);
        else add_tensor(key, value);
    });
    json::sax_parse(text.begin(), text.end(), &parser);
    if (!parser.refusal.empty()) throw fail(parser.refusal);
    if (!parser.error.empty()) throw fail("header is not valid JSON: " + parser.error);

    // The header's checksum: the header as stored, its own 8 digits read as zeros.
    if (!stored_header_crc.empty()) {
        const size_t at = header_crc_position(text, stored_header_crc);
        if (at == std::string_view::npos)
            throw fail(std::string("header: \"") + st_header_crc32_key +
                       "\" is not written where its writer puts it (the checksum of the header cannot be checked)");
        uint32_t crc = crc32_of(0, text.data(), at);
        crc = crc32_of(crc, "00000000", 8);
        crc = crc32_of(crc, text.data() + at + 8, text.size() - at - 8);
        const uint32_t want = *parse_crc(stored_header_crc);
        if (crc != want)
            throw fail("the checksum of the header does not match (CRC-32 " + crc_text(crc) + ", " +
                       st_header_crc32_key + " " + stored_header_crc + "): the file is corrupt");
        f.m_header_checked = true;
    }

    // Entries come in the order of the file's text; sorted by offset, then size, then name.
    std::sort(f.m_entries.begin(), f.m_entries.end(), [](const StEntry& a, const StEntry& b) {
        if (a.offset != b.offset) return a.offset < b.offset;
        return a.bytes != b.bytes ? a.bytes < b.bytes : a.name < b.name;
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
    PARALAB_CHECK(m_data.size() == m_data_size, "the data of a file whose header alone is read");
    PARALAB_CHECK(e.offset + e.bytes <= m_data.size(), "entry outside this file's data area");
    return reinterpret_cast<const std::byte*>(m_data.data() + e.offset);
}

}  // namespace paralab::io
