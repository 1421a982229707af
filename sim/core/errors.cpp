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

ConfigError::ConfigError(const SourceLocation& where, const std::string& message)
    : std::runtime_error(where.render() + ": " + message), where_(where), message_(message) {}

ConfigError::ConfigError(const std::string& message)
    : std::runtime_error(message), message_(message) {}

SimulationError::SimulationError(const std::string& component, const std::string& message, Time at)
    : std::runtime_error(component + " at t=" + format_time(at) + ": " + message), at_(at) {}

}  // namespace cs
