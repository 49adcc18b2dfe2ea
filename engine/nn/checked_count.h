// Counts of a model (FLOPs, parameters, numbers per example) formed without wrapping: a model
// of absurd sizes is a ShapeError naming the count, never a negative or wrapped figure.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "engine/util/error.h"

namespace paralab::nn {

// The largest tensor a layer may make, in elements (per example for activations): 2^40, 4 TiB
// of f32. Within it, every count a layer forms from its shapes fits an int64.
constexpr int64_t kMaxTensorElements = int64_t{1} << 40;

// The product of `factors`; throws ShapeError("<what> ... more than a 64-bit count holds").
inline int64_t checked_product(std::initializer_list<int64_t> factors, const char* what) {
    int64_t n = 1;
    for (int64_t f : factors)
        if (__builtin_mul_overflow(n, f, &n))
            throw ShapeError(std::string("its ") + what + " are more than a 64-bit count holds");
    return n;
}

inline int64_t checked_sum(int64_t a, int64_t b, const char* what) {
    int64_t n = 0;
    if (__builtin_add_overflow(a, b, &n))
        throw ShapeError(std::string("its ") + what + " are more than a 64-bit count holds");
    return n;
}

}  // namespace paralab::nn
