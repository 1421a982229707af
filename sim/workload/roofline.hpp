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
    // The 16-bit GEMM curve is the GPU's (topology::GemmCurve); fp8 GEMMs reach this fraction
    // of the fp8 peak where the 16-bit curve reaches its peak_fraction.
    double gemm_peak_fraction_fp8 = 0.734;  // H200 SXM fp8 MAMF 1453.4 / 1979 TFLOP/s
    double gemm_smallest_fitted_dim = 512;  // below it the factor falls linearly (tile padding)
    // Flash attention (cuDNN SDPA on H200, h200-kernels.json transformer_layer_kernels): the
    // fraction of the bf16 peak the causal kernel's executed FLOPs reach rises with the sequence
    // length s as cap x s / (s + s_half) (fit on the h = 4096 rows at s = 2048 and 4096).
    double attention_forward_cap = 0.666;
    double attention_forward_half_seq = 1053;
    double attention_backward_cap = 0.592;
    double attention_backward_half_seq = 1417;
    double hbm_fraction = 0.865;  // H200 device copy 4150.7 GB/s of 4.8 TB/s (MemKind::Fused)
    // Achieved fraction of the datasheet HBM bandwidth per MemKind (h200-kernels.json kernels
    // and the profiled iteration, bytes as docs/compute-model.md counts them).
    double hbm_fraction_of(MemKind kind) const;
};
const RooflineCalibration& default_calibration();

// Fraction of the peak a GEMM of this shape reaches at this precision (before efficiency_scale):
// peak_fraction(precision) x f(m) x f(n) x f(k), f(x) = x^p / (x^p + x0^p) for x at least the
// smallest benchmarked size x_min, f(x_min) x / x_min below it (a skinny GEMM pads its tiles; the
// fitted curve, quadratic near 0, is not extrapolated there).
double gemm_efficiency(const GemmShape& shape, Precision precision,
                       const topology::GemmCurve& curve = topology::GemmCurve{},
                       const RooflineCalibration& cal = default_calibration());

// The GPU's dense peak at a precision.
FlopRate peak_rate(const topology::GpuModel& gpu, Precision precision);

// Time of one GEMM: max(flops / (peak x efficiency x scale), bytes / HBM) + overheads. The bytes
// are the operands and the result at `element_bytes` each.
Time gemm_time(const GemmShape& shape, Precision precision, const topology::GpuModel& gpu,
               const RooflineCompute& compute, int element_bytes = 2);
// Time of a memory-bound op moving `bytes` through HBM, + overheads (one launch).
Time memory_bound_time(Bytes bytes, const topology::GpuModel& gpu, const RooflineCompute& compute,
                       MemKind kind = MemKind::Fused);
// The flash-attention kernels' fraction of the bf16 peak at sequence length `seq`.
double attention_efficiency(std::int64_t seq, bool backward,
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

// The flash-attention kernel of a layer (PassBuilder::attention's cost): `executed` FLOPs at the
// attention efficiency for key/value length `seq` (forward or backward), against `io` bytes of
// HBM, with the framework's launches; `model` FLOPs counted for MFU (hardware FLOPs too, or only
// those with `recompute`). Context parallelism's ring (workload/context_parallel.cpp) costs its
// attention blocks with it.
Step flash_attention_step(const topology::GpuModel& gpu, const RooflineCompute& compute,
                          const char* label, Flops model, Flops executed, Bytes io,
                          std::int64_t seq, bool backward, bool recompute);

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

}  // namespace cs::workload
