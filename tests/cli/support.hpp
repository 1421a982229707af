// Helpers of the CLI tests: run the built `clustersim` binary (CLUSTERSIM_BIN) as a user would and
// capture its output and exit status; scratch folders.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/errors.hpp"

namespace cs::test {

// The repository, and the bundled inputs the CLI tests run.
inline const std::string kRoot = CLUSTERSIM_SOURCE_DIR;
inline const std::string kPipeline = kRoot + "/workloads/h200-2gpu-pipeline.yaml";
inline const std::string kProfile = kRoot + "/workloads/h200-pipeline-profile.yaml";
inline const std::string kTwoGpus = kRoot + "/topologies/h200-2gpu-nvlink.yaml";

// A fresh empty folder per test case.
inline std::filesystem::path scratch(const std::string& name) {
    const auto dir = std::filesystem::temp_directory_path() / ("cs_cli_tests_" + name);
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    return dir;
}

inline std::string slurp(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// Single-quoted for /bin/sh.
inline std::string shell_quote(const std::string& s) {
    std::string out(1, '\'');
    for (char c : s) {
        if (c == '\'') {
            out.append("'\\''");
        } else {
            out.push_back(c);
        }
    }
    out.push_back('\'');
    return out;
}

struct CliResult {
    int status = -1;
    std::string out, err;
};

// Runs `clustersim ARGS...` and returns its exit status, stdout and stderr.
inline CliResult run_binary(const std::vector<std::string>& args) {
    const auto err_file =
        std::filesystem::temp_directory_path() / ("cs_cli_stderr_" + std::to_string(::getpid()));
    std::string cmd = shell_quote(CLUSTERSIM_BIN);
    for (const auto& a : args)
        cmd.append(1, ' ').append(shell_quote(a));
    cmd.append(" 2>").append(shell_quote(err_file.string()));
    CliResult r;
    FILE* pipe = ::popen(cmd.c_str(), "r");
    if (!pipe) throw std::runtime_error("cannot start " + cmd);
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;)
        r.out.append(buf, n);
    const int raw = ::pclose(pipe);
    r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
    r.err = slurp(err_file);
    std::filesystem::remove(err_file);
    return r;
}

// Runs `clustersim NAME ARGS...`; returns stdout on exit 0, throws ConfigError with the stderr
// text on exit 2 (bad input) and std::runtime_error on anything else.
inline std::string run_cli(const std::string& name, std::vector<std::string> args) {
    args.insert(args.begin(), name);
    const CliResult r = run_binary(args);
    if (r.status == 2) throw ConfigError(r.err);
    if (r.status != 0) throw std::runtime_error("exit " + std::to_string(r.status) + ": " + r.err);
    return r.out;
}

}  // namespace cs::test
