// Byte-level text corpora: the "text" data set of language models. The corpus is a file, or a
// folder's regular files in name order, concatenated; each byte is a token (vocabulary 256).
// The last val_fraction of the bytes is the test split. An example is a window of T + 1 bytes
// (x = its first T, y = its last T): at a random offset of the training split, or consecutive
// from the start of the test split. The splits keep the bytes, not the examples (dataset.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/data/dataset.h"

namespace paralab::data {

inline constexpr int64_t kByteVocabulary = 256;
inline constexpr const char* kDefaultTextPath = "/usr/share/games/fortunes";  // Debian: fortunes
// The largest corpus read (1 GiB): it is held whole in memory. A larger one is refused at
// "data.path" with its size, before it is read when its files' sizes tell.
inline constexpr int64_t kMaxTextCorpusBytes = int64_t{1} << 30;

// The files `path` stands for, in reading order: the file itself (followed if a symlink), or
// a folder's regular files in name order, skipping symlinks, sub-folders and files that hold
// a NUL byte (binary files, such as the fortunes' .dat indexes). Reads each folder file as
// far as its first NUL. Throws ConfigError at "data.path" naming what is missing, is not a
// file or folder, cannot be read, is an empty file, or is a folder with no usable file.
std::vector<std::string> text_corpus_files(const std::string& path);

// The concatenated bytes of text_corpus_files(path); throws like it, and refuses a corpus over
// kMaxTextCorpusBytes. `stop` is asked before each 1 MiB piece; LoadStopped when it says so.
std::vector<uint8_t> read_text_corpus(const std::string& path, const StopCheck& stop = {});

// The bytes of each split of a corpus of `bytes` bytes: the last round(bytes * val_fraction)
// are the test split. Each split needs at least seq_len + 1 bytes: otherwise a ConfigError at
// "data.path" says how many the corpus has and how many it needs (`path` names it).
struct TextSplitBytes {
    int64_t train = 0, test = 0;
};
TextSplitBytes split_text_bytes(int64_t bytes, const DataConfig& cfg, const std::string& path);

// Both splits of cfg's corpus (resolved_data_path), sharing one buffer: training windows =
// floor(train bytes / T), test windows = floor((test bytes - 1) / T), each capped by
// train_limit / test_limit. cfg's values are checked first (validate_data_config). `stop` as
// read_text_corpus.
DataSplits load_text(const DataConfig& cfg, const StopCheck& stop = {});

// load_text's checks without keeping the corpus: the files are listed (folder files read for a
// NUL byte) and their sizes added up.
void check_text_corpus(const DataConfig& cfg);

// The offset in *ds.text of example `index` of `epoch` (its T + 1 bytes lie in
// [ds.text_begin, ds.text_end)). Training (random_windows): uniform over the split's windows,
// from a counter-based hash of (seed, epoch, index), so that every shard and every worker
// count cuts the same windows. Test: ds.text_begin + index * T; seed and epoch unused.
int64_t text_window_offset(const Dataset& ds, uint64_t seed, int64_t epoch, int64_t index);

}  // namespace paralab::data
