// Numbers formatted for the fit reports' text.
#pragma once

#include <cstdio>
#include <string>

namespace cs::api::detail {

// `v` formatted by the printf conversion `format` ("%.4g", "%.1f%%"), as at most 63 characters.
inline std::string fmt(const char* format, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, format, v);
    return buf;
}

}  // namespace cs::api::detail
