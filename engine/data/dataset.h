// Data sets: the experiment file's "data" section (DataConfig), an in-memory data set
// (Dataset: flat float inputs and targets, or windows of a byte corpus), and load_data, which
// builds the train and test splits for a config. Plain C++: the trainer copies batches into
// device tensors.
//
// Layout: example i's input is inputs[i * sample_numel() .. (i + 1) * sample_numel()), its
// target targets[i * target_numel() ..]; class ids are stored as floats. A text set keeps no
// examples: the loader cuts each one out of the corpus bytes (text.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/util/error.h"

namespace paralab::data {

// Asked between chunks while a data set loads (IDX files, CSV rows, a text corpus): true means
// stop loading. Empty: never. May be called from more than one thread at once (the two IDX
// splits load side by side).
using StopCheck = std::function<bool()>;

// Thrown by the loaders when their StopCheck asked them to stop: the load is abandoned and
// what was read so far is freed.
class LoadStopped : public Error {
public:
    LoadStopped() : Error("the data loading was stopped") {}
};

// The experiment file's "data" section (docs/experiment-format.md), already checked for JSON types;
// validate_data_config checks the values.
struct DataConfig {
    std::string dataset =
        "spirals";  // spirals | blobs | sine | seqclass | fashion-mnist | mnist | csv | text
    // IDX folder, CSV file, or text file or folder. Empty: fashion-mnist ->
    // /usr/share/datasets/fashion-mnist, mnist -> /usr/share/datasets/mnist, text ->
    // /usr/share/games/fortunes.
    std::string path;
    int64_t train_limit = 0, test_limit = 0;  // first N examples of each split; 0 = all
    int64_t batch_size = 32;                  // the global batch of one optimizer step
    int workers = 0;
    bool shuffle = true;
    int64_t samples = 0;  // synthetic: total examples (train + test); 0 = the data set's default
    int64_t classes = 0;  // spirals / blobs / seqclass; 0 = default
    double noise = -1;    // < 0 = default
    // sine / seqclass (features also blobs); 0 = default. text: the context length T (required).
    int64_t seq_len = 0, features = 0;
    std::string label_column;           // csv: header name of the label column; empty = last
    double test_fraction = 0.2;         // synthetic and csv: share held out for the test split
    double val_fraction = 0.1;          // text: share of the bytes, at the end, for the test split
    std::string tokenizer = "byte";     // text: "byte" (token id = byte value, vocabulary 256)
};

struct Dataset {
    std::string name;
    std::vector<int64_t> sample_shape;  // per-sample input shape: {2}, {1, 28, 28}, {T, F}
    std::vector<int64_t> target_shape;  // {} class ids, {T} token ids (text), else regression
    int64_t num_classes = 0;            // 0 = regression
    std::vector<float> inputs;          // size() * sample_numel(); empty for text
    std::vector<float> targets;         // size() * target_numel(); empty for text

    // Text: sample_shape = target_shape = {window}, num_classes = the vocabulary. Example k is
    // the window of window + 1 bytes at text_window_offset (text.h): x = its first `window`
    // bytes, y = its last `window`, as token ids. Both splits share one corpus buffer.
    std::shared_ptr<const std::vector<uint8_t>> text;
    int64_t text_begin = 0, text_end = 0;  // this split's bytes of *text: [text_begin, text_end)
    int64_t window = 0;                    // T
    // true (training): each example's offset is drawn from (seed, epoch, index in the epoch);
    // false (test): window k starts at text_begin + k * window.
    bool random_windows = false;
    int64_t windows = 0;  // the examples of one epoch

    int64_t sample_numel() const;
    int64_t target_numel() const;  // max(1, prod(target_shape))
    int64_t size() const;
    bool is_classification() const { return num_classes > 0; }
    bool is_text() const { return text != nullptr; }
};

struct DataSplits {
    Dataset train, test;
};

// The names `dataset` accepts, in the order messages list them.
const std::vector<std::string>& dataset_names();
bool is_synthetic_dataset(const std::string& name);

// Range checks of the values (types were checked by the experiment parser). Throws
// ConfigError naming the key: "data.batch_size: expected a positive integer, got 0".
void validate_data_config(const DataConfig& cfg);

// Builds both splits. Synthetic sets are generated from `seed` (the same seed gives the
// same data), CSV rows are shuffled with it before the split; IDX files bring their own
// split. train_limit / test_limit then keep the first N examples of each split. Throws
// ConfigError for bad values and paralab::Error for missing or malformed files, with a
// message that names the file and what is wrong. `stop` is asked between chunks of what is
// read (a few MiB each): when it says so, LoadStopped is thrown.
DataSplits load_data(const DataConfig& cfg, uint64_t seed, const StopCheck& stop = {});

// Checks that the files a config needs exist, are readable and have valid headers, without
// loading them (validation before a run starts). Throws like load_data.
void check_data_files(const DataConfig& cfg);

// The folder or file a config reads: cfg.path, or the data set's default folder.
std::string resolved_data_path(const DataConfig& cfg);

// Building blocks of load_data, public for the loaders and the tests.
// Permutes the examples of `ds` in place (Fisher-Yates; inputs and targets move together).
void shuffle_examples(Dataset& ds, uint64_t seed);
// The last round(size * test_fraction) examples become the test split, the rest train.
DataSplits split_examples(Dataset&& all, double test_fraction);
// Keeps the first `limit` examples (0 = all; a limit above the size keeps all). A text set
// keeps its corpus and serves `limit` windows.
void truncate_examples(Dataset& ds, int64_t limit);

}  // namespace paralab::data
