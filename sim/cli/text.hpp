// Small helpers for the plain-text tables the command line prints (tables.hpp).
#pragma once

#include <cstdio>
#include <string>

namespace cs::cli {

// `fraction` as a percentage with `decimals` digits: 0.1234 -> "12.34%".
inline std::string percent(double fraction, int decimals = 2) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.*f%%", decimals, fraction * 100);
    return buf;
}

// `v` through a printf format of one double: fmt("%.3f", 1.5) -> "1.500".
inline std::string fmt(const char* format, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, format, v);
    return buf;
}

// `s` padded with spaces to at least `width` characters.
inline std::string pad(std::string s, std::size_t width) {
    if (s.size() < width) s.append(width - s.size(), ' ');
    return s;
}

}  // namespace cs::cli
