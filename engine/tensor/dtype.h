// Element types. f32 is the training type everywhere; f64 runs the same layer code on the CPU
// as the double-precision reference that gradient checks use; bf16/f16 are storage types
// reserved for the CUDA backend's mixed precision.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "engine/util/error.h"

namespace paralab {

enum class DType : uint8_t { f32, f64, bf16, f16 };

constexpr size_t dtype_size(DType t) {
    switch (t) {
        case DType::f32: return 4;
        case DType::f64: return 8;
        case DType::bf16:
        case DType::f16: return 2;
    }
    return 0;
}

constexpr std::string_view dtype_name(DType t) {
    switch (t) {
        case DType::f32: return "f32";
        case DType::f64: return "f64";
        case DType::bf16: return "bf16";
        case DType::f16: return "f16";
    }
    return "?";
}

template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() { return DType::f32; }
template <>
constexpr DType dtype_of<double>() { return DType::f64; }

// Calls fn.template operator()<T>() with T = float or double according to `t`: the way layers
// run one templated body for both the f32 engine and the f64 reference.
template <class Fn>
decltype(auto) dispatch_float(DType t, Fn&& fn) {
    switch (t) {
        case DType::f32: return fn.template operator()<float>();
        case DType::f64: return fn.template operator()<double>();
        default: break;
    }
    throw Error("operation supports only f32 and f64 tensors on this device, got " +
                std::string(dtype_name(t)));
}

}  // namespace paralab
