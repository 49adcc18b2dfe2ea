// A fixture for tests of single layers: a CPU device, random f64 tensors, and a layer built in
// f64 on it with seeded parameters, labelled as the file's second layer.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "engine/device/device.h"
#include "engine/nn/layer.h"
#include "engine/util/rng.h"

namespace paralab::testing {

class LayerFixture : public ::testing::Test {
protected:
    std::unique_ptr<Device> m_device = make_cpu_device(0);

    Tensor random(const Shape& shape, uint64_t seed) {
        Rng rng(seed);
        Tensor t = Tensor::empty(shape, DType::f64, *m_device, MemCategory::activations);
        for (double& v : t.span<double>()) v = rng.normal();
        return t;
    }
    std::unique_ptr<nn::Layer> built(std::unique_ptr<nn::Layer> layer, const Shape& input) {
        layer->set_label("model.layers[1] (" + layer->type() + ")", "model.layers[1]");
        layer->build(input, DType::f64, *m_device);
        Rng rng(3);
        layer->reset_parameters(rng);
        return layer;
    }
};

}  // namespace paralab::testing
