// Error types. Library code throws; only the CLI catches, prints and chooses the exit code
// (ConfigError -> 2, anything else -> 1).
#pragma once

#include <stdexcept>
#include <string>

#include "core/units.hpp"

namespace cs {

// Where in an input a problem was found. line/column are 1-based; 0 means unknown.
struct SourceLocation {
    std::string file;  // as the user named it, or "--set" / "<command line>"
    int line = 0;
    int column = 0;
    std::string render() const;  // "file:line:column" (omitting unknown parts)
};

// Bad input of any kind: a missing file, bad YAML, an unknown key, a wrong unit, an impossible
// layout. what() is the complete message shown to the user.
class ConfigError : public std::runtime_error {
  public:
    ConfigError(const SourceLocation& where, const std::string& message);
    explicit ConfigError(const std::string& message);  // for errors with no place in a file
    const SourceLocation& where() const { return where_; }
    const std::string& message() const { return message_; }

  private:
    SourceLocation where_;
    std::string message_;
};

// A broken invariant found while simulating (time going backwards, overflow, a deadlocked
// schedule). Carries the simulated time and the component that noticed.
class SimulationError : public std::runtime_error {
  public:
    SimulationError(const std::string& component, const std::string& message,
                    Time at = Time::zero());
    Time at() const { return at_; }

  private:
    Time at_;
};

// No route between two GPUs (topology::Cluster::route), e.g. once failed links cut them apart.
class NoPathError : public SimulationError {
  public:
    NoPathError(int src, int dst, const std::string& message)
        : SimulationError("topology", message), src_(src), dst_(dst) {}
    int src() const { return src_; }
    int dst() const { return dst_; }

  private:
    int src_, dst_;
};

// A time beyond the 64-bit picosecond clock (2^63 ps, about 106 days). Thrown by the time
// arithmetic of core/units.hpp; the front ends turn it into a ConfigError naming the input whose
// sizes, rates or durations led there, since it is the input that is out of range.
class ClockOverflow : public SimulationError {
  public:
    using SimulationError::SimulationError;
};

}  // namespace cs
