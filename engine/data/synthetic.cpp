#include "engine/data/synthetic.h"

#include <cmath>
#include <numbers>

#include "engine/util/error.h"
#include "engine/util/rng.h"

namespace paralab::data {
namespace {

constexpr double two_pi = 2.0 * std::numbers::pi;

struct Resolved {
    int64_t samples, classes, seq_len, features;
    double noise;
};

Resolved resolve(const DataConfig& cfg) {
    const SyntheticDefaults d = synthetic_defaults(cfg.dataset);
    return Resolved{
        cfg.samples > 0 ? cfg.samples : d.samples, cfg.classes > 0 ? cfg.classes : d.classes,
        cfg.seq_len > 0 ? cfg.seq_len : d.seq_len, cfg.features > 0 ? cfg.features : d.features,
        cfg.noise >= 0 ? cfg.noise : d.noise};
}

// Examples are generated class by class; class c gets samples / classes examples and the
// first samples % classes classes one more, so the classes are balanced.
int64_t class_count(int64_t samples, int64_t classes, int64_t c) {
    return samples / classes + (c < samples % classes ? 1 : 0);
}

Dataset empty_classification(const std::string& name, std::vector<int64_t> sample_shape,
                             int64_t classes, int64_t samples) {
    Dataset ds;
    ds.name = name;
    ds.sample_shape = std::move(sample_shape);
    ds.num_classes = classes;
    ds.inputs.reserve(static_cast<size_t>(samples * ds.sample_numel()));
    ds.targets.reserve(static_cast<size_t>(samples));
    return ds;
}

}  // namespace

SyntheticDefaults synthetic_defaults(const std::string& dataset) {
    if (dataset == "spirals") return {3000, 3, 0, 2, 0.2};
    if (dataset == "blobs") return {2000, 4, 0, 2, 0.5};
    if (dataset == "sine") return {4000, 0, 20, 1, 0.05};
    if (dataset == "seqclass") return {4000, 4, 20, 4, 0.8};
    throw ConfigError("data.dataset", "'" + dataset + "' is not a synthetic data set");
}

// out: samples x {2}; class c occupies arm c.
Dataset make_spirals(const DataConfig& cfg, uint64_t seed) {
    const Resolved p = resolve(cfg);
    Rng rng(seed);
    Dataset ds = empty_classification("spirals", {2}, p.classes, p.samples);
    for (int64_t c = 0; c < p.classes; ++c) {
        const int64_t n = class_count(p.samples, p.classes, c);
        for (int64_t i = 0; i < n; ++i) {
            // np.linspace(0, 1, n): both ends included, so every arm reaches the centre.
            const double r = n > 1 ? static_cast<double>(i) / static_cast<double>(n - 1) : 0.0;
            const double theta = 4.0 * static_cast<double>(c) + 4.0 * r + p.noise * rng.normal();
            ds.inputs.push_back(static_cast<float>(r * std::sin(theta)));
            ds.inputs.push_back(static_cast<float>(r * std::cos(theta)));
            ds.targets.push_back(static_cast<float>(c));
        }
    }
    return ds;
}

// out: samples x {features}.
Dataset make_blobs(const DataConfig& cfg, uint64_t seed) {
    const Resolved p = resolve(cfg);
    constexpr double radius = 3.0;
    Rng rng(seed);
    const int64_t dims = p.features;
    std::vector<double> centers(static_cast<size_t>(p.classes * dims), 0.0);
    if (dims == 1) {
        // A "circle" in one dimension: evenly spaced on [-radius, radius].
        for (int64_t c = 0; c < p.classes; ++c)
            centers[c] = p.classes > 1 ? -radius + 2.0 * radius * c / (p.classes - 1) : 0.0;
    } else if (dims == 2) {
        const double rotation = rng.uniform(0.0, two_pi);
        for (int64_t c = 0; c < p.classes; ++c) {
            const double a = rotation + two_pi * static_cast<double>(c) / p.classes;
            centers[c * 2] = radius * std::cos(a);
            centers[c * 2 + 1] = radius * std::sin(a);
        }
    } else {
        // Random directions on the sphere (normalised Gaussian vectors).
        for (int64_t c = 0; c < p.classes; ++c) {
            double norm2 = 0.0;
            double* center = &centers[c * dims];
            do {
                norm2 = 0.0;
                for (int64_t d = 0; d < dims; ++d) {
                    center[d] = rng.normal();
                    norm2 += center[d] * center[d];
                }
            } while (norm2 < 1e-12);
            const double scale = radius / std::sqrt(norm2);
            for (int64_t d = 0; d < dims; ++d) center[d] *= scale;
        }
    }
    Dataset ds = empty_classification("blobs", {dims}, p.classes, p.samples);
    for (int64_t c = 0; c < p.classes; ++c) {
        const int64_t n = class_count(p.samples, p.classes, c);
        for (int64_t i = 0; i < n; ++i) {
            for (int64_t d = 0; d < dims; ++d)
                ds.inputs.push_back(
                    static_cast<float>(centers[c * dims + d] + p.noise * rng.normal()));
            ds.targets.push_back(static_cast<float>(c));
        }
    }
    return ds;
}

// out: samples x {seq_len, 1} -> target {1}.
Dataset make_sine(const DataConfig& cfg, uint64_t seed) {
    const Resolved p = resolve(cfg);
    Rng rng(seed);
    Dataset ds;
    ds.name = "sine";
    ds.sample_shape = {p.seq_len, 1};
    ds.target_shape = {1};
    ds.inputs.reserve(static_cast<size_t>(p.samples * p.seq_len));
    ds.targets.reserve(static_cast<size_t>(p.samples));
    for (int64_t i = 0; i < p.samples; ++i) {
        const double amplitude = rng.uniform(0.5, 1.5);
        const double omega = rng.uniform(0.15, 0.6);
        const double phase = rng.uniform(0.0, two_pi);
        for (int64_t t = 0; t < p.seq_len; ++t) {
            const double clean = amplitude * std::sin(omega * static_cast<double>(t) + phase);
            ds.inputs.push_back(static_cast<float>(clean + p.noise * rng.normal()));
        }
        ds.targets.push_back(static_cast<float>(
            amplitude * std::sin(omega * static_cast<double>(p.seq_len) + phase)));
    }
    return ds;
}

// out: samples x {seq_len, features}.
Dataset make_seqclass(const DataConfig& cfg, uint64_t seed) {
    const Resolved p = resolve(cfg);
    Rng rng(seed);
    const int64_t steps = p.seq_len, feats = p.features;
    // Frequencies spread over (0, pi): distinct classes stay distinct, none aliases another.
    std::vector<float> prototypes(static_cast<size_t>(p.classes * steps * feats));
    for (int64_t c = 0; c < p.classes; ++c) {
        const double omega = std::numbers::pi * static_cast<double>(c + 1) / (p.classes + 1);
        for (int64_t f = 0; f < feats; ++f) {
            const double phase = rng.uniform(0.0, two_pi);
            for (int64_t t = 0; t < steps; ++t)
                prototypes[(c * steps + t) * feats + f] =
                    static_cast<float>(std::sin(omega * static_cast<double>(t) + phase));
        }
    }
    Dataset ds = empty_classification("seqclass", {steps, feats}, p.classes, p.samples);
    for (int64_t c = 0; c < p.classes; ++c) {
        const float* proto = &prototypes[c * steps * feats];
        const int64_t n = class_count(p.samples, p.classes, c);
        for (int64_t i = 0; i < n; ++i) {
            const double scale = rng.uniform(0.8, 1.2);
            for (int64_t k = 0; k < steps * feats; ++k)
                ds.inputs.push_back(static_cast<float>(scale * proto[k] + p.noise * rng.normal()));
            ds.targets.push_back(static_cast<float>(c));
        }
    }
    return ds;
}

Dataset make_synthetic(const DataConfig& cfg, uint64_t seed) {
    if (cfg.dataset == "spirals") return make_spirals(cfg, seed);
    if (cfg.dataset == "blobs") return make_blobs(cfg, seed);
    if (cfg.dataset == "sine") return make_sine(cfg, seed);
    if (cfg.dataset == "seqclass") return make_seqclass(cfg, seed);
    throw ConfigError("data.dataset", "'" + cfg.dataset + "' is not a synthetic data set");
}

}  // namespace paralab::data
