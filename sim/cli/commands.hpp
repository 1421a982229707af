// The clustersim command line: one file per subcommand, each registering itself on the CLI11 app.
// Commands parse their arguments, call the api layer (sim/api), print and write files. They throw
// ConfigError for bad input; main() maps it to exit code 2, CommandExit to its status and anything
// else to 1.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace cs::cli {

void register_run(CLI::App& app);
void register_compare(CLI::App& app);
void register_sweep(CLI::App& app);
void register_plan(CLI::App& app);
void register_topology(CLI::App& app);
void register_collective(CLI::App& app);
void register_validate(CLI::App& app);
void register_calibrate(CLI::App& app);
void register_chakra(CLI::App& app);
void register_diff(CLI::App& app);

// A command that ends with a status of its own (validate --check: 3), with a line for stderr.
struct CommandExit {
    int status = 0;
    std::string message;
};

}  // namespace cs::cli
