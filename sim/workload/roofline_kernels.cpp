// The time of one kernel on the roofline: GEMMs (one and grouped), flash attention and
// memory-bound kernels, and the calibration's per-kind fractions and latencies.
#include <algorithm>
#include <cmath>

#include "core/errors.hpp"
#include "workload/roofline.hpp"
#include "workload/roofline_detail.hpp"

namespace cs::workload {
namespace {

using I = std::int64_t;

double dim_factor(double x, const topology::GemmCurve& curve, const RooflineCalibration& cal) {
    const double p = curve.exponent;
    const double fitted = std::max(x, cal.gemm_smallest_fitted_dim);
    const double xp = std::pow(fitted, p);
    return xp / (xp + std::pow(curve.half_dim, p)) * (x / fitted);
}

}  // namespace

const RooflineCalibration& default_calibration() {
    static const RooflineCalibration cal;
    return cal;
}

FlopRate peak_rate(const topology::GpuModel& gpu, Precision precision) {
    FlopRate r;
    switch (precision) {
        case Precision::Bf16:
            r = gpu.peak_bf16;
            break;
        case Precision::Fp16:
            r = gpu.peak_fp16.flops_per_s > 0 ? gpu.peak_fp16 : gpu.peak_bf16;
            break;
        case Precision::Fp8:
            r = gpu.peak_fp8.flops_per_s > 0 ? gpu.peak_fp8 : gpu.peak_bf16;
            break;
        case Precision::Fp32:
            r = gpu.peak_fp32;
            break;
    }
    if (r.flops_per_s <= 0)
        throw SimulationError(
            "roofline", "GPU model " + gpu.name + " has no " + precision_name(precision) + " peak");
    return r;
}

double gemm_efficiency(const GemmShape& shape, const topology::GemmCurve& curve,
                       const RooflineCalibration& cal) {
    return curve.peak_fraction * dim_factor(static_cast<double>(shape.m), curve, cal) *
           dim_factor(static_cast<double>(shape.n), curve, cal) *
           dim_factor(static_cast<double>(shape.k), curve, cal);
}

FlopRate gemm_rate(const GemmShape& shape, Precision precision, const topology::GpuModel& gpu,
                   const RooflineCompute& compute, Fp8Recipe recipe) {
    const topology::GemmCurve& curve = compute.gemm(gpu);
    const double eff = gemm_efficiency(shape, curve) * compute.efficiency_scale;
    if (precision != Precision::Fp8) return detail::scaled(peak_rate(gpu, precision), eff);
    peak_rate(gpu, precision);  // an fp8 run needs fp8 tensor cores
    const topology::GemmCurve::Fp8& fp8 = recipe == Fp8Recipe::Rowwise     ? curve.fp8_rowwise
                                          : recipe == Fp8Recipe::Blockwise ? curve.fp8_blockwise
                                                                           : curve.fp8_tensorwise;
    const FlopRate rate = detail::scaled(peak_rate(gpu, Precision::Bf16), eff * fp8.speedup);
    // The cost per output element, as the rate that takes the GEMM's time plus it.
    const double flops = shape.flops().value;
    if (flops <= 0 || fp8.per_output <= 0) return rate;
    const double seconds = flops / rate.flops_per_s + fp8.per_output *
                                                          static_cast<double>(shape.m) *
                                                          static_cast<double>(shape.n);
    return FlopRate{flops / seconds};
}

Time gemm_time(const GemmShape& shape, Precision precision, const topology::GpuModel& gpu,
               const RooflineCompute& compute, int element_bytes, Fp8Recipe recipe) {
    const FlopRate rate = gemm_rate(shape, precision, gpu, compute, recipe);
    // In double first: shapes within their limits (2^40 a side) multiply past 2^63.
    const double bytes = static_cast<double>(element_bytes) *
                         (static_cast<double>(shape.m) * static_cast<double>(shape.k) +
                          static_cast<double>(shape.k) * static_cast<double>(shape.n) +
                          static_cast<double>(shape.m) * static_cast<double>(shape.n));
    // Byte counts are 64-bit: a GEMM moving 2^63 bytes or more is beyond what is counted (and
    // beyond the clock at any HBM bandwidth of a real GPU).
    if (!(bytes < 0x1p63))
        throw ClockOverflow("roofline", "a GEMM moving 2^63 bytes or more", Time::zero());
    return detail::roofline_time(shape.flops(), rate, Bytes{static_cast<std::int64_t>(bytes)}, gpu,
                                 compute);
}

GroupedGemmTiling grouped_gemm_tiling(I experts, I tokens, I n, I k, bool tokens_reduce,
                                      const RooflineCalibration& cal) {
    const I rows = tokens_reduce ? n : tokens;
    const I cols = tokens_reduce ? k : n;
    const I reduction = tokens_reduce ? tokens : k;
    GroupedGemmTiling t;
    t.ping_pong = rows <= 128 || cols <= 128;
    t.tile_m = t.ping_pong ? 64 : 128;
    t.tile_n = t.ping_pong ? 128 : 256;
    t.tile_k = t.ping_pong ? 128 : 64;
    const auto ceil_div = [](I a, I b) { return (std::max<I>(a, 1) + b - 1) / b; };
    const I row_tiles = 2 * ceil_div(ceil_div(rows, t.tile_m), 2);  // 2 x 1 CTA clusters
    t.tiles = std::max<I>(experts, 1) * row_tiles * ceil_div(cols, t.tile_n);
    t.waves = ceil_div(t.tiles, std::max<I>(cal.grouped_sms, 1));
    t.k_steps = ceil_div(reduction, t.tile_k);
    return t;
}

Time grouped_gemm_time(I experts, I tokens, I n, I k, bool tokens_reduce, Precision precision,
                       const topology::GpuModel& gpu, const RooflineCompute& compute,
                       const RooflineCalibration& cal) {
    const GroupedGemmTiling t = grouped_gemm_tiling(experts, tokens, n, k, tokens_reduce, cal);
    FlopRate peak = peak_rate(gpu, precision);
    if (precision == Precision::Fp8)
        peak = detail::scaled(peak_rate(gpu, Precision::Bf16),
                              compute.gemm(gpu).fp8_tensorwise.speedup);
    const double efficiency =
        t.ping_pong ? cal.grouped_small_efficiency : cal.grouped_large_efficiency;
    const FlopRate per_sm =
        detail::scaled(peak, efficiency * compute.efficiency_scale * compute.grouped_gemm_scale /
                                 static_cast<double>(std::max<I>(cal.grouped_sms, 1)));
    const Flops tile_flops{2.0 * static_cast<double>(t.tile_m * t.tile_n * t.tile_k) *
                           static_cast<double>(t.k_steps)};
    const Time math = (compute_time(tile_flops, per_sm) + cal.grouped_tile) * t.waves;
    const int element = precision == Precision::Fp8 ? 1 : 2;
    const I rows = experts * tokens;
    const Bytes bytes{element * (rows * n + rows * k + experts * n * k)};
    const Time memory =
        transfer_time(bytes, Bandwidth{gpu.hbm_bandwidth.bytes_per_s * cal.grouped_hbm_fraction});
    return cal.grouped_call + std::max(math, memory);
}

double AttentionBlock::model_flops() const {
    return 4.0 * static_cast<double>(b) * static_cast<double>(q_len) * static_cast<double>(kv_len) *
           static_cast<double>(heads) * static_cast<double>(head_dim);
}

double AttentionBlock::executed_flops(bool backward) const {
    const double forward = model_flops() / (causal ? 2 : 1);
    return backward ? 2.5 * forward : forward;
}

Bytes AttentionBlock::hbm_bytes(bool backward, int element_bytes) const {
    const std::int64_t q = b * q_len * heads * head_dim;
    const std::int64_t kv = b * kv_len * kv_heads * head_dim;
    return Bytes{element_bytes * (backward ? 4 * q + 4 * kv : 2 * q + 2 * kv)};
}

double attention_efficiency(const AttentionBlock& block, bool backward,
                            const RooflineCalibration& cal) {
    const double s = static_cast<double>(block.kv_len);
    const double w = static_cast<double>(block.b) * static_cast<double>(block.heads) *
                     static_cast<double>(block.q_len) / 128.0;
    const double cap = backward ? cal.attention_backward_cap : cal.attention_forward_cap;
    const double s0 = backward ? cal.attention_backward_s0 : cal.attention_forward_s0;
    const double w0 = backward ? cal.attention_backward_w0 : cal.attention_forward_w0;
    return cap * s / (s + s0) * w / (w + w0);
}

Time attention_time(const AttentionBlock& block, bool backward, const topology::GpuModel& gpu,
                    const RooflineCompute& compute) {
    const double scale =
        backward ? compute.attention_backward_scale : compute.attention_forward_scale;
    const FlopRate rate =
        detail::scaled(peak_rate(gpu, Precision::Bf16),
                       attention_efficiency(block, backward) * scale * compute.efficiency_scale);
    const Time math = compute_time(Flops{block.executed_flops(backward)}, rate);
    return std::max(math,
                    transfer_time(block.hbm_bytes(backward), detail::achievable_hbm(gpu, compute)));
}

int attention_launches(const AttentionBlock& block, bool backward, Framework framework) {
    if (framework != Framework::Pytorch) return 1;
    if (!backward) return 2;
    return block.kv_heads < block.heads ? 6 : 4;
}

Time memory_bound_time(Bytes bytes, const topology::GpuModel& gpu, const RooflineCompute& compute,
                       MemKind kind) {
    return transfer_time(bytes, detail::achievable_hbm(gpu, compute, kind)) +
           detail::overheads(compute);
}

double RooflineCalibration::hbm_fraction_of(MemKind kind) const {
    // Effective bandwidth / 4.8 TB/s on H200 (docs/compute-model.md tabulates the fits). Where a
    // kind runs in more than one public profiled iteration (gpt-h3072, llama-h2048-l8,
    // moe-h2048-e8-l4), the fraction is their pooled fit by `clustersim calibrate --experiment`:
    // the model's bytes of the kind over its kernels' time, summed over the traces.
    switch (kind) {
        case MemKind::Fused:
            return hbm_fraction;
        case MemKind::Elementwise:
            return 0.887;  // gpt 0.887, llama 0.876, moe 0.900: adds, casts, fills at 4.2-4.3 TB/s
        case MemKind::Activation:
            return 0.63;  // GELU forward 2.4-3.0 TB/s, backward 2.6-3.3 (gpt trace: 0.611)
        case MemKind::Norm:
            return 0.45;  // LayerNorm forward 1.6-2.1 TB/s, backward 2.0-2.7 (gpt trace: 0.464)
        case MemKind::Reduce:
            return 0.42;  // bias gradients 1.4-2.4 TB/s (gpt 0.410, moe 0.389)
        case MemKind::Concat:
            return 0.19;  // torch.cat of the q, k, v gradients (gpt 0.191, llama 0.178, moe 0.185)
        case MemKind::StridedCopy:
            return 0.245;  // gpt's q, k, v gradient copy 0.236, moe's routing-weight product 0.325
        case MemKind::MixedAccumulate:
            return 0.565;  // fp32 += bf16 main gradients beyond kind_latency (0.54-0.58)
        case MemKind::Softmax:
            return 0.495;  // the loss's cast, log-softmax and its backward (0.480-0.517)
        case MemKind::Optimizer:
            return 0.707;  // fused AdamW, 28 bytes per parameter (gpt 0.698 - moe 0.719)
        // Megatron-LM's unfused attention at s = 2048 (b 16, 8 heads of 64, dropout 0.1) on an
        // A100 40GB, the FlashAttention paper's Tables 15 and 16 (arXiv 2205.14135v2; tests/
        // validation/data/a100-attention.json): 7.1 GB forward in 6.56 ms, 10.5 GB backward in
        // 10.80 ms, of 1.555 TB/s. Not measured on any other GPU: the fractions carry over.
        case MemKind::Scores:
            return 0.698;
        case MemKind::ScoresBackward:
            return 0.624;
        case MemKind::RmsNorm:
            return 0.542;  // llama 0.536, moe 0.565 (forward 3.4 TB/s, backward 2.4)
        case MemKind::Rotary:
            return 0.26;  // llama 0.259, moe 0.261: strided mul, neg, cat, add at 1.1-1.7 TB/s
        case MemKind::Swiglu:
            return 0.387;  // llama 0.386, moe 0.390: silu, strided mul, silu_backward
        case MemKind::Permute:
            return 0.495;  // moe: the token gather with its index gather
        case MemKind::Unpermute:
            return 0.067;  // index_add_ (moe 0.074) and the embedding's backward (gpt, llama)
        // The router's softmax and top-k and the index arithmetic: a fixed time per kernel
        // (kind_latency) and their bytes at this fraction, from the routing microbenchmarks
        // (T = 4096-32768 tokens, 8-256 experts: 22-477 us).
        case MemKind::Routing:
            return 0.07;
        case MemKind::Sort:
            return 1;  // its time is RooflineCalibration::small_sort or large_sort
    }
    return hbm_fraction;
}

Time RooflineCalibration::kind_latency(MemKind kind) const {
    switch (kind) {
        case MemKind::Routing:
            return Time::ns(2000);
        // The main-gradient adds, one per parameter tensor from a norm's weight to the
        // embedding: a regression of their kernel times on their bytes in the three profiled
        // iterations gives 3.1-3.8 us per kernel (the tiny ones take 3.6 us) and 0.54-0.58 of
        // the HBM bandwidth beyond it, where one fraction alone ranges 0.50-0.57 with the sizes.
        case MemKind::MixedAccumulate:
            return Time::ns(3400);
        default:
            return Time::zero();
    }
}

}  // namespace cs::workload
