// Megatron-LM command-line flags as experiment overrides.
//
// `clustersim run --megatron-args "..."` describes the model, layout and training settings with
// Megatron-LM's own argument names. This turns them into the "key=value" overrides that --set
// takes (parallelism.tp=8, model.layers=96, training.recompute=full, ...). The data-parallel size
// is not a Megatron flag (Megatron derives it from the world size); the caller derives it.
#pragma once

#include <string>
#include <vector>

namespace cs::workload {

// Parses `args` (whitespace-separated, with '...' / "..." quoting and backslash-newline
// continuations as in launch scripts; `--flag value` and `--flag=value` both work) and returns the
// overrides in the order the flags appear (derived keys, such as vpp from
// --num-layers-per-virtual-pipeline-stage, last). Every flag clustersim does not use, and every
// flag it can only approximate, is named in `warnings`; none is dropped silently. Throws
// ConfigError for a malformed value (e.g. a non-numeric size) or an impossible combination.
// Reading `@file` is the caller's job.
std::vector<std::string> megatron_args_to_overrides(const std::string& args,
                                                    std::vector<std::string>& warnings);

}  // namespace cs::workload
