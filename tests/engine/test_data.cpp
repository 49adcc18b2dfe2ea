// Data sets and the DataLoader: synthetic generators, the IDX and CSV readers with their
// error messages, the real Fashion-MNIST when installed, the text corpus and its windows
// (the real fortunes when installed), batching, shuffling, workers and the sharding rule.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/data/csv.h"
#include "engine/data/dataset.h"
#include "engine/data/idx.h"
#include "engine/data/loader.h"
#include "engine/data/synthetic.h"
#include "engine/data/text.h"
#include "engine/util/error.h"

namespace fs = std::filesystem;
using namespace paralab;
using namespace paralab::data;

namespace {

// Runs `fn`, expects an exception of type E, and returns its message.
template <class E, class Fn>
std::string error_of(Fn&& fn) {
    try {
        fn();
    } catch (const E& e) {
        return e.what();
    }
    ADD_FAILURE() << "no exception thrown";
    return {};
}

#define EXPECT_CONTAINS(text, part) \
    EXPECT_NE(std::string(text).find(part), std::string::npos) << "message: " << (text)

// A fresh folder under /tmp, removed at the end of the test.
class TempDir {
public:
    TempDir() {
        static std::atomic<int> counter{0};
        m_path = fs::temp_directory_path() / ("paralab_data_test_" + std::to_string(getpid()) +
                                              "_" + std::to_string(counter++));
        fs::create_directories(m_path);
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(m_path, ec);
    }
    std::string file(const std::string& name) const { return (m_path / name).string(); }
    std::string str() const { return m_path.string(); }

private:
    fs::path m_path;
};

std::vector<unsigned char> idx_bytes(uint32_t magic, const std::vector<uint32_t>& dims,
                                     const std::vector<unsigned char>& data) {
    std::vector<unsigned char> out;
    auto put32 = [&](uint32_t v) {
        for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<unsigned char>(v >> s));
    };
    put32(magic);
    for (uint32_t d : dims) put32(d);
    out.insert(out.end(), data.begin(), data.end());
    return out;
}

void write_bytes(const std::string& path, const std::vector<unsigned char>& bytes, bool gzip) {
    if (gzip) {
        gzFile f = gzopen(path.c_str(), "wb");
        ASSERT_NE(f, nullptr) << path;
        ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
                  static_cast<int>(bytes.size()));
        ASSERT_EQ(gzclose(f), Z_OK);
    } else {
        std::ofstream out(path, std::ios::binary);
        out.write(reinterpret_cast<const char*>(bytes.data()),
                  static_cast<std::streamsize>(bytes.size()));
    }
}

std::vector<unsigned char> read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_text(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
}

// A tiny MNIST-format set: `count` images of rows x cols (non-square, so that a swap of
// rows and cols shows), pixel (i, k) = (7 i + k) % 256, label i % 10.
struct TinyIdx {
    static constexpr uint32_t rows = 4, cols = 3;
    static std::vector<unsigned char> images(uint32_t count) {
        std::vector<unsigned char> px(count * rows * cols);
        for (uint32_t i = 0; i < count; ++i)
            for (uint32_t k = 0; k < rows * cols; ++k) px[i * rows * cols + k] = (7 * i + k) % 256;
        return idx_bytes(0x00000803, {count, rows, cols}, px);
    }
    static std::vector<unsigned char> labels(uint32_t count) {
        std::vector<unsigned char> l(count);
        for (uint32_t i = 0; i < count; ++i) l[i] = i % 10;
        return idx_bytes(0x00000801, {count}, l);
    }
    static void write_all(const TempDir& dir, bool gzip, uint32_t train = 50, uint32_t test = 20) {
        const std::string ext = gzip ? ".gz" : "";
        write_bytes(dir.file("train-images-idx3-ubyte" + ext), images(train), gzip);
        write_bytes(dir.file("train-labels-idx1-ubyte" + ext), labels(train), gzip);
        write_bytes(dir.file("t10k-images-idx3-ubyte" + ext), images(test), gzip);
        write_bytes(dir.file("t10k-labels-idx1-ubyte" + ext), labels(test), gzip);
    }
};

DataConfig idx_config(const std::string& folder) {
    DataConfig cfg;
    cfg.dataset = "fashion-mnist";
    cfg.path = folder;
    return cfg;
}

// Example i: inputs {10 i, 10 i + 1, 10 i + 2}, target i.
Dataset numbered_dataset(int64_t n) {
    Dataset ds;
    ds.name = "numbered";
    ds.sample_shape = {3};
    ds.num_classes = n;
    for (int64_t i = 0; i < n; ++i) {
        for (int k = 0; k < 3; ++k) ds.inputs.push_back(static_cast<float>(10 * i + k));
        ds.targets.push_back(static_cast<float>(i));
    }
    return ds;
}

std::vector<Batch> collect_epoch(DataLoader& loader, int64_t epoch) {
    loader.start_epoch(epoch);
    std::vector<Batch> out;
    Batch b;
    while (loader.next(b)) out.push_back(b);
    return out;
}

std::vector<int64_t> ids_of(const std::vector<Batch>& batches) {
    std::vector<int64_t> ids;
    for (const auto& b : batches) ids.insert(ids.end(), b.sample_ids.begin(), b.sample_ids.end());
    return ids;
}

}  // namespace

// ---- synthetic sets -------------------------------------------------------------------------

struct SyntheticCase {
    std::string name;
    std::vector<int64_t> sample_shape, target_shape;
    int64_t classes, samples;
};

class SyntheticSet : public ::testing::TestWithParam<SyntheticCase> {};

TEST_P(SyntheticSet, ShapesSplitsAndDeterminism) {
    const SyntheticCase& c = GetParam();
    DataConfig cfg;
    cfg.dataset = c.name;
    const DataSplits a = load_data(cfg, 7);
    EXPECT_EQ(a.train.sample_shape, c.sample_shape);
    EXPECT_EQ(a.train.target_shape, c.target_shape);
    EXPECT_EQ(a.test.sample_shape, c.sample_shape);
    EXPECT_EQ(a.train.num_classes, c.classes);
    EXPECT_EQ(a.train.size() + a.test.size(), c.samples);
    EXPECT_EQ(a.test.size(), c.samples / 5);  // default test_fraction 0.2
    EXPECT_EQ(a.train.inputs.size(), static_cast<size_t>(a.train.size() * a.train.sample_numel()));
    EXPECT_EQ(a.train.targets.size(), static_cast<size_t>(a.train.size() * a.train.target_numel()));
    for (float v : a.train.inputs) ASSERT_TRUE(std::isfinite(v));
    if (c.classes > 0) {
        for (float t : a.train.targets) ASSERT_TRUE(t >= 0 && t < c.classes && t == std::floor(t));
    }

    const DataSplits same = load_data(cfg, 7);
    EXPECT_EQ(a.train.inputs, same.train.inputs);
    EXPECT_EQ(a.train.targets, same.train.targets);
    EXPECT_EQ(a.test.inputs, same.test.inputs);
    const DataSplits other = load_data(cfg, 8);
    EXPECT_NE(a.train.inputs, other.train.inputs);
}

INSTANTIATE_TEST_SUITE_P(Data, SyntheticSet,
                         ::testing::Values(SyntheticCase{"spirals", {2}, {}, 3, 3000},
                                           SyntheticCase{"blobs", {2}, {}, 4, 2000},
                                           SyntheticCase{"sine", {20, 1}, {1}, 0, 4000},
                                           SyntheticCase{"seqclass", {20, 4}, {}, 4, 4000}),
                         [](const auto& info) { return info.param.name; });

TEST(Synthetic, SpiralsClassesAreBalancedAndShuffled) {
    DataConfig cfg;
    cfg.samples = 3001;
    cfg.test_fraction = 0.0;
    const DataSplits s = load_data(cfg, 1);
    ASSERT_EQ(s.train.size(), 3001);
    EXPECT_EQ(s.test.size(), 0);
    std::vector<int> counts(3, 0);
    for (float t : s.train.targets) counts[static_cast<int>(t)]++;
    EXPECT_EQ(counts, (std::vector<int>{1001, 1000, 1000}));
    // Shuffled before the split: the first 60 examples are not all of one class.
    std::set<float> first(s.train.targets.begin(), s.train.targets.begin() + 60);
    EXPECT_EQ(first.size(), 3u);
    // Every point lies within the unit disc (radius in [0, 1]).
    for (int64_t i = 0; i < s.train.size(); ++i)
        ASSERT_LE(std::hypot(s.train.inputs[2 * i], s.train.inputs[2 * i + 1]), 1.0f + 1e-6f);
}

TEST(Synthetic, OptionsChangeShapes) {
    DataConfig cfg;
    cfg.dataset = "blobs";
    cfg.features = 5;
    cfg.classes = 6;
    cfg.samples = 600;
    const DataSplits s = load_data(cfg, 3);
    EXPECT_EQ(s.train.sample_shape, (std::vector<int64_t>{5}));
    EXPECT_EQ(s.train.num_classes, 6);
    // Class means sit near the radius-3 sphere.
    std::vector<double> sum(6 * 5, 0.0), n(6, 0.0);
    for (int64_t i = 0; i < s.train.size(); ++i) {
        const int c = static_cast<int>(s.train.targets[i]);
        n[c] += 1;
        for (int d = 0; d < 5; ++d) sum[c * 5 + d] += s.train.inputs[i * 5 + d];
    }
    for (int c = 0; c < 6; ++c) {
        double r2 = 0;
        for (int d = 0; d < 5; ++d) r2 += std::pow(sum[c * 5 + d] / n[c], 2);
        EXPECT_NEAR(std::sqrt(r2), 3.0, 0.3) << "class " << c;
    }

    cfg = DataConfig{};
    cfg.dataset = "seqclass";
    cfg.seq_len = 7;
    cfg.features = 3;
    cfg.classes = 5;
    cfg.samples = 100;
    cfg.test_fraction = 0.3;
    const DataSplits q = load_data(cfg, 3);
    EXPECT_EQ(q.train.sample_shape, (std::vector<int64_t>{7, 3}));
    EXPECT_EQ(q.train.num_classes, 5);
    EXPECT_EQ(q.train.size(), 70);
    EXPECT_EQ(q.test.size(), 30);
}

// The sequence task is what its comment promises: the whole sequence separates the classes
// (nearest class mean > 97%), the last step alone does not (< 90%), so a recurrent model
// that reaches 90% has used its memory.
TEST(Synthetic, SeqclassNeedsTheWholeSequence) {
    DataConfig cfg;
    cfg.dataset = "seqclass";
    const DataSplits s = load_data(cfg, 11);
    const int64_t T = 20, F = 4, K = 4, D = T * F;
    std::vector<double> mean(K * D, 0.0), n(K, 0.0);
    for (int64_t i = 0; i < s.train.size(); ++i) {
        const auto c = static_cast<int64_t>(s.train.targets[i]);
        n[c] += 1;
        for (int64_t k = 0; k < D; ++k) mean[c * D + k] += s.train.inputs[i * D + k];
    }
    for (int64_t c = 0; c < K; ++c)
        for (int64_t k = 0; k < D; ++k) mean[c * D + k] /= n[c];
    auto accuracy = [&](int64_t from) {
        int64_t right = 0;
        for (int64_t i = 0; i < s.test.size(); ++i) {
            double best = 1e300;
            int64_t arg = -1;
            for (int64_t c = 0; c < K; ++c) {
                double d2 = 0;
                for (int64_t k = from; k < D; ++k)
                    d2 += std::pow(s.test.inputs[i * D + k] - mean[c * D + k], 2);
                if (d2 < best) best = d2, arg = c;
            }
            right += arg == static_cast<int64_t>(s.test.targets[i]);
        }
        return static_cast<double>(right) / static_cast<double>(s.test.size());
    };
    std::printf("seqclass nearest class mean: whole sequence %.3f, last step %.3f\n", accuracy(0),
                accuracy(D - F));
    EXPECT_GT(accuracy(0), 0.97);
    EXPECT_LT(accuracy(D - F), 0.90);
    EXPECT_GT(accuracy(D - F), 0.40);  // but a step carries some signal
}

TEST(Synthetic, SineTargetIsTheNextValue) {
    DataConfig cfg;
    cfg.dataset = "sine";
    cfg.noise = 0.0;
    cfg.seq_len = 30;
    cfg.samples = 50;
    const DataSplits s = load_data(cfg, 5);
    // A noiseless sinusoid obeys x[t+1] = 2 cos(w) x[t] - x[t-1]; estimate 2 cos(w) from the
    // sequence and check that it predicts the target.
    for (int64_t i = 0; i < s.train.size(); ++i) {
        const float* x = &s.train.inputs[i * 30];
        double num = 0, den = 0;
        for (int t = 1; t + 1 < 30; ++t) {
            num += (x[t + 1] + x[t - 1]) * x[t];
            den += x[t] * x[t];
        }
        const double c = num / den;
        EXPECT_NEAR(c * x[29] - x[28], s.train.targets[i], 1e-3) << "example " << i;
    }
}

TEST(Data, SplitFractionAndLimits) {
    DataConfig cfg;
    cfg.samples = 1000;
    cfg.test_fraction = 0.25;
    DataSplits s = load_data(cfg, 2);
    EXPECT_EQ(s.train.size(), 750);
    EXPECT_EQ(s.test.size(), 250);

    cfg.train_limit = 100;
    cfg.test_limit = 7;
    const DataSplits limited = load_data(cfg, 2);
    EXPECT_EQ(limited.train.size(), 100);
    EXPECT_EQ(limited.test.size(), 7);
    // The first N of the same splits.
    EXPECT_TRUE(std::equal(limited.train.inputs.begin(), limited.train.inputs.end(),
                           s.train.inputs.begin()));
    EXPECT_TRUE(std::equal(limited.test.targets.begin(), limited.test.targets.end(),
                           s.test.targets.begin()));

    cfg.train_limit = 100000;  // above the size: everything
    EXPECT_EQ(load_data(cfg, 2).train.size(), 750);
}

TEST(Data, BadValuesNameTheKey) {
    DataConfig cfg;
    cfg.dataset = "cifar";
    EXPECT_CONTAINS(error_of<ConfigError>([&] { load_data(cfg, 0); }),
                    "data.dataset: unknown data set 'cifar' (expected one of spirals");
    cfg = DataConfig{};
    cfg.batch_size = 0;
    EXPECT_CONTAINS(error_of<ConfigError>([&] { load_data(cfg, 0); }),
                    "data.batch_size: expected a positive integer, got 0");
    cfg = DataConfig{};
    cfg.test_fraction = 1.0;
    EXPECT_CONTAINS(error_of<ConfigError>([&] { load_data(cfg, 0); }),
                    "data.test_fraction: expected a number in [0, 1), got 1");
    cfg = DataConfig{};
    cfg.classes = 1;
    EXPECT_CONTAINS(error_of<ConfigError>([&] { load_data(cfg, 0); }), "data.classes");
    cfg = DataConfig{};
    cfg.classes = 50;
    cfg.samples = 20;
    EXPECT_CONTAINS(error_of<ConfigError>([&] { load_data(cfg, 0); }),
                    "data.classes: 50 classes need at least as many samples, got 20");
    cfg = DataConfig{};
    cfg.train_limit = -3;
    EXPECT_CONTAINS(error_of<ConfigError>([&] { check_data_files(cfg); }),
                    "data.train_limit: expected a non-negative integer, got -3");
    cfg = DataConfig{};
    cfg.dataset = "csv";
    EXPECT_CONTAINS(error_of<ConfigError>([&] { load_data(cfg, 0); }), "data.path");
    cfg = DataConfig{};
    cfg.samples = 4;
    cfg.test_fraction = 0.9;
    EXPECT_CONTAINS(error_of<ConfigError>([&] { load_data(cfg, 0); }), "none for training");
}

// ---- IDX ------------------------------------------------------------------------------------

class IdxFormat : public ::testing::TestWithParam<bool> {};  // param: gzip

TEST_P(IdxFormat, LoadsTheFourFiles) {
    TempDir dir;
    TinyIdx::write_all(dir, GetParam());
    const DataSplits s = load_data(idx_config(dir.str()), 0);
    ASSERT_EQ(s.train.size(), 50);
    ASSERT_EQ(s.test.size(), 20);
    EXPECT_EQ(s.train.sample_shape, (std::vector<int64_t>{1, 4, 3}));
    EXPECT_TRUE(s.train.target_shape.empty());
    EXPECT_EQ(s.train.num_classes, 10);
    for (int64_t i = 0; i < 50; ++i) {
        EXPECT_EQ(s.train.targets[i], static_cast<float>(i % 10));
        for (int64_t k = 0; k < 12; ++k)
            ASSERT_EQ(s.train.inputs[i * 12 + k], static_cast<float>((7 * i + k) % 256) / 255.0f);
    }
    EXPECT_NO_THROW(check_data_files(idx_config(dir.str())));

    DataConfig cfg = idx_config(dir.str());
    cfg.train_limit = 9;
    cfg.test_limit = 3;
    const DataSplits limited = load_data(cfg, 0);
    EXPECT_EQ(limited.train.size(), 9);
    EXPECT_EQ(limited.test.size(), 3);
    EXPECT_TRUE(std::equal(limited.train.inputs.begin(), limited.train.inputs.end(),
                           s.train.inputs.begin()));
}

TEST_P(IdxFormat, TruncatedFileNamesTheFileAndTheSizes) {
    TempDir dir;
    TinyIdx::write_all(dir, GetParam());
    const std::string ext = GetParam() ? ".gz" : "";
    const std::string path = dir.file("train-images-idx3-ubyte" + ext);
    std::vector<unsigned char> bytes = TinyIdx::images(50);  // 16 + 600 bytes
    bytes.resize(100);
    write_bytes(path, bytes, GetParam());
    // A plain file is refused by its size before reading; a gzip stream when it ends early.
    EXPECT_CONTAINS(error_of<Error>([&] { load_data(idx_config(dir.str()), 0); }),
                    GetParam() ? path + ": truncated: expected 616 bytes of data, got 100"
                               : path + ": the header announces 616 bytes, but the file can hold at most 100");
    // A limit within what the file holds reads only that much.
    DataConfig cfg = idx_config(dir.str());
    cfg.train_limit = 5;
    EXPECT_EQ(load_data(cfg, 0).train.size(), 5);

    bytes.resize(9);  // inside the header
    write_bytes(path, bytes, GetParam());
    EXPECT_CONTAINS(error_of<Error>([&] { load_data(idx_config(dir.str()), 0); }),
                    path + ": truncated: expected 16 bytes of header, got 9");
}

TEST_P(IdxFormat, BadMagicCountMismatchAndBadLabels) {
    TempDir dir;
    TinyIdx::write_all(dir, GetParam());
    const std::string ext = GetParam() ? ".gz" : "";
    // A labels file where the images belong.
    write_bytes(dir.file("t10k-images-idx3-ubyte" + ext), TinyIdx::labels(20), GetParam());
    const std::string magic = error_of<Error>([&] { load_data(idx_config(dir.str()), 0); });
    EXPECT_CONTAINS(magic,
                    dir.file("t10k-images-idx3-ubyte" + ext) + ": bad magic number 0x00000801");
    EXPECT_CONTAINS(magic, "expected 0x00000803");
    EXPECT_THROW(check_data_files(idx_config(dir.str())), Error);

    TinyIdx::write_all(dir, GetParam());
    write_bytes(dir.file("train-labels-idx1-ubyte" + ext), TinyIdx::labels(49), GetParam());
    const std::string mismatch = error_of<Error>([&] { load_data(idx_config(dir.str()), 0); });
    EXPECT_CONTAINS(mismatch, "train-images-idx3-ubyte" + ext + " holds 50 images but ");
    EXPECT_CONTAINS(mismatch, "train-labels-idx1-ubyte" + ext + " holds 49 labels");
    EXPECT_CONTAINS(error_of<Error>([&] { check_data_files(idx_config(dir.str())); }),
                    "holds 49 labels");

    TinyIdx::write_all(dir, GetParam());
    write_bytes(dir.file("t10k-labels-idx1-ubyte" + ext), idx_bytes(0x801, {2}, {3, 12}),
                GetParam());
    write_bytes(dir.file("t10k-images-idx3-ubyte" + ext), TinyIdx::images(2), GetParam());
    EXPECT_CONTAINS(error_of<Error>([&] { load_data(idx_config(dir.str()), 0); }),
                    "label 12 of item 1 is out of range [0, 10)");

    TinyIdx::write_all(dir, GetParam());
    std::vector<unsigned char> extra = TinyIdx::labels(20);
    extra.push_back(0);
    write_bytes(dir.file("t10k-labels-idx1-ubyte" + ext), extra, GetParam());
    EXPECT_CONTAINS(error_of<Error>([&] { load_data(idx_config(dir.str()), 0); }),
                    "more data than the header announces");
}

INSTANTIATE_TEST_SUITE_P(Data, IdxFormat, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "gzip" : "plain"; });

TEST(Idx, CutGzipStreamIsTruncated) {
    TempDir dir;
    TinyIdx::write_all(dir, true, 3000, 20);  // big enough that half the stream is real data
    const std::string path = dir.file("train-images-idx3-ubyte.gz");
    std::vector<unsigned char> gz = read_bytes(path);
    gz.resize(gz.size() / 2);
    write_bytes(path, gz, false);
    const std::string msg = error_of<Error>([&] { read_idx(path, 3); });
    EXPECT_CONTAINS(msg, path + ": truncated: expected 36016 bytes of data, got ");
}

// What a header claims is checked before anything is allocated: dimensions whose product
// overflows, and sizes the file cannot hold (a 16-byte file claiming 1.5 GB; its gzip too).
TEST(Idx, ClaimsBeyondTheFileAreRefusedBeforeAllocating) {
    TempDir dir;
    const std::string path = dir.file("huge-idx3-ubyte");
    write_bytes(path, idx_bytes(0x803, {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}, {}), false);
    EXPECT_CONTAINS(error_of<Error>([&] { read_idx(path, 3); }), path + ": implausible dimensions");
    write_bytes(path, idx_bytes(0x803, {1500, 1000, 1000}, {}), false);
    EXPECT_CONTAINS(error_of<Error>([&] { read_idx(path, 3); }),
                    path + ": the header announces 1500000016 bytes, but the file can hold at most 16");
    const std::string gz = dir.file("huge-idx3-ubyte.gz");
    write_bytes(gz, idx_bytes(0x803, {1500, 1000, 1000}, {}), true);
    EXPECT_CONTAINS(error_of<Error>([&] { read_idx(gz, 3); }), gz + ": the header announces 1500000016 bytes");
}

TEST(Idx, MissingFileAndDottedNames) {
    TempDir dir;
    EXPECT_EQ(error_of<Error>([&] { load_data(idx_config(dir.str()), 0); }),
              "fashion-mnist: missing train-images-idx3-ubyte(.gz) in " + dir.str() +
                  " (install Debian's dataset-fashion-mnist or set data.path)");
    DataConfig mnist = idx_config(dir.str());
    mnist.dataset = "mnist";
    EXPECT_CONTAINS(error_of<Error>([&] { check_data_files(mnist); }),
                    "mnist: missing train-images-idx3-ubyte(.gz) in " + dir.str());

    TinyIdx::write_all(dir, false);
    fs::remove(dir.file("t10k-labels-idx1-ubyte"));
    EXPECT_CONTAINS(error_of<Error>([&] { load_data(idx_config(dir.str()), 0); }),
                    "missing t10k-labels-idx1-ubyte(.gz)");
    // Some mirrors name the files with a dot: train-images.idx3-ubyte.
    write_bytes(dir.file("t10k-labels.idx1-ubyte"), TinyIdx::labels(20), false);
    EXPECT_EQ(load_data(idx_config(dir.str()), 0).test.size(), 20);
}

TEST(Idx, RealFashionMnist) {
    const std::string folder = "/usr/share/datasets/fashion-mnist";
    if (find_idx_file(folder, "train-images-idx3-ubyte").empty())
        GTEST_SKIP() << "Fashion-MNIST is not installed in " << folder
                     << " (apt install dataset-fashion-mnist)";
    DataConfig cfg;
    cfg.dataset = "fashion-mnist";  // the default path
    EXPECT_NO_THROW(check_data_files(cfg));
    const DataSplits s = load_data(cfg, 0);
    ASSERT_EQ(s.train.size(), 60000);
    ASSERT_EQ(s.test.size(), 10000);
    EXPECT_EQ(s.train.sample_shape, (std::vector<int64_t>{1, 28, 28}));
    EXPECT_EQ(s.train.num_classes, 10);
    const auto [lo, hi] = std::minmax_element(s.train.inputs.begin(), s.train.inputs.end());
    EXPECT_EQ(*lo, 0.0f);
    EXPECT_EQ(*hi, 1.0f);
    std::vector<int> counts(10, 0);
    for (float t : s.train.targets) counts[static_cast<int>(t)]++;
    EXPECT_EQ(counts, std::vector<int>(10, 6000));  // Fashion-MNIST is balanced

    cfg.train_limit = 1000;
    cfg.test_limit = 100;
    const DataSplits limited = load_data(cfg, 0);
    EXPECT_EQ(limited.train.size(), 1000);
    EXPECT_EQ(limited.test.size(), 100);
    EXPECT_TRUE(
        std::equal(limited.test.inputs.begin(), limited.test.inputs.end(), s.test.inputs.begin()));
}

// ---- CSV ------------------------------------------------------------------------------------

TEST(Csv, ClassificationRegressionAndLabelByName) {
    TempDir dir;
    const std::string path = dir.file("iris.csv");
    write_text(path, "x1, x2 ,y,\"x,3\"\r\n1.5,2,0,3\r\n\r\n-4,+5e-1,2,6\r\n7,8,1,\"9\"\r\n");
    const Dataset last = read_csv(path, "");  // label: the last column, "x,3"
    EXPECT_EQ(last.num_classes, 10);
    EXPECT_EQ(last.sample_shape, (std::vector<int64_t>{3}));
    const Dataset ds = read_csv(path, "y");
    ASSERT_EQ(ds.size(), 3);
    EXPECT_EQ(ds.num_classes, 3);
    EXPECT_TRUE(ds.target_shape.empty());
    EXPECT_EQ(ds.inputs, (std::vector<float>{1.5f, 2, 3, -4, 0.5f, 6, 7, 8, 9}));
    EXPECT_EQ(ds.targets, (std::vector<float>{0, 2, 1}));

    const Dataset reg = read_csv(path, "x1");  // 1.5 is not integral: regression
    EXPECT_EQ(reg.num_classes, 0);
    EXPECT_EQ(reg.target_shape, (std::vector<int64_t>{1}));
    EXPECT_EQ(reg.targets, (std::vector<float>{1.5f, -4, 7}));

    const std::string msg = error_of<Error>([&] { read_csv(path, "label"); });
    EXPECT_EQ(msg, path + ": no column 'label' (columns: x1, x2, y, x,3)");
    EXPECT_THROW(check_csv_file(path, "label"), Error);
    EXPECT_NO_THROW(check_csv_file(path, "y"));
}

TEST(Csv, BadRowsNameFileLineAndColumn) {
    TempDir dir;
    const std::string path = dir.file("bad.csv");
    write_text(path, "a,b,c\n1,2,3\n\n4,5\n");
    EXPECT_EQ(error_of<Error>([&] { read_csv(path, ""); }), path + ":4: expected 3 columns, got 2");
    write_text(path, "a,b,c\n1,2,3\n4,abc,6\n");
    EXPECT_EQ(error_of<Error>([&] { read_csv(path, ""); }),
              path + ":3: column 'b': 'abc' is not a number");
    write_text(path, "a,b,c\n1,2,3\n4,5 6,6\n");
    EXPECT_CONTAINS(error_of<Error>([&] { read_csv(path, ""); }),
                    ":3: column 'b': '5 6' is not a number");
    write_text(path, "a,b,c\n1,,3\n");
    EXPECT_CONTAINS(error_of<Error>([&] { read_csv(path, ""); }),
                    ":2: column 'b': '' is not a number");
    write_text(path, "a,b,c\n1,nan,3\n");
    EXPECT_CONTAINS(error_of<Error>([&] { read_csv(path, ""); }), "'nan' is not a finite number");
    write_text(path, "a,b,c\n");
    EXPECT_CONTAINS(error_of<Error>([&] { read_csv(path, ""); }), "no data rows");
    write_text(path, "");
    EXPECT_CONTAINS(error_of<Error>([&] { read_csv(path, ""); }), "empty file");
    EXPECT_CONTAINS(error_of<Error>([&] { read_csv(dir.file("none.csv"), ""); }),
                    "none.csv: cannot open: No such file or directory");
}

// A pipe (opening one would wait for a writer forever) and a device (/dev/zero reads without
// end) are refused before they are opened.
TEST(Csv, APipeOrADeviceIsRefusedBeforeOpening) {
    TempDir dir;
    const std::string fifo = dir.file("rows.csv");
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    EXPECT_EQ(error_of<Error>([&] { read_csv(fifo, ""); }),
              fifo + ": is not a regular file (a pipe, a device or a socket); expected a CSV file");
    EXPECT_CONTAINS(error_of<Error>([&] { read_csv("/dev/zero", ""); }), "/dev/zero: is not a regular file");
}

// A line beyond 64 MiB is an error naming the file and the line (it ended in bad_alloc at
// 1 GB); duplicate names among many columns are found.
TEST(Csv, AnEndlessLineAndDuplicateColumns) {
    TempDir dir;
    const std::string path = dir.file("long.csv");
    {
        std::ofstream out(path, std::ios::binary);
        out << "a,b\n1,2\n";
        const std::string block(1 << 20, '7');
        for (int i = 0; i < 65; ++i) out << block;
        out << ",1\n";
    }
    EXPECT_EQ(error_of<Error>([&] { read_csv(path, ""); }), path + ":3: a line longer than 64 MiB");
    std::string header;
    for (int i = 0; i < 20000; ++i) {  // piecewise: GCC 12 warns (-Wrestrict) on "c" + ...
        header += 'c';
        header += std::to_string(i);
        header += ',';
    }
    header += "c777";
    write_text(path, header + "\n");
    EXPECT_EQ(error_of<Error>([&] { read_csv(path, ""); }), path + ":1: duplicate column 'c777'");
    write_text(path, "a,b\r\n1,2\r\n\n3,4");  // CRLF, a blank line, no newline at the end
    EXPECT_EQ(read_csv(path, "").size(), 2);
}

TEST(Csv, LoadDataShufflesAndSplits) {
    TempDir dir;
    DataConfig cfg;
    cfg.dataset = "csv";
    cfg.path = dir.file("sorted.csv");
    cfg.label_column = "label";
    std::string text = "label,f\n";
    for (int i = 0; i < 100; ++i) text += std::to_string(i / 50) + "," + std::to_string(i) + "\n";
    write_text(cfg.path, text);
    const DataSplits s = load_data(cfg, 4);
    EXPECT_EQ(s.train.size(), 80);
    EXPECT_EQ(s.test.size(), 20);
    EXPECT_EQ(s.train.num_classes, 2);
    // Sorted by class in the file; shuffled, both classes reach the test split.
    EXPECT_EQ(std::set<float>(s.test.targets.begin(), s.test.targets.end()).size(), 2u);
    std::multiset<float> all(s.train.inputs.begin(), s.train.inputs.end());
    all.insert(s.test.inputs.begin(), s.test.inputs.end());
    std::multiset<float> expected;
    for (int i = 0; i < 100; ++i) expected.insert(static_cast<float>(i));
    EXPECT_EQ(all, expected);
    // Rows stay whole: feature i belongs to label i / 50.
    for (int64_t i = 0; i < s.train.size(); ++i)
        EXPECT_EQ(s.train.targets[i], std::floor(s.train.inputs[i] / 50));
}

// ---- DataLoader -----------------------------------------------------------------------------

TEST(Loader, EveryExampleOncePerEpochWithMatchingRows) {
    const Dataset ds = numbered_dataset(103);
    DataLoader loader(ds, {.batch_size = 10, .shuffle = true, .seed = 3});
    EXPECT_EQ(loader.batches_per_epoch(), 11);
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
        const auto batches = collect_epoch(loader, epoch);
        ASSERT_EQ(batches.size(), 11u);
        for (size_t b = 0; b < batches.size(); ++b) {
            const Batch& batch = batches[b];
            EXPECT_EQ(batch.size, b + 1 < batches.size() ? 10 : 3);
            EXPECT_EQ(batch.global_size, batch.size);
            EXPECT_EQ(batch.index_in_epoch, static_cast<int64_t>(b));
            EXPECT_EQ(batch.epoch, epoch);
            for (int64_t r = 0; r < batch.size; ++r) {
                const int64_t id = batch.sample_ids[r];
                ASSERT_EQ(batch.targets[r], static_cast<float>(id));
                ASSERT_EQ(batch.inputs[r * 3 + 2], static_cast<float>(10 * id + 2));
            }
        }
        std::vector<int64_t> ids = ids_of(batches);
        std::sort(ids.begin(), ids.end());
        std::vector<int64_t> expected(103);
        std::iota(expected.begin(), expected.end(), 0);
        EXPECT_EQ(ids, expected);
    }
    Batch b;
    EXPECT_FALSE(loader.next(b));  // the epoch is over until the next start_epoch
}

TEST(Loader, ShuffleOrderDependsOnSeedAndEpoch) {
    const Dataset ds = numbered_dataset(64);
    DataLoader a(ds, {.batch_size = 8, .shuffle = true, .seed = 9});
    DataLoader b(ds, {.batch_size = 8, .shuffle = true, .seed = 9});
    DataLoader c(ds, {.batch_size = 8, .shuffle = true, .seed = 10});
    const auto a0 = ids_of(collect_epoch(a, 0)), a1 = ids_of(collect_epoch(a, 1));
    EXPECT_NE(a0, a1);
    EXPECT_EQ(a0, ids_of(collect_epoch(b, 0)));
    EXPECT_EQ(a1, ids_of(collect_epoch(b, 1)));
    EXPECT_NE(a0, ids_of(collect_epoch(c, 0)));
    EXPECT_EQ(a0, ids_of(collect_epoch(a, 0)));  // an epoch's order is reproducible

    DataLoader plain(ds, {.batch_size = 8, .shuffle = false});
    std::vector<int64_t> identity(64);
    std::iota(identity.begin(), identity.end(), 0);
    EXPECT_EQ(ids_of(collect_epoch(plain, 5)), identity);
}

TEST(Loader, DropLast) {
    const Dataset ds = numbered_dataset(25);
    DataLoader loader(ds, {.batch_size = 10, .drop_last = true});
    EXPECT_EQ(loader.batches_per_epoch(), 2);
    const auto batches = collect_epoch(loader, 0);
    ASSERT_EQ(batches.size(), 2u);
    EXPECT_EQ(batches[1].size, 10);
    DataLoader small(ds, {.batch_size = 30, .drop_last = true});
    EXPECT_EQ(small.batches_per_epoch(), 0);
    EXPECT_TRUE(collect_epoch(small, 0).empty());
}

TEST(Loader, WorkersDeliverTheSameSequence) {
    const Dataset ds = numbered_dataset(1001);
    for (int prefetch : {1, 2, 5}) {
        DataLoader serial(ds, {.batch_size = 16, .seed = 4, .workers = 0});
        DataLoader parallel(ds, {.batch_size = 16, .seed = 4, .workers = 3, .prefetch = prefetch});
        for (int64_t epoch = 0; epoch < 3; ++epoch) {
            const auto x = collect_epoch(serial, epoch), y = collect_epoch(parallel, epoch);
            ASSERT_EQ(x.size(), y.size());
            for (size_t i = 0; i < x.size(); ++i) {
                EXPECT_EQ(x[i].sample_ids, y[i].sample_ids);
                EXPECT_EQ(x[i].inputs, y[i].inputs);
                EXPECT_EQ(x[i].targets, y[i].targets);
                EXPECT_EQ(x[i].index_in_epoch, y[i].index_in_epoch);
                EXPECT_EQ(x[i].epoch, y[i].epoch);
            }
        }
    }
    // Restarting an epoch in the middle drops what the workers had prepared.
    DataLoader serial(ds, {.batch_size = 16, .seed = 4});
    DataLoader parallel(ds, {.batch_size = 16, .seed = 4, .workers = 3});
    Batch b;
    parallel.start_epoch(0);
    ASSERT_TRUE(parallel.next(b));
    ASSERT_TRUE(parallel.next(b));
    EXPECT_EQ(ids_of(collect_epoch(parallel, 7)), ids_of(collect_epoch(serial, 7)));
}

// Destroying a loader whose workers are mid-epoch (waiting for window room, or assembling)
// or that never started must wake and join them: a missed wake-up hangs here, and the test's
// time limit names it. How long destruction takes is not asserted (speed is benchmarks' job).
TEST(Loader, DestructionMidEpochJoinsTheWorkers) {
    Dataset ds;
    ds.sample_shape = {4096};
    ds.num_classes = 2;
    ds.inputs.assign(4096 * 2000, 0.5f);
    ds.targets.assign(2000, 1.0f);
    for (int i = 0; i < 5; ++i) {
        DataLoader loader(ds, {.batch_size = 50, .workers = 4, .prefetch = 4});
        loader.start_epoch(0);
        Batch b;
        ASSERT_TRUE(loader.next(b));
        EXPECT_EQ(b.size, 50);
        EXPECT_EQ(b.index_in_epoch, 0);
    }
    { DataLoader never_started(ds, {.batch_size = 50, .workers = 2}); }
    {   // restarted mid-epoch, then destroyed
        DataLoader loader(ds, {.batch_size = 50, .workers = 3, .prefetch = 2});
        Batch b;
        ASSERT_TRUE(loader.next(b));
        loader.start_epoch(1);
        ASSERT_TRUE(loader.next(b));
        EXPECT_EQ(b.epoch, 1);
        EXPECT_EQ(b.index_in_epoch, 0);
    }
}

TEST(Loader, ShardsSplitEveryGlobalBatch) {
    const Dataset ds = numbered_dataset(23);
    const int world = 3;
    DataLoader whole(ds, {.batch_size = 10, .seed = 1});
    const auto global = collect_epoch(whole, 2);
    std::vector<std::vector<Batch>> shards;
    for (int r = 0; r < world; ++r) {
        DataLoader part(
            ds, {.batch_size = 10, .seed = 1, .workers = r, .shard = r, .num_shards = world});
        EXPECT_EQ(part.batches_per_epoch(), whole.batches_per_epoch());
        shards.push_back(collect_epoch(part, 2));
    }
    for (size_t b = 0; b < global.size(); ++b) {
        std::vector<int64_t> joined;
        for (int r = 0; r < world; ++r) {
            const Batch& s = shards[r][b];
            EXPECT_EQ(s.size, shard_of_batch(global[b].size, r, world).count);
            EXPECT_EQ(s.global_size, global[b].size);
            joined.insert(joined.end(), s.sample_ids.begin(), s.sample_ids.end());
        }
        EXPECT_EQ(joined, global[b].sample_ids) << "batch " << b;
    }
}

TEST(Loader, RejectsBadOptions) {
    const Dataset ds = numbered_dataset(5);
    EXPECT_THROW(DataLoader(ds, {.batch_size = 0}), ConfigError);
    EXPECT_THROW(DataLoader(ds, {.batch_size = 2, .shard = 2, .num_shards = 2}), Error);
}

// ---- sharding rule --------------------------------------------------------------------------

TEST(Shard, BatchOfTenOverThree) {
    EXPECT_EQ(shard_of_batch(10, 0, 3).offset, 0);
    EXPECT_EQ(shard_of_batch(10, 0, 3).count, 4);
    EXPECT_EQ(shard_of_batch(10, 1, 3).offset, 4);
    EXPECT_EQ(shard_of_batch(10, 1, 3).count, 3);
    EXPECT_EQ(shard_of_batch(10, 2, 3).offset, 7);
    EXPECT_EQ(shard_of_batch(10, 2, 3).count, 3);
    EXPECT_THROW(shard_of_batch(10, 3, 3), Error);
    EXPECT_THROW(shard_of_batch(10, 0, 0), Error);
}

TEST(Shard, RangesTileExactly) {
    for (int64_t size : {0, 1, 2, 7, 10, 127, 10000}) {
        for (int world = 1; world <= 8; ++world) {
            for (auto* rule : {&shard_of_batch, &shard_of_dataset}) {
                int64_t next = 0, lo = size, hi = 0;
                for (int r = 0; r < world; ++r) {
                    const ShardRange s = rule(size, r, world);
                    EXPECT_EQ(s.offset, next) << size << " over " << world << ", rank " << r;
                    next += s.count;
                    lo = std::min(lo, s.count);
                    hi = std::max(hi, s.count);
                }
                EXPECT_EQ(next, size) << size << " over " << world;
                EXPECT_LE(hi - lo, 1) << size << " over " << world;
            }
        }
    }
}

// ---- text -----------------------------------------------------------------------------------

namespace {

// n corpus bytes, never NUL, with values above 127 (a signed char would show as negative):
// byte k = (131 k + k / 256) % 255 + 1.
std::string corpus_bytes(int64_t n) {
    std::string out(static_cast<size_t>(n), ' ');
    for (int64_t k = 0; k < n; ++k) out[k] = static_cast<char>((131 * k + k / 256) % 255 + 1);
    return out;
}

DataConfig text_config(const std::string& path, int64_t seq_len) {
    DataConfig cfg;
    cfg.dataset = "text";
    cfg.path = path;
    cfg.seq_len = seq_len;
    return cfg;
}

float token(const std::string& bytes, int64_t k) {
    return static_cast<float>(static_cast<unsigned char>(bytes[static_cast<size_t>(k)]));
}

// A ConfigError's path and message, for the checks that name the key.
std::pair<std::string, std::string> config_error_of(const std::function<void()>& fn) {
    try {
        fn();
    } catch (const ConfigError& e) {
        return {e.path(), e.what()};
    }
    ADD_FAILURE() << "no ConfigError thrown";
    return {};
}

}  // namespace

TEST(Text, FolderReadsRegularNulFreeFilesInNameOrder) {
    TempDir dir;
    write_text(dir.file("b.txt"), "BBBB");
    write_text(dir.file("a.txt"), "AAAA\n");
    write_text(dir.file("c.dat"), std::string("xx\0yy", 5));    // binary: skipped
    write_text(dir.file("empty"), "");                          // counts, adds nothing
    fs::create_symlink(dir.file("b.txt"), dir.file("a2.txt"));  // a symlink: skipped
    fs::create_directory(dir.file("sub"));
    write_text(dir.file("sub/z.txt"), "ZZZZ");  // a sub-folder's files: not read
    EXPECT_EQ(text_corpus_files(dir.str()),
              (std::vector<std::string>{dir.file("a.txt"), dir.file("b.txt"), dir.file("empty")}));
    const std::vector<uint8_t> bytes = read_text_corpus(dir.str());
    EXPECT_EQ(std::string(bytes.begin(), bytes.end()), "AAAA\nBBBB");
    // A file named directly is read as it is, NUL bytes and all, and so is a symlink to one.
    EXPECT_EQ(read_text_corpus(dir.file("c.dat")).size(), 5u);
    EXPECT_EQ(read_text_corpus(dir.file("a2.txt")).size(), 4u);
}

TEST(Text, SplitsShareTheCorpusAndTheLastFractionIsTheTestSplit) {
    TempDir dir;
    const std::string bytes = corpus_bytes(1000);
    write_text(dir.file("corpus.txt"), bytes);
    DataConfig cfg = text_config(dir.file("corpus.txt"), 8);
    cfg.val_fraction = 0.2;
    EXPECT_NO_THROW(check_data_files(cfg));
    const DataSplits s = load_data(cfg, 1);
    for (const Dataset* ds : {&s.train, &s.test}) {
        EXPECT_EQ(ds->name, "text");
        EXPECT_TRUE(ds->is_text());
        EXPECT_EQ(ds->sample_shape, (std::vector<int64_t>{8}));
        EXPECT_EQ(ds->target_shape, (std::vector<int64_t>{8}));
        EXPECT_EQ(ds->num_classes, 256);
        EXPECT_TRUE(ds->inputs.empty());
        EXPECT_TRUE(ds->targets.empty());
    }
    EXPECT_EQ(s.train.text, s.test.text);  // one buffer, not a copy per split
    ASSERT_EQ(s.train.text->size(), 1000u);
    EXPECT_EQ(s.train.text_begin, 0);
    EXPECT_EQ(s.train.text_end, 800);
    EXPECT_EQ(s.test.text_begin, 800);
    EXPECT_EQ(s.test.text_end, 1000);
    EXPECT_EQ(s.train.size(), 800 / 8);       // an epoch: floor(train bytes / T) windows
    EXPECT_EQ(s.test.size(), (200 - 1) / 8);  // non-overlapping windows of T + 1 bytes
    EXPECT_TRUE(s.train.random_windows);
    EXPECT_FALSE(s.test.random_windows);

    cfg.train_limit = 7;
    cfg.test_limit = 5;
    const DataSplits limited = load_data(cfg, 1);
    EXPECT_EQ(limited.train.size(), 7);
    EXPECT_EQ(limited.test.size(), 5);
    cfg.test_limit = 1000;  // above the count: all
    EXPECT_EQ(load_data(cfg, 1).test.size(), 24);
}

TEST(Text, TrainingWindowsLieInTheTrainingSplitShiftedByOne) {
    TempDir dir;
    const std::string bytes = corpus_bytes(1000);
    write_text(dir.file("corpus.txt"), bytes);
    DataConfig cfg = text_config(dir.file("corpus.txt"), 16);  // train: bytes [0, 900)
    const DataSplits s = load_data(cfg, 3);
    ASSERT_EQ(s.train.text_end, 900);
    DataLoader loader(s.train, {.batch_size = 10, .shuffle = true, .seed = 3});
    EXPECT_EQ(loader.batches_per_epoch(), (900 / 16 + 9) / 10);
    std::set<int64_t> offsets;
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
        const auto batches = collect_epoch(loader, epoch);
        ASSERT_EQ(batches.size(), 6u);
        int64_t next_id = 0;
        for (const Batch& b : batches) {
            ASSERT_EQ(b.inputs.size(), static_cast<size_t>(b.size * 16));
            ASSERT_EQ(b.targets.size(), static_cast<size_t>(b.size * 16));
            for (int64_t r = 0; r < b.size; ++r) {
                EXPECT_EQ(b.sample_ids[r], next_id++);  // the example's index in the epoch
                const int64_t o = text_window_offset(s.train, 3, epoch, b.sample_ids[r]);
                ASSERT_GE(o, 0);
                ASSERT_LE(o + 16, 899);  // y's last byte is inside the training split
                offsets.insert(o);
                for (int64_t t = 0; t < 16; ++t) {
                    ASSERT_EQ(b.inputs[r * 16 + t], token(bytes, o + t));
                    ASSERT_EQ(b.targets[r * 16 + t], token(bytes, o + t + 1));
                }
            }
        }
        EXPECT_EQ(next_id, 900 / 16);
    }
    EXPECT_GT(offsets.size(), 100u);  // drawn anew each epoch, not a fixed tiling
    // The same (seed, epoch) gives the same windows; another epoch or seed others.
    EXPECT_EQ(text_window_offset(s.train, 3, 1, 4), text_window_offset(s.train, 3, 1, 4));
    std::vector<int64_t> e0, e1, other_seed;
    for (int64_t i = 0; i < 20; ++i) {
        e0.push_back(text_window_offset(s.train, 3, 0, i));
        e1.push_back(text_window_offset(s.train, 3, 1, i));
        other_seed.push_back(text_window_offset(s.train, 4, 0, i));
    }
    EXPECT_NE(e0, e1);
    EXPECT_NE(e0, other_seed);
}

// Every window start of the training split can be drawn, the last one included.
TEST(Text, TrainingOffsetsCoverTheWholeSplit) {
    TempDir dir;
    write_text(dir.file("corpus.txt"), corpus_bytes(100));
    // Training bytes [0, 90): window starts 0 .. 85.
    DataConfig cfg = text_config(dir.file("corpus.txt"), 4);
    const DataSplits s = load_data(cfg, 0);
    std::set<int64_t> starts;
    for (int64_t epoch = 0; epoch < 50; ++epoch)
        for (int64_t i = 0; i < s.train.size(); ++i)
            starts.insert(text_window_offset(s.train, 9, epoch, i));
    EXPECT_EQ(*starts.begin(), 0);
    EXPECT_EQ(*starts.rbegin(), 90 - 4 - 1);
    EXPECT_EQ(starts.size(), 86u);
}

TEST(Text, SameGlobalBatchesForAnyShardAndWorkerCount) {
    TempDir dir;
    write_text(dir.file("corpus.txt"), corpus_bytes(3000));
    const DataSplits s = load_data(text_config(dir.file("corpus.txt"), 12), 0);
    DataLoader whole(s.train, {.batch_size = 9, .seed = 21});
    DataLoader threaded(s.train, {.batch_size = 9, .seed = 21, .workers = 2});
    std::vector<std::unique_ptr<DataLoader>> shards;
    for (int r = 0; r < 2; ++r)
        shards.push_back(std::make_unique<DataLoader>(
            s.train,
            DataLoader::Options{
                .batch_size = 9, .seed = 21, .workers = 2 * r, .shard = r, .num_shards = 2}));
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
        const auto global = collect_epoch(whole, epoch);
        const auto with_workers = collect_epoch(threaded, epoch);
        const auto part0 = collect_epoch(*shards[0], epoch),
                   part1 = collect_epoch(*shards[1], epoch);
        ASSERT_EQ(global.size(), with_workers.size());
        ASSERT_EQ(global.size(), part0.size());
        ASSERT_EQ(global.size(), part1.size());
        for (size_t b = 0; b < global.size(); ++b) {
            EXPECT_EQ(with_workers[b].sample_ids, global[b].sample_ids);
            EXPECT_EQ(with_workers[b].inputs, global[b].inputs);
            EXPECT_EQ(with_workers[b].targets, global[b].targets);
            EXPECT_EQ(part0[b].size, shard_of_batch(global[b].size, 0, 2).count);
            EXPECT_EQ(part0[b].global_size, global[b].size);
            std::vector<float> x = part0[b].inputs, y = part0[b].targets;
            x.insert(x.end(), part1[b].inputs.begin(), part1[b].inputs.end());
            y.insert(y.end(), part1[b].targets.begin(), part1[b].targets.end());
            EXPECT_EQ(x, global[b].inputs) << "epoch " << epoch << ", batch " << b;
            EXPECT_EQ(y, global[b].targets) << "epoch " << epoch << ", batch " << b;
        }
    }
}

TEST(Text, TestWindowsAreConsecutiveFromTheSplitStart) {
    TempDir dir;
    const std::string bytes = corpus_bytes(1000);
    write_text(dir.file("corpus.txt"), bytes);
    DataConfig cfg = text_config(dir.file("corpus.txt"), 10);
    cfg.val_fraction = 0.25;  // test: bytes [750, 1000), 24 windows
    cfg.test_limit = 20;
    const DataSplits s = load_data(cfg, 0);
    ASSERT_EQ(s.test.size(), 20);
    for (bool shuffle : {false, true}) {  // shuffle has no say over text windows
        DataLoader loader(s.test, {.batch_size = 8, .shuffle = shuffle, .seed = 5});
        const auto batches = collect_epoch(loader, 3);
        ASSERT_EQ(batches.size(), 3u);
        EXPECT_EQ(batches.back().size, 4);
        int64_t i = 0;
        for (const Batch& b : batches)
            for (int64_t r = 0; r < b.size; ++r, ++i) {
                EXPECT_EQ(b.sample_ids[r], i);
                EXPECT_EQ(text_window_offset(s.test, 5, 3, i), 750 + 10 * i);
                for (int64_t t = 0; t < 10; ++t) {
                    ASSERT_EQ(b.inputs[r * 10 + t], token(bytes, 750 + 10 * i + t));
                    ASSERT_EQ(b.targets[r * 10 + t], token(bytes, 750 + 10 * i + t + 1));
                }
            }
        EXPECT_EQ(i, 20);
    }
}

TEST(Text, BadConfigsAndCorporaNameTheKey) {
    TempDir dir;
    write_text(dir.file("short.txt"), corpus_bytes(100));
    DataConfig cfg = text_config(dir.file("short.txt"), 0);
    auto [path, msg] = config_error_of([&] { load_data(cfg, 0); });
    EXPECT_EQ(path, "data.seq_len");
    EXPECT_CONTAINS(msg, "data.seq_len: missing");

    cfg = text_config(dir.file("short.txt"), 8);
    for (double bad : {0.0, 1.0, -0.5, 2.0}) {
        cfg.val_fraction = bad;
        std::tie(path, msg) = config_error_of([&] { check_data_files(cfg); });
        EXPECT_EQ(path, "data.val_fraction");
        EXPECT_CONTAINS(msg, "expected a number in (0, 1)");
    }
    cfg.val_fraction = 0.1;
    cfg.tokenizer = "bpe";
    std::tie(path, msg) = config_error_of([&] { load_data(cfg, 0); });
    EXPECT_EQ(path, "data.tokenizer");
    EXPECT_CONTAINS(msg, "unknown tokenizer 'bpe'");

    // Missing file or folder: named, by check_data_files and load_data alike.
    cfg = text_config(dir.file("nothing-here"), 8);
    for (const auto& fn : std::vector<std::function<void()>>{[&] { check_data_files(cfg); },
                                                             [&] { load_data(cfg, 0); }}) {
        std::tie(path, msg) = config_error_of(fn);
        EXPECT_EQ(path, "data.path");
        EXPECT_CONTAINS(msg, dir.file("nothing-here") + ": no such file or folder");
    }

    // A folder of nothing usable: a binary file and a symlink.
    fs::create_directory(dir.file("binary"));
    write_text(dir.file("binary/index.dat"), std::string("\x01\x00\x02", 3));
    fs::create_symlink(dir.file("short.txt"), dir.file("binary/link.txt"));
    cfg.path = dir.file("binary");
    for (const auto& fn : std::vector<std::function<void()>>{[&] { check_data_files(cfg); },
                                                             [&] { load_data(cfg, 0); }}) {
        std::tie(path, msg) = config_error_of(fn);
        EXPECT_EQ(path, "data.path");
        EXPECT_CONTAINS(msg, dir.file("binary") + ": no regular, NUL-free file");
    }

    write_text(dir.file("empty.txt"), "");
    cfg.path = dir.file("empty.txt");
    std::tie(path, msg) = config_error_of([&] { check_data_files(cfg); });
    EXPECT_EQ(path, "data.path");
    EXPECT_CONTAINS(msg, dir.file("empty.txt") + ": is empty");

    // Too short: 100 bytes with val_fraction 0.1 leave 90 + 10; T = 10 needs 11 in each.
    cfg.path = dir.file("short.txt");
    cfg.seq_len = 10;
    for (const auto& fn : std::vector<std::function<void()>>{[&] { check_data_files(cfg); },
                                                             [&] { load_data(cfg, 0); }}) {
        std::tie(path, msg) = config_error_of(fn);
        EXPECT_EQ(path, "data.path");
        EXPECT_CONTAINS(msg, dir.file("short.txt") + " has 100 bytes");
        EXPECT_CONTAINS(msg, "the training split gets 90 and the validation split 10");
        EXPECT_CONTAINS(
            msg, "seq_len 10 needs at least 11 bytes in each (a corpus of at least 110 bytes)");
    }
    cfg.seq_len = 9;  // 10 validation bytes: exactly one window
    EXPECT_EQ(load_data(cfg, 0).test.size(), 1);
    cfg.val_fraction = 0.5;
    cfg.seq_len = 50;  // both splits short
    std::tie(path, msg) = config_error_of([&] { check_data_files(cfg); });
    EXPECT_CONTAINS(
        msg,
        "gets 50 and the validation split 50, and seq_len 50 needs at least 51 bytes in each "
        "(a corpus of at least 102 bytes)");
    cfg.seq_len = 49;  // 50 + 50 bytes: one window in each
    const DataSplits fits = load_data(cfg, 0);
    EXPECT_EQ(fits.train.size(), 1);
    EXPECT_EQ(fits.test.size(), 1);
    EXPECT_EQ(text_window_offset(fits.train, 0, 0, 0), 0);
}

TEST(Text, RealFortunes) {
    const std::string folder = kDefaultTextPath;
    std::error_code ec;
    if (!fs::is_directory(folder, ec))
        GTEST_SKIP() << "the fortunes are not installed in " << folder << " (apt install fortunes)";
    DataConfig cfg;
    cfg.dataset = "text";  // the default path
    cfg.seq_len = 64;
    EXPECT_EQ(resolved_data_path(cfg), folder);
    EXPECT_NO_THROW(check_data_files(cfg));
    const std::vector<std::string> files = text_corpus_files(folder);
    ASSERT_FALSE(files.empty());
    EXPECT_TRUE(std::is_sorted(files.begin(), files.end()));
    int64_t expected_bytes = 0;
    for (const auto& f : files) {
        EXPECT_NE(f.substr(f.size() - 4), ".dat") << f;  // the indexes hold NUL bytes
        EXPECT_FALSE(fs::is_symlink(f)) << f;            // the .u8 links
        expected_bytes += static_cast<int64_t>(fs::file_size(f));
    }
    const DataSplits s = load_data(cfg, 0);
    ASSERT_EQ(static_cast<int64_t>(s.train.text->size()), expected_bytes);
    EXPECT_EQ(std::count(s.train.text->begin(), s.train.text->end(), uint8_t{0}), 0);
    const auto test_bytes =
        static_cast<int64_t>(std::llround(static_cast<double>(expected_bytes) * 0.1));
    EXPECT_EQ(s.test.text_begin, expected_bytes - test_bytes);
    EXPECT_EQ(s.train.size(), (expected_bytes - test_bytes) / 64);
    EXPECT_EQ(s.test.size(), (test_bytes - 1) / 64);
    DataLoader loader(s.train, {.batch_size = 32, .seed = 1});
    Batch b;
    ASSERT_TRUE(loader.next(b));
    EXPECT_EQ(b.size, 32);
    for (float v : b.inputs) ASSERT_TRUE(v >= 1.0f && v <= 255.0f && v == std::floor(v));
}
