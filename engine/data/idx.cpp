#include "engine/data/idx.h"

#include <sys/stat.h>

#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <future>

#include "engine/util/error.h"

namespace paralab::data {
namespace {

constexpr int idx_type_ubyte = 0x08;
constexpr int mnist_classes = 10;
// A sanity bound on prod(dims): 64 GiB is no MNIST-format file anyone loads into memory,
// and it keeps the size arithmetic far from overflow.
constexpr int64_t max_idx_bytes = int64_t{1} << 36;

// Owns a gzFile; gzopen reads plain files transparently, so one reader serves both.
class GzReader {
public:
    explicit GzReader(const std::string& path) : m_path(path) {
        errno = 0;
        m_file = gzopen(path.c_str(), "rb");
        if (m_file == nullptr)
            throw Error(path +
                        ": cannot open: " + (errno != 0 ? std::strerror(errno) : "out of memory"));
        struct stat st {};
        if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) m_file_bytes = st.st_size;
        // 1 MiB reads for a data set (zlib's default is 8 KiB); a smaller file needs no more than
        // its size (zlib allocates the buffer, and twice it for inflate's output, at the first read).
        const int64_t buffer = m_file_bytes >= 0 ? std::clamp<int64_t>(m_file_bytes, 8 << 10, 1 << 20) : 1 << 20;
        gzbuffer(m_file, static_cast<unsigned>(buffer));
    }

    // The most bytes the file can hold once decompressed: its size when plain; deflate expands
    // at most 1032:1 (zlib's technical notes), so a gzip file at most that (plus a margin for the
    // header). -1 when the size is unknown (not a regular file).
    int64_t max_content_bytes() const {
        if (m_file_bytes < 0) return -1;
        if (gzdirect(m_file)) return m_file_bytes;
        return m_file_bytes > INT64_MAX / 1032 ? INT64_MAX : m_file_bytes * 1032 + 4096;
    }
    // A plain file (not gzip): its size bounds what it holds.
    bool plain() const { return gzdirect(m_file) != 0; }
    ~GzReader() {
        if (m_file != nullptr) gzclose(m_file);
    }
    GzReader(const GzReader&) = delete;
    GzReader& operator=(const GzReader&) = delete;

    // Reads up to `len` bytes; returns how many were read (short at the end of the data).
    // A truncated gzip stream also ends the data; any other failure throws.
    int64_t read(void* dst, int64_t len) {
        auto* out = static_cast<unsigned char*>(dst);
        int64_t got = 0;
        while (got < len) {
            // gzread takes an unsigned and returns an int: stay well inside both.
            const unsigned chunk = static_cast<unsigned>(std::min<int64_t>(len - got, 1 << 26));
            const int n = gzread(m_file, out + got, chunk);
            if (n > 0) {
                got += n;
                continue;
            }
            if (n < 0) fail_unless_truncated();
            break;
        }
        return got;
    }

private:
    void fail_unless_truncated() {
        int errnum = Z_OK;
        const char* message = gzerror(m_file, &errnum);
        if (errnum == Z_BUF_ERROR) return;  // "unexpected end of file": a cut-off .gz
        if (errnum == Z_ERRNO) throw Error(m_path + ": read error: " + std::strerror(errno));
        throw Error(m_path + ": corrupt gzip data: " + (message != nullptr ? message : "?"));
    }

    std::string m_path;
    gzFile m_file = nullptr;
    int64_t m_file_bytes = -1;
};

std::string hex32(uint32_t v) {
    char text[16];
    std::snprintf(text, sizeof text, "0x%08X", v);
    return text;
}

// Reads and validates the magic number and the dimensions, leaving `in` at the data.
std::vector<int64_t> parse_header(GzReader& in, const std::string& path, int rank) {
    unsigned char magic[4];
    const int64_t got = in.read(magic, 4);
    const int64_t header_bytes = 4 + 4 * int64_t{rank};
    if (got < 4)
        throw Error(path + ": truncated: expected " + std::to_string(header_bytes) +
                    " bytes of header, got " + std::to_string(got));
    const uint32_t found = uint32_t{magic[0]} << 24 | uint32_t{magic[1]} << 16 |
                           uint32_t{magic[2]} << 8 | uint32_t{magic[3]};
    const uint32_t expected = uint32_t{idx_type_ubyte} << 8 | static_cast<uint32_t>(rank);
    if (found != expected)
        throw Error(path + ": bad magic number " + hex32(found) + " (expected " + hex32(expected) +
                    ": an IDX file of unsigned bytes with " + std::to_string(rank) +
                    (rank == 1 ? " dimension)" : " dimensions)"));
    unsigned char raw[4 * 8];
    const int64_t got_dims = in.read(raw, 4 * int64_t{rank});
    if (got_dims < 4 * rank)
        throw Error(path + ": truncated: expected " + std::to_string(header_bytes) +
                    " bytes of header, got " + std::to_string(4 + got_dims));
    std::vector<int64_t> dims(static_cast<size_t>(rank));
    int64_t total = 1, item = 1;
    for (int d = 0; d < rank; ++d) {
        const unsigned char* b = raw + 4 * d;
        dims[d] = int64_t{b[0]} << 24 | int64_t{b[1]} << 16 | int64_t{b[2]} << 8 | int64_t{b[3]};
        // An empty file (count 0) is well-formed; an item with no bytes is not.
        if (d > 0 && dims[d] == 0) throw Error(path + ": dimension " + std::to_string(d) + " is 0");
        // One item is bounded too: with a count of 0 the total says nothing about its size.
        if (d > 0) {
            if (dims[d] > max_idx_bytes / item)
                throw Error(path + ": implausible dimensions (more than " + std::to_string(max_idx_bytes) +
                            " bytes in one item)");
            item *= dims[d];
        }
        // Checked before the product is formed: four dimensions of 0xFFFFFFFF overflow int64.
        if (total > 0 && dims[d] > max_idx_bytes / total)
            throw Error(path + ": implausible dimensions (more than " + std::to_string(max_idx_bytes) +
                        " bytes of data)");
        total = dims[d] == 0 ? 0 : total * dims[d];
        if (total > max_idx_bytes)
            throw Error(path + ": implausible dimensions (more than " +
                        std::to_string(max_idx_bytes) + " bytes of data)");
    }
    return dims;
}

int64_t item_bytes(const std::vector<int64_t>& dims) {
    int64_t n = 1;
    for (size_t d = 1; d < dims.size(); ++d) n *= dims[d];
    return n;
}

std::string missing_file_message(const std::string& name, const std::string& folder,
                                 const std::string& base) {
    std::string hint = name == "fashion-mnist"
                           ? "install Debian's dataset-fashion-mnist or set data.path"
                           : "set data.path to the folder that holds the IDX files";
    return name + ": missing " + base + "(.gz) in " + folder + " (" + hint + ")";
}

struct MnistFiles {
    std::string train_images, train_labels, test_images, test_labels;
};

MnistFiles find_mnist_files(const std::string& name, const std::string& folder) {
    auto find = [&](const char* base) {
        std::string path = find_idx_file(folder, base);
        if (path.empty()) throw Error(missing_file_message(name, folder, base));
        return path;
    };
    MnistFiles files;
    files.train_images = find("train-images-idx3-ubyte");
    files.train_labels = find("train-labels-idx1-ubyte");
    files.test_images = find("t10k-images-idx3-ubyte");
    files.test_labels = find("t10k-labels-idx1-ubyte");
    return files;
}

void check_pair(const std::string& images, const std::vector<int64_t>& image_dims,
                const std::string& labels, const std::vector<int64_t>& label_dims) {
    if (image_dims[0] != label_dims[0])
        throw Error(images + " holds " + std::to_string(image_dims[0]) + " images but " + labels +
                    " holds " + std::to_string(label_dims[0]) + " labels");
}

void check_same_image_size(const MnistFiles& files, const std::vector<int64_t>& train,
                           const std::vector<int64_t>& test) {
    if (train[1] != test[1] || train[2] != test[2])
        throw Error(files.test_images + ": images are " + std::to_string(test[1]) + "x" +
                    std::to_string(test[2]) + " but " + files.train_images + " has " +
                    std::to_string(train[1]) + "x" + std::to_string(train[2]));
}

// images: [N, rows, cols] bytes, labels: [N] -> Dataset with inputs [N, 1, rows, cols] in [0, 1].
Dataset load_split(const std::string& name, const std::string& images_path,
                   const std::string& labels_path, int64_t limit, const StopCheck& stop) {
    IdxArray images = read_idx(images_path, 3, limit, stop);
    IdxArray labels = read_idx(labels_path, 1, limit, stop);
    check_pair(images_path, images.dims, labels_path, labels.dims);
    Dataset ds;
    ds.name = name;
    ds.sample_shape = {1, images.dims[1], images.dims[2]};
    ds.num_classes = mnist_classes;
    ds.inputs.resize(images.data.size());
    const uint8_t* src = images.data.data();
    float* dst = ds.inputs.data();
    // Division, not a multiply by 1/255, so values match torchvision's ToTensor exactly.
    for (size_t i = 0, n = images.data.size(); i < n; ++i)
        dst[i] = static_cast<float>(src[i]) / 255.0f;
    ds.targets.resize(labels.data.size());
    for (size_t i = 0; i < labels.data.size(); ++i) {
        if (labels.data[i] >= mnist_classes)
            throw Error(labels_path + ": label " + std::to_string(labels.data[i]) + " of item " +
                        std::to_string(i) + " is out of range [0, " +
                        std::to_string(mnist_classes) + ")");
        ds.targets[i] = static_cast<float>(labels.data[i]);
    }
    return ds;
}

}  // namespace

std::vector<int64_t> read_idx_header(const std::string& path, int rank) {
    PARALAB_CHECK(rank >= 1 && rank <= 8, "IDX rank out of range");
    GzReader in(path);
    return parse_header(in, path, rank);
}

IdxArray read_idx(const std::string& path, int rank, int64_t max_items, const StopCheck& stop) {
    PARALAB_CHECK(rank >= 1 && rank <= 8, "IDX rank out of range");
    PARALAB_CHECK(max_items >= 0, "negative IDX item limit");
    GzReader in(path);
    IdxArray out;
    out.dims = parse_header(in, path, rank);
    const bool read_all = max_items == 0 || max_items >= out.dims[0];
    out.count = read_all ? out.dims[0] : max_items;
    const int64_t per_item = item_bytes(out.dims);
    const int64_t want = out.count * per_item;
    // What the header claims, against what the file can hold, before anything is allocated.
    const int64_t header = 4 + 4 * int64_t{rank};
    if (const int64_t room = in.max_content_bytes(); room >= 0 && header + want > room)
        throw Error(path + ": the header announces " + std::to_string(header + want) + " bytes" +
                    (read_all ? "" : " for the first " + std::to_string(out.count) + " items") +
                    ", but the file can hold at most " + std::to_string(room) + " (truncated or corrupt)");
    // In chunks, asking `stop` before each. A plain file's claim was checked against its size
    // and is allocated at once; a gzip stream's buffer grows with what arrives (doubling, at
    // most to the claim), so a stream that promises more than it holds is found short before
    // the whole claim is allocated.
    constexpr int64_t chunk = int64_t{4} << 20;
    int64_t got = 0;
    out.data.reserve(static_cast<size_t>(in.plain() ? want : std::min(want, int64_t{64} << 20)));
    while (got < want) {
        if (stop && stop()) throw LoadStopped();
        const int64_t n = std::min(chunk, want - got);
        const auto capacity = static_cast<int64_t>(out.data.capacity());
        if (got + n > capacity)
            out.data.reserve(static_cast<size_t>(std::min(want, std::max(2 * capacity, got + n))));
        out.data.resize(static_cast<size_t>(got + n));
        const int64_t r = in.read(out.data.data() + got, n);
        got += r;
        if (r < n) break;
    }
    if (got < want) {
        // Sizes as the whole (uncompressed) file, the number a reader can check with ls.
        throw Error(path + ": truncated: expected " +
                    std::to_string(header + out.dims[0] * per_item) + " bytes of data, got " +
                    std::to_string(header + got));
    }
    if (read_all) {
        unsigned char extra;
        if (in.read(&extra, 1) != 0)
            throw Error(path + ": more data than the header announces (" + std::to_string(want) +
                        " bytes after the header)");
    }
    return out;
}

std::string find_idx_file(const std::string& folder, const std::string& base) {
    namespace fs = std::filesystem;
    std::string dotted = base;
    if (const auto dash = dotted.rfind("-idx"); dash != std::string::npos) dotted[dash] = '.';
    for (const std::string& name : {base + ".gz", base, dotted + ".gz", dotted}) {
        const fs::path candidate = fs::path(folder) / name;
        std::error_code ec;
        if (fs::is_regular_file(candidate, ec)) return candidate.string();
    }
    return {};
}

DataSplits load_mnist_format(const std::string& name, const std::string& folder,
                             int64_t train_limit, int64_t test_limit, const StopCheck& stop) {
    const MnistFiles files = find_mnist_files(name, folder);
    // The test split decompresses on a second thread while this one reads the training split;
    // when either fails or is stopped, the other gives up at its next chunk.
    std::atomic<bool> abandoned{false};
    const StopCheck check = [&] { return abandoned.load() || (stop && stop()); };
    auto test = std::async(std::launch::async, [&] {
        try {
            return load_split(name, files.test_images, files.test_labels, test_limit, check);
        } catch (...) {
            abandoned = true;
            throw;
        }
    });
    DataSplits splits;
    std::exception_ptr train_error, test_error;
    try {
        splits.train = load_split(name, files.train_images, files.train_labels, train_limit, check);
    } catch (...) {
        train_error = std::current_exception();
        abandoned = true;
    }
    try {
        splits.test = test.get();
    } catch (...) {
        test_error = std::current_exception();
    }
    // The cause is a split's own failure; a split that gave up because the other failed is not.
    const auto gave_up = [](const std::exception_ptr& e) {
        try {
            std::rethrow_exception(e);
        } catch (const LoadStopped&) {
            return true;
        } catch (...) {
            return false;
        }
    };
    if (train_error && (!test_error || !gave_up(train_error) || gave_up(test_error)))
        std::rethrow_exception(train_error);
    if (test_error) std::rethrow_exception(test_error);
    if (splits.train.size() == 0) throw Error(files.train_images + ": holds no images");
    check_same_image_size(files, {0, splits.train.sample_shape[1], splits.train.sample_shape[2]},
                          {0, splits.test.sample_shape[1], splits.test.sample_shape[2]});
    return splits;
}

void check_mnist_format(const std::string& name, const std::string& folder) {
    const MnistFiles files = find_mnist_files(name, folder);
    const auto train_images = read_idx_header(files.train_images, 3);
    const auto train_labels = read_idx_header(files.train_labels, 1);
    const auto test_images = read_idx_header(files.test_images, 3);
    const auto test_labels = read_idx_header(files.test_labels, 1);
    check_pair(files.train_images, train_images, files.train_labels, train_labels);
    check_pair(files.test_images, test_images, files.test_labels, test_labels);
    if (train_images[0] == 0) throw Error(files.train_images + ": holds no images");
    check_same_image_size(files, train_images, test_images);
}

}  // namespace paralab::data
