// Megatron-LM command-line flags as experiment overrides.
//
// `clustersim run --megatron-args "..."` describes the model, layout and training settings with
// Megatron-LM's own argument names. This turns them into the "key=value" overrides that --set
// takes (parallelism.tp=8, model.layers=96, training.recompute=full, ...). The data-parallel size
// is not a Megatron flag (Megatron derives it from the world size); the caller derives it.
#pragma once

#include <string>
#include <vector>

#include "workload/experiment.hpp"

namespace cs::workload {

// Parses `args` (whitespace-separated, with '...' / "..." quoting and backslash-newline
// continuations as in launch scripts; `--flag value` and `--flag=value` both work) and returns the
// overrides in the order the flags appear (derived keys, such as vpp from
// --num-layers-per-virtual-pipeline-stage, last). Every flag clustersim does not use, and every
// flag it can only approximate, is named in `warnings`; none is dropped silently. Throws
// ConfigError for a malformed value (e.g. a non-numeric size) or an impossible combination.
// Reading `@file` is the caller's job.
//
// Megatron-LM's own defaults are applied where they differ from clustersim's: when the flags give
// --hidden-size, the architecture switches they leave out take Megatron's defaults (GELU, 4h MLP
// or its SwiGLU rule int(8h/3 / 64) * 64, LayerNorm, biases, tied embeddings, kv heads = heads,
// learned positions for --max-position-embeddings or --seq-length); --num-experts without
// --moe-router-topk routes to 2; --vocab-size is padded to a multiple of
// --make-vocab-size-divisible-by (128) x tp, as Megatron pads it.
std::vector<std::string> megatron_args_to_overrides(const std::string& args,
                                                    std::vector<std::string>& warnings);
// The flag that sets experiment key `key` one-to-one ("model.layers" -> "--num-layers"), or ""
// when none does: messages about a derived override name the flag the user typed.
std::string megatron_flag_of(const std::string& key);

}  // namespace cs::workload

namespace cs::workload {

// The reverse: Megatron-LM flags that run `spec`'s layout and training settings (parallel sizes,
// virtual stages under the interleaved schedule, sequence parallelism, micro and global batch,
// sequence length, recomputation, precision, the distributed optimizer or Megatron-FSDP's
// sharding), in that order, separated by spaces. megatron_args_to_overrides of the text gives
// back those settings (tests/api/test_plan.cpp). The model's own flags are not written (they are
// the model's, not the layout's), nor the data-parallel size (Megatron derives it). A schedule
// Megatron-LM does not run is named in `notes`.
//
// What the flags need of spec.schedule, from its traits (schedule::Schedule; workload sits below
// the schedule layer, so the caller asks it): whether Megatron-LM runs it, and the model chunks
// per device it uses for the layout's vpp (chunks_for), written as virtual stages when above 1.
struct MegatronSchedule {
    bool in_megatron_lm = false;
    int chunks = 1;
};
std::string megatron_args_for(const ExperimentSpec& spec, MegatronSchedule schedule,
                              std::vector<std::string>* notes = nullptr);

}  // namespace cs::workload
