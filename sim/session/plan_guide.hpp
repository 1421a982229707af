// `plan --guide`: the layout a published rule of thumb recommends for the experiment's model on
// its cluster, worked out from the guide's tables as data (docs/plan.md, "The guide").
//
// The guide is NVIDIA Megatron-Bridge's "Parallelism Strategy Selection" skill (2026): a
// starting point for dense models by parameter count (TP, PP and CP ranges for a range of GPU
// counts), rules by hardware topology (tensor parallelism within one NVLink domain; TP 4 on a
// limited, Ethernet, network) and by sequence length (8K-32K tokens: CP 2). For mixture-of-
// experts models it says TP is sized by the active parameters and EP by the expert count; plan
// reads that as the dense row of the active parameter count with EP the largest divisor of the
// experts that the layout allows.
#pragma once

#include <string>
#include <vector>

#include "session/plan.hpp"
#include "workload/experiment.hpp"

namespace cs::api {

struct GuideAdvice {
    std::vector<std::string> reasoning;  // how each rule applied, one line each
    // The layouts the guide's ranges give that multiply to the GPU count, each with the
    // experiment's own other axes (schedule, vpp, micro-batch size, recompute, sharding).
    std::vector<PlanLayout> layouts;
    // Those that do not: "tp 8 x pp 16 x cp 2 = 256 does not divide the 192 GPUs".
    std::vector<std::string> not_dividing;
};

GuideAdvice guide_advice(const workload::ExperimentSpec& spec);

}  // namespace cs::api
