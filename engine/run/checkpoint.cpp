#include "engine/run/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <tuple>

#include "engine/io/safetensors.h"
#include "engine/io/weights.h"
#include "engine/run/experiment_file.h"
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

namespace {

// Field `key` of `j` ("loader"."epoch" is named "loader.epoch" in `where`) as an int64: an
// integer in range, not a float, a string or a number beyond int64 that get<int64_t>() would wrap.
int64_t integer_at(const json& j, const char* key, const std::string& where) {
    const json& v = j.at(key);
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)))
        throw Error("\"" + where + "\" is " + v.dump() + ", not an integer in range");
    return v.get<int64_t>();
}

// The "paralab" metadata of a checkpoint of `e` into `c`: its format and identity, then every
// counter in its range and consistent with the others (a flipped digit in one of them refuses
// the file). Throws Error with the cause alone.
void read_metadata(const std::string& text, const config::Experiment& e, int64_t planned_steps, Checkpoint& c) {
    try {
        c.metadata = json::parse(text);
    } catch (const json::exception& err) {
        throw Error(std::string("the checkpoint's metadata is not JSON: ") + err.what());
    }
    const json& m = c.metadata;
    try {
        if (m.at("format") != json(kCheckpointFormat))
            throw Error("checkpoint format " + m.at("format").dump() + ", this build reads " +
                        std::to_string(kCheckpointFormat));
        const std::string identity = m.at("identity").get<std::string>();
        if (identity != experiment_identity(e))
            throw Error("the checkpoint belongs to another experiment (identity " + identity + ", this run's " +
                        experiment_identity(e) + ")");
        const int64_t step = integer_at(m, "step", "step");
        c.position.step = step;
        c.position.epoch = integer_at(m.at("loader"), "epoch", "loader.epoch");
        c.position.batch_index = integer_at(m.at("loader"), "batch_index", "loader.batch_index");
        c.state.optimizer_steps = integer_at(m.at("optimizer"), "steps_taken", "optimizer.steps_taken");
        c.state.optimizer_state_names = m.at("optimizer").at("state_names").get<std::vector<std::string>>();
        auto range = [](const char* what, int64_t v, int64_t lo, int64_t hi) {
            if (v < lo || v > hi)
                throw Error("the checkpoint's " + std::string(what) + " " + std::to_string(v) + " is outside [" +
                            std::to_string(lo) + ", " + std::to_string(hi) + "]");
        };
        if (step < 1 || step > planned_steps)
            throw Error("the checkpoint's step " + std::to_string(step) + " is outside the run's steps 1 to " +
                        std::to_string(planned_steps));
        // The step is written four times: each copy must agree.
        for (const auto& [object, key, where] :
             {std::tuple{"schedule", "step", "schedule.step"}, std::tuple{"rng", "dropout_step", "rng.dropout_step"}})
            if (const int64_t v = integer_at(m.at(object), key, where); v != step)
                throw Error("the checkpoint's step " + std::to_string(step) + " and its " + where + " " +
                            std::to_string(v) + " differ");
        if (const int64_t v = integer_at(m, "epoch", "epoch"); v != c.position.epoch)
            throw Error("the checkpoint's epoch " + std::to_string(v) + " and its loader.epoch " +
                        std::to_string(c.position.epoch) + " differ");
        range("loader.epoch", c.position.epoch, 0, std::min(step, e.train.epochs));
        range("loader.batch_index", c.position.batch_index, 0, step);
        range("optimizer.steps_taken", c.state.optimizer_steps, 0, step);
        if (m.contains("loss_scaler")) {
            const json& s = m.at("loss_scaler");
            c.state.has_scaler = true;
            c.state.scaler = {s.at("scale").get<double>(), integer_at(s, "clean", "loss_scaler.clean"),
                              integer_at(s, "skipped", "loss_scaler.skipped")};
            if (!std::isfinite(c.state.scaler.scale) || c.state.scaler.scale <= 0)
                throw Error("the checkpoint's loss_scaler.scale " + s.at("scale").dump() +
                            " is not a positive finite number");
            range("loss_scaler.clean", c.state.scaler.clean, 0, step);
            range("loss_scaler.skipped", c.state.scaler.skipped, 0, step);
        }
    } catch (const json::exception& err) {
        throw Error(std::string("the checkpoint's metadata is incomplete: ") + err.what());
    }
}

}  // namespace

Checkpoint read_checkpoint(const std::string& path, const config::Experiment& e,
                           const TensorNames& names, const std::vector<Shape>& shapes,
                           const std::vector<Shape>& buffer_shapes, int64_t planned_steps) {
    PARALAB_CHECK(shapes.size() == names.parameters.size(), "checkpoint: shapes do not fit the names");
    PARALAB_CHECK(buffer_shapes.size() <= names.buffers.size(), "checkpoint: buffer shapes do not fit the names");
    auto fail = [&](const std::string& cause) -> Error { return Error(path + ": " + cause); };
    Checkpoint c;
    c.path = path;
    // Every tensor the run needs, by name and shape: the parameters, the buffers, the optimizer state.
    std::vector<std::pair<std::string, const Shape*>> wanted;
    auto want_all = [&] {
        wanted.clear();
        for (size_t i = 0; i < shapes.size(); ++i) wanted.emplace_back(names.parameters[i], &shapes[i]);
        for (size_t i = 0; i < buffer_shapes.size(); ++i) wanted.emplace_back(names.buffers[i], &buffer_shapes[i]);
        for (const std::string& s : c.state.optimizer_state_names)
            for (size_t i = 0; i < shapes.size(); ++i) {
                std::string name = "optim.";
                name += names.parameters[i];
                name += '.';
                name += s;
                wanted.emplace_back(std::move(name), &shapes[i]);
            }
    };
    // The metadata and the tensors' names, types and shapes are checked on the header, before
    // the data is read: a file that does not fit is refused without reading (or allocating) its data.
    const io::SafetensorsFile file = io::SafetensorsFile::read(path, [&](const io::SafetensorsFile& f) {
        const auto it = f.metadata().find(kMetadataKey);
        if (it == f.metadata().end()) throw fail("not a ParaLab checkpoint (no \"paralab\" metadata)");
        try {
            read_metadata(it->second, e, planned_steps, c);
        } catch (const Error& err) {
            throw fail(err.what());
        }
        // Each state name stands for one tensor per parameter: a list longer than the file's
        // tensors could hold is refused before the names are made.
        const size_t per_state = std::max<size_t>(shapes.size(), 1);
        if (c.state.optimizer_state_names.size() > f.entries().size() / per_state)
            throw fail("the checkpoint's optimizer.state_names lists " +
                       std::to_string(c.state.optimizer_state_names.size()) + " states, more than its " +
                       std::to_string(f.entries().size()) + " tensors can hold");
        want_all();
        for (const auto& [name, shape] : wanted) {
            const io::StEntry* entry = f.find(name);
            if (!entry) throw fail("the tensor " + name + " is missing");
            if (!dtype_of(entry->dtype))
                throw fail("the tensor " + name + " has type " + std::string(io::st_dtype_name(entry->dtype)));
            const Shape got(entry->shape);
            if (got != *shape)
                throw fail("the tensor " + name + " is " + got.to_string() + ", the model's " + shape->to_string());
        }
    });
    auto tensor = [&](const std::string& name, const Shape& shape) {
        const io::StEntry* entry = file.find(name);
        Tensor t = Tensor::empty(shape, *dtype_of(entry->dtype), detached_host_device(), MemCategory::workspace);
        std::memcpy(t.raw(), file.data(*entry), t.nbytes());
        return t;
    };
    size_t k = 0;
    for (size_t i = 0; i < shapes.size(); ++i, ++k) c.state.parameters.push_back(tensor(wanted[k].first, shapes[i]));
    for (size_t i = 0; i < buffer_shapes.size(); ++i, ++k)
        c.state.buffers.push_back(tensor(wanted[k].first, buffer_shapes[i]));
    c.state.optimizer_state.resize(shapes.size());
    for (size_t j = 0; j < c.state.optimizer_state_names.size(); ++j)
        for (size_t i = 0; i < shapes.size(); ++i, ++k)
            c.state.optimizer_state[i].push_back(tensor(wanted[k].first, shapes[i]));
    return c;
}

std::optional<Checkpoint> newest_checkpoint(
    const std::string& folder, const config::Experiment& e, const TensorNames& names,
    const std::vector<Shape>& shapes, const std::vector<Shape>& buffer_shapes, int64_t planned_steps,
    const std::function<void(const std::string&, const std::string&)>& refused) {
    for (const std::string& path : checkpoint_files(folder)) {
        try {
            return read_checkpoint(path, e, names, shapes, buffer_shapes, planned_steps);
        } catch (const Error& err) {
            if (refused) refused(path, err.what());
        } catch (const std::bad_alloc&) {
            if (refused) refused(path, path + ": not enough memory to read it");
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
