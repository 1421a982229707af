// Small helpers for the plain-text tables that the api's renderings print.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

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

// The column header of one exposed-communication part in compare and sweep tables: "exp.tp",
// "exp.cp", "exp.ep", "exp.dp", "exp.pp" (the pipeline).
inline std::string exposed_column(std::string_view kind) {
    return "exp." + std::string(kind == "pipeline" ? std::string_view("pp") : kind);
}

}  // namespace cs::api
