#include "bench/model_bench.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <vector>

#include <kernels/cpu/gemm.h>
#include <kernels/cpu/threads.h>

#include "engine/device/device.h"
#include "engine/nn/model.h"
#include "engine/util/error.h"
#include "engine/util/own_thread.h"
#include "engine/util/rng.h"

// OpenBLAS's own (cblas.h declares it; the engine does not include cblas.h).
extern "C" char* openblas_get_corename(void);

namespace paralab::bench {
namespace {

using nlohmann::json;

constexpr int64_t kTest = 64;  // the end-of-run evaluation is not timed; keep it short
constexpr int64_t kGptContext = 64;  // gpt-char's T
// gpt-char's random corpus: the training split's 3,686 windows cover the longest run (200
// steps of 12 on a GPU) and the validation split's 409 the kTest test windows.
constexpr int64_t kRandomCorpusBytes = int64_t(256) << 10;

struct ModelCase {
    const char* name;
    const char* description;
    int64_t batch;          // the global batch (split over the devices)
    int64_t steps, warmup;  // at step_scale 1
    int devices = 1;        // > 1: `strategy` on cpu:0..cpu:N-1, 1 compute thread each
    const char* strategy = "ddp";  // with devices > 1: ddp, or zero (stage 1)
};

const std::vector<ModelCase>& cases() {
    static const std::vector<ModelCase> c = {
        {"mlp", "MLP 784-512-512-10 relu, blobs 784", 128, 80, 8},
        {"lenet", "LeNet conv5x5 16 / conv5x5 32 / linear 10, Fashion-MNIST 1x28x28", 64, 30, 4},
        {"lstm", "LSTM 32->128, 50 steps, linear 10 on the last, seqclass", 64, 24, 3},
        {"gpt-char", "char GPT (the gpt-char example), 4 blocks D 128, T 64, AdamW, random bytes", 12, 40, 5},
        {"llama-char", "char Llama (the llama-char example), 4 blocks D 128, 8 heads, 2 kv heads, T 64, AdamW, random bytes",
         12, 40, 5},
        {"moe-char",
         "char mixture of experts (the moe-char example), 2 blocks D 64, 8 experts top 2 + 1 shared, T 64, AdamW, "
         "random bytes",
         16, 40, 5},
        {"mlp-ddp2", "the MLP, ddp on cpu:0,cpu:1 (1 thread each), global batch 128 = 64 per device", 128,
         80, 8, 2},
        {"mlp-ddp2-b256", "the MLP, ddp on cpu:0,cpu:1 (1 thread each), global batch 256 = 128 per device",
         256, 80, 8, 2},
        {"mlp-zero2", "the MLP, zero stage 1 on cpu:0,cpu:1 (1 thread each), global batch 128 = 64 per device",
         128, 80, 8, 2, "zero"},
    };
    return c;
}

bool is_mlp(const std::string& model) { return model.rfind("mlp", 0) == 0; }
bool is_token_model(const std::string& model) {
    return model == "gpt-char" || model == "llama-char" || model == "moe-char";
}

const ModelCase& find_case(const std::string& model) {
    for (const auto& c : cases())
        if (model == c.name) return c;
    throw ConfigError("model bench: unknown model '" + model +
                      "' (mlp, lenet, lstm, gpt-char, llama-char, moe-char, mlp-ddp2, mlp-ddp2-b256, mlp-zero2)");
}

json layer(const char* type) { return {{"type", type}}; }

json synthetic(const char* dataset, int64_t train, int64_t batch, json extra) {
    json d{{"dataset", dataset}, {"samples", train + kTest}, {"classes", 10},
           {"test_fraction", static_cast<double>(kTest) / static_cast<double>(train + kTest)},
           {"train_limit", train}, {"test_limit", kTest}, {"batch_size", batch},
           {"workers", 0}, {"shuffle", false}};
    d.update(extra);
    return d;
}

}  // namespace

json model_bench_experiment(const std::string& model, const std::string& data_path, int64_t steps,
                            const std::string& device) {
    const ModelCase& c = find_case(model);
    const int64_t train = c.batch * steps;
    json data, layers, optimizer{{"type", "sgd"}, {"lr", 0.01}, {"momentum", 0.9}};
    if (is_mlp(model)) {
        data = synthetic("blobs", train, c.batch, {{"features", 784}});
        layers = json::array({{{"type", "linear"}, {"out", 512}}, layer("relu"),
                              {{"type", "linear"}, {"out", 512}}, layer("relu"),
                              {{"type", "linear"}, {"out", 10}}});
    } else if (model == "lenet") {
        data = {{"dataset", "fashion-mnist"}, {"path", data_path}, {"train_limit", train},
                {"test_limit", kTest}, {"batch_size", c.batch}, {"workers", 0}, {"shuffle", false}};
        layers = json::array({{{"type", "conv2d"}, {"out_channels", 16}, {"kernel", 5}, {"padding", 2}},
                              layer("relu"),
                              {{"type", "maxpool2d"}, {"kernel", 2}},
                              {{"type", "conv2d"}, {"out_channels", 32}, {"kernel", 5}, {"padding", 2}},
                              layer("relu"),
                              {{"type", "maxpool2d"}, {"kernel", 2}},
                              layer("flatten"),
                              {{"type", "linear"}, {"out", 10}}});
    } else if (is_token_model(model)) {
        // resources/examples/gpt-char.paralab.json or llama-char's on the bytes of `data_path`.
        data = {{"dataset", "text"}, {"path", data_path}, {"seq_len", kGptContext}, {"train_limit", train},
                {"test_limit", kTest}, {"batch_size", c.batch}, {"workers", 0}};
        if (model == "gpt-char")
            layers = json::array({{{"type", "embedding"}, {"vocab", 256}, {"dim", 128}},
                                  layer("position_embedding"),
                                  {{"type", "transformer_block"}, {"heads", 4}, {"ffn", 512}, {"repeat", 4}},
                                  layer("layernorm"),
                                  {{"type", "linear"}, {"out", 256}}});
        else if (model == "moe-char")  // resources/examples/moe-char.paralab.json
            layers = json::array({{{"type", "embedding"}, {"vocab", 256}, {"dim", 64}},
                                  {{"type", "transformer_block"}, {"heads", 4}, {"kv_heads", 2}, {"position", "rope"},
                                   {"norm", "rmsnorm"}, {"mlp", "moe"}, {"experts", 8}, {"top_k", 2},
                                   {"expert_ffn", 96}, {"shared_experts", 1}, {"aux_loss", 0.01}, {"bias", false},
                                   {"repeat", 2}},
                                  layer("rmsnorm"),
                                  {{"type", "linear"}, {"out", 256}, {"bias", false}}});
        else  // resources/examples/llama-char.paralab.json
            layers = json::array({{{"type", "embedding"}, {"vocab", 256}, {"dim", 128}},
                                  {{"type", "transformer_block"}, {"heads", 8}, {"kv_heads", 2}, {"ffn", 384},
                                   {"position", "rope"}, {"norm", "rmsnorm"}, {"mlp", "swiglu"}, {"bias", false},
                                   {"repeat", 4}},
                                  layer("rmsnorm"),
                                  {{"type", "linear"}, {"out", 256}, {"bias", false}}});
        optimizer = {{"type", "adamw"}, {"lr", 0.001}};
    } else {
        data = synthetic("seqclass", train, c.batch, {{"seq_len", 50}, {"features", 32}});
        layers = json::array({{{"type", "lstm"}, {"hidden", 128}, {"num_layers", 1}, {"return", "last"}},
                              {{"type", "linear"}, {"out", 10}}});
    }
    json devices = json::array();
    for (int d = 0; d < c.devices; ++d) devices.push_back(device == "cpu" ? "cpu:" + std::to_string(d) : device);
    return {{"paralab", 1},
            {"name", "bench-model-" + model},
            {"seed", 7},
            {"data", data},
            {"model", {{"layers", layers}, {"loss", "cross_entropy"}}},
            {"devices", devices},
            {"strategy", c.devices == 1              ? json{{"type", "single"}}
                         : std::string(c.strategy) == "zero" ? json{{"type", "zero"}, {"stage", 1}}
                                                             : json{{"type", c.strategy}}},
            {"optimizer", optimizer},
            {"schedule", {{"type", "constant"}}},
            {"train", {{"epochs", 1}, {"max_steps", steps}}}};
}

RandomBytesFile::RandomBytesFile(int64_t bytes) {
    std::string name = (std::filesystem::temp_directory_path() / "paralab-bench-bytes-XXXXXX").string();
    const int fd = mkstemp(name.data());
    if (fd < 0) throw Error("model bench: cannot create " + name + ": " + std::strerror(errno));
    m_path = name;
    std::vector<uint8_t> data(static_cast<size_t>(bytes));
    Rng rng(0xB17E5);
    for (auto& b : data) b = static_cast<uint8_t>(rng.next_u64() >> 56);
    size_t done = 0;
    while (done < data.size()) {
        const ssize_t n = write(fd, data.data() + done, data.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            const std::string why = std::strerror(errno);
            close(fd);
            std::filesystem::remove(m_path);
            throw Error("model bench: cannot write " + m_path + ": " + why);
        }
        done += static_cast<size_t>(n);
    }
    close(fd);
}

RandomBytesFile::~RandomBytesFile() {
    std::error_code ec;
    std::filesystem::remove(m_path, ec);
}

std::string blas_kernel() {
    const char* name = openblas_get_corename();
    return name ? name : "unknown";
}

double measure_sgemm_gflops(int64_t n, int threads) {
    // A is n x n, B is n x n, C = A B is n x n; 2 n^3 FLOPs a call.
    const int saved = kernels::cpu::num_threads();
    kernels::cpu::set_num_threads(threads);
    const size_t nn = static_cast<size_t>(n * n);
    std::vector<float> a(nn), b(nn), c(nn, 0.0f);
    for (size_t i = 0; i < nn; ++i) {
        a[i] = static_cast<float>((i * 7) % 13) * 0.01f;
        b[i] = static_cast<float>((i * 5) % 11) * 0.01f;
    }
    double best = 0;
    for (int call = 0; call < 6; ++call) {
        const auto t0 = std::chrono::steady_clock::now();
        kernels::cpu::gemm<float>(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (call > 0 && s > 0) best = std::max(best, 2.0 * static_cast<double>(n) * n * n / s / 1e9);
    }
    kernels::cpu::set_num_threads(saved);
    return best;
}

std::vector<ModelTiming> bench_models(const ModelBenchOptions& o, const Progress& progress) {
    std::vector<ModelTiming> rows;
    std::vector<config::Experiment> experiments;
    std::vector<bool> built;  // false: the experiment could not be built (the row says why)
    std::optional<RandomBytesFile> token_corpus;  // gpt-char's, removed on return
    std::string token_corpus_error;
    try {
        token_corpus.emplace(kRandomCorpusBytes);
    } catch (const Error& err) {  // the gpt-char rows say why
        token_corpus_error = err.what();
    }
    for (const auto& c : cases())
        for (int threads : o.threads) {
            if (c.devices > 1 && threads != 1) continue;  // ddp rows: 1 thread per device
            ModelTiming t;
            t.model = c.name;
            t.description = c.description;
            if (o.device != "cpu" && c.devices > 1) {
                // The ddp rows on a GPU run on virtual GPUs of that one card.
                const std::string cpus = "cpu:0,cpu:1 (1 thread each)";
                if (auto at = t.description.find(cpus); at != std::string::npos)
                    t.description.replace(at, cpus.size(), o.device + " twice (two virtual GPUs)");
            }
            t.threads = threads;
            t.devices = c.devices;
            t.batch = c.batch;
            t.tokens_per_sample = is_token_model(c.name) ? kGptContext : 0;
            t.steps = std::max<int64_t>(2, std::llround(static_cast<double>(c.steps) * o.step_scale));
            t.warmup_steps = std::max<int64_t>(1, std::llround(static_cast<double>(c.warmup) * o.step_scale));
            if (t.warmup_steps >= t.steps) t.warmup_steps = t.steps - 1;
            t.status = "not run";
            try {
                if (is_token_model(c.name) && !token_corpus) throw Error(token_corpus_error);
                const std::string& data_path = is_token_model(c.name) ? token_corpus->path() : o.data_path;
                config::Experiment e =
                    run::parse_experiment(model_bench_experiment(c.name, data_path, t.steps, o.device));
                auto device = make_cpu_device(0, threads);
                nn::Model m(e.layers, run::model_input_shape(e), e.loss, DType::f32, *device);
                t.forward_flops_per_sample = m.flops_per_sample();
                experiments.push_back(std::move(e));
                built.push_back(true);
            } catch (const Error& err) {  // e.g. Fashion-MNIST missing for lenet
                t.status = "failed";
                t.error = err.what();
                experiments.push_back({});
                built.push_back(false);
            }
            rows.push_back(std::move(t));
        }

    const int rounds = std::max(1, o.rounds);
    std::vector<double> sgemm(o.threads.size(), 0.0);
    for (int round = 0; round < rounds; ++round) {
        const std::string of_round =
            rounds > 1 ? " (round " + std::to_string(round + 1) + "/" + std::to_string(rounds) + ")" : "";
        for (size_t k = 0; k < o.threads.size(); ++k) {
            if (o.device != "cpu") continue;  // the GPU table has no sgemm column
            if (progress) progress("sgemm 1024 on " + std::to_string(o.threads[k]) + " threads" + of_round);
            // On a thread of its own: this one must not keep an OpenMP team (engine/util/own_thread.h).
            const int threads = o.threads[k];
            sgemm[k] = std::max(sgemm[k], on_own_thread([&] { return measure_sgemm_gflops(1024, threads); }));
        }
        for (size_t i = 0; i < rows.size(); ++i) {
            ModelTiming& t = rows[i];
            if (!built[i]) continue;
            if (progress)
                progress("model " + t.model + " on " +
                         (o.device != "cpu" ? o.device
                                            : std::to_string(t.threads) + " thread" + (t.threads == 1 ? "" : "s")) +
                         of_round);
            const StrategyTiming s = time_experiment(experiments[i], t.warmup_steps, t.threads);
            if (s.status != "finished") {
                if (t.samples_per_s_rounds.empty()) {
                    t.status = s.status;
                    t.error = s.error;
                }
                continue;
            }
            t.samples_per_s_rounds.push_back(s.samples_per_s);
            if (s.samples_per_s > t.samples_per_s) {
                t.samples_per_s = s.samples_per_s;
                t.ms_per_step = s.ms_per_step;
            }
            t.status = "finished";
            t.error.clear();
        }
    }
    const ModelTiming* single_mlp = nullptr;  // the 1-thread single-device MLP, for the ddp ratio
    for (const auto& t : rows)
        if (t.model == "mlp" && t.threads == 1 && t.status == "finished") single_mlp = &t;
    for (auto& t : rows) {
        for (size_t k = 0; k < o.threads.size(); ++k)
            if (o.threads[k] == t.threads) t.sgemm_gflops = sgemm[k];
        t.gflops = 3.0 * static_cast<double>(t.forward_flops_per_sample) * t.samples_per_s / 1e9;
        if (t.tokens_per_sample > 0 && t.status == "finished") {
            t.tokens_per_s = t.samples_per_s * static_cast<double>(t.tokens_per_sample);
            char buf[64];
            std::snprintf(buf, sizeof buf, "; %.0f tokens/s", t.tokens_per_s);
            t.description += buf;
        }
        if (t.devices > 1 && single_mlp && t.status == "finished" && single_mlp->samples_per_s > 0) {
            t.vs_one_device = t.samples_per_s / single_mlp->samples_per_s;
            char buf[64];
            std::snprintf(buf, sizeof buf, "; %.2fx the 1-device mlp", t.vs_one_device);
            t.description += buf;
        }
    }
    return rows;
}

json to_json(const ModelTiming& t) {
    json j{{"model", t.model}, {"description", t.description}, {"threads", t.threads}, {"devices", t.devices},
           {"batch", t.batch}, {"steps", t.steps}, {"warmup_steps", t.warmup_steps},
           {"tokens_per_sample", t.tokens_per_sample},
           {"status", t.status}, {"forward_flops_per_sample", t.forward_flops_per_sample},
           {"sgemm_gflops", t.sgemm_gflops}};
    if (t.status == "finished") {
        j["ms_per_step"] = t.ms_per_step;
        j["samples_per_s"] = t.samples_per_s;
        j["gflops"] = t.gflops;
        j["samples_per_s_rounds"] = t.samples_per_s_rounds;
        if (t.devices > 1) j["vs_one_device"] = t.vs_one_device;
        if (t.tokens_per_sample > 0) j["tokens_per_s"] = t.tokens_per_s;
    } else {
        j["error"] = t.error;
    }
    return j;
}

}  // namespace paralab::bench
