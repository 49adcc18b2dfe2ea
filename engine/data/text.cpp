#include "engine/data/text.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/util/error.h"
#include "engine/util/rng.h"

namespace paralab::data {
namespace {

namespace fs = std::filesystem;

// The training windows' own stream of the run's seed (dataset.cpp has 0xDA7A0001 and 2).
constexpr uint64_t window_stream = 0xDA7A0003;

[[noreturn]] void path_error(const std::string& reason) {
    throw ConfigError("data.path", reason);
}

// 0.1 rather than std::to_string's 0.100000.
std::string number_text(double v) {
    std::ostringstream out;
    out << v;
    return out.str();
}

// Reads `file` in pieces of 1 MiB (a smaller file in one piece of its size), handing each to
// `take(bytes, count)` until it returns false; `stop` is asked before each piece (LoadStopped).
template <class Take>
void read_pieces(const std::string& file, const StopCheck& stop, Take&& take) {
    errno = 0;
    std::ifstream in(file, std::ios::binary);
    if (!in)
        path_error(file +
                   ": cannot open: " + (errno != 0 ? std::strerror(errno) : "unknown error"));
    std::error_code ec;
    const uintmax_t size = fs::file_size(file, ec);  // fails for a FIFO or a device: 1 MiB pieces
    std::vector<char> piece(ec ? size_t{1} << 20 : static_cast<size_t>(std::clamp<uintmax_t>(size + 1, 4096, 1 << 20)));
    for (;;) {
        if (stop && stop()) throw LoadStopped();
        if (!in.read(piece.data(), static_cast<std::streamsize>(piece.size())) && in.gcount() == 0) break;
        if (!take(piece.data(), static_cast<size_t>(in.gcount()))) return;
    }
    if (in.bad()) path_error(file + ": read error");
}

// The corpus is held whole in memory: refused beyond kMaxTextCorpusBytes, naming its size so far.
void check_corpus_size(const std::string& path, int64_t bytes) {
    if (bytes > kMaxTextCorpusBytes)
        path_error(path + ": the corpus holds more than 1 GiB (at least " + std::to_string(bytes) +
                   " bytes); a text corpus is read whole into memory, so use a smaller file or folder "
                   "(at most " + std::to_string(kMaxTextCorpusBytes) + " bytes)");
}

// A folder's regular files (symlinks and sub-folders left out) in name order.
std::vector<fs::path> regular_files_of(const std::string& folder) {
    std::error_code ec;
    fs::directory_iterator it(folder, ec);
    if (ec) path_error(folder + ": cannot read the folder: " + ec.message());
    std::vector<fs::path> files;
    for (; it != fs::directory_iterator(); it.increment(ec)) {
        if (ec) path_error(folder + ": cannot read the folder: " + ec.message());
        std::error_code st_ec;
        if (fs::is_regular_file(it->symlink_status(st_ec)) && !st_ec) files.push_back(it->path());
    }
    std::sort(files.begin(), files.end(), [](const fs::path& a, const fs::path& b) {
        return a.filename().string() < b.filename().string();
    });
    return files;
}

struct Corpus {
    std::vector<std::string> files;
    int64_t bytes = 0;
};

// Lists (and with `out`, reads) the corpus of `path`. Without `out` a single file is only
// stat'ed, and a folder's files are read up to their first NUL byte and then dropped. Either
// way a corpus over kMaxTextCorpusBytes is refused as soon as it is seen to be.
Corpus scan_corpus(const std::string& path, std::vector<uint8_t>* out, const StopCheck& stop) {
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);
    if (!fs::exists(st)) {
        if (ec && ec != std::errc::no_such_file_or_directory)
            path_error(path + ": cannot access: " + ec.message());
        path_error(path + ": no such file or folder" +
                   (path == kDefaultTextPath ? " (the default corpus; apt install fortunes)" : ""));
    }
    Corpus corpus;
    if (fs::is_regular_file(st)) {
        corpus.files.push_back(path);
        const auto size = fs::file_size(path, ec);
        if (ec) path_error(path + ": cannot access: " + ec.message());
        check_corpus_size(path, static_cast<int64_t>(size));
        if (out) {
            out->reserve(static_cast<size_t>(size));
            read_pieces(path, stop, [&](const char* p, size_t n) {
                check_corpus_size(path, static_cast<int64_t>(out->size() + n));  // it may grow
                out->insert(out->end(), p, p + n);
                return true;
            });
            corpus.bytes = static_cast<int64_t>(out->size());
        } else if (size == 0) {
            // A file may hold text and report no size (/proc and /sys files): it is counted by
            // reading it, within the bound.
            read_pieces(path, stop, [&](const char*, size_t n) {
                corpus.bytes += static_cast<int64_t>(n);
                check_corpus_size(path, corpus.bytes);
                return true;
            });
        } else {
            corpus.bytes = static_cast<int64_t>(size);
        }
        if (corpus.bytes == 0) path_error(path + ": is empty; expected a text file");
        return corpus;
    }
    if (!fs::is_directory(st))
        path_error(path + ": is not a regular file or a folder (a pipe, a device or a socket)");
    const std::vector<fs::path> files = regular_files_of(path);
    if (out) {  // room for them all (at most the bound): the buffer is not regrown as it fills
        int64_t total = 0;
        for (const fs::path& file : files) {
            std::error_code size_ec;
            const auto size = fs::file_size(file, size_ec);
            if (size_ec) continue;
            const auto capped = static_cast<int64_t>(std::min<uintmax_t>(size, kMaxTextCorpusBytes));
            total = std::min(kMaxTextCorpusBytes, total + capped);
        }
        out->reserve(static_cast<size_t>(total));
    }
    for (const fs::path& file : files) {
        const size_t start = out ? out->size() : 0;
        int64_t bytes = 0;
        bool nul = false;
        read_pieces(file.string(), stop, [&](const char* p, size_t n) {
            if (std::memchr(p, 0, n)) {
                nul = true;
                return false;
            }
            check_corpus_size(path, corpus.bytes + bytes + static_cast<int64_t>(n));
            if (out) out->insert(out->end(), p, p + n);
            bytes += static_cast<int64_t>(n);
            return true;
        });
        if (nul) {
            if (out) out->resize(start);
            continue;
        }
        corpus.files.push_back(file.string());
        corpus.bytes += bytes;
    }
    if (corpus.files.empty())
        path_error(path +
                   ": no regular, NUL-free file in this folder (symlinks, sub-folders and "
                   "files holding a NUL byte are skipped)");
    return corpus;
}

bool splits_fit(int64_t bytes, double val_fraction, int64_t need) {
    const auto test = static_cast<int64_t>(std::llround(static_cast<double>(bytes) * val_fraction));
    return test >= need && bytes - test >= need;
}

// One split of the shared corpus: bytes [begin, end), `windows` examples of T tokens.
Dataset text_split(const std::shared_ptr<const std::vector<uint8_t>>& bytes, int64_t begin,
                   int64_t end, int64_t seq_len, bool random_windows, int64_t windows) {
    Dataset ds;
    ds.name = "text";
    ds.sample_shape = {seq_len};
    ds.target_shape = {seq_len};
    ds.num_classes = kByteVocabulary;
    ds.text = bytes;
    ds.text_begin = begin;
    ds.text_end = end;
    ds.window = seq_len;
    ds.random_windows = random_windows;
    ds.windows = windows;
    return ds;
}

}  // namespace

std::vector<std::string> text_corpus_files(const std::string& path) {
    return scan_corpus(path, nullptr, {}).files;
}

std::vector<uint8_t> read_text_corpus(const std::string& path, const StopCheck& stop) {
    std::vector<uint8_t> bytes;
    scan_corpus(path, &bytes, stop);
    return bytes;
}

TextSplitBytes split_text_bytes(int64_t bytes, const DataConfig& cfg, const std::string& path) {
    const double f = cfg.val_fraction;
    PARALAB_CHECK(f > 0.0 && f < 1.0 && cfg.seq_len > 0, "split_text_bytes: unchecked config");
    const int64_t need = cfg.seq_len + 1;  // one window: T inputs and the next token
    TextSplitBytes split;
    split.test = static_cast<int64_t>(std::llround(static_cast<double>(bytes) * f));
    split.train = bytes - split.test;
    if (split.train >= need && split.test >= need) return split;
    // The smallest corpus that fits, when it is a number worth printing.
    std::string in_all;
    const double least = std::ceil(static_cast<double>(need) / std::min(f, 1.0 - f));
    if (least < 0x1p62) {
        auto n = std::max(static_cast<int64_t>(least), 2 * need);
        for (int i = 0; i < 16 && !splits_fit(n, f, need); ++i)
            ++n;  // rounding moves it by a byte or two
        if (splits_fit(n, f, need))
            in_all = " (a corpus of at least " + std::to_string(n) + " bytes)";
    }
    path_error(path + " has " + std::to_string(bytes) + " bytes: with val_fraction " +
               number_text(f) + " the training split gets " + std::to_string(split.train) +
               " and the validation split " + std::to_string(split.test) + ", and seq_len " +
               std::to_string(cfg.seq_len) + " needs at least " + std::to_string(need) +
               " bytes in each" + in_all);
}

DataSplits load_text(const DataConfig& cfg, const StopCheck& stop) {
    validate_data_config(cfg);
    const std::string path = resolved_data_path(cfg);
    auto bytes = std::make_shared<const std::vector<uint8_t>>(read_text_corpus(path, stop));
    const auto total = static_cast<int64_t>(bytes->size());
    const TextSplitBytes split = split_text_bytes(total, cfg, path);
    const int64_t t = cfg.seq_len;
    DataSplits splits;
    splits.train = text_split(bytes, 0, split.train, t, true, split.train / t);
    splits.test = text_split(bytes, split.train, total, t, false, (split.test - 1) / t);
    truncate_examples(splits.train, cfg.train_limit);
    truncate_examples(splits.test, cfg.test_limit);
    return splits;
}

void check_text_corpus(const DataConfig& cfg) {
    validate_data_config(cfg);
    const std::string path = resolved_data_path(cfg);
    split_text_bytes(scan_corpus(path, nullptr, {}).bytes, cfg, path);
}

int64_t text_window_offset(const Dataset& ds, uint64_t seed, int64_t epoch, int64_t index) {
    PARALAB_CHECK(ds.is_text() && index >= 0 && index < ds.windows,
                  "text_window_offset: window " + std::to_string(index) + " of " +
                      std::to_string(ds.windows));
    if (!ds.random_windows) return ds.text_begin + index * ds.window;
    // Window starts 0 .. span - T - 1: the last one ends at the split's last byte.
    const auto starts = static_cast<uint64_t>(ds.text_end - ds.text_begin - ds.window);
    const uint64_t key =
        splitmix64(splitmix64(seed ^ window_stream) + static_cast<uint64_t>(epoch));
    return ds.text_begin + static_cast<int64_t>(
                               splitmix64(key ^ splitmix64(static_cast<uint64_t>(index))) % starts);
}

}  // namespace paralab::data
