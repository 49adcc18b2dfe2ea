#include "checkpoint_commands.h"

#include <iostream>
#include <optional>

#include "engine/device/device.h"
#include "engine/io/weights.h"
#include "engine/nn/model.h"
#include "engine/run/checkpoint.h"
#include "engine/run/experiment_file.h"
#include "engine/run/generate.h"
#include "engine/store/run_store.h"

namespace paralab::app {

namespace {

// A run's model on a host device, set from its newest usable checkpoint.
struct LoadedRun {
    config::Experiment e;
    std::unique_ptr<Device> device;
    std::unique_ptr<nn::Model> model;
    int64_t step = 0;
};

LoadedRun load_latest(const std::string& store, int64_t run_id) {
    store::RunStore db(store, store::RunStore::Access::read_only);
    const std::optional<store::RunRow> row = db.get_run(run_id);
    if (!row) throw ConfigError("run " + std::to_string(run_id) + " is not in the store " + store);
    LoadedRun r;
    try {
        r.e = run::parse_experiment(row->config);
    } catch (const ConfigError& err) {
        throw ConfigError("the stored experiment of run " + std::to_string(run_id) +
                          " does not read: " + err.what());
    }
    r.device = make_cpu_device(0, 1);
    r.model = std::make_unique<nn::Model>(r.e.layers, run::model_input_shape(r.e), r.e.loss,
                                          DType::f32, *r.device);
    const run::TensorNames names = run::checkpoint_names(*r.model);
    std::vector<Shape> shapes, buffer_shapes;
    for (const nn::Param* p : r.model->parameters()) shapes.push_back(p->value.shape());
    for (const Tensor& b : r.model->buffers()) buffer_shapes.push_back(b.shape());
    const std::string folder = run::checkpoint_folder(store, run_id);
    // The run's planned steps need its data set's size, which is not loaded here: max_steps,
    // when the experiment sets one, bounds them (the metadata's other checks hold regardless).
    const int64_t planned_steps = r.e.train.max_steps.value_or(INT64_MAX);
    const auto c = run::newest_checkpoint(folder, r.e, names, shapes, buffer_shapes, planned_steps,
                                          [](const std::string& path, const std::string& reason) {
                                              std::cerr << "paralab: checkpoint " << path
                                                        << " refused: " << reason << "\n";
                                          });
    if (!c)
        throw ConfigError("run " + std::to_string(run_id) + " has no usable checkpoint (in " +
                          folder + ")");
    const auto params = r.model->parameters();
    for (size_t i = 0; i < params.size(); ++i) params[i]->value.copy_from(c->state.parameters[i]);
    const auto buffers = r.model->buffers();
    for (size_t i = 0; i < buffers.size(); ++i) buffers[i].copy_from(c->state.buffers[i]);
    r.step = c->position.step;
    return r;
}

}  // namespace

int cmd_export_weights(const std::string& store, int64_t run_id, const std::string& file) {
    LoadedRun r = load_latest(store, run_id);
    io::write_weights(file, *r.model,
                      {{"paralab_run", std::to_string(run_id)}, {"step", std::to_string(r.step)}});
    std::cerr << "run " << run_id << " at step " << r.step << ": " << r.model->parameters().size()
              << " parameter tensors written to " << file << "\n";
    return 0;
}

int cmd_generate(const std::string& store, const GenerateArgs& a) {
    LoadedRun r = load_latest(store, a.run_id);
    const Shape input = run::model_input_shape(r.e);
    if (r.e.data.dataset != "text" || input.rank() != 1)
        throw ConfigError("run " + std::to_string(a.run_id) +
                          " is not a text model (its data set is " + r.e.data.dataset +
                          "); generate samples from a model of the text data set");
    run::GenerateOptions g;
    g.prompt = a.prompt.empty() ? "\n" : a.prompt;
    g.tokens = a.tokens;
    g.temperature = a.temperature;
    g.seed = a.seed;
    nn::Model& model = *r.model;
    const std::string text =
        run::generate_text([&model](const Tensor& x) { return model.forward(x, nn::Mode::eval); },
                           *r.device, input[0], g);
    std::cout << a.prompt << run::printable_text(text) << std::endl;
    return 0;
}

}  // namespace paralab::app
