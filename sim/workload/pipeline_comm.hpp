// What a pipeline message costs besides its transfer, as Megatron-LM sends it (docs/schedules.md,
// "What interleaving costs"): the scatter/gather optimisation of Narayanan et al. 2021 (section
// 4.1): with tensor parallelism and without sequence parallelism, each of the tp GPUs of a stage
// sends 1/tp of the activation (or gradient) to its counterpart of the next stage, and the
// receiving stage all-gathers the tp slices over its tensor-parallel group before the pass can
// use them. With sequence parallelism the activation is already split over the tp GPUs, and
// nothing is gathered.
#pragma once

#include <functional>

#include "workload/experiment.hpp"
#include "workload/plan.hpp"

namespace cs::workload {

// Sets every chunk's activation_bytes (per GPU) for Megatron-LM (b x s/cp x h x 2 / tp: the
// 1/tp slice, scattered or sequence-parallel) and, where scatter/gather applies, prepends to each
// pass that receives its input from another device an all-gather of the whole activation over the
// tp group, flagged Step::PipelineComm. Other frameworks send the whole activation from every tp
// GPU (torch.distributed.pipelining has no scatter/gather) and keep the plan's sizes. `device_of`
// and `copies` as plan_iteration takes them; with two model copies (DualPipe, whose placement
// depends on the microbatch) nothing is gathered.
void apply_pipeline_comm(const ExperimentSpec& spec, IterationPlan& plan,
                         const std::function<int(int)>& device_of, int copies);

// Whether the schedule's point-to-point messages go in Megatron-LM's batched, synchronised
// exchanges (Schedule::exchange_rounds): Megatron-LM without --overlap-p2p-communication.
bool batched_p2p(const ExperimentSpec& spec);
// Whether every model chunk's DP gradient reduction waits for the stage's whole backward and the
// chunks reduce one after another: grad_reduce_after_backward (Megatron-LM's local DDP of 2021),
// or Megatron-LM without --overlap-grad-reduce (finalize_model_grads after the schedule) unless
// sharding reduces each unit's gradients as its backward ends (zero2, zero3).
bool dp_reduce_after_backward(const ExperimentSpec& spec);

}  // namespace cs::workload
