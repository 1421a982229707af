#include "core/quantity.hpp"

#include <cctype>
#include <charconv>
#include <cmath>
#include <string>

namespace cs {
namespace {

struct UnitScale {
    std::string_view unit;
    double scale;
};

// Splits "12.5 GB/s" into 12.5 and "GB/s"; nullopt unless the number is finite and >= 0.
std::optional<std::pair<double, std::string_view>> split_number(std::string_view text) {
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front())))
        text.remove_prefix(1);
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())))
        text.remove_suffix(1);
    double value = 0;
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || !std::isfinite(value) || value < 0) return std::nullopt;
    std::string_view unit(ptr, static_cast<std::size_t>(text.data() + text.size() - ptr));
    while (!unit.empty() && unit.front() == ' ')
        unit.remove_prefix(1);
    return std::make_pair(value, unit);
}

template <std::size_t N>
std::optional<double> scaled(std::string_view text, const UnitScale (&table)[N]) {
    auto parts = split_number(text);
    if (!parts) return std::nullopt;
    for (const auto& u : table)
        if (u.unit == parts->second) {
            // "1e308TB/s" is a finite number but an infinite bandwidth.
            const double v = parts->first * u.scale;
            if (!std::isfinite(v)) return std::nullopt;
            return v;
        }
    return std::nullopt;
}

}  // namespace

std::optional<Time> parse_time(std::string_view text) {
    static const UnitScale table[] = {{"ps", 1e-12}, {"ns", 1e-9}, {"us", 1e-6},
                                      {"µs", 1e-6},  {"ms", 1e-3}, {"s", 1}};
    auto s = scaled(text, table);
    if (!s || *s > 9.0e6) return std::nullopt;  // beyond ~100 days is surely a typo
    return Time::from_seconds_ceil(*s);
}

std::optional<Bytes> parse_bytes(std::string_view text) {
    static const UnitScale table[] = {
        {"B", 1},           {"KB", 1e3},           {"MB", 1e6},
        {"GB", 1e9},        {"TB", 1e12},          {"KiB", 1024.0},
        {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
    auto s = scaled(text, table);
    if (!s || *s > 9.0e18) return std::nullopt;
    return Bytes{static_cast<std::int64_t>(std::llround(*s))};
}

std::optional<Bandwidth> parse_bandwidth(std::string_view text) {
    static const UnitScale table[] = {
        {"bps", 0.125},         {"Kbps", 125.0}, {"Mbps", 1.25e5},  {"Gbps", 1.25e8},
        {"Tbps", 1.25e11},      {"B/s", 1},      {"KB/s", 1e3},     {"MB/s", 1e6},
        {"GB/s", 1e9},          {"TB/s", 1e12},  {"KiB/s", 1024.0}, {"MiB/s", 1048576.0},
        {"GiB/s", 1073741824.0}};
    auto s = scaled(text, table);
    if (!s) return std::nullopt;
    return Bandwidth{*s};
}

std::optional<FlopRate> parse_flop_rate(std::string_view text) {
    static const UnitScale table[] = {
        {"FLOPS", 1}, {"GFLOPS", 1e9}, {"TFLOPS", 1e12}, {"PFLOPS", 1e15}};
    auto s = scaled(text, table);
    if (!s) return std::nullopt;
    return FlopRate{*s};
}

}  // namespace cs
