#include "core/errors.hpp"

namespace cs {

std::string SourceLocation::render() const {
    std::string out = file.empty() ? std::string("<input>") : file;
    if (line > 0) {
        out += ':' + std::to_string(line);
        if (column > 0) out += ':' + std::to_string(column);
    }
    return out;
}

namespace {

// A message quotes what the user gave, which may be megabytes (a 10 MB YAML value): what is shown
// keeps its first 2,000 characters (whole UTF-8 characters) and says how much is left out.
std::string shown(const std::string& text) {
    constexpr std::size_t kMost = 2000;
    if (text.size() <= kMost) return text;
    std::size_t cut = kMost;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80)
        --cut;
    return text.substr(0, cut) + "... (" + std::to_string(text.size() - cut) + " more characters)";
}

}  // namespace

ConfigError::ConfigError(const SourceLocation& where, const std::string& message)
    : std::runtime_error(shown(where.render()) + ": " + shown(message)),
      where_(where),
      message_(message) {}

ConfigError::ConfigError(const std::string& message)
    : std::runtime_error(shown(message)), message_(message) {}

SimulationError::SimulationError(const std::string& component, const std::string& message, Time at)
    : std::runtime_error(component + " at t=" + format_time(at) + ": " + message), at_(at) {}

}  // namespace cs
