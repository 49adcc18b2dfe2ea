#include "engine/run/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

#include "engine/io/safetensors.h"
#include "engine/io/weights.h"
#include "engine/run/experiment.h"
#include "engine/util/error.h"

namespace paralab::run {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kMetadataKey = "paralab";

std::optional<DType> dtype_of(io::StDType t) {
    switch (t) {
        case io::StDType::F32:
            return DType::f32;
        case io::StDType::F64:
            return DType::f64;
        case io::StDType::BF16:
            return DType::bf16;
        case io::StDType::F16:
            return DType::f16;
        default:
            return std::nullopt;
    }
}

io::StTensor st_tensor(const std::string& name, const Tensor& t) {
    io::StTensor s;
    s.name = name;
    s.dtype = io::st_dtype_of(t.dtype());
    for (int64_t d : t.shape().dims()) s.shape.push_back(d);
    s.data = t.raw();
    s.bytes = t.nbytes();
    return s;
}

// The step of "step-<N>.safetensors" (nullopt for another name).
std::optional<int64_t> step_of_file(const std::string& filename) {
    long long n = 0;
    char tail[32] = {};
    if (std::sscanf(filename.c_str(), "step-%lld.%31s", &n, tail) != 2) return std::nullopt;
    if (std::string(tail) != "safetensors" || n < 0) return std::nullopt;
    if (filename != "step-" + std::to_string(n) + ".safetensors") return std::nullopt;
    return n;
}

}  // namespace

std::string experiment_identity(const config::Experiment& e) {
    json j = to_json(e);
    j.erase("name");
    j.erase("notes");
    const std::string canonical = j.dump();  // nlohmann's objects keep their keys sorted
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : canonical) {
        h ^= c;
        h *= 1099511628211ull;
    }
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
    return hex;
}

std::string checkpoint_folder(const std::string& store_path, int64_t run_id) {
    const fs::path store(store_path);
    fs::path dir = store.parent_path();
    if (dir.empty()) dir = ".";
    return (dir / "checkpoints" / store.filename() / ("run-" + std::to_string(run_id))).string();
}

TensorNames checkpoint_names(nn::Model& model) {
    return {io::parameter_names(model), io::buffer_names(model)};
}

std::vector<std::string> checkpoint_files(const std::string& folder) {
    std::vector<std::pair<int64_t, std::string>> found;
    std::error_code ec;
    for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
        if (const auto n = step_of_file(it->path().filename().string()))
            found.emplace_back(*n, it->path().string());
    }
    std::sort(found.begin(), found.end(),
              [](const auto& a, const auto& b) { return a.first > b.first; });
    std::vector<std::string> out;
    for (auto& f : found) out.push_back(std::move(f.second));
    return out;
}

void remove_checkpoints(const std::string& folder) {
    std::error_code ec;
    for (const std::string& f : checkpoint_files(folder)) fs::remove(f, ec);
}

std::string write_checkpoint(const std::string& folder, const config::Experiment& e,
                             const TensorNames& names, const CheckpointPosition& position,
                             const strategy::TrainingState& state) {
    PARALAB_CHECK(state.parameters.size() == names.parameters.size(),
                  "checkpoint: parameters do not fit their names");
    PARALAB_CHECK(state.buffers.size() == names.buffers.size(),
                  "checkpoint: buffers do not fit their names");
    std::error_code ec;
    fs::create_directories(folder, ec);
    if (ec) throw Error(folder + ": cannot create the checkpoint folder: " + ec.message());

    std::vector<io::StTensor> tensors;
    for (size_t i = 0; i < state.parameters.size(); ++i)
        tensors.push_back(st_tensor(names.parameters[i], state.parameters[i]));
    for (size_t i = 0; i < state.buffers.size(); ++i)
        tensors.push_back(st_tensor(names.buffers[i], state.buffers[i]));
    for (size_t i = 0; i < state.optimizer_state.size(); ++i)
        for (size_t j = 0; j < state.optimizer_state[i].size(); ++j) {
            std::string name = "optim.";
            name += names.parameters[i];
            name += '.';
            name += state.optimizer_state_names[j];
            tensors.push_back(st_tensor(name, state.optimizer_state[i][j]));
        }

    const config::Experiment& x = e;
    json meta;
    meta["format"] = kCheckpointFormat;
    meta["identity"] = experiment_identity(e);
    meta["step"] = position.step;
    meta["epoch"] = position.epoch;
    // The loader's order is drawn from (seed, epoch) alone (engine/data/loader.h): its position
    // and the seed are its whole state.
    meta["loader"] = {{"epoch", position.epoch},
                      {"batch_index", position.batch_index},
                      {"shuffle", x.data.shuffle},
                      {"shuffle_seed", x.seed}};
    // Every random stream of a run is a function of the seed and a counter: the initial weights
    // of (seed) once, each dropout mask of (seed, step, layer, element) (engine/nn/dropout.h),
    // the data of (seed). Their state is the seed and the step.
    meta["rng"] = {{"seed", x.seed},
                   {"init", "drawn once from seed"},
                   {"dropout_step", position.step},
                   {"data_seed", x.seed}};
    meta["schedule"] = {{"type", x.schedule.type}, {"step", position.step}};
    meta["optimizer"] = {{"type", x.optimizer.type},
                         {"steps_taken", state.optimizer_steps},
                         {"state_names", state.optimizer_state_names}};
    if (state.has_scaler)
        meta["loss_scaler"] = {{"scale", state.scaler.scale},
                               {"clean", state.scaler.clean},
                               {"skipped", state.scaler.skipped}};
    meta["strategy"] = x.strategy.type;
    meta["devices"] = x.devices;

    const std::string path =
        (fs::path(folder) / ("step-" + std::to_string(position.step) + ".safetensors")).string();
    io::write_safetensors(path, tensors, {{kMetadataKey, meta.dump()}});

    const auto files = checkpoint_files(folder);
    for (size_t i = kCheckpointsKept; i < files.size(); ++i)
        fs::remove(files[i], ec);  // best effort
    // A process killed while it wrote leaves its temporary file (write_safetensors'); this run
    // is the folder's only writer, and its own file is in place.
    for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.starts_with("step-") && name.find(".safetensors.tmp-") != std::string::npos)
            fs::remove(it->path(), ec);
    }
    return path;
}

Checkpoint read_checkpoint(const std::string& path, const config::Experiment& e,
                           const TensorNames& names, const std::vector<Shape>& shapes,
                           const std::vector<Shape>& buffer_shapes) {
    const io::SafetensorsFile file = io::SafetensorsFile::read(path);
    auto fail = [&](const std::string& cause) -> Error { return Error(path + ": " + cause); };
    const auto it = file.metadata().find(kMetadataKey);
    if (it == file.metadata().end())
        throw fail("not a ParaLab checkpoint (no \"paralab\" metadata)");
    Checkpoint c;
    c.path = path;
    try {
        c.metadata = json::parse(it->second);
    } catch (const json::exception& err) {
        throw fail(std::string("the checkpoint's metadata is not JSON: ") + err.what());
    }
    try {
        if (c.metadata.at("format").get<int>() != kCheckpointFormat)
            throw fail("checkpoint format " + c.metadata.at("format").dump() +
                       ", this build reads " + std::to_string(kCheckpointFormat));
        const std::string identity = c.metadata.at("identity").get<std::string>();
        if (identity != experiment_identity(e))
            throw fail("the checkpoint belongs to another experiment (identity " + identity +
                       ", this run's " + experiment_identity(e) + ")");
        c.position.step = c.metadata.at("step").get<int64_t>();
        c.position.epoch = c.metadata.at("loader").at("epoch").get<int64_t>();
        c.position.batch_index = c.metadata.at("loader").at("batch_index").get<int64_t>();
        c.state.optimizer_steps = c.metadata.at("optimizer").at("steps_taken").get<int64_t>();
        c.state.optimizer_state_names =
            c.metadata.at("optimizer").at("state_names").get<std::vector<std::string>>();
        if (c.metadata.contains("loss_scaler")) {
            const json& s = c.metadata["loss_scaler"];
            c.state.has_scaler = true;
            c.state.scaler = {s.at("scale").get<double>(), s.at("clean").get<int64_t>(),
                              s.at("skipped").get<int64_t>()};
        }
    } catch (const json::exception& err) {
        throw fail(std::string("the checkpoint's metadata is incomplete: ") + err.what());
    }
    if (c.position.step < 1 || c.position.epoch < 0 || c.position.batch_index < 0)
        throw fail("the checkpoint's position is out of range");

    auto tensor = [&](const std::string& name, const Shape& shape) {
        const io::StEntry* entry = file.find(name);
        if (!entry) throw fail("the tensor " + name + " is missing");
        const auto dtype = dtype_of(entry->dtype);
        if (!dtype)
            throw fail("the tensor " + name + " has type " +
                       std::string(io::st_dtype_name(entry->dtype)));
        Shape got(entry->shape);
        if (got != shape)
            throw fail("the tensor " + name + " is " + got.to_string() + ", the model's " +
                       shape.to_string());
        Tensor t = Tensor::empty(shape, *dtype, detached_host_device(), MemCategory::workspace);
        std::memcpy(t.raw(), file.data(*entry), t.nbytes());
        return t;
    };
    PARALAB_CHECK(shapes.size() == names.parameters.size(),
                  "checkpoint: shapes do not fit the names");
    for (size_t i = 0; i < shapes.size(); ++i)
        c.state.parameters.push_back(tensor(names.parameters[i], shapes[i]));
    for (size_t i = 0; i < buffer_shapes.size(); ++i)
        c.state.buffers.push_back(tensor(names.buffers[i], buffer_shapes[i]));
    c.state.optimizer_state.resize(shapes.size());
    for (size_t i = 0; i < shapes.size(); ++i)
        for (const std::string& s : c.state.optimizer_state_names) {
            std::string name = "optim.";
            name += names.parameters[i];
            name += '.';
            name += s;
            c.state.optimizer_state[i].push_back(tensor(name, shapes[i]));
        }
    return c;
}

std::optional<Checkpoint> newest_checkpoint(
    const std::string& folder, const config::Experiment& e, const TensorNames& names,
    const std::vector<Shape>& shapes, const std::vector<Shape>& buffer_shapes,
    const std::function<void(const std::string&, const std::string&)>& refused) {
    for (const std::string& path : checkpoint_files(folder)) {
        try {
            return read_checkpoint(path, e, names, shapes, buffer_shapes);
        } catch (const Error& err) {
            if (refused) refused(path, err.what());
        }
    }
    return std::nullopt;
}

void point_checkpoints(Checkpointing& cp, const std::string& store_path, int64_t run_id) {
    if (cp.resume || run_id <= 0) return;
    cp.folder = checkpoint_folder(store_path, run_id);
    remove_checkpoints(cp.folder);
}

}  // namespace paralab::run
