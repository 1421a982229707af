#include "core/units.hpp"

#include <cmath>
#include <cstdio>

#include "core/errors.hpp"

namespace cs {

void throw_time_overflow(const char* what) {
    throw ClockOverflow("core", std::string(what) + " overflowed the 64-bit picosecond clock");
}

Time Time::from_seconds_ceil(double seconds) {
    if (std::isinf(seconds) && seconds > 0) throw_time_overflow("seconds to Time conversion");
    if (!std::isfinite(seconds) || seconds < 0)
        throw SimulationError("core",
                              "a duration must be a finite, non-negative number of seconds");
    const double ps = std::ceil(seconds * 1e12 - 1e-6);  // tolerate binary noise below 1e-6 ps
    if (ps >= 9.2e18) throw_time_overflow("seconds to Time conversion");
    return Time::ps(ps < 0 ? 0 : static_cast<std::int64_t>(ps));
}

Time transfer_time(double bytes, Bandwidth rate) {
    if (bytes <= 0) return Time::zero();
    if (!(rate.bytes_per_s > 0))
        throw SimulationError("core", "transfer over a link with no bandwidth");
    return Time::from_seconds_ceil(bytes / rate.bytes_per_s);
}

Time transfer_time(Bytes amount, Bandwidth rate) {
    return transfer_time(static_cast<double>(amount.value), rate);
}

Time compute_time(Flops work, FlopRate rate) {
    if (work.value <= 0) return Time::zero();
    if (!(rate.flops_per_s > 0)) throw SimulationError("core", "compute at a zero FLOP rate");
    return Time::from_seconds_ceil(work.value / rate.flops_per_s);
}

namespace {
std::string fmt_scaled(double v, const char* const* names, const double* scales, int n) {
    char buf[64];
    for (int i = 0; i < n; ++i) {
        if (std::fabs(v) >= scales[i] || i == n - 1) {
            std::snprintf(buf, sizeof buf, "%.4g %s", v / scales[i], names[i]);
            return buf;
        }
    }
    return "?";
}
}  // namespace

std::string format_time(Time t) {
    static const char* const names[] = {"s", "ms", "us", "ns", "ps"};
    static const double scales[] = {1e12, 1e9, 1e6, 1e3, 1};
    return fmt_scaled(static_cast<double>(t.count_ps()), names, scales, 5);
}

std::string format_bytes(Bytes b) {
    static const char* const names[] = {"TB", "GB", "MB", "KB", "B"};
    static const double scales[] = {1e12, 1e9, 1e6, 1e3, 1};
    return fmt_scaled(static_cast<double>(b.value), names, scales, 5);
}

std::string format_bandwidth(Bandwidth bw) {
    static const char* const names[] = {"TB/s", "GB/s", "MB/s", "KB/s", "B/s"};
    static const double scales[] = {1e12, 1e9, 1e6, 1e3, 1};
    return fmt_scaled(bw.bytes_per_s, names, scales, 5);
}

}  // namespace cs
