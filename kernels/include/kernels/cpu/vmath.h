// Single-precision exp, sigmoid and tanh that vectorize: plain arithmetic and bit operations,
// no libm call, so an `omp simd` loop over them runs in vector registers. glibc's expf is a
// scalar call (~4 ns); an LSTM step evaluates five of them per cell element (docs/benchmarks.md,
// "Layer kernels"). Accuracy against
// libm is tested in tests/kernels/test_vmath.cpp.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace paralab::kernels::cpu::vmath {

// e^x within 2 ulp of std::exp for x in [-87.3, 88.7]; +inf above (as std::exp), 0 below
// -87.33 (where std::exp returns subnormals: every caller here adds it to 1 or divides by
// 1 + it, where a subnormal and 0 give the same result); NaN stays NaN.
inline float exp(float x) {
    constexpr float kLog2e = 1.44269504088896341f;
    constexpr float kLn2Hi = 0.693359375f;    // ln 2 split so that n * kLn2Hi is exact
    constexpr float kLn2Lo = -2.12194440e-4f;
    constexpr float kMax = 88.7228394f;       // above: +inf
    constexpr float kMin = -87.3365479f;      // below: 0 (e^kMin is FLT_MIN)
    constexpr float kRound = 12582912.0f;     // 1.5 * 2^23: adding it rounds to an integer
    const float xc = x < kMin ? kMin : (x > kMax ? kMax : x);
    // x = n ln2 + r, |r| <= ln2 / 2
    const float n = (xc * kLog2e + kRound) - kRound;
    const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
    // e^r by its Taylor series to r^7 (the next term is < 1e-8 relative on |r| <= 0.347)
    float p = 1.0f / 5040;
    p = p * r + 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    // 2^n as two normal powers of two (n reaches 128 at kMax, past the largest exponent)
    const int32_t k = static_cast<int32_t>(n);
    const int32_t k1 = k >> 1, k2 = k - k1;
    const float s1 = std::bit_cast<float>((k1 + 127) << 23);
    const float s2 = std::bit_cast<float>((k2 + 127) << 23);
    float y = p * s1 * s2;
    y = x > kMax ? std::numeric_limits<float>::infinity() : y;
    y = x < kMin ? 0.0f : y;
    return x != x ? x : y;
}

// 1 / (1 + e^-x): 0 for x below about -88, 1 above about 17, NaN for NaN.
inline float sigmoid(float x) { return 1.0f / (1.0f + exp(-x)); }

// tanh within 3 ulp of std::tanh: (1 - e) / (1 + e) with e = e^(-2|x|) and the sign of x; below
// |x| = 0.55, where 1 - e cancels enough to cost ulps, the odd Taylor series to x^15 (the next
// term is under 2e-8 relative there). Both are computed and one
// selected, so the loop has no branch. +-inf give +-1, NaN gives NaN.
inline float tanh(float x) {
    const float a = std::fabs(x);
    const float s = x * x;
    const float small =
        x * (1.0f +
             s * (-1.0f / 3 +
                  s * (2.0f / 15 +
                       s * (-17.0f / 315 +
                            s * (62.0f / 2835 +
                                 s * (-1382.0f / 155925 +
                                      s * (21844.0f / 6081075 + s * (-929569.0f / 638512875))))))));
    const float e = exp(-2.0f * a);
    const float big = std::copysign((1.0f - e) / (1.0f + e), x);
    return a < 0.55f ? small : big;
}

// The GELU's cumulative normal, Phi(x) = 0.5 (1 + erf(x / sqrt 2)), within 4e-7 of libm's
// (absolute: Phi is in [0, 1], and GELU = x Phi(x) inherits the bound relative to x). erf is
// Abramowitz and Stegun 7.1.26, 1 - (a1 t + ... + a5 t^5) e^{-z^2} with t = 1 / (1 + p z),
// |error| <= 1.5e-7, on z = |x| / sqrt 2 and mirrored; no branch. NaN gives NaN.
// normal_cdf given e = e^{-x^2 / 2} (which the density shares).
inline float normal_cdf_with(float x, float e) {
    const float z = std::fabs(x) * 0.70710678118654752f;
    const float t = 1.0f / (1.0f + 0.3275911f * z);
    const float poly =
        t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
    const float erf_z = 1.0f - poly * e;
    return 0.5f + 0.5f * std::copysign(erf_z, x);
}
inline float normal_cdf(float x) { return normal_cdf_with(x, exp(-0.5f * x * x)); }

// The standard normal density, phi(x) = e^{-x^2 / 2} / sqrt(2 pi).
inline float normal_pdf(float x) { return 0.39894228040143268f * exp(-0.5f * x * x); }

// d GELU / dx = Phi(x) + x phi(x), with one exponential for both.
inline float gelu_derivative(float x) {
    const float e = exp(-0.5f * x * x);
    return normal_cdf_with(x, e) + x * (0.39894228040143268f * e);
}

}  // namespace paralab::kernels::cpu::vmath
