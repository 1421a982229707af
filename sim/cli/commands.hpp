// The clustersim command line: one file per subcommand, each registering itself on the CLI11 app.
// Commands throw ConfigError for bad input; main() maps it to exit code 2 and anything else to 1.
#pragma once

#include <CLI/CLI.hpp>
#include <filesystem>
#include <string>
#include <vector>

namespace cs::cli {

void register_run(CLI::App& app);
void register_compare(CLI::App& app);
void register_sweep(CLI::App& app);
void register_topology(CLI::App& app);
void register_collective(CLI::App& app);
void register_validate(CLI::App& app);

// The folder holding the bundled workloads/ and topologies/: $CLUSTERSIM_DATA, else the first
// ancestor of the executable's folder that has workloads/default.yaml, else the source tree the
// binary was built from. Throws ConfigError when none exists.
std::filesystem::path data_root();

// Parses "0-7", "0,2,4", "0-3,8-11" into GPU numbers; throws ConfigError naming `option`.
std::vector<int> parse_rank_list(const std::string& text, const std::string& option);

// The overrides a run applies, in order: those derived from Megatron-LM flags (`args`, or
// `@file` to read them from a file; empty for none), then the user's --set assignments, which win.
// Megatron derives dp from the world size, so flags that change the layout also clear `dp`.
// Unused flags are logged as warnings by name.
std::vector<std::string> collect_overrides(const std::string& megatron_args,
                                           const std::vector<std::string>& sets);

}  // namespace cs::cli
