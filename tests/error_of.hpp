// The message of the ConfigError that `f` throws, or "(no error)" if it throws none: error-message
// tests compare it with the exact text a user would see.
#pragma once

#include <functional>
#include <string>

#include "core/errors.hpp"

namespace cs::test {

inline std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const ConfigError& e) {
        return e.what();
    }
    return "(no error)";
}

}  // namespace cs::test
