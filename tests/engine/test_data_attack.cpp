// The data loaders against hostile or oversized input, and a stop while the data loads: what a
// header claims is checked before it is allocated, binary or endless input is refused at once,
// a text corpus is bounded, and every loader gives up between chunks when asked to stop (a
// run stopped while loading ends promptly, stored as stopped).
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/data/csv.h"
#include "engine/data/dataset.h"
#include "engine/data/idx.h"
#include "engine/data/text.h"
#include "engine/run/experiment_file.h"
#include "engine/run/trainer.h"
#include "engine/util/error.h"

namespace fs = std::filesystem;
using namespace paralab;
using namespace paralab::data;

namespace {

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

class TempDir {
public:
    TempDir() {
        static std::atomic<int> counter{0};
        m_path = fs::temp_directory_path() / ("paralab_data_attack_" + std::to_string(getpid()) +
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

std::vector<unsigned char> idx_header(uint32_t magic, const std::vector<uint32_t>& dims) {
    std::vector<unsigned char> out;
    auto put32 = [&](uint32_t v) {
        for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<unsigned char>(v >> s));
    };
    put32(magic);
    for (uint32_t d : dims) put32(d);
    return out;
}

// Writes `parts` one after the other, gzip-compressed (level 1) or plain.
void write_parts(const std::string& path, const std::vector<std::vector<unsigned char>>& parts, bool gzip) {
    if (gzip) {
        gzFile f = gzopen(path.c_str(), "wb1");
        ASSERT_NE(f, nullptr) << path;
        for (const auto& p : parts)
            ASSERT_EQ(gzwrite(f, p.data(), static_cast<unsigned>(p.size())), static_cast<int>(p.size()));
        ASSERT_EQ(gzclose(f), Z_OK);
    } else {
        std::ofstream out(path, std::ios::binary);
        for (const auto& p : parts)
            out.write(reinterpret_cast<const char*>(p.data()), static_cast<std::streamsize>(p.size()));
    }
}

std::vector<unsigned char> random_bytes(size_t n, unsigned seed) {
    std::mt19937 gen(seed);
    std::vector<unsigned char> out(n);
    for (auto& b : out) b = static_cast<unsigned char>(gen());
    return out;
}

// A StopCheck that says "stop" from its `at`-th call on, counting its calls.
struct StopAt {
    explicit StopAt(int at) : at(at) {}
    StopCheck check() {
        return [this] { return ++calls >= at; };
    }
    int at;
    std::atomic<int> calls{0};
};

// A Fashion-MNIST folder of small, valid files but for the training images, `train_images`.
// Its test images are two of rows x cols.
DataConfig mnist_folder(const TempDir& dir, const std::vector<std::vector<unsigned char>>& train_images,
                        uint32_t train_count, uint32_t rows, uint32_t cols) {
    write_parts(dir.file("train-images-idx3-ubyte.gz"), train_images, true);
    write_parts(dir.file("train-labels-idx1-ubyte.gz"),
                {idx_header(0x801, {train_count}), std::vector<unsigned char>(train_count, 1)}, true);
    write_parts(dir.file("t10k-images-idx3-ubyte.gz"),
                {idx_header(0x803, {2, rows, cols}), std::vector<unsigned char>(2 * rows * cols, 9)}, true);
    write_parts(dir.file("t10k-labels-idx1-ubyte.gz"), {idx_header(0x801, {2}), {3, 4}}, true);
    DataConfig cfg;
    cfg.dataset = "fashion-mnist";
    cfg.path = dir.str();
    return cfg;
}

int64_t peak_rss_bytes() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<int64_t>(u.ru_maxrss) * 1024;
}

}  // namespace

// ---- IDX ------------------------------------------------------------------------------------

// Stop is asked before every 4 MiB chunk: a 12 MiB file asked to stop at the second chunk
// reads no further, plain or gzip.
TEST(IdxAttack, AStopBetweenChunksEndsTheRead) {
    for (const bool gzip : {false, true}) {
        TempDir dir;
        const std::string path = dir.file(gzip ? "big-idx3-ubyte.gz" : "big-idx3-ubyte");
        write_parts(path, {idx_header(0x803, {12, 1024, 1024}), std::vector<unsigned char>(12 << 20, 5)}, gzip);
        StopAt stop(2);
        EXPECT_THROW(read_idx(path, 3, 0, stop.check()), LoadStopped) << (gzip ? "gzip" : "plain");
        EXPECT_EQ(stop.calls.load(), 2) << "the read went on after the stop";
        StopAt never(1000);
        EXPECT_EQ(read_idx(path, 3, 0, never.check()).data.size(), size_t{12} << 20);
        EXPECT_EQ(never.calls.load(), 3);  // one per chunk
    }
}

// The two splits load side by side: a stop ends both, and load_data reports LoadStopped.
TEST(IdxAttack, LoadDataStopsBothSplits) {
    TempDir dir;
    const DataConfig cfg = mnist_folder(
        dir, {idx_header(0x803, {40, 1024, 1024}), std::vector<unsigned char>(40 << 20, 7)}, 40, 1024, 1024);
    StopAt stop(3);
    EXPECT_THROW(load_data(cfg, 0, stop.check()), LoadStopped);
    EXPECT_LE(stop.calls.load(), 5);  // 13 chunks in all when not stopped
    const StopCheck already = [] { return true; };
    EXPECT_THROW(load_data(cfg, 0, already), LoadStopped);
    StopAt never(1000);
    EXPECT_EQ(load_data(cfg, 0, never.check()).train.size(), 40);
    EXPECT_EQ(never.calls.load(), 13);  // 10 + 1 training, 1 + 1 test
}

// A split that fails ends the other, and its own error is the one reported, not a "stopped".
TEST(IdxAttack, TheFailingSplitsErrorIsReported) {
    TempDir dir;
    DataConfig cfg = mnist_folder(
        dir, {idx_header(0x803, {40, 512, 512}), std::vector<unsigned char>(40 * 512 * 512, 7)}, 40, 512, 512);
    write_parts(dir.file("t10k-labels-idx1-ubyte.gz"), {idx_header(0x801, {2}), {3, 12}}, true);
    EXPECT_CONTAINS(error_of<Error>([&] { load_data(cfg, 0); }), "label 12 of item 1 is out of range");
}

// A gzip stream whose header claims 1 GB, within deflate's ratio of its size, that holds 1.1 MB:
// found short without the claimed gigabyte being allocated.
TEST(IdxAttack, AShortGzipStreamCostsOnlyWhatItHolds) {
    TempDir dir;
    const std::string path = dir.file("liar-idx3-ubyte.gz");
    write_parts(path, {idx_header(0x803, {1000, 1000, 1000}), random_bytes(1100 * 1024, 1)}, true);
    const int64_t before = peak_rss_bytes();
    EXPECT_CONTAINS(error_of<Error>([&] { read_idx(path, 3); }),
                    path + ": truncated: expected 1000000016 bytes of data, got " + std::to_string(16 + 1100 * 1024));
    EXPECT_LT(peak_rss_bytes() - before, int64_t{200} << 20) << "the claim was allocated";
}

// Dimensions of 0xFFFFFFFF overflow a product of int64: refused by name before any product.
TEST(IdxAttack, OverflowingDimensionsAreRefused) {
    TempDir dir;
    const std::string path = dir.file("huge-idx3-ubyte");
    write_parts(path, {idx_header(0x803, {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu})}, false);
    EXPECT_CONTAINS(error_of<Error>([&] { read_idx(path, 3); }), path + ": implausible dimensions");
    write_parts(path, {idx_header(0x803, {1, 0xFFFFFFFFu, 0xFFFFFFFFu})}, false);
    EXPECT_CONTAINS(error_of<Error>([&] { read_idx(path, 3); }), path + ": implausible dimensions");
    write_parts(path, {idx_header(0x803, {1500, 1000, 1000})}, false);
    EXPECT_CONTAINS(error_of<Error>([&] { read_idx(path, 3); }),
                    path + ": the header announces 1500000016 bytes, but the file can hold at most 16");
}

// ---- CSV ------------------------------------------------------------------------------------

// A regular file of NUL bytes (a disk image, /dev/zero copied) is refused at its first piece.
TEST(CsvAttack, ANulByteIsRefusedAtOnce) {
    TempDir dir;
    const std::string path = dir.file("zeros.csv");
    {
        std::ofstream out(path, std::ios::binary);
        out << "a,b\n1,2\n";
        const std::string zeros(8 << 20, '\0');
        out << zeros;
    }
    EXPECT_EQ(error_of<Error>([&] { read_csv(path, ""); }),
              path + ":3: a NUL byte: this is a binary file, not CSV text");
    EXPECT_THROW(read_csv("/dev/zero", ""), Error);  // not a regular file: never read
}

// 100,000 columns: the duplicate check is one pass over them, not one per pair.
TEST(CsvAttack, ManyColumnsAndADuplicate) {
    TempDir dir;
    const std::string path = dir.file("wide.csv");
    std::string header, row;
    for (int i = 0; i < 100000; ++i) {  // piecewise: GCC 12 warns (-Wrestrict) on "c" + ...
        header += 'c';
        header += std::to_string(i);
        header += ',';
        row += "1,";
    }
    header += "c99999";
    row += "0";
    std::ofstream(path, std::ios::binary) << header << "\n" << row << "\n";
    EXPECT_EQ(error_of<Error>([&] { read_csv(path, ""); }), path + ":1: duplicate column 'c99999'");
}

TEST(CsvAttack, AStopEndsTheRead) {
    TempDir dir;
    const std::string path = dir.file("rows.csv");
    {
        std::ofstream out(path, std::ios::binary);
        out << "x,y\n";
        for (int i = 0; i < 200000; ++i) out << i << "," << (i % 2) << "\n";
    }
    StopAt stop(3);
    EXPECT_THROW(read_csv(path, "", stop.check()), LoadStopped);
    EXPECT_EQ(stop.calls.load(), 3);
    DataConfig cfg;
    cfg.dataset = "csv";
    cfg.path = path;
    const StopCheck already = [] { return true; };
    EXPECT_THROW(load_data(cfg, 0, already), LoadStopped);
    EXPECT_EQ(read_csv(path, "").size(), 200000);
}

// ---- text -----------------------------------------------------------------------------------

// The corpus is held in memory whole: beyond 1 GiB it is refused at data.path, before it is read
// (sparse files: nothing is written to disk).
TEST(TextAttack, ACorpusOver1GiBIsRefusedBeforeReading) {
    TempDir dir;
    const std::string big = dir.file("big.txt");
    { std::ofstream(big, std::ios::binary) << "x"; }
    fs::resize_file(big, static_cast<uintmax_t>(kMaxTextCorpusBytes) + 1);
    DataConfig cfg;
    cfg.dataset = "text";
    cfg.path = big;
    cfg.seq_len = 8;
    const StopCheck never_asked = [] {
        ADD_FAILURE() << "read a piece of a corpus it should have refused";
        return true;
    };
    try {
        load_data(cfg, 0, never_asked);
        ADD_FAILURE() << "no error";
    } catch (const ConfigError& e) {
        EXPECT_EQ(e.path(), "data.path");
        EXPECT_CONTAINS(e.what(), big + ": the corpus holds more than 1 GiB (at least 1073741825 bytes)");
    }
    EXPECT_THROW(check_data_files(cfg), ConfigError);
}

// A file that reports no size but holds text (/proc's) is a corpus like any other: counted by
// reading it, not called empty.
TEST(TextAttack, AProcFileIsTextNotEmpty) {
    DataConfig cfg;
    cfg.dataset = "text";
    cfg.path = "/proc/self/maps";
    cfg.seq_len = 4;
    ASSERT_EQ(fs::file_size(cfg.path), 0u) << "this system's /proc reports sizes";
    EXPECT_NO_THROW(check_data_files(cfg));
    EXPECT_GT(load_data(cfg, 0).train.text->size(), 0u);
}

TEST(TextAttack, AStopEndsTheRead) {
    TempDir dir;
    const std::string path = dir.file("corpus.txt");
    { std::ofstream(path, std::ios::binary) << std::string(5 << 20, 'a'); }
    DataConfig cfg;
    cfg.dataset = "text";
    cfg.path = path;
    cfg.seq_len = 8;
    StopAt stop(2);
    EXPECT_THROW(load_data(cfg, 0, stop.check()), LoadStopped);
    EXPECT_EQ(stop.calls.load(), 2);
    cfg.path = dir.str();  // a folder too
    StopAt folder_stop(2);
    EXPECT_THROW(load_data(cfg, 0, folder_stop.check()), LoadStopped);
    EXPECT_EQ(load_data(cfg, 0).train.text->size(), size_t{5} << 20);
}

// ---- a run stopped while its data loads ------------------------------------------------------

namespace {

struct FinishSeen : run::RunObserver {
    std::string started_and_finished;
    void on_start(const config::Experiment&, int64_t total) override {
        started_and_finished += "start " + std::to_string(total) + ";";
    }
    void on_finish(const config::RunSummary& s) override { started_and_finished += "finish " + s.status; }
};

// True once this process holds `path` open.
bool holds_open(const std::string& path) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator("/proc/self/fd", ec)) {
        std::error_code link_ec;
        if (fs::read_symlink(entry.path(), link_ec) == path) return true;
    }
    return false;
}

}  // namespace

// The training images claim 250 MB and hold 200 MB (loaded whole, the run would fail
// "truncated"). A stop sent once the file is open ends the load at its next chunk: the run is
// stopped with no step, reported to its observer like any other run.
TEST(RunAttack, AStopWhileTheDataLoadsStopsTheRun) {
    TempDir dir;
    const DataConfig data = mnist_folder(dir,
                                   {idx_header(0x803, {1000, 500, 500}), random_bytes(1 << 20, 2),
                                    std::vector<unsigned char>(199 << 20, 0)},
                                   1000, 500, 500);
    nlohmann::json j = {
        {"paralab", 1},
        {"name", "stop-while-loading"},
        {"data", {{"dataset", "fashion-mnist"}, {"path", data.path}, {"batch_size", 10}}},
        {"model", {{"input", {1, 500, 500}}, {"layers", {{{"type", "flatten"}}, {{"type", "linear"}, {"out", 10}}}},
                   {"loss", "cross_entropy"}}},
        {"optimizer", {{"type", "sgd"}, {"lr", 0.01}}},
        {"train", {{"epochs", 1}}},
        {"devices", {"cpu:0"}},
        {"strategy", {{"type", "single"}}}};
    const config::Experiment e = run::parse_experiment(j);
    run::RunControl control;
    FinishSeen seen;
    std::atomic<bool> done{false};
    const std::string images = dir.file("train-images-idx3-ubyte.gz");
    std::thread stopper([&] {
        while (!done.load() && !holds_open(images)) std::this_thread::yield();
        control.stop = true;
    });
    config::RunSummary s;
    try {
        s = run::run_experiment(e, &seen, &control);
    } catch (const std::exception& err) {
        ADD_FAILURE() << "the load was not stopped: " << err.what();
    }
    done = true;
    stopper.join();
    EXPECT_EQ(s.status, "stopped");
    EXPECT_EQ(s.steps, 0);
    EXPECT_EQ(seen.started_and_finished, "start 0;finish stopped");
}
