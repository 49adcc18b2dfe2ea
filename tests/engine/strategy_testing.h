// What the strategy tests share: device lists, running an experiment with its artifacts, and
// comparing trained parameters with the single device's.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/run/experiment.h"
#include "engine/run/trainer.h"

namespace strategy_testing {

using nlohmann::json;

// ["cpu:0", ..., "cpu:<n-1>"]
inline json devices(int n) {
    json d = json::array();
    for (int i = 0; i < n; ++i) d.push_back("cpu:" + std::to_string(i));
    return d;
}

inline json with_strategy(json j, int n, json strategy) {
    j["devices"] = devices(n);
    j["strategy"] = std::move(strategy);
    return j;
}

struct Result {
    paralab::run::RunSummary summary;
    paralab::run::RunArtifacts artifacts;  // host copies: valid after the run
};

inline Result run_it(const json& j, paralab::run::RunObserver* observer = nullptr,
                     paralab::run::RunControl* control = nullptr) {
    Result r;
    r.summary = paralab::run::run_experiment(paralab::run::parse_experiment(j), observer, control, 1, &r.artifacts);
    return r;
}

// Largest |a - b| over all elements, relative to 1 + the largest |a|.
inline double max_rel_diff(const std::vector<paralab::Tensor>& a, const std::vector<paralab::Tensor>& b) {
    EXPECT_EQ(a.size(), b.size());
    double diff = 0, scale = 0;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
        EXPECT_EQ(a[i].shape(), b[i].shape()) << "tensor " << i;
        if (a[i].shape() != b[i].shape()) return INFINITY;
        const float* x = a[i].data<float>();
        const float* y = b[i].data<float>();
        for (int64_t k = 0; k < a[i].numel(); ++k) {
            diff = std::max(diff, std::abs(static_cast<double>(x[k]) - y[k]));
            scale = std::max(scale, std::abs(static_cast<double>(x[k])));
        }
    }
    return diff / (1 + scale);
}

}  // namespace strategy_testing
