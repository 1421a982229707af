#pragma once

// Small non-cryptographic hashes shared by the engine, the network and the sweep: splitmix64's
// finaliser and FNV-1a. Deterministic on every platform (results and digests depend on them).

#include <array>
#include <bit>
#include <cstdint>
#include <string_view>

namespace cs {

// splitmix64's output function: a bijection of 64-bit words that spreads every input bit.
constexpr std::uint64_t mix64(std::uint64_t x) {
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

// One splitmix64 step from state `x`: the golden-ratio increment, then mix64.
constexpr std::uint64_t splitmix64(std::uint64_t x) {
    return mix64(x + 0x9e3779b97f4a7c15ULL);
}

inline constexpr std::uint64_t kFnv1aBasis = 0xcbf29ce484222325ULL;
inline constexpr std::uint64_t kFnv1aPrime = 0x100000001b3ULL;

// FNV-1a of `text`, continuing from `h`.
constexpr std::uint64_t fnv1a(std::string_view text, std::uint64_t h = kFnv1aBasis) {
    for (const char c : text) {
        h ^= static_cast<unsigned char>(c);
        h *= kFnv1aPrime;
    }
    return h;
}

// FNV-1a over the object representation of a trivially copyable value, continuing from `h`.
template <typename T>
std::uint64_t fnv1a_bytes(const T& value, std::uint64_t h) {
    const auto raw = std::bit_cast<std::array<char, sizeof(T)>>(value);
    return fnv1a(std::string_view(raw.data(), raw.size()), h);
}

}  // namespace cs
