// The roofline compute-time model and the ops of one transformer layer on one GPU.
//
// Each compute op takes max(executed FLOPs / (peak x efficiency), HBM bytes / achievable HBM
// bandwidth) + launch overhead (+ op overhead). GEMM efficiency is a smooth function of the GEMM
// shape fitted on the H200 GEMM microbenchmarks of validation/h200-calibration.json, capped by the
// published achievable ("MAMF") GEMM throughput; flash attention has its own efficiency from
// published FlashAttention-2 figures. docs/compute-model.md derives every constant and tabulates
// the error against the measured H200 transformer layers.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "core/units.hpp"
#include "topology/cluster.hpp"
#include "workload/experiment.hpp"
#include "workload/plan.hpp"

namespace cs::workload {

// C[m,n] = A[m,k] · B[k,n].
struct GemmShape {
    std::int64_t m = 0, n = 0, k = 0;
    Flops flops() const {
        return Flops{2.0 * static_cast<double>(m) * static_cast<double>(n) *
                     static_cast<double>(k)};
    }
};

// Calibrated constants (see docs/compute-model.md for their sources).
struct RooflineCalibration {
    // The 16-bit GEMM curve is the GPU's (topology::GemmCurve), and so are the fp8 constants: an
    // fp8 GEMM runs at the 16-bit curve's rate times its recipe's measured speedup, not at the
    // datasheet's 2x, plus the recipe's measured cost per output element.
    double gemm_smallest_fitted_dim = 512;  // below it the factor falls linearly (tile padding)
    // A grouped GEMM (torch._grouped_mm: CUTLASS's sm90 grouped kernel, Megatron-core's
    // GroupedMLP on Hopper) as its persistent kernel runs it: every expert's output cut into
    // tiles (GroupedGemmTiling), the tiles dealt in waves over the SMs, each tile its mainloop
    // at a fraction of the peak plus a fixed cost, and a fixed cost per call; or the HBM time
    // of its operands where that is longer (docs/validation.md, "The grouped GEMM model").
    // Fitted on the H200 microbenchmarks' grouped_gemm rows at 128-4096 tokens per expert
    // (561 rows; h200-microbench.json, tools/validation/fit_grouped_gemm.py).
    std::int64_t grouped_sms = 132;           // H100 / H200 SXM
    Time grouped_call = Time::ns(7200);       // the problem-list kernel, ramp-up, tail
    Time grouped_tile = Time::ns(2700);       // a tile's prologue and epilogue
    double grouped_large_efficiency = 0.806;  // 128 x 256 x 64 cooperative tiles
    double grouped_small_efficiency = 0.62;   // 64 x 128 x 128 ping-pong tiles
    double grouped_hbm_fraction = 0.795;      // of the datasheet HBM bandwidth
    // Flash attention (cuDNN SDPA on H200, the attention microbenchmarks over heads, K/V heads
    // and sequence length): the fraction of the bf16 peak the causal kernel's executed FLOPs
    // reach, cap · s/(s + s0) · w/(w + w0), with s the key length and w the query tiles of 128
    // rows over the batch and heads (b · heads · s_q / 128), the backward's helper kernels
    // (dO·O, dQ conversion, the GQA head reductions) included.
    double attention_forward_cap = 0.6862;
    double attention_forward_s0 = 400;
    double attention_forward_w0 = 170;
    double attention_backward_cap = 0.5938;
    double attention_backward_s0 = 1000;
    double attention_backward_w0 = 120;
    double hbm_fraction = 0.865;  // H200 device copy 4150.7 GB/s of 4.8 TB/s (MemKind::Fused)
    // Achieved fraction of the datasheet HBM bandwidth per MemKind (h200-kernels.json kernels
    // and the profiled iteration, bytes as docs/compute-model.md counts them).
    double hbm_fraction_of(MemKind kind) const;
    // The fixed GPU time of one kernel of the latency-bound kinds beyond its bytes (the MoE
    // router's top-k, the sort), zero for the others.
    Time kind_latency(MemKind kind) const;
    // torch.argsort of n keys: an in-place block radix sort up to kSmallSortKeys keys, cub's
    // onesweep radix sort (histogram, scans, eight passes, memsets) above.
    static constexpr std::int64_t kSmallSortKeys = 4096;
    // Eager PyTorch's host time per kernel in units of HostModel::launch (Step::host_weight):
    // a module's call (nn.Linear, the norms, GELU) in the forward, a plain tensor function's
    // (rotary, SwiGLU, adds, SDPA, the MoE routing and permutation, grouped_mm), and any kernel
    // of the backward (the autograd engine's nodes, kernel-less ones included). A grid (module
    // 1.0-1.4, function 0.7-1.0, backward 0.8-1.5) on the host-bound H200 layer rows of the
    // three families, the 2 x H200 pipeline runs and the profiled iterations (docs/compute-
    // model.md section 6): 30 us per module kernel, 18.75 us per function kernel at launch 25 us.
    double host_module = 1.2, host_function = 0.75, host_backward = 1.0;
    Time small_sort = Time::ns(34000);
    Time large_sort = Time::ns(60000);
};
const RooflineCalibration& default_calibration();

// Fraction of the 16-bit peak a 16-bit GEMM of this shape reaches (before efficiency_scale):
// peak_fraction x f(m) x f(n) x f(k), f(x) = x^p / (x^p + x0^p) for x at least the smallest
// benchmarked size x_min, f(x_min) x / x_min below it (a skinny GEMM pads its tiles; the fitted
// curve, quadratic near 0, is not extrapolated there). An fp8 GEMM runs at this fraction of the
// 16-bit peak times its recipe's speedup, plus its recipe's cost per output (gemm_rate).
double gemm_efficiency(const GemmShape& shape, const topology::GemmCurve& curve = {},
                       const RooflineCalibration& cal = default_calibration());
// The GEMM's rate at a precision: the 16-bit peak x gemm_efficiency x efficiency_scale; in fp8,
// x the recipe's speedup and then slowed to take the recipe's per_output x m x n seconds more
// (topology::GemmCurve::Fp8); the fp32 peak x gemm_efficiency in fp32.
FlopRate gemm_rate(const GemmShape& shape, Precision precision, const topology::GpuModel& gpu,
                   const RooflineCompute& compute, Fp8Recipe recipe = Fp8Recipe::Tensorwise);

// The GPU's dense peak at a precision.
FlopRate peak_rate(const topology::GpuModel& gpu, Precision precision);

// Time of one GEMM: max(flops / (peak x efficiency x scale), bytes / HBM) + overheads. The bytes
// are the operands and the result at `element_bytes` each.
Time gemm_time(const GemmShape& shape, Precision precision, const topology::GpuModel& gpu,
               const RooflineCompute& compute, int element_bytes = 2,
               Fp8Recipe recipe = Fp8Recipe::Tensorwise);
// Time of a memory-bound op moving `bytes` through HBM, + overheads (one launch).
Time memory_bound_time(Bytes bytes, const topology::GpuModel& gpu, const RooflineCompute& compute,
                       MemKind kind = MemKind::Fused);
// One flash-attention call on one GPU: b sequences of q_len queries against kv_len keys, heads
// query heads and kv_heads K/V heads of head_dim (the layer's q_len = kv_len = s/cp; context
// parallelism calls it on its blocks). Causal skips the masked half of the scores.
struct AttentionBlock {
    std::int64_t b = 1, q_len = 0, kv_len = 0, heads = 0, kv_heads = 0, head_dim = 0;
    bool causal = true;
    // Model FLOPs of QK^T and the context product, the whole score matrix (Narayanan eq. 3).
    double model_flops() const;
    // FLOPs the kernels execute: half the model's when causal; the backward 2.5 x the forward
    // (it recomputes the scores).
    double executed_flops(bool backward) const;
    // HBM bytes: Q, K, V and the output (forward); Q, K, V, O, dO, dQ, dK, dV (backward).
    Bytes hbm_bytes(bool backward, int element_bytes = 2) const;
};
// The fraction of the bf16 peak the kernel's executed FLOPs reach (RooflineCalibration).
double attention_efficiency(const AttentionBlock& block, bool backward,
                            const RooflineCalibration& cal = default_calibration());
// GPU time of the call (forward, or its backward with the helper kernels), without launch gaps.
Time attention_time(const AttentionBlock& block, bool backward, const topology::GpuModel& gpu,
                    const RooflineCompute& compute);
// Kernels the call launches in eager PyTorch (cuDNN SDPA): a memset and the kernel forward; a
// memset, dO·O, the main kernel and the dQ conversion backward, and with grouped-query
// attention the reductions of dK and dV over each group.
int attention_launches(const AttentionBlock& block, bool backward, Framework framework);

// How torch._grouped_mm tiles a grouped GEMM of `experts` GEMMs on Hopper. Each expert's
// output is m x n_out with reduction k_red: forward and dgrad {tokens, n, k}, the wgrad
// (`tokens_reduce`) {n, k, tokens}. PyTorch picks 64 x 128 x 128 ping-pong tiles when m or n_out
// is at most 128, 128 x 256 x 64 cooperative tiles otherwise; clusters of 2 x 1 CTAs round each
// expert's row tiles up to an even count. The persistent kernel deals the tiles over the SMs.
struct GroupedGemmTiling {
    std::int64_t tile_m = 0, tile_n = 0, tile_k = 0;
    bool ping_pong = false;
    std::int64_t tiles = 0;    // experts x even(ceil(m / tile_m)) x ceil(n_out / tile_n)
    std::int64_t waves = 0;    // ceil(tiles / SMs)
    std::int64_t k_steps = 0;  // ceil(k_red / tile_k): mainloop steps per tile
};
GroupedGemmTiling grouped_gemm_tiling(std::int64_t experts, std::int64_t tokens, std::int64_t n,
                                      std::int64_t k, bool tokens_reduce,
                                      const RooflineCalibration& cal = default_calibration());
// GPU time of one grouped GEMM (both kernels, no launch gaps):
//   grouped_call + max(waves x tile time, bytes / (HBM x grouped_hbm_fraction)),
//   tile time = 2 tile_m tile_n tile_k k_steps / (peak x efficiency x scales / SMs) + grouped_tile,
// the scales being compute.efficiency_scale and compute.grouped_gemm_scale (a calibration's),
// the efficiency that of the tiling's kind; bytes: the activations in and out and the experts'
// weights. In fp8 the peak is the bf16 one times the curve's tensorwise speedup.
Time grouped_gemm_time(std::int64_t experts, std::int64_t tokens, std::int64_t n, std::int64_t k,
                       bool tokens_reduce, Precision precision, const topology::GpuModel& gpu,
                       const RooflineCompute& compute,
                       const RooflineCalibration& cal = default_calibration());

// Divides the tensor-core steps of `passes` by the GPU's sustained factor for their duty cycle
// (the tensor-core share of the compute time of all of them together); no-op with burst clocks.
void apply_sustained(std::initializer_list<PassPlan*> passes, const topology::GpuModel& gpu,
                     const RooflineCompute& compute);

// The work of one model piece (a transformer layer, the embedding, the output layer) on one GPU
// for one microbatch. backward = backward_input followed by backward_weight (for schedules that
// split them); recomputation sits at the start of backward and backward_input.
struct LayerPasses {
    PassPlan forward, backward, backward_input, backward_weight;
    Bytes activation_memory;  // held per in-flight microbatch (Korthikanti Table 2)
    Bytes activation_send;    // the activation passed to the next pipeline stage
};

// The attention block of one layer on one GPU for one microbatch (tp and cp applied), as the
// roofline costs it.
AttentionBlock layer_attention_block(const ModelSpec& model, const ParallelLayout& layout,
                                     const TrainingSpec& training);
// One fused attention call on `block` (forward, or its backward) as the roofline costs it
// (attention_time, the framework's launches and host weight), counting `model` FLOPs for MFU
// (hardware FLOPs too, or only those with `recompute`). Context parallelism's ring
// (workload/context_parallel.cpp) costs its blocks with it.
Step flash_attention_step(const topology::GpuModel& gpu, const RooflineCompute& compute,
                          const char* label, const AttentionBlock& block, Flops model,
                          bool backward, bool recompute);

// One transformer layer on one GPU of the layout (tp, sp, cp, ep applied) for one microbatch.
// Ops: norm, qkv, attention (flash attention; causal, so half the score matrix is computed while
// model FLOPs count all of it as Narayanan eq. 3 does), proj, residual, norm, MLP or router +
// expert GEMMs, activation, residual; collectives: TP all-reduce (or all-gather/reduce-scatter
// with sequence parallelism), CP K/V all-gather / reduce-scatter, EP all-to-all dispatch and
// combine.
LayerPasses roofline_layer(const ModelSpec& model, const ParallelLayout& layout,
                           const TrainingSpec& training, const topology::GpuModel& gpu,
                           const RooflineCompute& compute, bool moe_layer);

// Embedding lookup (first stage): memory-bound gather forward, scatter-add of the gradient
// backward (weight gradient), with the TP all-reduce of the vocab-parallel embedding.
LayerPasses roofline_embedding(const ModelSpec& model, const ParallelLayout& layout,
                               const TrainingSpec& training, const topology::GpuModel& gpu,
                               const RooflineCompute& compute);

// Final norm, logits GEMM (2·b·s·h·V / tp) and cross-entropy (last stage).
LayerPasses roofline_output_layer(const ModelSpec& model, const ParallelLayout& layout,
                                  const TrainingSpec& training, const topology::GpuModel& gpu,
                                  const RooflineCompute& compute);

// One optimizer step of one GPU as Megatron-LM's mixed-precision Adam runs it, HBM-bound, in
// bytes per parameter (g = gradient_bytes_per_parameter: 2 in fp16, 4 otherwise):
//   zero the gradient buffer for the next iteration             g x held
//   fp16 only: copy the fp16 gradients to fp32 (read 2, write 4) 6 x owned
//   fp16 only: unscale and check for inf/nan (read + write)      8 x owned
//   gradient norm for clipping (read)                            4 x owned
//   Adam: read gradient, master, m, v; write master, m, v        28 x owned
//   copy the master weights to the 16-bit weights (not fp32)     6 x owned
// `held` is parameters_per_gpu(); `owned` is optimizer_parameters_per_gpu() (the shard with the
// distributed optimizer). fp16 costs 2 + 52 per parameter, bf16 and fp8 4 + 38, fp32 4 + 32.
// Not counted: the clipping multiply (8 x owned), which runs only in iterations whose gradient
// norm exceeds --clip-grad, and the NaN check of the gradient buffer that newer Megatron-LM runs
// before the data-parallel reduction (g x held).
// Eager PyTorch with Megatron-style mixed precision (the public H200 trace) runs fused AdamW
// (MemKind::Optimizer, 28 x owned), the master copy to bf16 (6 x owned) and the zeroing of the fp32
// main gradients (4 x held) as separate multi-tensor kernels, and no gradient norm.
Time roofline_optimizer_step(std::int64_t held, std::int64_t owned, Precision precision,
                             const topology::GpuModel& gpu, const RooflineCompute& compute);
// The same step as the memory-bound kernels it is timed as (one for Megatron-LM, three for eager
// PyTorch), each with its bytes and kind: what roofline_optimizer_step sums and calibrate fits.
struct OptimizerKernel {
    const char* label;
    Bytes bytes;
    MemKind kind;
};
std::vector<OptimizerKernel> optimizer_step_kernels(std::int64_t held, std::int64_t owned,
                                                    Precision precision,
                                                    const RooflineCompute& compute);

}  // namespace cs::workload
