// Parameter counts and FLOP counts of a transformer model, in closed form.
//
// FLOP conventions (those of Narayanan et al. 2021 and Korthikanti et al. 2022, so that our MFU
// compares with theirs): only matrix multiplications count, 2 FLOPs per multiply-add; the
// attention core (Q K^T and attention x V) counts 4·b·s²·(heads·head_dim) forward as if it were not
// causal; a backward pass costs twice its forward; the logits layer costs 2·b·s·h·V forward. The
// routed experts of an MoE layer count top_k experts per token. Norms, activations, softmax and the
// router's top-k selection are not counted.
#pragma once

#include <cstdint>

#include "core/units.hpp"
#include "workload/model.hpp"

namespace cs::workload {

// Parameters of one transformer layer (weights, biases, norms; an MoE layer counts the router and
// every expert).
std::int64_t layer_parameter_count(const ModelSpec& m, bool moe_layer);
// Parameters of one MoE layer's routed experts only (the part sharded over expert parallelism).
std::int64_t routed_expert_parameter_count(const ModelSpec& m);
// Word embedding (V·h) plus learned position embeddings.
std::int64_t embedding_parameter_count(const ModelSpec& m);
// The output (logits) layer's own weight: 0 when tied to the word embedding.
std::int64_t output_parameter_count(const ModelSpec& m);
// Final norm before the output layer.
std::int64_t final_norm_parameter_count(const ModelSpec& m);
// The whole model. For GPT-family models this is Narayanan eq. 2,
// 12·l·h²·(1 + 13/(12h) + (V+s)/(12·l·h)), plus the final LayerNorm (2h) that eq. 2 leaves out.
std::int64_t parameter_count(const ModelSpec& m);
// Parameters one token passes through (top_k routed experts instead of all of them).
std::int64_t active_parameter_count(const ModelSpec& m);

// True when layer `layer` (0-based) is an MoE layer.
bool is_moe_layer(const ModelSpec& m, int layer);
int moe_layer_count(const ModelSpec& m);

// Matrix-multiply weights one token passes through in one layer (no biases or norms): what the
// forward pass multiplies by 2 FLOPs per token.
std::int64_t layer_matmul_weights_per_token(const ModelSpec& m, bool moe_layer);

// Forward FLOPs of one layer for `sequences` sequences of `seq_length` tokens: GEMMs plus the
// attention core. Whole layer (not divided by tensor parallelism).
Flops layer_forward_flops(const ModelSpec& m, bool moe_layer, std::int64_t sequences,
                          std::int64_t seq_length);
// Forward FLOPs of the attention core alone (4·b·s²·heads·head_dim).
Flops attention_core_forward_flops(const ModelSpec& m, std::int64_t sequences,
                                   std::int64_t seq_length);
// Forward FLOPs of the logits GEMM (2·b·s·h·V; 0 without a vocabulary).
Flops logits_forward_flops(const ModelSpec& m, std::int64_t sequences, std::int64_t seq_length);

// FLOPs of one training iteration over `global_batch` sequences, whole cluster.
// model: forward + backward, no recomputation (Korthikanti eq. 7 for GPT:
//   72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h))).
// hardware: model plus what recomputation executes again: selective adds the attention core's
//   forward once per layer (4·B·s²·h), full adds each layer's whole forward (Narayanan eq. 3 for
//   GPT: 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h))). The logits layer is never recomputed.
struct IterationFlops {
    Flops model;
    Flops hardware;
};
IterationFlops iteration_flops(const ModelSpec& m, std::int64_t global_batch,
                               std::int64_t seq_length, Recompute recompute);

}  // namespace cs::workload
