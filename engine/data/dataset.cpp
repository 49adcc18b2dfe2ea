#include "engine/data/dataset.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include "engine/data/csv.h"
#include "engine/data/idx.h"
#include "engine/data/synthetic.h"
#include "engine/data/text.h"
#include "engine/util/error.h"
#include "engine/util/rng.h"

namespace paralab::data {
namespace {

// Independent streams from the run's seed, so that the data does not move when another
// consumer of the seed (weight init, the loader's shuffles) changes.
constexpr uint64_t generate_stream = 0xDA7A0001;
constexpr uint64_t shuffle_stream = 0xDA7A0002;
// A synthetic set larger than this many floats (4 GiB) is surely a typo in the file.
constexpr int64_t max_synthetic_values = int64_t{1} << 30;

std::string join_names() {
    std::string out;
    for (const auto& n : dataset_names()) out += (out.empty() ? "" : ", ") + n;
    return out;
}

void require(bool ok, const std::string& key, const std::string& expected, const std::string& got) {
    if (!ok) throw ConfigError("data." + key, "expected " + expected + ", got " + got);
}

void require_non_negative(int64_t v, const std::string& key) {
    require(v >= 0, key, "a non-negative integer", std::to_string(v));
}

// 0.2 rather than std::to_string's 0.200000.
std::string number_text(double v) {
    std::ostringstream out;
    out << v;
    return out.str();
}

bool is_idx_dataset(const std::string& name) {
    return name == "mnist" || name == "fashion-mnist";
}

// Rows [begin, end) of `src` as a new data set with the same shapes.
Dataset slice_examples(const Dataset& src, int64_t begin, int64_t end) {
    Dataset out;
    out.name = src.name;
    out.sample_shape = src.sample_shape;
    out.target_shape = src.target_shape;
    out.num_classes = src.num_classes;
    const int64_t in = src.sample_numel(), tn = src.target_numel();
    out.inputs.assign(src.inputs.begin() + begin * in, src.inputs.begin() + end * in);
    out.targets.assign(src.targets.begin() + begin * tn, src.targets.begin() + end * tn);
    return out;
}

}  // namespace

int64_t Dataset::sample_numel() const {
    int64_t n = 1;
    for (int64_t d : sample_shape) n *= d;
    return n;
}

int64_t Dataset::target_numel() const {
    int64_t n = 1;
    for (int64_t d : target_shape) n *= d;
    return std::max<int64_t>(1, n);
}

int64_t Dataset::size() const {
    if (is_text()) return windows;
    const int64_t n = sample_numel();
    return n > 0 ? static_cast<int64_t>(inputs.size()) / n : 0;
}

const std::vector<std::string>& dataset_names() {
    static const std::vector<std::string> names = {"spirals",       "blobs", "sine", "seqclass",
                                                   "fashion-mnist", "mnist", "csv",  "text"};
    return names;
}

bool is_synthetic_dataset(const std::string& name) {
    return name == "spirals" || name == "blobs" || name == "sine" || name == "seqclass";
}

void validate_data_config(const DataConfig& cfg) {
    const auto& names = dataset_names();
    if (std::find(names.begin(), names.end(), cfg.dataset) == names.end())
        throw ConfigError("data.dataset", "unknown data set '" + cfg.dataset + "' (expected one of " +
                          join_names() + ")");
    require_non_negative(cfg.train_limit, "train_limit");
    require_non_negative(cfg.test_limit, "test_limit");
    require(cfg.batch_size > 0, "batch_size", "a positive integer", std::to_string(cfg.batch_size));
    require(cfg.workers >= 0 && cfg.workers <= 256, "workers", "an integer in [0, 256]",
            std::to_string(cfg.workers));
    require(std::isfinite(cfg.test_fraction) && cfg.test_fraction >= 0.0 && cfg.test_fraction < 1.0,
            "test_fraction", "a number in [0, 1)", number_text(cfg.test_fraction));
    if (cfg.dataset == "csv" && cfg.path.empty())
        throw ConfigError("data.path", "the csv data set needs the path of a CSV file");
    if (cfg.dataset == "text") {
        if (cfg.seq_len == 0)
            throw ConfigError("data.seq_len",
                              "missing; the text data set needs seq_len, the context "
                              "length T of its examples (model.input is [T])");
        require(cfg.seq_len > 0, "seq_len", "a positive integer", std::to_string(cfg.seq_len));
        require(std::isfinite(cfg.val_fraction) && cfg.val_fraction > 0.0 && cfg.val_fraction < 1.0,
                "val_fraction", "a number in (0, 1)", number_text(cfg.val_fraction));
        if (cfg.tokenizer != "byte")
            throw ConfigError("data.tokenizer",
                              "unknown tokenizer '" + cfg.tokenizer +
                                  "' (expected \"byte\": one token per byte, vocabulary 256)");
        return;
    }
    if (!is_synthetic_dataset(cfg.dataset)) return;

    require_non_negative(cfg.samples, "samples");
    require(cfg.classes == 0 || cfg.classes >= 2, "classes", "an integer >= 2 (0 = default)",
            std::to_string(cfg.classes));
    require(!std::isnan(cfg.noise) && cfg.noise < 1e6, "noise",
            "a finite number (negative = default)", number_text(cfg.noise));
    require_non_negative(cfg.seq_len, "seq_len");
    require_non_negative(cfg.features, "features");
    if (cfg.dataset == "sine")
        require(cfg.features <= 1, "features", "1 for sine (one value per step)",
                std::to_string(cfg.features));
    if (cfg.dataset == "spirals")
        require(cfg.features == 0 || cfg.features == 2, "features", "2 for spirals (points in 2-D)",
                std::to_string(cfg.features));
    const SyntheticDefaults d = synthetic_defaults(cfg.dataset);
    const int64_t samples = cfg.samples > 0 ? cfg.samples : d.samples;
    const int64_t seq_len = cfg.seq_len > 0 ? cfg.seq_len : std::max<int64_t>(d.seq_len, 1);
    const int64_t features = cfg.features > 0 ? cfg.features : d.features;
    const int64_t classes = cfg.classes > 0 ? cfg.classes : d.classes;
    if (classes > samples)
        throw ConfigError("data.classes", std::to_string(classes) +
                          " classes need at least as many samples, got " + std::to_string(samples));
    const bool sequence = cfg.dataset == "sine" || cfg.dataset == "seqclass";
    const int64_t per_sample = sequence ? seq_len * features : features;
    if (seq_len > max_synthetic_values || features > max_synthetic_values ||
        per_sample > max_synthetic_values / samples)
        throw ConfigError("data.samples", std::to_string(samples) + " examples of " +
                          std::to_string(per_sample) + " values is too large (at most " +
                          std::to_string(max_synthetic_values) + " values in all)");
    const auto test =
        static_cast<int64_t>(std::llround(static_cast<double>(samples) * cfg.test_fraction));
    if (samples - test < 1)
        throw ConfigError("data.samples", std::to_string(samples) +
                          " examples leave none for training with test_fraction " +
                          number_text(cfg.test_fraction));
}

std::string resolved_data_path(const DataConfig& cfg) {
    if (!cfg.path.empty()) return cfg.path;
    if (cfg.dataset == "fashion-mnist") return "/usr/share/datasets/fashion-mnist";
    if (cfg.dataset == "mnist") return "/usr/share/datasets/mnist";
    if (cfg.dataset == "text") return kDefaultTextPath;
    return {};
}

void shuffle_examples(Dataset& ds, uint64_t seed) {
    PARALAB_CHECK(!ds.is_text(), "shuffle_examples: a text set is cut into windows by the loader");
    const int64_t n = ds.size();
    std::vector<int64_t> perm(static_cast<size_t>(n));
    std::iota(perm.begin(), perm.end(), int64_t{0});
    Rng rng(seed);
    for (int64_t i = n - 1; i > 0; --i)
        std::swap(perm[i], perm[static_cast<int64_t>(rng.below(static_cast<uint64_t>(i + 1)))]);
    const int64_t in = ds.sample_numel(), tn = ds.target_numel();
    std::vector<float> inputs(ds.inputs.size()), targets(ds.targets.size());
    for (int64_t i = 0; i < n; ++i) {
        std::copy_n(ds.inputs.begin() + perm[i] * in, in, inputs.begin() + i * in);
        std::copy_n(ds.targets.begin() + perm[i] * tn, tn, targets.begin() + i * tn);
    }
    ds.inputs = std::move(inputs);
    ds.targets = std::move(targets);
}

DataSplits split_examples(Dataset&& all, double test_fraction) {
    PARALAB_CHECK(test_fraction >= 0.0 && test_fraction < 1.0, "test_fraction out of [0, 1)");
    PARALAB_CHECK(!all.is_text(),
                  "split_examples: a text set is split by bytes (split_text_bytes)");
    const int64_t n = all.size();
    const auto n_test = static_cast<int64_t>(std::llround(static_cast<double>(n) * test_fraction));
    DataSplits splits;
    splits.test = slice_examples(all, n - n_test, n);
    all.inputs.resize(static_cast<size_t>((n - n_test) * all.sample_numel()));
    all.targets.resize(static_cast<size_t>((n - n_test) * all.target_numel()));
    splits.train = std::move(all);
    return splits;
}

void truncate_examples(Dataset& ds, int64_t limit) {
    PARALAB_CHECK(limit >= 0, "negative example limit");
    if (limit == 0 || limit >= ds.size()) return;
    if (ds.is_text()) {
        ds.windows = limit;
        return;
    }
    ds.inputs.resize(static_cast<size_t>(limit * ds.sample_numel()));
    ds.targets.resize(static_cast<size_t>(limit * ds.target_numel()));
    ds.inputs.shrink_to_fit();
    ds.targets.shrink_to_fit();
}

DataSplits load_data(const DataConfig& cfg, uint64_t seed, const StopCheck& stop) {
    validate_data_config(cfg);
    if (cfg.dataset == "text") return load_text(cfg, stop);
    DataSplits splits;
    if (is_idx_dataset(cfg.dataset)) {
        // The files' own split; the limits are applied while reading.
        return load_mnist_format(cfg.dataset, resolved_data_path(cfg), cfg.train_limit,
                                 cfg.test_limit, stop);
    }
    Dataset all = is_synthetic_dataset(cfg.dataset)
                      ? make_synthetic(cfg, splitmix64(seed ^ generate_stream))
                      : read_csv(cfg.path, cfg.label_column, stop);
    // Generated sets come class by class and CSV files are often sorted: shuffle before
    // the split so that both splits see every class.
    shuffle_examples(all, splitmix64(seed ^ shuffle_stream));
    splits = split_examples(std::move(all), cfg.test_fraction);
    if (splits.train.size() == 0)
        throw Error(cfg.path + ": " + std::to_string(splits.test.size()) +
                    " rows leave none for training with test_fraction " +
                    number_text(cfg.test_fraction));
    truncate_examples(splits.train, cfg.train_limit);
    truncate_examples(splits.test, cfg.test_limit);
    return splits;
}

void check_data_files(const DataConfig& cfg) {
    validate_data_config(cfg);
    if (is_idx_dataset(cfg.dataset))
        check_mnist_format(cfg.dataset, resolved_data_path(cfg));
    else if (cfg.dataset == "csv")
        check_csv_file(cfg.path, cfg.label_column);
    else if (cfg.dataset == "text")
        check_text_corpus(cfg);
}

}  // namespace paralab::data
