// Deterministic random streams for models (stragglers, jitter, faults).
//
// A stream is xoshiro256** (Blackman & Vigna) whose 256-bit state is filled by splitmix64 from a
// key derived from (seed, stream id). Streams with different ids are statistically independent;
// the same (seed, id) gives the same sequence on every platform, in every Simulation. The
// Simulation owns the streams of a run (Simulation::random), so nothing random is global and two
// simulations side by side never share state. A model that draws from its own stream (one per
// worker, say) gets the same numbers whatever order simultaneous events run in.
//
// next(), uniform() and below() are exact integer/bit arithmetic, identical everywhere. normal()
// goes through std::log, std::sqrt and std::cos, whose last bits may differ between C libraries.
#pragma once

#include <cstdint>
#include <limits>

namespace cs {

class RandomStream {
  public:
    using result_type = std::uint64_t;  // a UniformRandomBitGenerator, for <random> if needed

    RandomStream(std::uint64_t seed, std::uint64_t stream_id);

    // 64 uniformly distributed bits.
    std::uint64_t next() {
        const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
        const std::uint64_t t = s_[1] << 17;
        s_[2] ^= s_[0];
        s_[3] ^= s_[1];
        s_[1] ^= s_[2];
        s_[0] ^= s_[3];
        s_[2] ^= t;
        s_[3] = rotl(s_[3], 45);
        return result;
    }
    result_type operator()() { return next(); }
    static constexpr result_type min() { return 0; }
    static constexpr result_type max() { return std::numeric_limits<result_type>::max(); }

    // Uniform in [0, 1), a multiple of 2^-53.
    double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
    // Uniform integer in [0, n) without modulo bias (Lemire's multiply-and-reject); n > 0, else
    // throws SimulationError.
    std::uint64_t below(std::uint64_t n);
    // Standard normal (mean 0, standard deviation 1), Box-Muller.
    double normal();

  private:
    static constexpr std::uint64_t rotl(std::uint64_t x, int k) {
        return (x << k) | (x >> (64 - k));
    }
    std::uint64_t s_[4];
};

}  // namespace cs
