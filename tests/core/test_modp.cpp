// Arithmetic modulo p = 2^61 - 1 (core/modp.hpp), the link sketch's field.
#include <doctest/doctest.h>

#include <cstdint>

#include "core/modp.hpp"

using cs::modp::kPrime;

TEST_CASE("modp: reduction, addition and multiplication modulo 2^61 - 1") {
    // 2^61 = p + 1, so it is 1; 2^62 = 2 x 2^61 is 2; 2^64 - 1 = 8 x 2^61 - 1 is 8 - 1 = 7.
    CHECK(cs::modp::of(0) == 0);
    CHECK(cs::modp::of(kPrime) == 0);
    CHECK(cs::modp::of(kPrime - 1) == kPrime - 1);
    CHECK(cs::modp::of(std::uint64_t{1} << 61) == 1);
    CHECK(cs::modp::of(std::uint64_t{1} << 62) == 2);
    CHECK(cs::modp::of(~std::uint64_t{0}) == 7);
    // (p - 1) + 1 = p is 0; (p - 1) + (p - 1) = 2p - 2 is p - 2.
    CHECK(cs::modp::add(kPrime - 1, 1) == 0);
    CHECK(cs::modp::add(kPrime - 1, kPrime - 1) == kPrime - 2);
    // (p - 1)^2 = (-1)^2 = 1; 2^60 x 2 = 2^61 is 1; 2^31 x 2^30 = 2^61 is 1 as well;
    // 3 x 5 = 15 stays below p.
    CHECK(cs::modp::mul(kPrime - 1, kPrime - 1) == 1);
    CHECK(cs::modp::mul(std::uint64_t{1} << 60, 2) == 1);
    CHECK(cs::modp::mul(std::uint64_t{1} << 31, std::uint64_t{1} << 30) == 1);
    CHECK(cs::modp::mul(3, 5) == 15);
    // (p - 1) x 2 = -2 is p - 2; 0 x anything is 0.
    CHECK(cs::modp::mul(kPrime - 1, 2) == kPrime - 2);
    CHECK(cs::modp::mul(0, kPrime - 1) == 0);
    // Linearity, which the sketch relies on: a x (b + c) = a x b + a x c for values near p.
    const std::uint64_t a = kPrime - 12345, b = kPrime - 3, c = 987654321987ULL;
    CHECK(cs::modp::mul(a, cs::modp::add(b, c)) ==
          cs::modp::add(cs::modp::mul(a, b), cs::modp::mul(a, c)));
}
