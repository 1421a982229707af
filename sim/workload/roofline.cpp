#include "workload/roofline.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <string_view>

#include "core/errors.hpp"
#include "workload/flops.hpp"
#include "workload/memory.hpp"

namespace cs::workload {
namespace {

using I = std::int64_t;
using network::CollectiveKind;

constexpr I kActivationBytes = 2;  // activations stay 16-bit, also in fp8 training

double dim_factor(double x, const topology::GemmCurve& curve, const RooflineCalibration& cal) {
    const double p = curve.exponent;
    const double fitted = std::max(x, cal.gemm_smallest_fitted_dim);
    const double xp = std::pow(fitted, p);
    return xp / (xp + std::pow(curve.half_dim, p)) * (x / fitted);
}

// A calibration file's fraction for the kind wins over the catalogue's.
Bandwidth achievable_hbm(const topology::GpuModel& gpu, const RooflineCompute& compute,
                         MemKind kind = MemKind::Fused) {
    const double given = compute.hbm_fractions[static_cast<std::size_t>(kind)];
    const double fraction = given > 0 ? given : default_calibration().hbm_fraction_of(kind);
    return Bandwidth{gpu.hbm_bandwidth.bytes_per_s * fraction};
}

// GPU time between kernels: `launches` kernel gaps + the user's per-op overhead.
Time overheads(const RooflineCompute& compute, int launches = 1) {
    return compute.launch_overhead * launches + compute.op_overhead;
}

bool eager(const RooflineCompute& compute) {
    return compute.framework == Framework::Pytorch;
}

Time roofline_time(Flops executed, FlopRate rate, Bytes bytes, const topology::GpuModel& gpu,
                   const RooflineCompute& compute, int launches = 1,
                   MemKind kind = MemKind::Fused) {
    const Time math = executed.value > 0 ? compute_time(executed, rate) : Time::zero();
    const Time memory = transfer_time(bytes, achievable_hbm(gpu, compute, kind));
    return std::max(math, memory) + overheads(compute, launches);
}

FlopRate scaled(FlopRate peak, double fraction) {
    return FlopRate{peak.flops_per_s * fraction};
}

// Builds the steps of one pass. `recompute` marks steps that re-execute forward work during the
// backward pass: they count as hardware FLOPs only.
class PassBuilder {
  public:
    PassBuilder(const topology::GpuModel& gpu, const RooflineCompute& compute, Precision precision)
        : gpu_(gpu), compute_(compute), precision_(precision) {}

    bool eager() const { return workload::eager(compute_); }
    // The kind of a memory-bound kernel: eager PyTorch's own kernel, or Megatron-LM's fused one.
    MemKind kind(MemKind eager_kind) const { return eager() ? eager_kind : MemKind::Fused; }

    // Eager PyTorch runs a memset (cuBLAS workspace) before each GEMM: two launches.
    void gemm(PassPlan& pass, const char* label, GemmShape shape, bool recompute = false,
              int repeat = 1) {
        if (shape.m <= 0 || shape.n <= 0 || shape.k <= 0) return;
        Step s;
        s.label = label;
        s.tensor_core = true;
        s.launches = eager() ? 2 : 1;
        const int element = precision_ == Precision::Fp8 ? 1 : 2;
        s.duration = gemm_time(shape, precision_, gpu_, compute_, element) +
                     compute_.launch_overhead * (s.launches - 1);
        s.hardware_flops = shape.flops();
        s.model_flops = recompute ? Flops{} : shape.flops();
        s.hbm_bytes = Bytes{element * (shape.m * shape.k + shape.k * shape.n + shape.m * shape.n)};
        s.repeat = repeat;
        pass.steps.push_back(s);
    }

    // Flash attention: `model` FLOPs as counted for MFU, `executed` as run (causal skips the
    // masked half), at the attention efficiency, always on the 16-bit tensor cores.
    // Eager PyTorch: cuDNN's forward is a memset and one kernel, its backward a memset, the
    // dO.O product, the main kernel and the dQ conversion.
    void attention(PassPlan& pass, const char* label, Flops model, Flops executed, Bytes bytes,
                   double fraction, bool backward, bool recompute = false) {
        Step s;
        s.label = label;
        s.tensor_core = true;
        s.launches = eager() ? (backward ? 4 : 2) : 1;
        const FlopRate rate =
            scaled(peak_rate(gpu_, Precision::Bf16), fraction * compute_.efficiency_scale);
        s.duration = roofline_time(executed, rate, bytes, gpu_, compute_, s.launches);
        s.hardware_flops = model;
        s.model_flops = recompute ? Flops{} : model;
        s.hbm_bytes = bytes;
        pass.steps.push_back(s);
    }

    // A batched GEMM of the unfused attention core (scores or context, all heads in one call) on
    // the 16-bit tensor cores at the large-GEMM cap: with the head dimension as its short side it
    // is HBM-bound on every GPU we model, so the bytes decide its time, at the score-matrix
    // kernels' fraction of the bandwidth (MemKind::Scores, or ScoresBackward).
    void batched_gemm(PassPlan& pass, const char* label, Flops flops, Flops model, Bytes bytes,
                      bool recompute, MemKind kind = MemKind::Scores) {
        Step s;
        s.label = label;
        s.tensor_core = true;
        const FlopRate rate = scaled(peak_rate(gpu_, Precision::Bf16),
                                     compute_.gemm(gpu_).peak_fraction * compute_.efficiency_scale);
        s.duration = roofline_time(flops, rate, bytes, gpu_, compute_, 1, kind);
        s.hardware_flops = model;
        s.model_flops = recompute ? Flops{} : model;
        s.hbm_bytes = bytes;
        pass.steps.push_back(s);
    }

    void memory(PassPlan& pass, const char* label, Bytes bytes, MemKind kind = MemKind::Fused,
                int repeat = 1, int launches = 1) {
        if (bytes.value <= 0) return;
        Step s;
        s.label = label;
        s.launches = launches;
        s.duration = transfer_time(bytes, achievable_hbm(gpu_, compute_, kind)) +
                     overheads(compute_, launches);
        s.hbm_bytes = bytes;
        s.repeat = repeat;
        pass.steps.push_back(s);
    }

    // Eager PyTorch adds each parameter tensor's gradient in a kernel of its own (one launch per
    // tensor): into the fp32 main gradient (read 4 + 2, write 4 bytes per parameter, a
    // mixed-type kernel) or into .grad in the parameters' 16-bit type (read 2 + 2, write 2).
    // Megatron-LM fuses it into the weight-gradient GEMMs: nothing to add.
    void main_grad_accumulate(PassPlan& pass, std::int64_t params, std::int64_t tensors) {
        if (!eager()) return;
        const bool fp32 = compute_.main_grads == MainGrads::Fp32;
        memory(pass, "main grad accumulate", Bytes{(fp32 ? 10 : 6) * params},
               fp32 ? MemKind::MixedAccumulate : MemKind::Elementwise, 1,
               static_cast<int>(tensors));
    }

    static void collective(PassPlan& pass, const char* label, CollectiveKind kind, GroupKind group,
                           Bytes size) {
        Step s;
        s.kind = Step::Kind::Collective;
        s.label = label;
        s.collective = kind;
        s.group = group;
        s.size = size;
        pass.steps.push_back(s);
    }

  private:
    const topology::GpuModel& gpu_;
    const RooflineCompute& compute_;
    Precision precision_;
};

I local_expert_count(const ModelSpec& m, const ParallelLayout& layout) {
    return std::max<I>(1, m.experts / layout.ep);
}

// Flags every step of `pass` from index `first` on: what one emitting function appended.
void flag_from(PassPlan& pass, std::size_t first, Step::Flag flag) {
    for (auto i = first; i < pass.steps.size(); ++i)
        pass.steps[i].flags |= flag;
}

void append(PassPlan& to, const PassPlan& from) {
    to.steps.insert(to.steps.end(), from.steps.begin(), from.steps.end());
}

// Per-GPU sizes of one microbatch through one layer.
struct Dims {
    I t, tokens, norm_tokens, h, q, kv, seq_local, seq_full, b, head_dim;
    bool sp;
    Attention attention;
};

Dims dims_of(const ModelSpec& m, const ParallelLayout& layout, const TrainingSpec& training) {
    Dims d{};
    d.t = layout.tp;
    d.b = training.micro_batch_size;
    d.seq_full = training.seq_length;
    d.seq_local = training.seq_length / layout.cp;
    d.tokens = d.b * d.seq_local;
    d.sp = layout.sequence_parallel && layout.tp > 1;
    d.norm_tokens = d.sp ? d.tokens / d.t : d.tokens;
    d.h = m.hidden_size;
    d.q = I{m.attention_heads} * m.head_dim;
    d.kv = I{m.kv_heads} * m.head_dim;
    d.head_dim = m.head_dim;
    d.attention = training.attention;
    return d;
}

// The TP collectives around a tensor-parallel block: entering (forward all-gather with SP) and
// leaving (all-reduce, or reduce-scatter with SP). Backward mirrors them.
void tp_enter(PassPlan& pass, const Dims& d, Bytes size) {
    if (d.t > 1 && d.sp)
        PassBuilder::collective(pass, "all-gather tp", CollectiveKind::AllGather, GroupKind::Tp,
                                size);
}
void tp_leave(PassPlan& pass, const Dims& d, Bytes size) {
    if (d.t <= 1) return;
    if (d.sp)
        PassBuilder::collective(pass, "reduce-scatter tp", CollectiveKind::ReduceScatter,
                                GroupKind::Tp, size);
    else
        PassBuilder::collective(pass, "all-reduce tp", CollectiveKind::AllReduce, GroupKind::Tp,
                                size);
}

// The attention core of one layer, forward. Model FLOPs are 4·b·s_local·s_full·q/t (QK^T and
// the context product, the whole score matrix, as Narayanan eq. 3 counts them).
//  flash:   one kernel; causal masking skips half the scores, so it executes half the model
//           FLOPs, at the flash-attention efficiency; HBM traffic is Q, K, V and the output.
//  unfused: Megatron-LM's pre-FlashAttention core: the scores bmm writes the N = b·(a/t)·s·s
//           score matrix, the fused scale-mask-softmax reads and writes it, dropout reads it and
//           writes its output and a 1-byte mask, the context bmm reads it: 13 bytes per score;
//           the whole matrix is computed (the mask is applied in the softmax).
void attention_core_forward(PassPlan& pass, PassBuilder& pb, const Dims& d, bool recompute) {
    const I e = kActivationBytes;
    const double model = 4.0 * d.b * d.seq_local * d.seq_full * (d.q / d.t);
    const auto rc = [recompute](const char* normal, const char* again) {
        return recompute ? again : normal;
    };
    if (d.attention == Attention::Flash) {
        const Bytes io{e * d.tokens * (2 * d.q + 2 * d.kv) / d.t};
        pb.attention(pass, rc("attention", "recompute attention"), Flops{model}, Flops{model / 2},
                     io, attention_efficiency(d.seq_full, false), false, recompute);
        return;
    }
    const double scores = static_cast<double>(d.b) * (d.q / d.head_dim / d.t) * d.seq_local *
                          static_cast<double>(d.seq_full);
    const Bytes q_bytes{e * d.tokens * d.q / d.t};
    const Bytes kv_bytes{e * d.b * d.seq_full * d.kv / d.t};
    const Bytes score_bytes = Bytes{static_cast<std::int64_t>(std::ceil(scores * e))};
    pb.batched_gemm(pass, rc("attention scores", "recompute attention scores"), Flops{model / 2},
                    Flops{model / 2}, q_bytes + kv_bytes + score_bytes, recompute);
    pb.memory(pass, rc("softmax", "recompute softmax"), score_bytes + score_bytes, MemKind::Scores);
    pb.memory(pass, rc("attention dropout", "recompute attention dropout"),
              Bytes{static_cast<std::int64_t>(std::ceil(scores * (2 * e + 1)))}, MemKind::Scores);
    pb.batched_gemm(pass, rc("attention context", "recompute attention context"), Flops{model / 2},
                    Flops{model / 2}, score_bytes + kv_bytes + q_bytes, recompute);
}

// The attention core backward: 2 x the forward in model FLOPs.
//  flash:   it executes 2.5 x the forward's (causal-halved) FLOPs because it recomputes the
//           scores (5 matmuls against 2).
//  unfused: context bmm backward (dP writes the scores, dV reads the probabilities), dropout
//           backward (reads dP and the mask, writes), softmax backward (reads P and dP, writes
//           dS), scores bmm backward (dQ and dK read dS): 19 bytes per score.
void attention_core_backward(PassPlan& in, PassBuilder& pb, const Dims& d) {
    const I e = kActivationBytes;
    const double fwd = 4.0 * d.b * d.seq_local * d.seq_full * (d.q / d.t);
    if (d.attention == Attention::Flash) {
        const Bytes io{e * d.tokens * (4 * d.q + 4 * d.kv) / d.t};
        pb.attention(in, "attention bwd", Flops{2 * fwd}, Flops{2.5 * fwd / 2}, io,
                     attention_efficiency(d.seq_full, true), true);
        return;
    }
    const double scores = static_cast<double>(d.b) * (d.q / d.head_dim / d.t) * d.seq_local *
                          static_cast<double>(d.seq_full);
    const Bytes qkv_bytes{e * (d.tokens * d.q + d.b * d.seq_full * d.kv) / d.t};
    const auto score_io = [&](double per_score) {
        return Bytes{static_cast<std::int64_t>(std::ceil(scores * per_score))};
    };
    pb.batched_gemm(in, "attention context bwd", Flops{fwd}, Flops{fwd},
                    score_io(2.0 * e) + qkv_bytes + qkv_bytes, false, MemKind::ScoresBackward);
    pb.memory(in, "attention dropout bwd", score_io(2.0 * e + 1), MemKind::ScoresBackward);
    pb.memory(in, "softmax bwd", score_io(3.0 * e), MemKind::ScoresBackward);
    pb.batched_gemm(in, "attention scores bwd", Flops{fwd}, Flops{fwd},
                    score_io(2.0 * e) + qkv_bytes + qkv_bytes, false, MemKind::ScoresBackward);
}

// The attention core's steps, each flagged Step::AttentionCore (what the validator's
// `part: attention` sums): everything the two functions above emit, whatever its label.
void attention_forward(PassPlan& pass, PassBuilder& pb, const Dims& d, bool recompute) {
    const auto first = pass.steps.size();
    attention_core_forward(pass, pb, d, recompute);
    flag_from(pass, first, Step::AttentionCore);
}
void attention_backward(PassPlan& in, PassBuilder& pb, const Dims& d) {
    const auto first = in.steps.size();
    attention_core_backward(in, pb, d);
    flag_from(in, first, Step::AttentionCore);
}

// The forward ops of one layer. With `recompute` the same ops are emitted as re-executed work.
void layer_forward(PassPlan& pass, PassBuilder& pb, const ModelSpec& m,
                   const ParallelLayout& layout, const Dims& d, bool moe_layer, bool recompute) {
    const I e = kActivationBytes;
    const Bytes hidden_full{d.tokens * d.h * e};
    const Bytes norm_io{4 * d.norm_tokens * d.h};  // read + write 2-byte tensors
    const Bytes residual_io{3 * d.norm_tokens * d.h * e};
    const auto rc = [recompute](const char* normal, const char* again) {
        return recompute ? again : normal;
    };

    pb.memory(pass, rc("norm", "recompute norm"), norm_io, pb.kind(MemKind::Norm));
    tp_enter(pass, d, hidden_full);
    pb.gemm(pass, rc("qkv", "recompute qkv"), {d.tokens, (d.q + 2 * d.kv) / d.t, d.h}, recompute);
    if (layout.cp > 1)
        PassBuilder::collective(pass, "all-gather cp", CollectiveKind::AllGather, GroupKind::Cp,
                                Bytes{d.b * d.seq_full * 2 * d.kv / d.t * e});
    attention_forward(pass, pb, d, recompute);
    pb.gemm(pass, rc("proj", "recompute proj"), {d.tokens, d.h, d.q / d.t}, recompute);
    tp_leave(pass, d, hidden_full);
    pb.memory(pass, rc("residual", "recompute residual"), residual_io,
              pb.kind(MemKind::Elementwise));
    pb.memory(pass, rc("norm", "recompute norm"), norm_io, pb.kind(MemKind::Norm));
    tp_enter(pass, d, hidden_full);
    const bool swiglu = m.activation == Activation::SwiGlu;
    const I up_factor = swiglu ? 2 : 1;
    const I act_io_factor = swiglu ? 3 : 2;  // read gate+up, write product | read, write
    if (!moe_layer) {
        const I f = m.ffn_hidden_size / d.t;
        pb.gemm(pass, rc("fc1", "recompute fc1"), {d.tokens, up_factor * f, d.h}, recompute);
        pb.memory(pass, rc("activation", "recompute activation"),
                  Bytes{act_io_factor * d.tokens * f * e}, pb.kind(MemKind::Activation));
        pb.gemm(pass, rc("fc2", "recompute fc2"), {d.tokens, d.h, f}, recompute);
    } else {
        const I f = m.moe_ffn_hidden_size / d.t;
        pb.gemm(pass, rc("router", "recompute router"), {d.tokens, m.experts, d.h}, recompute);
        const Bytes routed{d.tokens * m.top_k * d.h * e};
        if (layout.ep > 1)
            PassBuilder::collective(pass, "all-to-all ep dispatch", CollectiveKind::AllToAll,
                                    GroupKind::Ep, routed);
        const I local_experts = std::max<I>(1, m.experts / layout.ep);
        // Balanced routing: the ep ranks' tokens x top_k spread evenly over the experts.
        const I per_expert =
            std::max<I>(1, (d.tokens * m.top_k * layout.ep + m.experts - 1) / m.experts);
        const int rep = static_cast<int>(local_experts);
        pb.gemm(pass, rc("expert fc1", "recompute expert fc1"), {per_expert, up_factor * f, d.h},
                recompute, rep);
        pb.memory(pass, rc("expert activation", "recompute expert activation"),
                  Bytes{act_io_factor * per_expert * f * e}, pb.kind(MemKind::Activation), rep);
        pb.gemm(pass, rc("expert fc2", "recompute expert fc2"), {per_expert, d.h, f}, recompute,
                rep);
        if (layout.ep > 1)
            PassBuilder::collective(pass, "all-to-all ep combine", CollectiveKind::AllToAll,
                                    GroupKind::Ep, routed);
        if (m.shared_experts > 0) {
            const I fs = I{m.shared_experts} * f;
            pb.gemm(pass, rc("shared fc1", "recompute shared fc1"), {d.tokens, up_factor * fs, d.h},
                    recompute);
            pb.memory(pass, rc("shared activation", "recompute shared activation"),
                      Bytes{act_io_factor * d.tokens * fs * e}, pb.kind(MemKind::Activation));
            pb.gemm(pass, rc("shared fc2", "recompute shared fc2"), {d.tokens, d.h, fs}, recompute);
        }
    }
    tp_leave(pass, d, hidden_full);
    pb.memory(pass, rc("residual", "recompute residual"), residual_io,
              pb.kind(MemKind::Elementwise));
}

// dgrad and wgrad of a forward GEMM {m, n, k}: dX[m,k] = dY[m,n] W^T, dW[k,n] = X^T dY. With
// biases, eager PyTorch sums dY over the tokens in a separate kernel (Megatron-LM's fused GEMMs
// produce the bias gradient in their epilogue).
void gemm_backward(PassPlan& input, PassPlan& weight, PassBuilder& pb, const char* dgrad,
                   const char* wgrad, GemmShape fwd, int repeat = 1, bool bias = false) {
    pb.gemm(input, dgrad, {fwd.m, fwd.k, fwd.n}, false, repeat);
    pb.gemm(weight, wgrad, {fwd.k, fwd.n, fwd.m}, false, repeat);
    if (bias && pb.eager())
        pb.memory(weight, "bias grad", Bytes{kActivationBytes * fwd.m * fwd.n}, MemKind::Reduce,
                  repeat);
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

double gemm_efficiency(const GemmShape& shape, Precision precision,
                       const topology::GemmCurve& curve, const RooflineCalibration& cal) {
    const double cap =
        precision == Precision::Fp8 ? cal.gemm_peak_fraction_fp8 : curve.peak_fraction;
    return cap * dim_factor(static_cast<double>(shape.m), curve, cal) *
           dim_factor(static_cast<double>(shape.n), curve, cal) *
           dim_factor(static_cast<double>(shape.k), curve, cal);
}

Time gemm_time(const GemmShape& shape, Precision precision, const topology::GpuModel& gpu,
               const RooflineCompute& compute, int element_bytes) {
    const double eff =
        gemm_efficiency(shape, precision, compute.gemm(gpu)) * compute.efficiency_scale;
    const FlopRate rate = scaled(peak_rate(gpu, precision), eff);
    const Bytes bytes{element_bytes * (shape.m * shape.k + shape.k * shape.n + shape.m * shape.n)};
    return roofline_time(shape.flops(), rate, bytes, gpu, compute);
}

Time memory_bound_time(Bytes bytes, const topology::GpuModel& gpu, const RooflineCompute& compute,
                       MemKind kind) {
    return transfer_time(bytes, achievable_hbm(gpu, compute, kind)) + overheads(compute);
}

double RooflineCalibration::hbm_fraction_of(MemKind kind) const {
    // Effective bandwidth / 4.8 TB/s on H200 (docs/compute-model.md tabulates the fits).
    switch (kind) {
        case MemKind::Fused:
            return hbm_fraction;
        case MemKind::Elementwise:
            return 0.85;  // residual adds 3.8-4.2 TB/s, bf16 casts 3.9, fills 4.3
        case MemKind::Activation:
            return 0.63;  // GELU forward 2.4-3.0 TB/s, backward 2.6-3.3
        case MemKind::Norm:
            return 0.45;  // LayerNorm forward 1.6-2.1 TB/s, backward 2.0-2.7, gamma/beta 1.9-2.3
        case MemKind::Reduce:
            return 0.42;  // bias gradients 1.4-2.4 TB/s
        case MemKind::Concat:
            return 0.21;  // torch.cat of the q, k, v gradients 0.8-1.0 TB/s
        case MemKind::StridedCopy:
            return 0.31;  // 1.3-1.7 TB/s
        case MemKind::MixedAccumulate:
            return 0.50;  // fp32 += bf16 main-gradient adds, 2.4 TB/s (profiled iteration)
        case MemKind::Softmax:
            return 0.50;  // fp32 log-softmax forward 2.1 TB/s, backward 2.8 (profiled iteration)
        case MemKind::Optimizer:
            return 0.69;  // fused AdamW, 28 bytes per parameter at 3.3 TB/s (profiled iteration)
        // Megatron-LM's unfused attention at s = 2048 (b 16, 8 heads of 64, dropout 0.1) on an
        // A100 40GB, the FlashAttention paper's Tables 15 and 16 (arXiv 2205.14135v2; tests/
        // validation/data/a100-attention.json): 7.1 GB forward in 6.56 ms, 10.5 GB backward in
        // 10.80 ms, of 1.555 TB/s. Not measured on any other GPU: the fractions carry over.
        case MemKind::Scores:
            return 0.698;
        case MemKind::ScoresBackward:
            return 0.624;
    }
    return hbm_fraction;
}

double attention_efficiency(std::int64_t seq, bool backward, const RooflineCalibration& cal) {
    const double s = static_cast<double>(seq);
    return backward ? cal.attention_backward_cap * s / (s + cal.attention_backward_half_seq)
                    : cal.attention_forward_cap * s / (s + cal.attention_forward_half_seq);
}

void apply_sustained(std::initializer_list<PassPlan*> passes, const topology::GpuModel& gpu,
                     const RooflineCompute& compute) {
    if (!compute.sustained) return;
    double tensor = 0, total = 0;
    for (const PassPlan* p : passes)
        for (const auto& st : p->steps) {
            if (st.kind != Step::Kind::Compute) continue;
            const double t = static_cast<double>(st.duration.count_ps()) * st.repeat;
            total += t;
            if (st.tensor_core) tensor += t;
        }
    if (total <= 0) return;
    const double factor = gpu.sustained.factor(tensor / total);
    if (factor >= 1.0) return;
    for (PassPlan* p : passes)
        for (auto& st : p->steps)
            if (st.kind == Step::Kind::Compute && st.tensor_core)
                st.duration = Time::ps(static_cast<std::int64_t>(
                    std::llround(static_cast<double>(st.duration.count_ps()) / factor)));
}

LayerPasses roofline_layer(const ModelSpec& model, const ParallelLayout& layout,
                           const TrainingSpec& training, const topology::GpuModel& gpu,
                           const RooflineCompute& compute, bool moe_layer) {
    const Dims d = dims_of(model, layout, training);
    const I e = kActivationBytes;
    PassBuilder pb(gpu, compute, training.precision);
    const bool bias = model.bias;
    LayerPasses r;
    layer_forward(r.forward, pb, model, layout, d, moe_layer, false);

    PassPlan& in = r.backward_input;
    PassPlan& w = r.backward_weight;
    if (training.recompute == Recompute::Full) {
        layer_forward(in, pb, model, layout, d, moe_layer, true);
    } else if (training.recompute == Recompute::Selective) {
        attention_forward(in, pb, d, true);
    }

    const Bytes hidden_full{d.tokens * d.h * e};
    // Norm backward reads x and dy and writes dx; eager PyTorch then reads x and dy again for the
    // gamma/beta gradient in a second kernel.
    const Bytes norm_bwd_io{(pb.eager() ? 10 : 6) * d.norm_tokens * d.h};
    const int norm_bwd_launches = pb.eager() ? 2 : 1;
    const Bytes residual_io{3 * d.norm_tokens * d.h * e};  // add the two gradient branches
    const bool swiglu = model.activation == Activation::SwiGlu;
    const I up_factor = swiglu ? 2 : 1;
    // Activation backward reads its inputs and the output gradient, writes the input gradients.
    const I act_bwd_factor = swiglu ? 5 : 3;
    const MemKind act_kind = pb.kind(MemKind::Activation);
    const MemKind add_kind = pb.kind(MemKind::Elementwise);
    const MemKind norm_kind = pb.kind(MemKind::Norm);

    // MLP block, last op first. Entering the block backward mirrors leaving it forward.
    if (d.t > 1 && d.sp)
        PassBuilder::collective(in, "all-gather tp", CollectiveKind::AllGather, GroupKind::Tp,
                                hidden_full);
    if (!moe_layer) {
        const I f = model.ffn_hidden_size / d.t;
        gemm_backward(in, w, pb, "fc2 dgrad", "fc2 wgrad", {d.tokens, d.h, f}, 1, bias);
        pb.memory(in, "activation bwd", Bytes{act_bwd_factor * d.tokens * f * e}, act_kind);
        gemm_backward(in, w, pb, "fc1 dgrad", "fc1 wgrad", {d.tokens, up_factor * f, d.h}, 1, bias);
    } else {
        const I f = model.moe_ffn_hidden_size / d.t;
        if (model.shared_experts > 0) {
            const I fs = I{model.shared_experts} * f;
            gemm_backward(in, w, pb, "shared fc2 dgrad", "shared fc2 wgrad", {d.tokens, d.h, fs}, 1,
                          bias);
            pb.memory(in, "shared activation bwd", Bytes{act_bwd_factor * d.tokens * fs * e},
                      act_kind);
            gemm_backward(in, w, pb, "shared fc1 dgrad", "shared fc1 wgrad",
                          {d.tokens, up_factor * fs, d.h}, 1, bias);
        }
        const Bytes routed{d.tokens * model.top_k * d.h * e};
        if (layout.ep > 1)
            PassBuilder::collective(in, "all-to-all ep combine bwd", CollectiveKind::AllToAll,
                                    GroupKind::Ep, routed);
        const I local_experts = std::max<I>(1, model.experts / layout.ep);
        const I per_expert = std::max<I>(
            1, (d.tokens * model.top_k * layout.ep + model.experts - 1) / model.experts);
        const int rep = static_cast<int>(local_experts);
        gemm_backward(in, w, pb, "expert fc2 dgrad", "expert fc2 wgrad", {per_expert, d.h, f}, rep,
                      bias);
        pb.memory(in, "expert activation bwd", Bytes{act_bwd_factor * per_expert * f * e}, act_kind,
                  rep);
        gemm_backward(in, w, pb, "expert fc1 dgrad", "expert fc1 wgrad",
                      {per_expert, up_factor * f, d.h}, rep, bias);
        if (layout.ep > 1)
            PassBuilder::collective(in, "all-to-all ep dispatch bwd", CollectiveKind::AllToAll,
                                    GroupKind::Ep, routed);
        gemm_backward(in, w, pb, "router dgrad", "router wgrad", {d.tokens, model.experts, d.h});
    }
    tp_leave(in, d, hidden_full);
    pb.memory(in, "norm bwd", norm_bwd_io, norm_kind, 1, norm_bwd_launches);
    pb.memory(in, "residual bwd", residual_io, add_kind);

    // Attention block.
    if (d.t > 1 && d.sp)
        PassBuilder::collective(in, "all-gather tp", CollectiveKind::AllGather, GroupKind::Tp,
                                hidden_full);
    gemm_backward(in, w, pb, "proj dgrad", "proj wgrad", {d.tokens, d.h, d.q / d.t}, 1, bias);
    attention_backward(in, pb, d);
    if (layout.cp > 1)
        PassBuilder::collective(in, "reduce-scatter cp", CollectiveKind::ReduceScatter,
                                GroupKind::Cp, Bytes{d.b * d.seq_full * 2 * d.kv / d.t * e});
    const I qkv_width = (d.q + 2 * d.kv) / d.t;
    if (pb.eager()) {
        // The q, k and v gradients come out of the attention kernel head-major: torch.cat joins
        // them (read + write) and a strided copy lays the result out token-major for the GEMMs.
        const Bytes qkv_grad{2 * d.tokens * qkv_width * e};
        pb.memory(in, "qkv grad concat", qkv_grad, MemKind::Concat);
        pb.memory(in, "qkv grad copy", qkv_grad, MemKind::StridedCopy);
    }
    gemm_backward(in, w, pb, "qkv dgrad", "qkv wgrad", {d.tokens, qkv_width, d.h}, 1, bias);
    tp_leave(in, d, hidden_full);
    pb.memory(in, "norm bwd", norm_bwd_io, norm_kind, 1, norm_bwd_launches);
    pb.memory(in, "residual bwd", residual_io, add_kind);

    // The layer's gradients accumulate across microbatches (PassBuilder::main_grad_accumulate):
    // its parameters on this GPU and its parameter tensors, one kernel each.
    if (pb.eager()) {
        const I routed = moe_layer ? routed_expert_parameter_count(model) : 0;
        const I params =
            (layer_parameter_count(model, moe_layer) - routed) / d.t + routed / (d.t * layout.ep);
        const I linears = moe_layer ? 2 + 1 + 2 * local_expert_count(model, layout) +
                                          4 * I{model.shared_experts > 0}
                                    : 4;
        const I tensors = linears * (bias ? 2 : 1) + (model.norm == Norm::LayerNorm ? 4 : 2);
        pb.main_grad_accumulate(w, params, tensors);
    }

    apply_sustained({&r.forward, &in, &w}, gpu, compute);
    append(r.backward, r.backward_input);
    append(r.backward, r.backward_weight);
    r.activation_memory = layer_activation_bytes(model, layout, training, moe_layer);
    r.activation_send = Bytes{d.norm_tokens * d.h * e};
    return r;
}

LayerPasses roofline_embedding(const ModelSpec& model, const ParallelLayout& layout,
                               const TrainingSpec& training, const topology::GpuModel& gpu,
                               const RooflineCompute& compute) {
    const Dims d = dims_of(model, layout, training);
    const I e = kActivationBytes;
    PassBuilder pb(gpu, compute, training.precision);
    LayerPasses r;
    if (model.vocab_size == 0) return r;
    // Gather rows of the (vocab-parallel) table, add positions: read + write the hidden states.
    // Eager PyTorch gathers (write), then adds the position rows in a kernel of its own.
    if (pb.eager()) {
        pb.memory(r.forward, "embedding", Bytes{d.tokens * d.h * e}, MemKind::Elementwise);
        if (model.position_embeddings > 0)
            pb.memory(r.forward, "position add", Bytes{3 * d.tokens * d.h * e},
                      MemKind::Elementwise);
    } else {
        pb.memory(r.forward, "embedding", Bytes{2 * d.tokens * d.h * e});
    }
    tp_leave(r.forward, d, Bytes{d.tokens * d.h * e});
    if (d.t > 1 && d.sp)
        PassBuilder::collective(r.backward_weight, "all-gather tp", CollectiveKind::AllGather,
                                GroupKind::Tp, Bytes{d.tokens * d.h * e});
    // Scatter-add of the output gradient into the table's gradient (read-modify-write rows).
    pb.memory(r.backward_weight, "embedding wgrad", Bytes{3 * d.tokens * d.h * e});
    if (pb.eager()) {
        // A dense gradient of the whole (vocab-parallel) table is allocated and zeroed before the
        // scatter (which sorts the token ids: a handful of small kernels), then accumulated into
        // the main gradient with the positions' gradient.
        const I rows = (I{model.vocab_size} + d.t - 1) / d.t;
        pb.memory(r.backward_weight, "embedding grad zero", Bytes{rows * d.h * e},
                  MemKind::Elementwise);
        const I params = rows * d.h + I{model.position_embeddings} * d.h;
        pb.main_grad_accumulate(r.backward_weight, params, model.position_embeddings > 0 ? 2 : 1);
    }
    append(r.backward, r.backward_weight);
    r.activation_send = Bytes{d.norm_tokens * d.h * e};
    return r;
}

LayerPasses roofline_output_layer(const ModelSpec& model, const ParallelLayout& layout,
                                  const TrainingSpec& training, const topology::GpuModel& gpu,
                                  const RooflineCompute& compute) {
    const Dims d = dims_of(model, layout, training);
    const I e = kActivationBytes;
    PassBuilder pb(gpu, compute, training.precision);
    LayerPasses r;
    if (model.vocab_size == 0) return r;
    const I v = (I{model.vocab_size} + d.t - 1) / d.t;
    const Bytes hidden_full{d.tokens * d.h * e};
    pb.memory(r.forward, "final norm", Bytes{4 * d.norm_tokens * d.h}, pb.kind(MemKind::Norm));
    tp_enter(r.forward, d, hidden_full);
    pb.gemm(r.forward, "logits", {d.tokens, v, d.h});
    if (pb.eager()) {
        // Eager cross entropy in fp32: cast the logits (read 2, write 4), log-softmax (read 4,
        // write 4), then the NLL gather (small).
        pb.memory(r.forward, "logits to fp32", Bytes{d.tokens * v * (e + 4)}, MemKind::Elementwise);
        pb.memory(r.forward, "log softmax", Bytes{d.tokens * v * 8}, MemKind::Softmax, 1, 2);
    } else {
        // Vocab-parallel cross entropy: fp32 logits read twice (max, then exp-sum), with
        // all-reduces of the per-token max, sum and target logit over the TP group.
        pb.memory(r.forward, "cross entropy", Bytes{2 * d.tokens * v * 4});
    }
    if (d.t > 1)
        PassBuilder::collective(r.forward, "all-reduce tp", CollectiveKind::AllReduce,
                                GroupKind::Tp, Bytes{3 * d.tokens * 4});

    if (pb.eager()) {
        // NLL backward (a fill and a scatter), log-softmax backward (read 4 + 4, write 4) and the
        // cast of the gradient back to 16 bits (read 4, write 2).
        pb.memory(r.backward_input, "log softmax bwd", Bytes{d.tokens * v * 12}, MemKind::Softmax,
                  1, 3);
        pb.memory(r.backward_input, "logits grad to bf16", Bytes{d.tokens * v * (4 + e)},
                  MemKind::Elementwise);
    } else {
        pb.memory(r.backward_input, "cross entropy bwd", Bytes{d.tokens * v * (4 + e)});
    }
    gemm_backward(r.backward_input, r.backward_weight, pb, "logits dgrad", "logits wgrad",
                  {d.tokens, v, d.h});
    tp_leave(r.backward_input, d, hidden_full);
    pb.memory(r.backward_input, "final norm bwd",
              Bytes{(pb.eager() ? 10 : 6) * d.norm_tokens * d.h}, pb.kind(MemKind::Norm), 1,
              pb.eager() ? 2 : 1);
    if (pb.eager()) {
        const I params = (model.tied_embeddings ? 0 : v * d.h) + 2 * d.h;
        pb.main_grad_accumulate(r.backward_weight, params, 3);
    }
    apply_sustained({&r.forward, &r.backward_input, &r.backward_weight}, gpu, compute);
    append(r.backward, r.backward_input);
    append(r.backward, r.backward_weight);
    // Logits in fp32 for the loss, split over TP.
    r.activation_memory = Bytes{d.tokens * v * 4};
    return r;
}

Step flash_attention_step(const topology::GpuModel& gpu, const RooflineCompute& compute,
                          const char* label, Flops model, Flops executed, Bytes io,
                          std::int64_t seq, bool backward, bool recompute) {
    PassBuilder pb(gpu, compute, Precision::Bf16);
    PassPlan pass;
    pb.attention(pass, label, model, executed, io, attention_efficiency(seq, backward), backward,
                 recompute);
    pass.steps.back().flags |= Step::AttentionCore;
    return pass.steps.back();
}

Time roofline_optimizer_step(std::int64_t held, std::int64_t owned, Precision precision,
                             const topology::GpuModel& gpu, const RooflineCompute& compute) {
    if (held <= 0 && owned <= 0) return Time::zero();
    if (eager(compute)) {
        const double h = static_cast<double>(held), o = static_cast<double>(owned);
        const auto bytes = [](double b) { return Bytes{static_cast<std::int64_t>(std::ceil(b))}; };
        return memory_bound_time(bytes(28 * o), gpu, compute, MemKind::Optimizer) +
               (precision == Precision::Fp32
                    ? Time::zero()
                    : memory_bound_time(bytes(6 * o), gpu, compute, MemKind::Elementwise)) +
               memory_bound_time(bytes(gradient_bytes_per_parameter(precision) * h), gpu, compute,
                                 MemKind::Elementwise);
    }
    const bool fp16 = precision == Precision::Fp16;
    const double zero_bytes_per_held = gradient_bytes_per_parameter(precision);
    const double to_fp32_bytes_per_owned = fp16 ? 2 + 4 : 0;
    const double unscale_bytes_per_owned = fp16 ? 4 + 4 : 0;
    const double norm_bytes_per_owned = 4;
    const double adam_bytes_per_owned = 4 * 4 + 3 * 4;
    const double to_weights_bytes_per_owned = precision == Precision::Fp32 ? 0 : 4 + 2;
    const double bytes = zero_bytes_per_held * static_cast<double>(held) +
                         (to_fp32_bytes_per_owned + unscale_bytes_per_owned + norm_bytes_per_owned +
                          adam_bytes_per_owned + to_weights_bytes_per_owned) *
                             static_cast<double>(owned);
    return memory_bound_time(Bytes{static_cast<std::int64_t>(std::ceil(bytes))}, gpu, compute);
}

}  // namespace cs::workload
