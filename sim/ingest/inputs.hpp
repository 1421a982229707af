// What every front end (CLI, tests, benchmarks, bindings) needs before a run: where the bundled
// files are, the experiment to load with its overrides, rank lists. Warnings are returned as
// data; nothing here prints.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/atomic_file.hpp"
#include "workload/experiment.hpp"

namespace cs::api {

// The folder holding the bundled workloads/ and topologies/: $CLUSTERSIM_DATA, else the first
// ancestor of the executable's folder that has workloads/default.yaml, else the source tree the
// library was built from. Throws ConfigError when none exists.
std::filesystem::path data_root();

// workloads/default.yaml under data_root().
std::filesystem::path default_experiment();

// The most GPUs a rank list may name (32 times the largest layout clustersim has been run at).
inline constexpr std::int64_t kMaxRankList = std::int64_t{1} << 22;

// Parses "0-7", "0,2,4", "0-3,8-11" into GPU numbers, in the order given; throws ConfigError
// naming `option` and the text for what it cannot read, a GPU listed twice, or more than
// kMaxRankList GPUs (counted before any range is expanded).
std::vector<int> parse_rank_list(const std::string& text, const std::string& option);

// --max-memory SIZE ("64GiB"); empty: topology::kDefaultMaxMemory. Throws ConfigError naming the
// option and the value for a size it cannot read or one that is not positive.
std::int64_t parse_max_memory(const std::string& text);

// The overrides a run applies, in order: those derived from Megatron-LM flags (`megatron_args`,
// or `@file` to read them from a file; empty for none), then the user's --set assignments, which
// win. Megatron derives dp from the world size, so flags that change the layout also clear `dp`.
// Flags that are not used are appended to `warnings`, by name.
std::vector<std::string> collect_overrides(const std::string& megatron_args,
                                           const std::vector<std::string>& sets,
                                           std::vector<std::string>& warnings);

// An experiment and the overrides applied to it, as a front end names them.
struct ExperimentRequest {
    std::filesystem::path path;  // empty: default_experiment()
    std::vector<std::string> sets;
    std::string megatron_args;
    std::int64_t max_memory = topology::kDefaultMaxMemory;  // --max-memory
    // The experiment's text when the front end has read `path` already (read_streamed_input):
    // loaded instead of reading `path` again; messages name it as they name `path`.
    std::optional<workload::ExperimentText> text = std::nullopt;
};

// An input given as a stream (a FIFO, `clustersim run <(cat x.yaml)`), which can be read only
// once: its whole text, read here within read_input_file's bounds, with the name and folder
// load_document would give it, for the loader to take instead of the path. Nothing for an empty
// path, a regular file, a folder or a missing path: the loaders read those, with their messages.
std::optional<workload::ExperimentText> read_streamed_input(const std::filesystem::path& path);

// Loads the experiment with its overrides. The spec's `warnings` gain the Megatron-LM flags that
// were not used. Throws ConfigError for bad input.
workload::ExperimentSpec load_experiment(const ExperimentRequest& request);
// The same for an experiment given as text (the Python bindings' dicts), with --set overrides.
workload::ExperimentSpec load_experiment(const workload::ExperimentText& text,
                                         const std::vector<std::string>& sets);

// Refuses (ConfigError naming the output) an output of `outputs` that is a file the experiment
// was read from: the experiment file, its topology file, its `compute.calibration` file, and the
// file of `--megatron-args @FILE` when `megatron_args` names one. Outputs are committed last, so
// this may run after loading.
void guard_experiment_inputs(const OutputSet& outputs, const workload::ExperimentSpec& spec,
                             const std::string& megatron_args = "");

}  // namespace cs::api
