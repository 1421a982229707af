#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/errors.hpp"
#include "engine/random.hpp"
#include "engine/simulation.hpp"

using namespace cs;

namespace {
std::vector<std::uint64_t> draw(RandomStream& r, int n) {
    std::vector<std::uint64_t> out;
    for (int i = 0; i < n; ++i)
        out.push_back(r.next());
    return out;
}
int agreeing_bits(const std::vector<std::uint64_t>& a, const std::vector<std::uint64_t>& b,
                  std::size_t shift) {
    int same = 0;
    for (std::size_t i = 0; i + shift < a.size(); ++i)
        same += 64 - std::popcount(a[i + shift] ^ b[i]);
    return same;
}
}  // namespace

TEST_CASE("a stream is xoshiro256** keyed by (seed, id): pinned values") {
    // Computed outside C++ by transliterating the definition in random.cpp (Python, 64-bit masks):
    //   key = mix64(mix64(seed + G) + id); state[i] = mix64(key + (i + 1) G), i = 0..3,
    //   G = 0x9e3779b97f4a7c15, mix64 = splitmix64's output function; then xoshiro256**.
    // Pinning them keeps every recorded result reproducible across compilers and platforms.
    Simulation sim;  // seed 0
    auto& s00 = sim.random(0);
    CHECK(s00.next() == 0x30bb94d28b7ab90cULL);
    CHECK(s00.next() == 0x16a17f40c767e533ULL);
    CHECK(s00.next() == 0xe3e4b8ec5f525c28ULL);
    Simulation seeded(42);
    auto& s42 = seeded.random(7);
    CHECK(s42.next() == 0xf7c7131e581266d6ULL);
    CHECK(s42.next() == 0xbf8e0a870594e23bULL);
    CHECK(s42.next() == 0xc5a2116166595c66ULL);
}

TEST_CASE("same seed and id give the same sequence; another seed gives another") {
    Simulation a(1234), b(1234), c(1235);
    const auto xa = draw(a.random(5), 1000);
    CHECK(xa == draw(b.random(5), 1000));
    const auto xc = draw(c.random(5), 1000);
    // Independent 64-bit words agree in half their bits: 64000 x 1/2 = 32000, standard deviation
    // sqrt(64000 / 4) = 126.5; 6 standard deviations is 759. Equal sequences would give 64000.
    CHECK(std::abs(agreeing_bits(xa, xc, 0) - 32000) < 759);
}

TEST_CASE("streams with different ids are independent") {
    Simulation sim(7);
    constexpr int kWords = 4096;
    std::vector<std::vector<std::uint64_t>> streams;
    for (std::uint64_t id = 0; id < 8; ++id)
        streams.push_back(draw(sim.random(id), kWords));
    // Every pair, aligned and shifted by one word (a stream that is its neighbour's sequence one
    // step on would agree in all bits of the shifted comparison): 4096 x 64 = 262144 bits, half
    // expected to agree, 131072 +- 6 x sqrt(262144 / 4) = 6 x 256 = 1536 (one word fewer when
    // shifted: 131040).
    for (std::size_t i = 0; i < streams.size(); ++i)
        for (std::size_t j = 0; j < streams.size(); ++j) {
            if (i == j) continue;
            CHECK(std::abs(agreeing_bits(streams[i], streams[j], 0) - 131072) < 1536);
            CHECK(std::abs(agreeing_bits(streams[i], streams[j], 1) - 131040) < 1536);
        }
    // Neighbouring ids, as uniforms: the sample correlation of independent U(0,1) series of n =
    // 4096 has standard deviation 1 / sqrt(n) = 0.0156; 5 of them is 0.078.
    for (std::uint64_t id = 0; id + 1 < 8; ++id) {
        Simulation fresh(7);
        auto& x = fresh.random(id);
        auto& y = fresh.random(id + 1);
        double sx = 0, sy = 0, sxx = 0, syy = 0, sxy = 0;
        for (int i = 0; i < kWords; ++i) {
            const double u = x.uniform(), v = y.uniform();
            sx += u, sy += v, sxx += u * u, syy += v * v, sxy += u * v;
        }
        const double n = kWords;
        const double r = (sxy - sx * sy / n) / std::sqrt((sxx - sx * sx / n) * (syy - sy * sy / n));
        CHECK(std::abs(r) < 0.078);
    }
}

TEST_CASE("two simulations side by side do not interfere") {
    // Drawing from b between a's draws must not change a's sequence: each Simulation owns its
    // streams. The reference returned by random() stays valid as other streams are created.
    Simulation a(99), b(99), reference(99);
    auto& ra = a.random(3);
    std::vector<std::uint64_t> interleaved;
    for (int i = 0; i < 100; ++i) {
        interleaved.push_back(ra.next());
        b.random(3).next();
        b.random(static_cast<std::uint64_t>(i) + 100).next();
        a.random(static_cast<std::uint64_t>(i) + 1000);  // a new stream of a; ra stays valid
    }
    CHECK(&a.random(3) == &ra);
    CHECK(interleaved == draw(reference.random(3), 100));
    CHECK(a.seed() == 99);
}

TEST_CASE("uniform, below and normal have the distributions they promise") {
    Simulation sim(2024);
    auto& r = sim.random(0);
    constexpr int n = 60000;
    // uniform: in [0, 1), mean 1/2 +- 6 sqrt(1/12 / n) = 6 x 0.00118 = 0.0071.
    double sum = 0;
    for (int i = 0; i < n; ++i) {
        const double u = r.uniform();
        REQUIRE(u >= 0.0);
        REQUIRE(u < 1.0);
        sum += u;
    }
    CHECK(std::abs(sum / n - 0.5) < 0.0071);
    // below(6): each face n/6 = 10000 times; chi-square with 5 degrees of freedom stays under
    // 25.7 with probability 1 - 1e-4.
    std::vector<int> faces(6, 0);
    for (int i = 0; i < n; ++i) {
        const auto k = r.below(6);
        REQUIRE(k < 6);
        ++faces[k];
    }
    double chi2 = 0;
    for (int f : faces)
        chi2 += (f - 10000.0) * (f - 10000.0) / 10000.0;
    CHECK(chi2 < 25.7);
    CHECK(r.below(1) == 0);
    CHECK_THROWS_AS(r.below(0), SimulationError);
    // normal: mean 0 +- 6 / sqrt(n) = 0.0245; variance 1 +- 6 sqrt(2 / n) = 0.035.
    double s1 = 0, s2 = 0;
    for (int i = 0; i < n; ++i) {
        const double z = r.normal();
        s1 += z;
        s2 += z * z;
    }
    CHECK(std::abs(s1 / n) < 0.0245);
    CHECK(std::abs(s2 / n - (s1 / n) * (s1 / n) - 1.0) < 0.035);
}
