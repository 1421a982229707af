// Memory per GPU: model states (parameters, gradients, optimizer states) and activations.
//
// Model states follow Megatron-LM's mixed-precision Adam: 2 bytes per parameter for the bf16/fp16
// weights, the gradient buffer (4 bytes in fp32 for bf16, 2 for fp16:
// gradient_bytes_per_parameter), 12 for the fp32 master weights and the two Adam moments (18 bytes
// per parameter in bf16; with the distributed optimizer the 12 are sharded over the data-parallel
// replicas: 6 + 12/d, as Megatron-LM's documentation states).
//
// Activations follow Korthikanti et al. 2022, Table 2 (bytes per layer per microbatch, s·b·h
// units, 2-byte activations and 1-byte dropout masks), generalised to grouped-query attention,
// SwiGLU and MoE MLPs by counting the same stored tensors.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/units.hpp"
#include "workload/experiment.hpp"
#include "workload/plan.hpp"

namespace cs::workload {

// Bytes per parameter of the gradient buffer, which is also the data type gradients are reduced
// in across data parallelism: Megatron-LM accumulates and reduces in the parameters' type (2
// bytes) for fp16, and forces fp32 (4) for bf16 (and so fp8, whose weights are bf16); fp32
// training keeps fp32 gradients.
double gradient_bytes_per_parameter(Precision precision);
// Bytes per parameter of the model's weights: 2 (bf16, fp16, and fp8 training, which keeps bf16
// weights), 4 in fp32 training.
double weight_bytes_per_parameter(Precision precision);

// Activation bytes one transformer layer keeps on one GPU for one in-flight microbatch, for the
// layout's tp, sequence parallelism and cp (which divides s) and the training's recompute, with
// the tensors the framework's kernels save (eager PyTorch's rotary embedding and SwiGLU keep
// more than Megatron-LM's fused kernels; docs/compute-model.md section 5). For GPT these are
// Korthikanti Table 2:
//   none:      sbh(10 + 24/t + 5as/(ht))      with sp: sbh(34/t + 5as/(ht))
//   selective: sbh(10 + 24/t)                 with sp: sbh(34/t)
//   full:      2sbh                           with sp: 2sbh/t
Bytes layer_activation_bytes(const ModelSpec& m, const ParallelLayout& layout,
                             const TrainingSpec& training, bool moe_layer,
                             Framework framework = Framework::Megatron);

// The cross entropy's fp32 buffers on the GPU that holds the output layer, per microbatch: held
// from the forward to the backward (the log-softmax output, or Megatron-LM's softmax), and the
// transient ones at the loss's backward beyond it (eager PyTorch: the zeroed NLL gradient and the
// log-softmax gradient, 8 bytes per logit; Megatron-LM, which turns the saved softmax into the
// gradient in place: its 16-bit cast, 2).
struct LossBuffers {
    Bytes held, transient;
};
LossBuffers loss_buffer_bytes(const ModelSpec& m, const ParallelLayout& layout,
                              const TrainingSpec& training, Framework framework);

// Parameters held by one GPU of pipeline stage `stage` holding `layers_on_stage` layers (the
// stage's first layer index is stage * layers_on_stage, which decides which layers are MoE),
// with the embedding and/or output layer. Dense weights are split over tp; routed experts over
// ep x tp.
std::int64_t parameters_per_gpu(const ModelSpec& m, const ParallelLayout& layout, int first_layer,
                                int layers_on_stage, bool has_embedding, bool has_output);

// Parameters whose optimizer state (fp32 master weight, Adam m and v) one GPU owns: all of
// parameters_per_gpu(), or with the distributed optimizer its shard, the dense part divided by
// shard group x cp (dp x cp without HSDP) and the routed experts by max(1, that / ep) (rounded
// up).
std::int64_t optimizer_parameters_per_gpu(const ModelSpec& m, const ParallelLayout& layout,
                                          int first_layer, int layers_on_stage, bool has_embedding,
                                          bool has_output);

// Parameters per GPU of each FSDP unit of `layers` layers from `first_layer`: one unit per layer
// (as FSDP2's fully_shard per block and Megatron-FSDP's per-layer units), the embedding folded
// into the first unit and the output layer (and final norm) into the last.
std::vector<std::int64_t> unit_parameters_per_gpu(const ModelSpec& m, const ParallelLayout& layout,
                                                  int first_layer, int layers, bool has_embedding,
                                                  bool has_output);

// Bytes of weights and gradients per GPU under ZeRO-2 and ZeRO-3 with shard group size N
// (ParallelLayout::shard_group_size()) for `parameters` parameters on the GPU (Psi) whose largest
// unit has U parameters; w and g are weight_ and gradient_bytes_per_parameter:
//   ZeRO-2: weights w Psi;                 gradients g Psi / N + g U
//   ZeRO-3: weights w Psi / N + w G;       gradients g Psi / N + g U
// where g U is one unit's unsharded gradients before their reduce-scatter, and G the gathered
// parameters: 2U (the unit computing and the one prefetched), U without prefetch, Psi when units
// stay gathered from forward to backward (reshard_after_forward: false). nullopt for ZeRO-0/1 or
// N = 1 (nothing sharded beyond the optimizer states).
struct ShardedStates {
    double parameters = 0, gradients = 0;
};
std::optional<ShardedStates> sharded_model_states(const ExperimentSpec& spec,
                                                  std::int64_t largest_unit, double parameters);

// Memory of one GPU of pipeline stage `stage` holding `layers_on_stage` layers, with
// `inflight_microbatches` microbatches' activations held at its peak (the schedule's number).
MemoryBreakdown memory_per_gpu(const ExperimentSpec& spec, int stage, int layers_on_stage,
                               int inflight_microbatches, bool has_embedding, bool has_output);

// A contiguous run of layers, [first, first + count): one model chunk.
struct LayerRange {
    int first = 0;
    int count = 0;
};
// Memory of one GPU holding the model chunks `chunks` (in any order; with the embedding and/or
// output layer as flagged) and `activations` bytes of activations at its peak.
MemoryBreakdown memory_per_gpu(const ExperimentSpec& spec, const std::vector<LayerRange>& chunks,
                               Bytes activations, bool has_embedding, bool has_output);

}  // namespace cs::workload
