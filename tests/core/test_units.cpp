#include <doctest/doctest.h>

#include "core/errors.hpp"
#include "core/quantity.hpp"
#include "core/units.hpp"

using namespace cs;

TEST_CASE("transfer_time rounds up to whole picoseconds") {
    // 1 byte at 3 B/s is 1/3 s = 333333333333.33 ps -> 333333333334 ps.
    CHECK(transfer_time(Bytes{1}, Bandwidth{3}).count_ps() == 333333333334);
    // 450 GB/s moves 450e9 B in exactly 1 s.
    CHECK(transfer_time(Bytes{450'000'000'000}, Bandwidth{450e9}) == Time::ms(1000));
    CHECK(transfer_time(Bytes{0}, Bandwidth{0}) == Time::zero());
    CHECK_THROWS_AS(transfer_time(Bytes{1}, Bandwidth{0}), SimulationError);
}

TEST_CASE("compute_time rounds up") {
    // 989e12 FLOP at 989 TFLOPS is 1 s.
    CHECK(compute_time(Flops{989e12}, FlopRate{989e12}) == Time::ms(1000));
    // 1 FLOP at 3 FLOP/s -> ceil(1e12/3) ps.
    CHECK(compute_time(Flops{1}, FlopRate{3}).count_ps() == 333333333334);
}

TEST_CASE("Time arithmetic checks overflow") {
    CHECK_THROWS_AS(Time::max() + Time::ps(1), SimulationError);
    CHECK_THROWS_AS(Time::zero() - Time::max() - Time::ps(2), SimulationError);
    CHECK_THROWS_AS(Time::max() * 2, SimulationError);
    CHECK((Time::us(3) + Time::ns(500)).count_ps() == 3'500'000);
}

TEST_CASE("quantities parse with their units") {
    CHECK(parse_time("1.3ms")->count_ps() == 1'300'000'000);
    CHECK(parse_time("1.5 us")->count_ps() == 1'500'000);
    CHECK(parse_time("2s")->count_ps() == 2'000'000'000'000);
    CHECK_FALSE(parse_time("1.3").has_value());  // a bare number has no unit
    CHECK_FALSE(parse_time("1.3 hours").has_value());
    CHECK_FALSE(parse_time("-1ms").has_value());
    CHECK(parse_bytes("141GB")->value == 141'000'000'000);
    CHECK(parse_bytes("2GiB")->value == 2LL * 1024 * 1024 * 1024);
    // 400 Gbps = 400e9 bit/s = 50e9 B/s.
    CHECK(parse_bandwidth("400Gbps")->bytes_per_s == doctest::Approx(50e9));
    CHECK(parse_bandwidth("25GB/s")->bytes_per_s == doctest::Approx(25e9));
    CHECK(parse_flop_rate("989TFLOPS")->flops_per_s == doctest::Approx(989e12));
    CHECK_FALSE(parse_bandwidth("25GB").has_value());
}
