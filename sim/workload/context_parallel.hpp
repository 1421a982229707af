// Context parallelism as Megatron-LM runs it through Transformer Engine's attention
// (docs/compute-model.md, "Context parallelism"; parallelism.cp_comm_type):
//
//   p2p        the sequence in 2 x cp chunks, rank i holding chunks i and 2cp-1-i (causal load
//              balance); attention in cp steps, step j on the key/value block that started on rank
//              i - j, the next block arriving from the ring neighbour while this one computes
//              (TE's double buffer: the pair takes the longer of the two, Step::OverlapNext). Step
//              0 is the causal diagonal block; the others are full blocks of half the scores.
//              Backward: the same ring carrying the keys and values and their gradients (twice
//              the bytes), and one last hop returning the gradients to their owner.
//   a2a        all-to-all of q, k, v (sequence-split to head-split) before the attention on the
//              whole sequence with heads / cp, and of the output after; the backward mirrors it.
//   allgather  all-gather of the keys and values before attention, reduce-scatter of their
//              gradients after the backward (what workload::roofline_layer emits).
//   a2a+p2p    all-to-all inside groups of cp_a2a_size ranks, then the p2p ring over the cp /
//              cp_a2a_size groups.
//
// Each attention step of the layer (forward, backward and the recomputed forward) becomes the
// steps of its kind, costed with workload::flash_attention_step on the blocks' shapes.
#pragma once

#include "workload/experiment.hpp"
#include "workload/roofline.hpp"

namespace cs::workload {

// Rewrites the attention and context-parallel collectives of one layer's passes (as
// roofline_layer made them) for the layout's cp_comm_type; nothing with cp = 1 or allgather.
// Throws ConfigError (at the layout) for p2p, a2a or a2a+p2p without flash attention, and for a2a
// with attention heads per tensor-parallel rank not divisible by cp (or by cp_a2a_size).
void apply_context_parallel(const ExperimentSpec& spec, const topology::GpuModel& gpu,
                            LayerPasses& layer);

// backward = backward_input then backward_weight again, after either half changed.
inline void rejoin_backward(LayerPasses& layer) {
    layer.backward = layer.backward_input;
    layer.backward.steps.insert(layer.backward.steps.end(), layer.backward_weight.steps.begin(),
                                layer.backward_weight.steps.end());
}

}  // namespace cs::workload
