// Small helpers for the plain-text tables the command line prints (tables.hpp).
#pragma once

#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

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

// A JSON document for an output file, indented by 2, with its newline. Bytes that are not UTF-8
// (a path from the command line in another encoding) become U+FFFD instead of an exception that
// would lose the whole file.
template <class Json>
std::string json_text(const Json& j) {
    return j.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
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

// The words of `clustersim run [EXPERIMENT] --set k=v ...` (the HTML report's "copy as command"
// of a sweep's or plan's rows starts with these; the page quotes them for a shell).
inline std::vector<std::string> run_command(const std::string& experiment,
                                            const std::vector<std::string>& sets) {
    std::vector<std::string> words{"clustersim", "run"};
    if (!experiment.empty()) words.push_back(experiment);
    for (const auto& s : sets) {
        words.emplace_back("--set");
        words.push_back(s);
    }
    return words;
}

}  // namespace cs::cli
