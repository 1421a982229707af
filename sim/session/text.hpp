// Small helpers for the plain-text tables that the api's renderings print.
#pragma once

#include <cstdio>
#include <string>

namespace cs::api {

// `fraction` as a percentage with `decimals` digits: 0.1234 -> "12.34%".
inline std::string percent(double fraction, int decimals = 2) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.*f%%", decimals, fraction * 100);
    return buf;
}

// `s` padded with spaces to at least `width` characters.
inline std::string pad(std::string s, std::size_t width) {
    if (s.size() < width) s.append(width - s.size(), ' ');
    return s;
}

}  // namespace cs::api
