// Megatron-LM's --tp-comm-overlap: Transformer Engine's userbuffers run the tensor-parallel
// all-gathers and reduce-scatters of sequence parallelism chunk by chunk under the GEMMs next to
// them (docs/compute-model.md, "Overlap"): an all-gather under the GEMM that consumes it (qkv,
// fc1 forward; the dgrad GEMMs that follow it backward), a reduce-scatter under the GEMM that
// produces it (proj, fc2 forward; qkv and fc1 dgrad backward). Each such pair takes the longer
// of the two with the GEMM slowed by compute.interference while they overlap
// (Step::OverlapNext, OverlapPrevious; replay::overlapped_time).
#pragma once

#include "workload/experiment.hpp"
#include "workload/roofline.hpp"

namespace cs::workload {

// Flags every TP all-gather followed by a GEMM of the same repeat (OverlapNext) and every TP
// reduce-scatter preceded by one (OverlapPrevious) in one layer's forward and input-gradient
// passes; nothing without parallelism.tp_comm_overlap.
void apply_tp_comm_overlap(const ExperimentSpec& spec, LayerPasses& layer);

}  // namespace cs::workload
