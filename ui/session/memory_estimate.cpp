#include "ui/session/memory_estimate.h"

#include <algorithm>
#include <numeric>

#include "engine/device/device.h"
#include "engine/nn/model.h"
#include "engine/strategy/stages.h"

namespace paralab::ui {

namespace {

constexpr int64_t kF32 = 4;
constexpr auto idx(MemCategory c) {
    return static_cast<size_t>(c);
}

// Rows of a global batch of `batch` over `shards` devices for shard `r`: batch / shards, the
// first batch % shards one more (docs/strategies.md, "Batch split").
int64_t rows_of(int64_t batch, int r, int shards) {
    if (shards <= 0) return 0;
    return batch / shards + (r < batch % shards ? 1 : 0);
}

int64_t ceil_div(int64_t a, int64_t b) {
    return b > 0 ? (a + b - 1) / b : 0;
}

}  // namespace

int64_t DeviceMemoryEstimate::total() const {
    return std::accumulate(bytes.begin(), bytes.end(), int64_t{0});
}

int64_t ModelCost::parameters() const {
    return std::accumulate(layer_parameters.begin(), layer_parameters.end(), int64_t{0});
}

int optimizer_state_per_parameter(const optim::OptimizerConfig& o) {
    if (o.type == "adam" || o.type == "adamw") return 2;
    return o.momentum > 0 ? 1 : 0;
}

ModelCost model_cost(const run::Experiment& e) {
    const Shape input = run::model_input_shape(e);
    auto device = make_cpu_device(0);
    nn::Model model(e.layers, input, e.loss, DType::f32, *device);
    ModelCost cost;
    cost.input_numel = input.numel();
    cost.output_numel = model.output_shape().numel();
    for (const auto& row : model.summary()) {
        if (row.depth == 0) {
            cost.layer_parameters.push_back(row.parameters);
            cost.layer_outputs.push_back(row.output.numel());
        } else if (!cost.layer_outputs.empty()) {
            cost.layer_outputs.back() += row.output.numel();  // a residual body's outputs
        }
    }
    return cost;
}

std::vector<DeviceMemoryEstimate> estimate_memory(const run::Experiment& e, const ModelCost& m) {
    const auto& s = e.strategy;
    const int n = std::max<int>(1, static_cast<int>(e.devices.size()));
    const int64_t batch = e.data.batch_size;
    const int64_t p = m.parameters();
    const int64_t k = optimizer_state_per_parameter(e.optimizer);
    const int64_t largestLayer =
        m.layer_parameters.empty()
            ? 0
            : *std::max_element(m.layer_parameters.begin(), m.layer_parameters.end());
    const int64_t perExample =
        m.input_numel + std::accumulate(m.layer_outputs.begin(), m.layer_outputs.end(), int64_t{0});

    std::vector<DeviceMemoryEstimate> out(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r)
        out[r].device =
            r < static_cast<int>(e.devices.size()) ? e.devices[r] : "cpu:" + std::to_string(r);
    auto set = [&](int r, MemCategory c, int64_t numbers) {
        out[r].bytes[idx(c)] = numbers * kF32;
    };

    const std::string& t = s.type;
    if (t == "single" || n == 1) {
        for (int r = 0; r < n; ++r) {
            out[r].role = "single";
            set(r, MemCategory::parameters, p);
            set(r, MemCategory::gradients, p);
            set(r, MemCategory::optimizer_state, k * p);
            set(r, MemCategory::activations, perExample * batch);
        }
    } else if (t == "data_parallel" || t == "ddp" || t == "zero" || t == "hogwild") {
        for (int r = 0; r < n; ++r) {
            const int64_t rows = rows_of(batch, r, n);
            out[r].role = "replica";
            set(r, MemCategory::parameters, p);
            set(r, MemCategory::gradients, p);
            set(r, MemCategory::optimizer_state, k * p);
            set(r, MemCategory::activations, perExample * rows);
            // ddp: the gradients are views of the buckets (counted above); the flat buffer the
            // parameters are broadcast through at the start
            if (t == "ddp") set(r, MemCategory::communication, p);
            if (t == "zero") {
                set(r, MemCategory::optimizer_state, ceil_div(k * p, n));
                // stage 1: the full gradients (the shard is a view of them); stage 2: the
                // shard and the gradients of the layer whose backward is running (the largest,
                // at the peak)
                set(r, MemCategory::gradients, s.zero_stage == 2 ? ceil_div(p, n) + largestLayer : p);
                // the flat buffer the parameters are broadcast through at the start (they are
                // all-gathered in place)
                set(r, MemCategory::communication, p);
            }
            if (t == "data_parallel") {
                set(r, MemCategory::communication, p);  // the flat buffer gradients are reduced in
                if (r == 0) {
                    out[r].role = "device 0: gathers, steps";
                    // the whole batch's outputs and their gradients live on device 0
                    set(r, MemCategory::activations,
                        perExample * rows + 2 * m.output_numel * batch);
                    set(r, MemCategory::communication, p + m.output_numel * batch);
                } else {
                    set(r, MemCategory::optimizer_state, 0);
                }
            }
            if (t == "hogwild" && r != 0) {
                out[r].role = "worker (shared parameters)";
                set(r, MemCategory::parameters, 0);  // they use device 0's values
            }
            if (t == "hogwild" && r == 0) out[r].role = "holds the shared parameters";
        }
    } else if (t == "param_server") {
        const int workers = n - 1;
        out[0].role = "server";
        set(0, MemCategory::parameters, p);
        set(0, MemCategory::gradients, p);  // the pushes summed
        set(0, MemCategory::optimizer_state, k * p);
        set(0, MemCategory::communication,
            (workers + 1) * p);  // a buffer per worker, and one to send
        for (int r = 1; r < n; ++r) {
            out[r].role = "worker";
            set(r, MemCategory::parameters, p);
            set(r, MemCategory::gradients, p);
            set(r, MemCategory::activations, perExample * rows_of(batch, r - 1, workers));
            set(r, MemCategory::communication, p);
        }
    } else if (t == "model_parallel" || t == "pipeline") {
        const int64_t layers = static_cast<int64_t>(m.layer_parameters.size());
        std::vector<int64_t> split = s.split;
        if (split.size() != static_cast<size_t>(n - 1) && n <= layers)
            split = strategy::stages::balanced_split(m.layer_parameters, n);
        std::vector<int64_t> bounds{0};
        for (int64_t b : split) bounds.push_back(std::clamp<int64_t>(b, 0, layers));
        while (static_cast<int>(bounds.size()) < n) bounds.push_back(layers);
        bounds.push_back(layers);
        const bool pipe = t == "pipeline";
        const int64_t micro = pipe ? std::max<int64_t>(1, s.micro_batches) : 1;
        const int64_t microRows = ceil_div(batch, micro);
        for (int r = 0; r < n; ++r) {
            // The stage's input (received, and its gradient sent back) and its layers' outputs;
            // what crosses devices is accounted as activations, not communication.
            const int64_t stageInput =
                bounds[r] == 0 ? m.input_numel : m.layer_outputs[bounds[r] - 1];
            int64_t params = 0, acts = 2 * stageInput;
            for (int64_t l = bounds[r]; l < bounds[r + 1]; ++l)
                params += m.layer_parameters[l], acts += m.layer_outputs[l];
            const int64_t inFlight = !pipe                  ? 1
                                     : s.schedule == "1f1b" ? std::min<int64_t>(micro, n - r)
                                                            : micro;
            out[r].role = "stage " + std::to_string(r + 1) + ": layers " +
                          std::to_string(bounds[r]) + "–" +
                          std::to_string(std::max<int64_t>(bounds[r], bounds[r + 1] - 1));
            set(r, MemCategory::parameters, params);
            set(r, MemCategory::gradients, params);
            set(r, MemCategory::optimizer_state, k * params);
            set(r, MemCategory::activations, acts * microRows * inFlight);
        }
    }
    return out;
}

}  // namespace paralab::ui
