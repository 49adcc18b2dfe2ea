// Seeded random numbers. Every random choice in the engine (initial weights, dropout masks,
// shuffles, synthetic data) goes through these so that a run is repeatable from its seed.
#pragma once

#include <cmath>
#include <cstdint>

namespace paralab {

// SplitMix64: the standard 64-bit mixer; also used to derive independent streams from a seed.
inline uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// Counter-based uniform in [0,1) from (key, counter): a dropout mask can be recomputed from
// its key and element index without storing generator state.
inline double hash_uniform(uint64_t key, uint64_t counter) {
    return static_cast<double>(splitmix64(key ^ splitmix64(counter)) >> 11) * 0x1.0p-53;
}

// xoshiro256** generator, seeded through SplitMix64.
class Rng {
public:
    explicit Rng(uint64_t seed = 0) { reseed(seed); }

    void reseed(uint64_t seed) {
        uint64_t x = seed;
        for (auto& s : m_state) {
            x = splitmix64(x);
            s = x;
        }
        m_has_spare = false;
    }

    uint64_t next_u64() {
        const uint64_t result = rotl(m_state[1] * 5, 7) * 9;
        const uint64_t t = m_state[1] << 17;
        m_state[2] ^= m_state[0];
        m_state[3] ^= m_state[1];
        m_state[1] ^= m_state[2];
        m_state[0] ^= m_state[3];
        m_state[2] ^= t;
        m_state[3] = rotl(m_state[3], 45);
        return result;
    }

    // Uniform in [0, 1).
    double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
    double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }

    // Uniform integer in [0, n).
    uint64_t below(uint64_t n) { return n == 0 ? 0 : next_u64() % n; }

    // Standard normal (Marsaglia polar method).
    double normal() {
        if (m_has_spare) {
            m_has_spare = false;
            return m_spare;
        }
        double u, v, s;
        do {
            u = uniform(-1.0, 1.0);
            v = uniform(-1.0, 1.0);
            s = u * u + v * v;
        } while (s >= 1.0 || s == 0.0);
        const double f = std::sqrt(-2.0 * std::log(s) / s);
        m_spare = v * f;
        m_has_spare = true;
        return u * f;
    }

    // A new generator whose stream is independent of this one's (for a layer, a worker...).
    Rng split() { return Rng(next_u64()); }

private:
    static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
    uint64_t m_state[4]{};
    double m_spare = 0.0;
    bool m_has_spare = false;
};

}  // namespace paralab
