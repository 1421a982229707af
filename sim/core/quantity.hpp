// Parsing of quantities written with units, as they appear in YAML and on the command line:
// "1.3ms", "450GB/s", "400Gbps", "141GB", "2GiB", "989TFLOPS". A space between number and unit is
// allowed. Decimal prefixes are powers of 1000 (GB = 1e9 bytes), binary ones powers of 1024
// (GiB = 2^30 bytes); bits are converted to bytes (Gbps = 1e9 bit/s = 1.25e8 B/s).
#pragma once

#include <optional>
#include <string_view>

#include "core/units.hpp"

namespace cs {

// Each returns nullopt when the text is not a non-negative number followed by an accepted unit.
std::optional<Time> parse_time(std::string_view text);
std::optional<Bytes> parse_bytes(std::string_view text);
std::optional<Bandwidth> parse_bandwidth(std::string_view text);
std::optional<FlopRate> parse_flop_rate(std::string_view text);

// The accepted units, for error messages.
inline constexpr const char* kTimeUnits = "ps, ns, us, ms, s (e.g. \"1.5us\")";
inline constexpr const char* kBytesUnits = "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB (e.g. \"80GB\")";
inline constexpr const char* kBandwidthUnits =
    "bps, Kbps, Mbps, Gbps, Tbps, B/s, KB/s, MB/s, GB/s, TB/s, KiB/s, MiB/s, GiB/s "
    "(e.g. \"400Gbps\", \"450GB/s\")";
inline constexpr const char* kFlopRateUnits = "FLOPS, GFLOPS, TFLOPS, PFLOPS (e.g. \"989TFLOPS\")";

}  // namespace cs
