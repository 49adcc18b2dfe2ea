// The safetensors reader and writer against the format's rules: a round trip, files written by
// hand byte for byte from the specification, every malformed header refused with its cause, a
// write that fails (a full disk, a file-size limit) leaving no partial file, and a cross-check
// with Python's numpy and zlib reading what the writer wrote (skipped without python3 and
// numpy). And against an attacker's files: headers of 300,000 tensors read in linear time, a
// FIFO or a device refused without blocking, a sparse file's size checked before anything is
// allocated, a flipped bit caught by the checksums, and the writer replacing only regular files.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "engine/io/safetensors.h"
#include "engine/util/error.h"

namespace fs = std::filesystem;
using namespace paralab;
using namespace paralab::io;

namespace {

#define EXPECT_CONTAINS(text, part) \
    EXPECT_NE(std::string(text).find(part), std::string::npos) << "message: " << (text)

class TempDir {
public:
    TempDir() {
        static std::atomic<int> counter{0};
        m_path = fs::temp_directory_path() /
                 ("paralab_safetensors_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
        fs::create_directories(m_path);
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(m_path, ec);
    }
    std::string file(const std::string& name) const { return (m_path / name).string(); }
    const fs::path& path() const { return m_path; }
    std::vector<std::string> names() const {
        std::vector<std::string> out;
        for (const auto& e : fs::directory_iterator(m_path)) out.push_back(e.path().filename().string());
        std::sort(out.begin(), out.end());
        return out;
    }

private:
    fs::path m_path;
};

std::string slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string le64(uint64_t v) {
    std::string s(8, '\0');
    for (int i = 0; i < 8; ++i) s[size_t(i)] = char((v >> (8 * i)) & 0xff);
    return s;
}

// A file from its header text and data area, as the specification lays it out.
std::string file_bytes(const std::string& header, const std::string& data) {
    return le64(header.size()) + header + data;
}

std::string parse_error(const std::string& bytes) {
    try {
        SafetensorsFile::parse(bytes, "bad.safetensors");
    } catch (const Error& e) {
        return e.what();
    }
    ADD_FAILURE() << "accepted";
    return {};
}

template <class T>
std::vector<T> values_of(const SafetensorsFile& f, const StEntry& e) {
    std::vector<T> v(e.bytes / sizeof(T));
    std::memcpy(v.data(), f.data(e), e.bytes);
    return v;
}

// `fn()` run on a thread of its own, waited for up to `ceiling`: a reader that hangs fails the
// test instead of hanging it (the process ends there, the thread still blocked).
template <class F>
auto within(std::chrono::seconds ceiling, F fn) {
    auto task = std::make_shared<std::packaged_task<decltype(fn())()>>(std::move(fn));
    auto result = task->get_future();
    std::thread([task] { (*task)(); }).detach();
    if (result.wait_for(ceiling) != std::future_status::ready) {
        ADD_FAILURE() << "still running after " << ceiling.count() << " s";
        std::fflush(stdout);
        std::_Exit(1);
    }
    return result.get();
}

std::string read_error(const std::string& path) {
    try {
        SafetensorsFile::read(path);
    } catch (const Error& e) {
        return e.what();
    }
    return "accepted";
}

std::string bytes_of_floats(std::initializer_list<float> v) {
    return std::string(reinterpret_cast<const char*>(std::data(v)), v.size() * sizeof(float));
}

}  // namespace

TEST(Safetensors, RoundTripKeepsNamesShapesDataAndMetadata) {
    TempDir dir;
    const std::vector<float> w = {1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, -7.0f};
    const std::vector<double> b = {0.1, -0.2};
    const std::vector<uint16_t> half = {0x3c00, 0xc000, 0x7bff};  // any 2-byte payload
    const std::vector<int64_t> ids = {-1, 0, INT64_MAX};
    const std::vector<int32_t> i32 = {42};
    const std::vector<uint8_t> u8 = {0, 255, 7, 9};
    const float scalar = 4.0f;
    const std::vector<StTensor> tensors = {
        {"layers.1.weight", StDType::F32, {2, 3}, w.data(), w.size() * 4},
        {"layers.0.bias", StDType::F64, {2}, b.data(), b.size() * 8},
        {"h16", StDType::F16, {3}, half.data(), 6},
        {"hb16", StDType::BF16, {1, 3}, half.data(), 6},
        {"ids", StDType::I64, {3}, ids.data(), 24},
        {"one", StDType::I32, {1, 1, 1}, i32.data(), 4},
        {"bytes", StDType::U8, {2, 2}, u8.data(), 4},
        {"scalar", StDType::F32, {}, &scalar, 4},
        {"empty", StDType::F32, {0, 3}, nullptr, 0},
    };
    const std::string path = dir.file("w.safetensors");
    write_safetensors(path, tensors, {{"format", "pt"}, {"step", "12"}});
    EXPECT_EQ(dir.names(), std::vector<std::string>{"w.safetensors"});  // no temporary file left

    const std::string raw = slurp(path);
    uint64_t n = 0;
    std::memcpy(&n, raw.data(), 8);
    EXPECT_EQ(n % 8, 0u) << "the header is padded to a multiple of 8";
    EXPECT_EQ(raw[8], '{');

    const SafetensorsFile f = SafetensorsFile::read(path);
    EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"step", "12"}}));
    ASSERT_EQ(f.entries().size(), tensors.size());
    // The data lies in name order (entries come in the order of their data; "empty" has no bytes).
    std::vector<std::string> order;
    for (const StEntry& e : f.entries()) {
        if (e.bytes > 0) order.push_back(e.name);
    }
    EXPECT_EQ(order, (std::vector<std::string>{"bytes", "h16", "hb16", "ids", "layers.0.bias",
                                               "layers.1.weight", "one", "scalar"}));
    for (const StTensor& t : tensors) {
        const StEntry* e = f.find(t.name);
        ASSERT_NE(e, nullptr) << t.name;
        EXPECT_EQ(e->dtype, t.dtype) << t.name;
        EXPECT_EQ(e->shape, t.shape) << t.name;
        ASSERT_EQ(e->bytes, t.bytes) << t.name;
        if (t.bytes) {
            EXPECT_EQ(std::memcmp(f.data(*e), t.data, t.bytes), 0) << t.name;
        }
    }
    EXPECT_EQ(f.find("absent"), nullptr);
    EXPECT_EQ(values_of<double>(f, *f.find("layers.0.bias")), b);

    // Written again over the same path: replaced whole.
    write_safetensors(path, {{"x", StDType::F32, {1}, &scalar, 4}});
    const SafetensorsFile g = SafetensorsFile::read(path);
    ASSERT_EQ(g.entries().size(), 1u);
    EXPECT_TRUE(g.metadata().empty());
    EXPECT_EQ(dir.names(), std::vector<std::string>{"w.safetensors"});
}

// Written by hand from the specification: an unpadded header, keys in any order, data in an
// order other than the names', an empty metadata object, a zero-element tensor.
TEST(Safetensors, ReadsAFileWrittenByHandFromTheSpecification) {
    const std::string header =
        R"({"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
        R"("__metadata__":{},)"
        R"("a":{"shape":[1,2],"data_offsets":[8,16],"dtype":"F32"},)"
        R"("z":{"dtype":"U8","shape":[0],"data_offsets":[16,16]}})";
    const std::string data = bytes_of_floats({1.0f, 2.0f}) + bytes_of_floats({-3.0f, 0.5f});
    const SafetensorsFile f = SafetensorsFile::parse(file_bytes(header, data), "hand.safetensors");
    ASSERT_EQ(f.entries().size(), 3u);
    EXPECT_EQ(f.entries()[0].name, "b");
    const StEntry* a = f.find("a");
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->shape, (std::vector<int64_t>{1, 2}));
    EXPECT_EQ(a->offset, 8u);
    EXPECT_EQ(values_of<float>(f, *a), (std::vector<float>{-3.0f, 0.5f}));
    EXPECT_EQ(values_of<float>(f, *f.find("b")), (std::vector<float>{1.0f, 2.0f}));
    EXPECT_EQ(f.find("z")->bytes, 0u);
    EXPECT_TRUE(f.metadata().empty());

    // Padded with spaces, as the reference writer does; and an empty file of tensors.
    const SafetensorsFile padded =
        SafetensorsFile::parse(file_bytes(R"({"__metadata__":{"k":"v"}}      )", ""), "p");
    EXPECT_TRUE(padded.entries().empty());
    EXPECT_EQ(padded.metadata().at("k"), "v");
    EXPECT_TRUE(SafetensorsFile::parse(file_bytes("{}", ""), "e").entries().empty());
}

struct Malformed {
    const char* what;
    std::string bytes;
    const char* message;
};

// Each case is refused with a message naming the file and the cause.
TEST(Safetensors, RefusesEveryMalformedFile) {
    const std::string f8 = bytes_of_floats({1, 2});  // 8 bytes of data
    auto one = [&](const std::string& info, const std::string& data) {
        return file_bytes(R"({"t":)" + info + "}", data);
    };
    const std::vector<Malformed> cases = {
        {"empty file", "", "shorter than the 8-byte header length"},
        {"7 bytes", std::string(7, '\0'), "shorter than the 8-byte header length"},
        {"header past the end", le64(100) + "{}", "runs past the end of the file"},
        {"header length near 2^64", le64(~uint64_t{0}) + "{}", "above the limit"},
        {"header above 100 MB", le64(100'000'001) + "{}", "above the limit of 100000000 bytes"},
        {"header not an object", file_bytes("[1,2]", ""), "not a JSON object"},
        {"header a string", file_bytes(R"("abc")", ""), "not a JSON object"},
        {"header empty", file_bytes("", ""), "not a JSON object"},
        {"header broken JSON", file_bytes(R"({"t":)", ""), "not valid JSON"},
        {"header with trailing garbage", file_bytes("{} x", ""), "not valid JSON"},
        {"header invalid UTF-8", file_bytes("{\"\xff\":1}", ""), "not valid JSON"},
        {"header nested deeply", file_bytes(R"({"__metadata__":{"a":[[[[[[[[[[1]]]]]]]]]]}})", ""),
         "nests too deeply"},
        {"tensor not an object", one("3", ""), "tensor \"t\": not an object"},
        {"no dtype", one(R"({"shape":[2],"data_offsets":[0,8]})", f8), "no \"dtype\""},
        {"no shape", one(R"({"dtype":"F32","data_offsets":[0,8]})", f8), "no \"shape\""},
        {"no offsets", one(R"({"dtype":"F32","shape":[2]})", f8), "no \"data_offsets\""},
        {"unknown dtype", one(R"({"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]})", f8),
         "unknown or unsupported dtype \"F8_E4M3\""},
        {"lower-case dtype", one(R"({"dtype":"f32","shape":[2],"data_offsets":[0,8]})", f8),
         "unknown or unsupported dtype"},
        {"dtype not a string", one(R"({"dtype":4,"shape":[2],"data_offsets":[0,8]})", f8),
         "dtype is not a string"},
        {"negative dimension", one(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})", f8),
         "negative dimension (-2)"},
        {"fractional dimension", one(R"({"dtype":"F32","shape":[2.5],"data_offsets":[0,8]})", f8),
         "other than a dimension"},
        {"dimension above int64", one(R"({"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,8]})", f8),
         "other than a dimension"},
        {"overflowing shape",
         one(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]})", f8),
         "overflows"},
        {"overflowing by element size",
         one(R"({"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,8]})", f8), "overflows"},
        {"shape not an array", one(R"({"dtype":"F32","shape":2,"data_offsets":[0,8]})", f8),
         "shape is not an array"},
        {"offsets past the data", one(R"({"dtype":"F32","shape":[4],"data_offsets":[0,16]})", f8),
         "outside the data area of 8 bytes"},
        {"offsets reversed", one(R"({"dtype":"F32","shape":[0],"data_offsets":[8,0]})", f8),
         "end before they begin"},
        {"offsets negative", one(R"({"dtype":"F32","shape":[2],"data_offsets":[-8,0]})", f8),
         "two non-negative integers"},
        {"offsets of three", one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8,8]})", f8),
         "two non-negative integers"},
        {"offsets not matching numel x size",
         one(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})", f8),
         "data_offsets hold 8 bytes, shape [3] of F32 needs 12"},
        {"bytes not covered at the end", one(R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})", f8),
         "4 bytes after the last tensor"},
        {"a gap before a tensor", one(R"({"dtype":"F32","shape":[1],"data_offsets":[4,8]})", f8),
         "4 bytes that no tensor covers, before tensor \"t\""},
        {"overlapping tensors",
         file_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                    R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                    f8),
         "overlaps tensor \"a\""},
        {"the same bytes twice",
         file_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                    R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                    f8),
         "overlaps"},
        {"duplicate names",
         file_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                    R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                    f8),
         "key \"a\" appears twice (duplicate tensor name)"},
        {"duplicate field", one(R"({"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]})", f8),
         "key \"dtype\" appears twice"},
        {"metadata with a number", file_bytes(R"({"__metadata__":{"step":3}})", ""),
         "__metadata__ \"step\" is not a string"},
        {"metadata not an object", file_bytes(R"({"__metadata__":"x"})", ""),
         "\"__metadata__\" is not an object"},
        {"data without tensors", file_bytes("{}", f8), "8 bytes after the last tensor"},
    };
    for (const Malformed& c : cases) {
        SCOPED_TRACE(c.what);
        const std::string message = parse_error(c.bytes);
        EXPECT_CONTAINS(message, "bad.safetensors: ");
        EXPECT_CONTAINS(message, c.message);
    }
}

TEST(Safetensors, ReadNamesTheFileAndTheCause) {
    TempDir dir;
    try {
        SafetensorsFile::read(dir.file("absent.safetensors"));
        FAIL() << "read";
    } catch (const Error& e) {
        EXPECT_CONTAINS(e.what(), dir.file("absent.safetensors") + ": cannot open: No such file or directory");
    }
    std::ofstream(dir.file("short.safetensors")) << "abc";
    try {
        SafetensorsFile::read(dir.file("short.safetensors"));
        FAIL() << "read";
    } catch (const Error& e) {
        EXPECT_CONTAINS(e.what(), dir.file("short.safetensors") + ": not a safetensors file");
    }
}

TEST(Safetensors, WriterRefusesInconsistentTensors) {
    TempDir dir;
    const std::string path = dir.file("w.safetensors");
    const std::vector<float> v(6);
    auto error_of = [&](const std::vector<StTensor>& t) -> std::string {
        try {
            write_safetensors(path, t);
        } catch (const Error& e) {
            return e.what();
        }
        return "written";
    };
    EXPECT_CONTAINS(error_of({{"a", StDType::F32, {2, 3}, v.data(), 20}}),
                    "tensor \"a\": 20 bytes given, shape [2, 3] of F32 needs 24");
    EXPECT_CONTAINS(error_of({{"a", StDType::F32, {-1}, v.data(), 4}}), "invalid shape [-1]");
    EXPECT_CONTAINS(error_of({{"a", StDType::F32, {1}, v.data(), 4}, {"a", StDType::F32, {1}, v.data(), 4}}),
                    "tensor \"a\" is given twice");
    EXPECT_CONTAINS(error_of({{"__metadata__", StDType::F32, {1}, v.data(), 4}}), "not a valid tensor name");
    EXPECT_CONTAINS(error_of({{"", StDType::F32, {1}, v.data(), 4}}), "empty name");
    EXPECT_CONTAINS(error_of({{"a", StDType::F32, {1}, nullptr, 4}}), "has no data");
    EXPECT_TRUE(dir.names().empty()) << "nothing written";
    EXPECT_CONTAINS(error_of({{"a", StDType::F32, {1}, v.data(), 4}}), "written");
    try {
        write_safetensors(dir.file("no/such/folder/w.safetensors"), {});
        FAIL() << "written";
    } catch (const Error& e) {
        EXPECT_CONTAINS(e.what(), dir.file("no/such/folder/w.safetensors") +
                                      ": cannot create a temporary file beside it: No such file or directory");
    }
}

namespace {
// Restores the file-size limit and SIGXFSZ's disposition on the way out.
struct FileSizeLimit {
    rlimit saved{};
    struct sigaction saved_action {};
    explicit FileSizeLimit(rlim_t bytes) {
        getrlimit(RLIMIT_FSIZE, &saved);
        struct sigaction ignore {};
        ignore.sa_handler = SIG_IGN;
        sigaction(SIGXFSZ, &ignore, &saved_action);
        rlimit lower = saved;
        lower.rlim_cur = bytes;
        setrlimit(RLIMIT_FSIZE, &lower);
    }
    ~FileSizeLimit() {
        setrlimit(RLIMIT_FSIZE, &saved);
        sigaction(SIGXFSZ, &saved_action, nullptr);
    }
};

struct Mount {
    fs::path at;
    bool mounted = false;
    ~Mount() {
        if (mounted) umount2(at.c_str(), MNT_DETACH);
    }
};

// Writes 4 MiB over `path` and expects the write refused with `cause`.
void expect_write_refused(const std::string& path, const char* cause) {
    const std::vector<float> big(1 << 20, 1.0f);
    try {
        write_safetensors(path, {{"big", StDType::F32, {int64_t(big.size())}, big.data(), big.size() * 4}});
        FAIL() << "written";
    } catch (const Error& e) {
        EXPECT_CONTAINS(e.what(), path + ": cannot write");
        EXPECT_CONTAINS(e.what(), cause);
    }
}
}  // namespace

// A write that fails part way (here: past the file-size limit, EFBIG) leaves no temporary file
// and keeps the file it would have replaced.
TEST(Safetensors, AFailedWriteLeavesNoPartialFileAndKeepsTheOldOne) {
    TempDir dir;
    const std::string path = dir.file("w.safetensors");
    const float old_value = 9.0f;
    write_safetensors(path, {{"old", StDType::F32, {1}, &old_value, 4}});
    {
        FileSizeLimit limit(64 * 1024);
        expect_write_refused(path, std::strerror(EFBIG));
    }
    EXPECT_EQ(dir.names(), std::vector<std::string>{"w.safetensors"});
    const SafetensorsFile f = SafetensorsFile::read(path);
    ASSERT_NE(f.find("old"), nullptr);
}

// A full disk (a 1 MiB tmpfs; root only, skipped elsewhere): ENOSPC named, nothing left behind.
TEST(Safetensors, AFullDiskIsNamedAndLeavesNothingBehind) {
    TempDir dir;
    Mount small{dir.path() / "small"};
    fs::create_directories(small.at);
    if (mount("tmpfs", small.at.c_str(), "tmpfs", 0, "size=1m") != 0)
        GTEST_SKIP() << "cannot mount a tmpfs here (needs root): " << std::strerror(errno);
    small.mounted = true;
    const std::string path = (small.at / "w.safetensors").string();
    const float old_value = 9.0f;
    write_safetensors(path, {{"old", StDType::F32, {1}, &old_value, 4}});
    expect_write_refused(path, std::strerror(ENOSPC));
    std::vector<std::string> left;
    for (const auto& e : fs::directory_iterator(small.at)) left.push_back(e.path().filename().string());
    EXPECT_EQ(left, std::vector<std::string>{"w.safetensors"});
    EXPECT_NE(SafetensorsFile::read(path).find("old"), nullptr);
}

// Python's json and numpy read what the writer wrote, and the reader reads a file numpy wrote
// by hand (the pip package safetensors is no Debian package; its format is checked this way).
TEST(Safetensors, CrossCheckedWithNumpy) {
    if (std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") != 0)
        GTEST_SKIP() << "python3 with numpy is not installed (apt install python3-numpy)";
    TempDir dir;
    const std::vector<float> w = {1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, -7.0f};
    const std::vector<int64_t> ids = {-1, 0, 5};
    const std::string ours = dir.file("ours.safetensors");
    write_safetensors(ours, {{"w", StDType::F32, {2, 3}, w.data(), 24}, {"ids", StDType::I64, {3}, ids.data(), 24}},
                      {{"format", "pt"}});
    const std::string theirs = dir.file("theirs.safetensors");
    const std::string script = dir.file("check.py");
    std::ofstream(script) << R"PY(
import json, struct, sys
import numpy as np
ours, theirs = sys.argv[1], sys.argv[2]
raw = open(ours, "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
header = json.loads(raw[8:8 + n])
data = raw[8 + n:]
meta = header["__metadata__"]
assert meta["format"] == "pt", header
# The checksums, as zlib computes them: the data area, and the header as stored with the
# header checksum's own digits read as zeros.
import zlib
assert meta["paralab_data_crc32"] == "%08x" % zlib.crc32(raw[8 + n:]), meta
stored = meta["paralab_header_crc32"]
field = b'"paralab_header_crc32":"'
zeroed = raw[8:8 + n].replace(field + stored.encode() + b'"', field + b'00000000"')
assert zeroed.count(field + b'00000000"') == 1 and stored == "%08x" % zlib.crc32(zeroed), (stored, zeroed)
assert set(meta) == {"format", "paralab_data_crc32", "paralab_header_crc32"}, meta
w = header["w"]
assert w["dtype"] == "F32" and w["shape"] == [2, 3], w
b, e = w["data_offsets"]
got = np.frombuffer(data[b:e], dtype="<f4").reshape(2, 3)
assert (got == np.array([[1.5, -2.0, 3.25], [0.0, 1e-30, -7.0]], dtype=np.float32)).all(), got
i = header["ids"]
b, e = i["data_offsets"]
assert (np.frombuffer(data[b:e], dtype="<i8") == np.array([-1, 0, 5])).all()
# And a file from numpy, laid out as the reference writer does (padded header, name order).
x = np.arange(6, dtype="<f8").reshape(3, 2)
y = np.array([7], dtype="<i4")
h = {"x": {"dtype": "F64", "shape": [3, 2], "data_offsets": [0, 48]},
     "y": {"dtype": "I32", "shape": [1], "data_offsets": [48, 52]},
     "__metadata__": {"source": "numpy"}}
text = json.dumps(h, separators=(",", ":")).encode()
text += b" " * ((8 - len(text) % 8) % 8)
open(theirs, "wb").write(struct.pack("<Q", len(text)) + text + x.tobytes() + y.tobytes())
print("ok")
)PY";
    const std::string command = "/usr/bin/python3 " + script + " " + ours + " " + theirs;
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
    const SafetensorsFile f = SafetensorsFile::read(theirs);
    EXPECT_EQ(f.metadata().at("source"), "numpy");
    EXPECT_EQ(values_of<double>(f, *f.find("x")), (std::vector<double>{0, 1, 2, 3, 4, 5}));
    EXPECT_EQ(f.find("x")->shape, (std::vector<int64_t>{3, 2}));
    EXPECT_EQ(values_of<int32_t>(f, *f.find("y")), std::vector<int32_t>{7});
}

// Headers of 100,000 and 300,000 tensors (8 and 25 MB of JSON) are read in time linear in their
// size: nlohmann's parser callbacks made it quadratic (100,000 tensors took a minute or more,
// 300,000 would take ten), which the ceiling catches; the linear reader needs seconds for both.
TEST(Safetensors, HundredsOfThousandsOfTensorsReadInLinearTime) {
    TempDir dir;
    for (const int n : {100'000, 300'000}) {
        const std::string path = dir.file("many.safetensors");
        std::vector<float> values(static_cast<size_t>(n));
        std::vector<StTensor> tensors;
        for (int i = 0; i < n; ++i) {
            values[size_t(i)] = float(i);
            tensors.push_back({"layers." + std::to_string(i) + ".weight", StDType::F32, {1}, &values[size_t(i)], 4});
        }
        write_safetensors(path, tensors);
        const auto t0 = std::chrono::steady_clock::now();
        const SafetensorsFile f = within(std::chrono::seconds(60), [&] { return SafetensorsFile::read(path); });
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("read %d tensors (a header of %llu bytes) in %.3f s\n", n,
                    static_cast<unsigned long long>(fs::file_size(path) - 8 - uint64_t(n) * 4), seconds);
        ASSERT_EQ(f.entries().size(), size_t(n));
        EXPECT_TRUE(f.checksummed());
        for (int i : {0, 1, 4'242, n - 1}) {
            const StEntry* e = f.find("layers." + std::to_string(i) + ".weight");
            ASSERT_NE(e, nullptr) << i;
            EXPECT_EQ(values_of<float>(f, *e), std::vector<float>{float(i)});
        }
    }
}

// Only a regular file is read: a FIFO (whose open blocks until a writer comes), a device, a
// directory, and a symbolic link to any of them are refused at once, naming what they are.
TEST(Safetensors, ReadRefusesWhatIsNotARegularFileWithoutBlocking) {
    TempDir dir;
    const std::string fifo = dir.file("step-999.safetensors");
    ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
    const std::string link = dir.file("link.safetensors");
    fs::create_symlink(fifo, link);
    fs::create_directories(dir.file("folder.safetensors"));
    const auto seconds = std::chrono::seconds(60);
    EXPECT_CONTAINS(within(seconds, [&] { return read_error(fifo); }), fifo + " is a FIFO, not a regular file");
    EXPECT_CONTAINS(within(seconds, [&] { return read_error(link); }),
                    link + " (a link to " + fifo + ") is a FIFO, not a regular file");
    EXPECT_CONTAINS(within(seconds, [&] { return read_error("/dev/null"); }),
                    "/dev/null is a character device, not a regular file");
    EXPECT_CONTAINS(within(seconds, [&] { return read_error(dir.file("folder.safetensors")); }),
                    "folder.safetensors is a directory, not a regular file");
    // A link to a regular file is read through.
    const float x = 2.5f;
    write_safetensors(dir.file("real.safetensors"), {{"x", StDType::F32, {1}, &x, 4}});
    fs::create_symlink(dir.file("real.safetensors"), dir.file("to-real.safetensors"));
    const SafetensorsFile f = SafetensorsFile::read(dir.file("to-real.safetensors"));
    EXPECT_EQ(values_of<float>(f, *f.find("x")), std::vector<float>{2.5f});
}

// A sparse file of 100 GB: its header is checked against the file's size, and the reader's
// check of the header runs, before anything is allocated for its data.
TEST(Safetensors, TheHeaderIsCheckedBeforeTheDataIsAllocated) {
    TempDir dir;
    const uint64_t huge = uint64_t(100) << 30;
    // A valid file of one small tensor, then a hole of 100 GB after it.
    const std::string padded = dir.file("padded.safetensors");
    const float x = 1.0f;
    write_safetensors(padded, {{"x", StDType::F32, {1}, &x, 4}});
    fs::resize_file(padded, fs::file_size(padded) + huge);
    EXPECT_CONTAINS(read_error(padded), padded + ": the data area has " + std::to_string(huge) +
                                            " bytes after the last tensor that no tensor covers");
    // A header that claims one tensor of 100 GB, the file as large: the caller's check refuses it
    // before the 100 GB are allocated or read.
    const std::string header = R"({"w":{"dtype":"F32","shape":[)" + std::to_string(huge / 4) +
                               R"(],"data_offsets":[0,)" + std::to_string(huge) + "]}}";
    const std::string claims = dir.file("claims.safetensors");
    std::ofstream(claims, std::ios::binary) << le64(header.size()) << header;
    fs::resize_file(claims, 8 + header.size() + huge);
    try {
        SafetensorsFile::read(claims, [&](const SafetensorsFile& f) {
            ASSERT_EQ(f.entries().size(), 1u);
            EXPECT_EQ(f.entries()[0].bytes, huge);
            throw Error(claims + ": tensor \"w\" is not the model's");
        });
        FAIL() << "read";
    } catch (const Error& e) {
        EXPECT_CONTAINS(e.what(), "tensor \"w\" is not the model's");
    }
    // One byte short of what the header claims: refused on the header alone.
    fs::resize_file(claims, 8 + header.size() + huge - 1);
    EXPECT_CONTAINS(read_error(claims), "lie outside the data area of " + std::to_string(huge - 1) + " bytes");
}

// Each file written holds a CRC-32 of its data and of its header; a flipped bit in either is
// refused naming the file and the checksum. Files without checksums (other writers') still read.
TEST(Safetensors, AFlippedBitIsCaughtByTheChecksums) {
    TempDir dir;
    const std::string path = dir.file("w.safetensors");
    const std::vector<float> w = {1.0f, 2.0f, 3.0f, 4.0f};
    write_safetensors(path, {{"w", StDType::F32, {4}, w.data(), 16}}, {{"note", "kept"}});
    const std::string good = slurp(path);
    const SafetensorsFile f = SafetensorsFile::read(path);
    EXPECT_TRUE(f.checksummed());
    EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"note", "kept"}}));

    auto flipped = [&](size_t at, int bit) {
        std::string bytes = good;
        bytes[at] = char(bytes[at] ^ (1 << bit));
        std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
        return read_error(path);
    };
    const size_t data_start = good.size() - 16;
    for (size_t at : {data_start, data_start + 9, good.size() - 1}) {
        const std::string error = flipped(at, 3);
        EXPECT_CONTAINS(error, path + ": the checksum of the data does not match");
    }
    // In the header, each leaving a valid header: a metadata value ("kept" -> "jept"), a tensor's
    // name ("w" -> "v").
    EXPECT_CONTAINS(flipped(good.find("kept"), 0), path + ": the checksum of the header does not match");
    EXPECT_CONTAINS(flipped(good.find("\"w\"") + 1, 0), path + ": the checksum of the header does not match");
    EXPECT_CONTAINS(parse_error(file_bytes(R"({"__metadata__":{"paralab_data_crc32":"12345"}})", "")),
                    "\"paralab_data_crc32\" is not 8 hexadecimal digits");

    // A writer's metadata cannot take the checksums' keys.
    for (const char* key : {st_data_crc32_key, st_header_crc32_key}) {
        try {
            write_safetensors(dir.file("k.safetensors"), {}, {{key, "00000000"}});
            ADD_FAILURE() << key << " accepted";
        } catch (const Error& e) {
            EXPECT_CONTAINS(e.what(), "is the writer's own checksum");
        }
    }
}

// The file written over is `path` or the file its symbolic link leads to; what is not a regular
// file is refused untouched; an existing file keeps its mode; a hard link's other names keep the
// old contents (the atomic replace: see write_safetensors).
TEST(Safetensors, WriteReplacesOnlyRegularFilesAndKeepsTheirMode) {
    TempDir dir;
    const float one = 1.0f, two = 2.0f;
    auto value_in = [&](const std::string& path) {
        const SafetensorsFile f = SafetensorsFile::read(path);
        return values_of<float>(f, *f.find("x")).at(0);
    };
    auto write_error = [&](const std::string& path) -> std::string {
        try {
            write_safetensors(path, {{"x", StDType::F32, {1}, &two, 4}});
        } catch (const Error& e) {
            return e.what();
        }
        return "written";
    };

    // Through a symbolic link (relative, as `ln -s` makes them): the target replaced, the link kept.
    const std::string real = dir.file("real.safetensors"), link = dir.file("link.safetensors");
    write_safetensors(real, {{"x", StDType::F32, {1}, &one, 4}});
    fs::create_symlink("real.safetensors", link);
    EXPECT_EQ(write_error(link), "written");
    EXPECT_TRUE(fs::is_symlink(link));
    EXPECT_EQ(value_in(real), 2.0f);
    // A dangling link: its target is created.
    fs::create_symlink("later.safetensors", dir.file("dangling.safetensors"));
    EXPECT_EQ(write_error(dir.file("dangling.safetensors")), "written");
    EXPECT_TRUE(fs::is_symlink(dir.file("dangling.safetensors")));
    EXPECT_EQ(value_in(dir.file("later.safetensors")), 2.0f);

    // A private file stays private.
    const std::string secret = dir.file("secret.safetensors");
    write_safetensors(secret, {{"x", StDType::F32, {1}, &one, 4}});
    fs::permissions(secret, fs::perms::owner_read | fs::perms::owner_write);
    EXPECT_EQ(write_error(secret), "written");
    EXPECT_EQ(fs::status(secret).permissions() & fs::perms::mask, fs::perms::owner_read | fs::perms::owner_write);
    EXPECT_EQ(value_in(secret), 2.0f);

    // Not a regular file (directly or through a link): refused, left as it was.
    const std::string fifo = dir.file("fifo.safetensors");
    ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
    EXPECT_CONTAINS(write_error(fifo), fifo + " is a FIFO, not a regular file: not replaced");
    EXPECT_TRUE(fs::is_fifo(fifo));
    fs::create_symlink(fifo, dir.file("to-fifo.safetensors"));
    EXPECT_CONTAINS(write_error(dir.file("to-fifo.safetensors")),
                    "to-fifo.safetensors (a link to " + fifo + ") is a FIFO, not a regular file: not replaced");
    EXPECT_TRUE(fs::is_fifo(fifo));
    fs::create_directories(dir.file("folder"));
    EXPECT_CONTAINS(write_error(dir.file("folder")), "is a directory, not a regular file: not replaced");
    EXPECT_TRUE(fs::is_directory(dir.file("folder")));
    fs::create_symlink("/dev/null", dir.file("to-null.safetensors"));
    EXPECT_CONTAINS(write_error(dir.file("to-null.safetensors")),
                    "(a link to /dev/null) is a character device, not a regular file: not replaced");
    EXPECT_TRUE(fs::is_character_file("/dev/null"));

    // A hard link: the name written holds the new file, the other name the old one.
    const std::string a = dir.file("a.safetensors"), b = dir.file("b.safetensors");
    write_safetensors(a, {{"x", StDType::F32, {1}, &one, 4}});
    fs::create_hard_link(a, b);
    EXPECT_EQ(write_error(a), "written");
    EXPECT_EQ(value_in(a), 2.0f);
    EXPECT_EQ(value_in(b), 1.0f);
    // No temporary file is left anywhere.
    for (const std::string& name : dir.names()) EXPECT_EQ(name.find(".tmp-"), std::string::npos) << name;
}
