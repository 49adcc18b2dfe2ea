// Synthetic data sets made in process, so that every example runs with nothing installed
// (docs/experiment-format.md). Each generator resolves the config's 0 / negative "use the default" values,
// draws everything from `seed`, and returns the examples in generation order (load_data
// shuffles and splits them).
#pragma once

#include <cstdint>

#include "engine/data/dataset.h"

namespace paralab::data {

// Defaults used when the config leaves a value at 0 (or noise < 0).
struct SyntheticDefaults {
    int64_t samples, classes, seq_len, features;
    double noise;
};
// spirals {3000, 3, -, 2, 0.2}, blobs {2000, 4, -, 2, 0.5}, sine {4000, -, 20, 1, 0.05},
// seqclass {4000, 4, 20, 4, 0.8}. Throws ConfigError for a name that is not synthetic.
SyntheticDefaults synthetic_defaults(const std::string& dataset);

// CS231n's spirals: `classes` interleaved arms in 2-D. Class c, radius r in [0, 1]:
// theta = 4c + 4r + noise * N(0, 1), x = (r sin theta, r cos theta). Classes are balanced
// (their sizes differ by at most one). inputs {2}, class ids.
Dataset make_spirals(const DataConfig& cfg, uint64_t seed);

// Gaussian blobs: `classes` centres at radius 3 (evenly spaced on a circle with a seeded
// rotation in 2-D, seeded random directions in more dimensions), std `noise`.
// inputs {features}, class ids.
Dataset make_blobs(const DataConfig& cfg, uint64_t seed);

// Sequence regression: x_t = A sin(w t + phi) + noise * N(0, 1) for t < seq_len with random
// A in [0.5, 1.5], w in [0.15, 0.6] rad per step, phi in [0, 2 pi); the target is the clean
// next value A sin(w seq_len + phi). inputs {seq_len, 1}, target {1}.
Dataset make_sine(const DataConfig& cfg, uint64_t seed);

// Sequence classification: class k has a prototype sequence P_k[t][f] = sin(w_k t + phi_kf)
// with its own frequency w_k and seeded phases; an example is a P_k[t][f] + noise * N(0, 1)
// with a in [0.8, 1.2]. With the default noise one time step alone identifies the class
// about 3 times in 4, so above ~90% a model has to accumulate evidence over the sequence
// (memory); the whole sequence separates the classes almost perfectly.
// inputs {seq_len, features}, class ids.
Dataset make_seqclass(const DataConfig& cfg, uint64_t seed);

// Dispatch on cfg.dataset.
Dataset make_synthetic(const DataConfig& cfg, uint64_t seed);

}  // namespace paralab::data
