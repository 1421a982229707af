// Helpers of the CLI tests: run a subcommand in process and capture its output, scratch folders.
#pragma once

#include <CLI/CLI.hpp>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace cs::test {

// A fresh empty folder per test case.
inline std::filesystem::path scratch(const std::string& name) {
    const auto dir = std::filesystem::temp_directory_path() / ("cs_cli_tests_" + name);
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    return dir;
}

// Runs `clustersim NAME ARGS...` in process with the subcommand `add` registers; returns what it
// printed on stdout. Exceptions (ConfigError for bad input) propagate.
inline std::string run_cli(const std::function<void(CLI::App&)>& add, const std::string& name,
                           std::vector<std::string> args) {
    CLI::App app{"test"};
    app.require_subcommand(1);
    add(app);
    args.insert(args.begin(), name);
    std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 parses a reversed list
    std::ostringstream captured;
    auto* old = std::cout.rdbuf(captured.rdbuf());
    try {
        app.parse(reversed);
    } catch (...) {
        std::cout.rdbuf(old);
        throw;
    }
    std::cout.rdbuf(old);
    return captured.str();
}

inline std::string slurp(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

}  // namespace cs::test
