// The experiment file under attack (docs/experiment-format.md, "Limits"): sizes and counts are
// bounded with an error naming the JSON path, products never wrap, hostile text is not echoed
// whole, and a model too large for the machine is refused by validate and by run alike, before
// anything of it is allocated.
#include <gtest/gtest.h>

#include <pthread.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "engine/device/device.h"
#include "engine/nn/model.h"
#include "engine/run/experiment_file.h"
#include "engine/run/memory_check.h"
#include "engine/run/trainer.h"
#include "engine/strategy/registry.h"

using namespace paralab;
using nlohmann::json;

namespace {

json spirals() {
    return json::parse(R"({
      "paralab": 1, "name": "t", "seed": 3,
      "data": {"dataset": "spirals", "samples": 200, "classes": 3, "batch_size": 16},
      "model": {"input": [2], "layers": [{"type": "linear", "out": 16}, {"type": "relu"},
                                          {"type": "linear", "out": 3}], "loss": "cross_entropy"},
      "train": {"epochs": 1, "max_steps": 2}
    })");
}

// The message of the ConfigError `f` throws ("" when it throws none).
template <class F>
std::string config_error(F&& f) {
    try {
        f();
    } catch (const ConfigError& e) {
        return e.what();
    }
    return "";
}

std::string write_file(const std::string& name, const std::string& text) {
    const auto path = std::filesystem::temp_directory_path() / name;
    std::ofstream(path, std::ios::binary) << text;
    return path.string();
}

// Sets PARALAB_AVAILABLE_MEMORY for the scope.
struct FakeAvailableMemory {
    explicit FakeAvailableMemory(int64_t bytes) { setenv("PARALAB_AVAILABLE_MEMORY", std::to_string(bytes).c_str(), 1); }
    ~FakeAvailableMemory() { unsetenv("PARALAB_AVAILABLE_MEMORY"); }
};

class CountingObserver : public run::RunObserver {
public:
    void on_start(const config::Experiment&, int64_t) override { ++starts; }
    int starts = 0;
};

}  // namespace

TEST(ConfigBounds, NumberBeyondADoubleNamesFileLineAndColumn) {
    const std::string path = write_file("paralab_bounds_number.paralab.json", "{\"paralab\": 1,\n  \"seed\": 1e99999}\n");
    const std::string msg = config_error([&] { run::load_experiment(path); });
    EXPECT_EQ(msg, path + ":2:11: number out of range (1e99999 is beyond a double)");
    std::filesystem::remove(path);
}

TEST(ConfigBounds, UnclosedLongStringIsNotEchoedWhole) {
    const std::string path =
        write_file("paralab_bounds_unclosed.paralab.json", "{\"name\": \"" + std::string(1 << 20, 'x') + "\n");
    const std::string msg = config_error([&] { run::load_experiment(path); });
    EXPECT_NE(msg.find("not valid JSON"), std::string::npos) << msg.substr(0, 300);
    EXPECT_LT(msg.size(), 400u) << msg.substr(0, 300);
    std::filesystem::remove(path);
}

TEST(ConfigBounds, LongStringsAndListsAreRefusedShortened) {
    json j = spirals();
    j["name"] = std::string(300, 'n');
    std::string msg = config_error([&] { run::parse_experiment(j); });
    EXPECT_NE(msg.find("name: expected at most 256 characters, got 300"), std::string::npos) << msg;
    EXPECT_LT(msg.size(), 200u);

    j = spirals();
    j["devices"] = {"cpu:0", std::string(1 << 20, 'x')};
    msg = config_error([&] { run::parse_experiment(j); });
    EXPECT_NE(msg.find("devices[1]: expected a device name such as \"cpu:0\""), std::string::npos) << msg.substr(0, 200);
    EXPECT_LT(msg.size(), 200u);

    j = spirals();
    j["strategy"] = {{"type", "single"}, {"straggler", {{"device", "r1/" + std::string(1 << 20, '1')}}}};
    msg = config_error([&] { run::parse_experiment(j); });
    EXPECT_NE(msg.find("strategy.straggler.device: expected a device"), std::string::npos) << msg.substr(0, 200);
    EXPECT_LT(msg.size(), 200u);

    j = spirals();
    j["devices"] = json::array();
    for (int i = 0; i < 1025; ++i) j["devices"].push_back("cpu:" + std::to_string(i));
    EXPECT_EQ(config_error([&] { run::parse_experiment(j); }), "devices: expected at most 1024 devices, got 1025");
}

TEST(ConfigBounds, InputRankAndUnboundedOptionsAreBounded) {
    json j = spirals();
    j["model"]["input"] = json::array();
    for (int i = 0; i < 9; ++i) j["model"]["input"].push_back(1);
    EXPECT_EQ(config_error([&] { run::parse_experiment(j); }), "model.input: expected at most 8 dimensions, got 9");
    // micro_batches declares no maximum; the memory model divides by it as an int.
    j = spirals();
    j["devices"] = {"cpu:0", "cpu:1"};
    j["strategy"] = {{"type", "pipeline"}, {"micro_batches", int64_t{1} << 40}};
    EXPECT_EQ(config_error([&] { run::parse_experiment(j); }),
              "strategy.micro_batches: expected an integer from 1 to 2147483647, got 1099511627776");
}

TEST(ConfigBounds, LayersInAllAreBounded) {
    json j = spirals();
    // 2 x 50,001 built layers: repeat multiplies a residual body.
    j["model"]["layers"] = json::parse(R"([{"type": "linear", "out": 3},
        {"type": "residual", "repeat": 50001, "layers": [{"type": "relu"}]}])");
    EXPECT_EQ(config_error([&] { run::parse_experiment(j); }),
              "model.layers[1]: the model passes 100000 layers in all (each copy of a repeated layer and each "
              "layer of a residual body counted)");
    j["model"]["layers"][1]["repeat"] = 49998;  // 1 + 2 x 49,998 = 99,997
    EXPECT_EQ(config_error([&] { run::parse_experiment(j); }), "");
}

TEST(ConfigBounds, NoTensorPassesTwoToTheFortyElements) {
    // The weight [2^21, 2^20] has 2^41 elements; its layer is named.
    try {
        nn::summarize({{.type = "linear", .out = int64_t{1} << 21}}, Shape{int64_t{1} << 20}, "mse");
        FAIL() << "a 2^41-element weight was summarized";
    } catch (const ShapeError& err) {
        EXPECT_EQ(err.path(), "model.layers[0]");
        EXPECT_NE(std::string(err.what()).find("passes 2^40 elements"), std::string::npos) << err.what();
    }
    // An output per example of 2^41 elements: [2^20, 2^21].
    try {
        nn::summarize({{.type = "linear", .out = int64_t{1} << 21}}, Shape{int64_t{1} << 20, 1}, "mse");
        FAIL() << "a 2^41-element output was summarized";
    } catch (const ShapeError& err) {
        EXPECT_EQ(err.path(), "model.layers[0]");
    }
}

TEST(ConfigBounds, FlopsBeyondInt64AreAnErrorNotAWrappedCount) {
    // Every tensor within 2^40 elements (input 2^38, weight 2^40, output about 2^38), yet the
    // convolution's FLOPs are about 2^65.
    const int64_t c = int64_t{1} << 14, side = int64_t{1} << 12;
    try {
        const auto s = nn::summarize({{.type = "conv2d", .out_channels = c, .kernel = 64, .padding = 32}},
                                     Shape{c, side, side}, "mse");
        FAIL() << "FLOPs " << s.flops_per_sample;
    } catch (const ShapeError& err) {
        EXPECT_EQ(err.path(), "model.layers[0]");
        EXPECT_NE(std::string(err.what()).find("FLOPs are more than a 64-bit count holds"), std::string::npos)
            << err.what();
    }
    EXPECT_EQ(meta_device().allocator().stats().peak_total, 0);
}

TEST(ConfigBounds, ValidateRefusesAModelTooLargeForTheMachineWithoutAllocatingIt) {
    // 10^11 parameters: 1.5 TiB with Adam; summarized on the meta device, refused at once.
    json j = spirals();
    j["model"]["layers"] = json::parse(R"([{"type": "linear", "out": 316228}, {"type": "linear", "out": 316228},
                                           {"type": "linear", "out": 3}])");
    const config::Experiment e = run::parse_experiment(j);
    FakeAvailableMemory available(int64_t{64} << 30);
    const std::string msg = config_error([&] { run::check_before_training(e); });
    EXPECT_NE(msg.find("model: needs "), std::string::npos) << msg;
    EXPECT_NE(msg.find(" GiB per device, 64.0 GiB available"), std::string::npos) << msg;
    EXPECT_EQ(meta_device().allocator().stats().peak_total, 0);
}

TEST(ConfigBounds, RunAndValidateRefuseAModelJustOverTheAvailableMemory) {
    const config::Experiment e = run::parse_experiment(spirals());
    const int64_t needed = strategy::estimate_memory(e, strategy::model_cost(e, Shape{2})).front().total();
    ASSERT_GT(needed, 0);
    {
        FakeAvailableMemory available(needed - 1);
        const std::string refused = config_error([&] { run::check_before_training(e); });
        EXPECT_NE(refused.find("model: needs "), std::string::npos) << refused;
        CountingObserver observer;
        EXPECT_EQ(config_error([&] { run::run_experiment(e, &observer, nullptr); }), refused);
        EXPECT_EQ(observer.starts, 0);  // refused before training
    }
    {
        FakeAvailableMemory available(needed);
        EXPECT_EQ(config_error([&] { run::check_before_training(e); }), "");
        CountingObserver observer;
        EXPECT_EQ(run::run_experiment(e, &observer, nullptr).status, "finished");
        EXPECT_EQ(observer.starts, 1);
    }
}

TEST(ConfigBounds, MemoryBeyondAnInt64CountIsRefusedNotWrapped) {
    // 2^40 numbers per example (the output [2^20, 2^20]) for a batch of 2^31: 2^73 bytes.
    config::Experiment e = run::parse_experiment(spirals());
    e.layers = {{.type = "linear", .out = int64_t{1} << 20}};
    e.loss = "mse";
    e.data.batch_size = int64_t{1} << 31;
    e.devices = {"cpu:0", "cpu:1"};
    e.strategy = strategy::default_config("ddp");
    const std::string msg = config_error([&] { run::check_memory_fits(e, Shape{int64_t{1} << 20, 1}); });
    EXPECT_NE(msg.find("model: needs "), std::string::npos) << msg;
    EXPECT_EQ(msg.find("-"), std::string::npos) << msg;  // no negative, wrapped figure
}

TEST(ConfigBounds, CpuDevicesShareTheHostsMemory) {
    json j = spirals();
    j["devices"] = {"cpu:0", "cpu:1"};
    j["strategy"] = {{"type", "ddp"}};
    const config::Experiment e = run::parse_experiment(j);
    int64_t both = 0;
    for (const auto& d : strategy::estimate_memory(e, strategy::model_cost(e, Shape{2}))) both += d.total();
    FakeAvailableMemory available(both - 1);
    const std::string msg = config_error([&] { run::check_before_training(e); });
    EXPECT_NE(msg.find("for the 2 CPU devices, which share the host's memory"), std::string::npos) << msg;
}

TEST(ConfigBounds, AvailableMemoryVariableIsChecked) {
    setenv("PARALAB_AVAILABLE_MEMORY", "8G", 1);
    EXPECT_EQ(run::available_memory_bytes("cpu:0"), int64_t{8} << 30);
    setenv("PARALAB_AVAILABLE_MEMORY", "lots", 1);
    EXPECT_NE(config_error([] { run::available_memory_bytes("cpu:0"); }).find("PARALAB_AVAILABLE_MEMORY: expected"),
              std::string::npos);
    unsetenv("PARALAB_AVAILABLE_MEMORY");
    const auto real = run::available_memory_bytes("cpu:0");  // /proc/meminfo's MemAvailable
    ASSERT_TRUE(real.has_value());
    EXPECT_GT(*real, 0);
}

namespace {

// Stops the run at its start: what happened before is the run's refusal, or its absence.
class StopAtStart : public run::RunObserver {
public:
    explicit StopAtStart(run::RunControl& control) : m_control(control) {}
    void on_start(const config::Experiment&, int64_t) override {
        started = true;
        m_control.stop = true;
    }
    bool started = false;

private:
    run::RunControl& m_control;
};

// Every leaf of `j` changed the way a careless edit changes it: a number to 0, -1 or 2^40, a
// string to a wrong word, a boolean flipped, an array one shorter.
void mutants(const json& root, const json& at, const json::json_pointer& where,
             std::vector<std::pair<std::string, json>>& out) {
    auto with = [&](const json& value, const std::string& label) {
        json m = root;
        m[where] = value;
        out.emplace_back(where.to_string() + " = " + label, std::move(m));
    };
    if (at.is_object()) {
        for (const auto& [k, v] : at.items()) mutants(root, v, where / k, out);
    } else if (at.is_array()) {
        if (!at.empty()) {
            json shorter = at;
            shorter.erase(shorter.size() - 1);
            with(shorter, "one shorter");
        }
        for (size_t i = 0; i < at.size(); ++i) mutants(root, at[i], where / i, out);
    } else if (at.is_boolean()) {
        with(!at.get<bool>(), "flipped");
    } else if (at.is_number()) {
        with(0, "0");
        with(-1, "-1");
        with(int64_t{1} << 40, "2^40");
    } else if (at.is_string()) {
        with("zzz", "\"zzz\"");
    }
}

}  // namespace

// validate's verdict is run's: each mutant of the shipped examples that need no data files is
// refused by both before training (with the same message) or by neither. Neither lets an
// internal check's text reach the user.
TEST(ConfigBounds, ValidateAgreesWithRunOnMutatedExamples) {
    int compared = 0, refused = 0;
    for (const char* name : {"spirals-mlp", "spirals-pipeline", "spirals-param-server-straggler", "sequence-lstm", "gpt-char"}) {
        std::ifstream in(std::string(PARALAB_EXAMPLES_DIR) + "/" + name + ".paralab.json");
        const json base = json::parse(in);
        std::vector<std::pair<std::string, json>> all;
        mutants(base, base, json::json_pointer(), all);
        for (auto& [label, j] : all) {
            if (label.rfind("/paralab", 0) == 0) continue;  // the format version: parse_experiment's own test
            if (j.contains("train") && j["train"].is_object()) j["train"]["max_steps"] = 1;
            config::Experiment e;
            std::string validate_says, run_says;
            try {
                e = run::parse_experiment(j);
                run::check_before_training(e);
            } catch (const Error& err) {
                validate_says = err.what();
            }
            if (validate_says.empty() || validate_says.find("model") == 0 || validate_says.find("devices") == 0 ||
                validate_says.find("strategy") == 0 || validate_says.find("data") == 0) {
                // A file that parses: run it up to its first step.
                bool parsed = true;
                try {
                    e = run::parse_experiment(j);
                } catch (const Error& err) {
                    parsed = false;
                    run_says = err.what();
                }
                if (parsed) {
                    run::RunControl control;
                    StopAtStart observer(control);
                    try {
                        run::run_experiment(e, &observer, &control);
                    } catch (const Error& err) {
                        run_says = err.what();
                    }
                    EXPECT_EQ(observer.started, run_says.empty()) << name << " " << label;
                }
            } else {
                run_says = validate_says;  // refused by the parser, which run reads the file with
            }
            ++compared;
            refused += !validate_says.empty();
            EXPECT_EQ(validate_says.empty(), run_says.empty())
                << name << " " << label << "\n  validate: " << validate_says << "\n  run: " << run_says;
            EXPECT_EQ(validate_says.find("(check "), std::string::npos) << name << " " << label << ": " << validate_says;
            EXPECT_EQ(run_says.find("(check "), std::string::npos) << name << " " << label << ": " << run_says;
        }
    }
    std::printf("%d mutants compared, %d refused by both\n", compared, refused);
    EXPECT_GT(compared, 100);
    EXPECT_GT(refused, 20);
}

// Hybrid's micro-batches cut each replica's share of the batch: more of them than the largest
// share has rows is refused at strategy.micro_batches, naming how many it may be.
TEST(ConfigBounds, HybridMicroBatchesBeyondTheBatchAreRefused) {
    json j = spirals();
    j["devices"] = {"cpu:0", "cpu:1", "cpu:2", "cpu:3"};
    j["strategy"] = {{"type", "hybrid"}, {"dp", 2}, {"pp", 2}, {"micro_batches", 9}};
    const std::string msg = config_error([&] { run::check_before_training(run::parse_experiment(j)); });
    EXPECT_EQ(msg, "strategy.micro_batches: 9 micro-batches, but the largest of dp 2 replicas' shares of "
                   "data.batch_size 16 has 8 rows; at most 8");
    j["strategy"]["micro_batches"] = 8;
    EXPECT_EQ(config_error([&] { run::check_before_training(run::parse_experiment(j)); }), "");
}

// A rank thread that cannot be started (the process's limits: here every new thread asks for
// a 1 TiB stack under a 16 GiB address-space limit) fails the run with that reason; the process
// is not ended by std::terminate. In a child process, whose limits do not reach the tests.
TEST(ConfigBounds, ARankThreadThatCannotStartFailsTheRun) {
    int out[2];
    ASSERT_EQ(pipe(out), 0);
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        close(out[0]);
        std::string said;
        try {
            json j = spirals();
            j["devices"] = {"cpu:0", "cpu:1"};
            j["strategy"] = {{"type", "ddp"}};
            const config::Experiment e = run::parse_experiment(j);
            pthread_attr_t attr;
            pthread_attr_init(&attr);
            pthread_attr_setstacksize(&attr, size_t{1} << 40);
            pthread_setattr_default_np(&attr);
            const rlimit as{size_t{16} << 30, size_t{16} << 30};
            setrlimit(RLIMIT_AS, &as);
            const config::RunSummary s = run::run_experiment(e, nullptr, nullptr, 1);
            said = s.status + ": " + s.error;
        } catch (const std::exception& err) {
            said = std::string("threw: ") + err.what();
        }
        (void)!write(out[1], said.data(), said.size());
        _exit(0);
    }
    close(out[1]);
    std::string said;
    char buf[4096];
    for (ssize_t n; (n = read(out[0], buf, sizeof buf)) > 0;) said.append(buf, static_cast<size_t>(n));
    close(out[0]);
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status)) << "the child ended by signal " << WTERMSIG(status) << "; it said: " << said;
    EXPECT_EQ(said.rfind("failed: cannot start the thread of rank 0 (cpu:0): ", 0), 0u) << said;
}

// The host memory a run may take is the least of MemAvailable, what RLIMIT_AS leaves and what the
// cgroup's limit leaves (v2: memory.max less memory.current, in its cgroup and every one above;
// v1: memory.limit_in_bytes less memory.usage_in_bytes), each read from a folder laid out as "/".
TEST(ConfigBounds, HostMemoryHonoursTheCgroupLimitAndRlimitAs) {
    const auto root = std::filesystem::temp_directory_path() / "paralab_memory_root";
    std::filesystem::remove_all(root);
    const auto put = [&](const std::string& path, const std::string& text) {
        std::filesystem::create_directories((root / path).parent_path());
        std::ofstream(root / path) << text;
    };
    put("proc/meminfo", "MemTotal:       65536000 kB\nMemAvailable:   32768000 kB\n");
    put("proc/self/statm", "1000 100 0 0 0 0 0\n");
    put("proc/self/cgroup", "0::/user.slice/job\n");
    put("sys/fs/cgroup/user.slice/job/memory.max", "max\n");
    put("sys/fs/cgroup/user.slice/memory.max", "4294967296\n");
    put("sys/fs/cgroup/user.slice/memory.current", "1073741824\n");
    const std::string r = root.string() + "/";
    run::HostMemoryLimits h = run::host_memory_limits(r);
    EXPECT_EQ(h.mem_available, int64_t{32768000} * 1024);
    EXPECT_EQ(h.cgroup_left, int64_t{3} << 30);  // the parent's limit binds
    EXPECT_EQ(h.least(), int64_t{3} << 30);
    EXPECT_EQ(h.least_name(), "the cgroup's memory limit");

    put("proc/self/cgroup", "4:memory:/docker/abc\n0::/\n");
    put("sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "2147483648\n");
    put("sys/fs/cgroup/memory/docker/abc/memory.usage_in_bytes", "536870912\n");
    EXPECT_EQ(run::host_memory_limits(r).cgroup_left, int64_t{3} << 29);
    put("sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "9223372036854771712\n");  // unlimited
    EXPECT_FALSE(run::host_memory_limits(r).cgroup_left);

    // RLIMIT_AS: the soft limit lowered for the check, then given back.
    rlimit saved{};
    ASSERT_EQ(getrlimit(RLIMIT_AS, &saved), 0);
    rlimit lowered = saved;
    lowered.rlim_cur = rlim_t{1} << 40;
    ASSERT_EQ(setrlimit(RLIMIT_AS, &lowered), 0);
    h = run::host_memory_limits(r);
    ASSERT_EQ(setrlimit(RLIMIT_AS, &saved), 0);
    EXPECT_EQ(h.address_space_left, (int64_t{1} << 40) - 1000 * sysconf(_SC_PAGESIZE));
    std::filesystem::remove_all(root);

    // The real machine's figures: at least MemAvailable is known.
    EXPECT_TRUE(run::host_memory_limits().least().has_value());
}
