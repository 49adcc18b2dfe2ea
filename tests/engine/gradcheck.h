// One helper proves every layer's backward: the layer is built in f64, its
// analytical gradients (input and every parameter) are compared with central finite
// differences of L = sum(w * forward(x)) for a random w; then the f32 build of the same layer,
// given the same parameters, must agree with the f64 reference in forward and backward.
// Adding a layer to the proof adds one row to a table of GradCase.
#pragma once

#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "engine/nn/layer.h"

namespace paralab::testing {

struct GradCase {
    std::string name;                                  // test-name suffix: letters, digits, _
    std::function<std::unique_ptr<nn::Layer>()> make;  // a fresh, unbuilt layer
    Shape input;                                       // per-sample input shape
    int64_t batch = 2;
    nn::Mode mode = nn::Mode::train;
    int64_t token_vocab = 0;  // > 0: inputs are token ids in [0, vocab), not differentiated
    double rtol = 1e-5;       // finite-difference comparison: |a-n| <= atol + rtol*max(|a|,|n|)
    double atol = 1e-6;
    // A loss the layer adds to the model's loss itself (a mixture of experts' auxiliary losses),
    // read after each forward: the finite differences see L = sum(w * forward(x)) + added_loss.
    std::function<double(nn::Layer&)> added_loss{};
};

inline std::ostream& operator<<(std::ostream& os, const GradCase& c) { return os << c.name; }

// gtest's name generator for INSTANTIATE_TEST_SUITE_P tables of GradCase.
struct GradCaseName {
    template <class Info>
    std::string operator()(const Info& info) const {
        return info.param.name;
    }
};

// GradCase::make for a layer of type L built from `args`: make<nn::Linear>(int64_t{3}).
template <class L, class... Args>
std::function<std::unique_ptr<nn::Layer>()> make(Args... args) {
    return [=]() -> std::unique_ptr<nn::Layer> { return std::make_unique<L>(args...); };
}

// Runs the whole check with gtest assertions (call inside a TEST_P body).
void check_layer_gradients(const GradCase& c);

}  // namespace paralab::testing
