#include "engine/random.hpp"

#include <cmath>
#include <numbers>

#include "core/errors.hpp"
#include "core/hash.hpp"

namespace cs {
namespace {
constexpr std::uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

}  // namespace

RandomStream::RandomStream(std::uint64_t seed, std::uint64_t stream_id) {
    // The key mixes the seed before adding the id, so for one seed distinct ids give distinct
    // keys (mix64 is a bijection), and neighbouring ids land far apart.
    std::uint64_t x = mix64(mix64(seed + kGolden) + stream_id);
    for (std::uint64_t& word : s_) {
        x += kGolden;
        word = mix64(x);
    }
    // xoshiro's only bad state; splitmix64 output never gives four zeros, but be sure.
    if ((s_[0] | s_[1] | s_[2] | s_[3]) == 0) s_[0] = kGolden;
}

std::uint64_t RandomStream::below(std::uint64_t n) {
    if (n == 0) throw SimulationError("random", "below(0): the range is empty");
    __extension__ using U128 = unsigned __int128;
    U128 m = static_cast<U128>(next()) * n;
    auto low = static_cast<std::uint64_t>(m);
    if (low < n) {
        const std::uint64_t threshold = (0 - n) % n;  // 2^64 mod n
        while (low < threshold) {
            m = static_cast<U128>(next()) * n;
            low = static_cast<std::uint64_t>(m);
        }
    }
    return static_cast<std::uint64_t>(m >> 64);
}

double RandomStream::normal() {
    // 1 - uniform() is in (0, 1], so the logarithm is finite.
    const double u1 = 1.0 - uniform();
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace cs
