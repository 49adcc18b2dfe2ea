// The memory each device of a run should need, by category, predicted from the experiment and
// the model's shapes before anything runs (the Strategy panel's bars). Plain C++: no Qt.
//
// Rules (bytes are f32, 4 per number; P = parameters, k = optimizer numbers per parameter:
// 0 for plain SGD, 1 for SGD with momentum, 2 for Adam/AdamW; rows = the device's share of the
// global batch, shard_of_batch's rule):
//   parameters   P on every replica; a stage's own parameters (model_parallel, pipeline); only
//                the server's for param_server's server, hogwild's shared set on device 0
//   gradients    P per replica (ddp's and zero stage 1's are views of flat buffers, reduced in
//                place); zero stage 2: the shard P / N and the largest top-level layer's
//                gradients, alive during its backward; the server: P (the workers' pushes summed)
//   optimizer    k·P; zero: k·P / N; data_parallel: on device 0 only
//   activations  (input + every layer's output) per example × rows; a stage: its input twice
//                (received, and its gradient sent back) and its layers' outputs, × the
//                micro-batches it holds in flight (GPipe all of them, 1F1B at most p − s)
//   communication ddp and zero: the flat buffer the parameters are broadcast through at the
//                start (P; the peak); data_parallel: the reduce buffer (P) and, on device 0, the
//                gathered outputs; param_server: P per worker plus one on the server, P on a
//                worker; stages: none (what they send is accounted as activations)
// It is an estimate, checked against real runs (tests/ui/test_setup_panels.cpp): parameters,
// gradients, optimizer state and communication within ±35% (mostly exact up to the allocator's
// 64-byte rounding); activations are the rough part (backward's temporaries, the loss's
// buffers, a layer's saved inputs; convolutions and recurrent layers keep more), within a
// factor of 2.5 on the tested MLP. Workspace is not predicted (zero keeps its shard's master
// copy there, P / N).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/run/experiment.h"
#include "engine/tensor/allocator.h"

namespace paralab::ui {

struct DeviceMemoryEstimate {
    std::string device;  // "cpu:0"
    std::string role;    // "replica", "server", "worker", "stage 2", "device 0 (gathers)", ...
    std::array<int64_t, kMemCategoryCount> bytes{};
    int64_t total() const;
};

// The model as the estimator needs it: per top-level layer, its parameters and the numbers it
// outputs per example (a residual block's body counted with it).
struct ModelCost {
    std::vector<int64_t> layer_parameters;
    std::vector<int64_t> layer_outputs;
    int64_t input_numel = 0;   // per example
    int64_t output_numel = 0;  // the model's output per example
    int64_t parameters() const;
};

// Builds the model of `e` on a throwaway CPU device to read its shapes. Throws like nn::Model
// (ShapeError, ConfigError) when it does not build.
ModelCost model_cost(const run::Experiment& e);

// One entry per device of `e`, in the experiment's order.
std::vector<DeviceMemoryEstimate> estimate_memory(const run::Experiment& e, const ModelCost& model);

// How many optimizer numbers each parameter carries (0, 1 or 2).
int optimizer_state_per_parameter(const optim::OptimizerConfig& o);

}  // namespace paralab::ui
