#pragma once

// Arithmetic modulo the Mersenne prime p = 2^61 - 1, for linear sketches (network::link_sketch):
// sums of products of whole numbers, which are exact and do not depend on the order they are
// added in. Values are kept reduced (below p).

#include <cstdint>

namespace cs::modp {

inline constexpr std::uint64_t kPrime = (std::uint64_t{1} << 61) - 1;

__extension__ typedef unsigned __int128 Wide;  // GCC and Clang's 128-bit integer

// x mod p for any 64-bit x: 2^61 = 1 (mod p), so x = hi * 2^61 + lo is hi + lo.
constexpr std::uint64_t of(std::uint64_t x) {
    const std::uint64_t r = (x & kPrime) + (x >> 61);  // below p + 8
    return r >= kPrime ? r - kPrime : r;
}

// (a + b) mod p for a, b below p.
constexpr std::uint64_t add(std::uint64_t a, std::uint64_t b) {
    const std::uint64_t s = a + b;  // below 2^62
    return s >= kPrime ? s - kPrime : s;
}

// (a * b) mod p for a, b below p: the 122-bit product folded at bit 61 (hi below 2^61, lo below
// 2^61), so one conditional subtraction finishes it.
constexpr std::uint64_t mul(std::uint64_t a, std::uint64_t b) {
    const Wide x = static_cast<Wide>(a) * b;
    const auto lo = static_cast<std::uint64_t>(x) & kPrime;
    const auto hi = static_cast<std::uint64_t>(x >> 61);
    return add(lo, hi);
}

}  // namespace cs::modp
