// Strong unit types used everywhere in clustersim.
//
// Time is an integer number of picoseconds. Sizes are integer bytes. Bandwidths (bytes per second)
// and FLOP counts/rates are doubles because their magnitudes exceed what an int64 holds comfortably
// (a 16k-GPU iteration is ~1e21 FLOPs). The only places that turn an amount into a Time are
// transfer_time() and compute_time(); both round up to the next picosecond so that a non-zero
// amount of work never takes zero time.
#pragma once

#include <compare>
#include <cstdint>
#include <limits>
#include <string>

namespace cs {

// Thrown on overflow of Time arithmetic; defined in errors.hpp.
[[noreturn]] void throw_time_overflow(const char* what);

class Time {
  public:
    constexpr Time() = default;
    static constexpr Time ps(std::int64_t v) { return Time{v}; }
    static constexpr Time ns(std::int64_t v) { return Time{v * 1000}; }
    static constexpr Time us(std::int64_t v) { return Time{v * 1000'000}; }
    static constexpr Time ms(std::int64_t v) { return Time{v * 1000'000'000}; }
    static constexpr Time zero() { return Time{0}; }
    static constexpr Time max() { return Time{std::numeric_limits<std::int64_t>::max()}; }
    // Rounds a (non-negative, finite) number of seconds up to whole picoseconds.
    static Time from_seconds_ceil(double seconds);

    constexpr std::int64_t count_ps() const { return ps_; }
    constexpr double seconds() const { return static_cast<double>(ps_) * 1e-12; }

    constexpr auto operator<=>(const Time&) const = default;

    Time operator+(Time o) const {
        std::int64_t r;
        if (__builtin_add_overflow(ps_, o.ps_, &r)) throw_time_overflow("Time addition");
        return Time{r};
    }
    Time operator-(Time o) const {
        std::int64_t r;
        if (__builtin_sub_overflow(ps_, o.ps_, &r)) throw_time_overflow("Time subtraction");
        return Time{r};
    }
    Time& operator+=(Time o) { return *this = *this + o; }
    Time& operator-=(Time o) { return *this = *this - o; }
    Time operator*(std::int64_t k) const {
        std::int64_t r;
        if (__builtin_mul_overflow(ps_, k, &r)) throw_time_overflow("Time multiplication");
        return Time{r};
    }

  private:
    constexpr explicit Time(std::int64_t ps) : ps_(ps) {}
    std::int64_t ps_ = 0;
};

// An amount of data in bytes.
struct Bytes {
    std::int64_t value = 0;
    constexpr auto operator<=>(const Bytes&) const = default;
    constexpr Bytes operator+(Bytes o) const { return {value + o.value}; }
    constexpr Bytes& operator+=(Bytes o) {
        value += o.value;
        return *this;
    }
};

// A data rate in bytes per second (per link and per direction when it describes a link).
struct Bandwidth {
    double bytes_per_s = 0;
    constexpr auto operator<=>(const Bandwidth&) const = default;
    constexpr double gb_per_s() const { return bytes_per_s * 1e-9; }
};

// A number of floating-point operations.
struct Flops {
    double value = 0;
    constexpr auto operator<=>(const Flops&) const = default;
    constexpr Flops operator+(Flops o) const { return {value + o.value}; }
    constexpr Flops& operator+=(Flops o) {
        value += o.value;
        return *this;
    }
};

// A compute rate in FLOP per second.
struct FlopRate {
    double flops_per_s = 0;
    constexpr auto operator<=>(const FlopRate&) const = default;
};

// Time to move `amount` at `rate`, rounded up to whole picoseconds. A zero amount takes zero time;
// a non-positive rate with a positive amount throws SimulationError.
Time transfer_time(Bytes amount, Bandwidth rate);
// Same for a fractional byte count (flow-level network models carry remaining bytes as double).
Time transfer_time(double bytes, Bandwidth rate);
// Time to execute `work` at `rate`, rounded up to whole picoseconds.
Time compute_time(Flops work, FlopRate rate);

// Human-readable renderings for tables and log lines ("1.305 ms", "450 GB/s", "141 GB").
std::string format_time(Time t);
std::string format_bytes(Bytes b);
std::string format_bandwidth(Bandwidth bw);

}  // namespace cs
