// `variability.gpus` of an experiment as a duration model: each GPU's passes take the product of
// the factors of the entries that name it (fixed, or drawn per pass from a normal or lognormal
// distribution), and a worker (its tp x cp GPUs run in lockstep) takes the slowest of its GPUs.
#pragma once

#include <memory>

#include "replay/duration_model.hpp"
#include "workload/experiment.hpp"

namespace cs::replay {

// `gpu_count`: the cluster's GPUs (every GPU number of `spec` is below it). Draws, per pass, go
// GPU by GPU in the worker's order and entry by entry in the experiment's order, from the
// worker's stream (DurationContext::random).
std::unique_ptr<DurationModel> make_variability(const workload::VariabilitySpec& spec,
                                                int gpu_count);

// The fixed part of a GPU's slowdown: the product of its `fixed` entries' factors (1 if none).
double fixed_slowdown(const workload::VariabilitySpec& spec, int gpu);

}  // namespace cs::replay
