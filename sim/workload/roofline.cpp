#include "workload/roofline.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <string_view>

#include "core/errors.hpp"
#include "workload/flops.hpp"
#include "workload/memory.hpp"
#include "workload/roofline_detail.hpp"

namespace cs::workload {
namespace {

using I = std::int64_t;
using detail::achievable_hbm;
using detail::overheads;
using detail::roofline_time;
using detail::scaled;
using network::CollectiveKind;

constexpr I kActivationBytes = 2;  // activations stay 16-bit, also in fp8 training

bool eager(const RooflineCompute& compute) {
    return compute.framework == Framework::Pytorch;
}

// Builds the steps of one pass. `recompute` marks steps that re-execute forward work during the
// backward pass: they count as hardware FLOPs only.
class PassBuilder {
  public:
    PassBuilder(const topology::GpuModel& gpu, const RooflineCompute& compute,
                const TrainingSpec& training, bool bias)
        : gpu_(gpu),
          compute_(compute),
          precision_(training.precision),
          recipe_(training.fp8_recipe),
          bias_(bias) {}

    bool eager() const { return workload::eager(compute_); }
    Framework framework() const { return compute_.framework; }
    // The steps emitted from now on run in the backward (the autograd engine issues them).
    void set_backward(bool backward) { backward_ = backward; }
    // Eager PyTorch's host time per kernel (RooflineCalibration::host_module etc.); 1 otherwise.
    double host_weight(bool module) const {
        if (!eager()) return 1;
        const auto& cal = default_calibration();
        if (backward_) return cal.host_backward;
        return module ? cal.host_module : cal.host_function;
    }
    const topology::GpuModel& gpu() const { return gpu_; }
    const RooflineCompute& compute() const { return compute_; }
    // The kind of a memory-bound kernel: eager PyTorch's own kernel, or Megatron-LM's fused one.
    MemKind kind(MemKind eager_kind) const { return eager() ? eager_kind : MemKind::Fused; }

    // Eager PyTorch's addmm (a linear with a bias) runs a memset (cuBLASLt's workspace) before
    // its GEMM: two launches; a linear without bias is one mm. `kernel`: GroupedGemm for the
    // experts' GEMMs run one per local expert (KernelKind).
    // In the backward a linear's host cost is its autograd nodes', which a bias does not
    // change: a bias-less GEMM's one launch takes the biased pair's two launches of host time
    // (docs/compute-model.md section 6, from the profiled Llama and GPT iterations).
    static constexpr double kBiaslessBackwardHost = 2;
    void gemm(PassPlan& pass, const char* label, GemmShape shape, bool recompute = false,
              int repeat = 1, KernelKind kernel = KernelKind::Gemm) {
        if (shape.m <= 0 || shape.n <= 0 || shape.k <= 0) return;
        Step s;
        s.label = label;
        s.kernel = kernel;
        s.tensor_core = true;
        s.launches = eager() && bias_ ? 2 : 1;
        s.host_weight =
            host_weight(true) * (eager() && backward_ && !bias_ ? kBiaslessBackwardHost : 1);
        const int element = precision_ == Precision::Fp8 ? 1 : 2;
        s.duration = gemm_time(shape, precision_, gpu_, compute_, element, recipe_) +
                     compute_.launch_overhead * (s.launches - 1);
        s.hardware_flops = shape.flops();
        s.model_flops = recompute ? Flops{} : shape.flops();
        s.hbm_bytes = Bytes{element * (shape.m * shape.k + shape.k * shape.n + shape.m * shape.n)};
        s.repeat = repeat;
        pass.steps.push_back(s);
    }

    // One grouped GEMM over `experts` experts of `tokens` rows each: forward {tokens, n, k} per
    // expert, or with `tokens_reduce` the weight gradient {n, k, tokens}. Eager PyTorch's
    // torch._grouped_mm launches a small kernel that prepares the problem list, then the GEMM.
    void grouped_gemm(PassPlan& pass, const char* label, I experts, I tokens, I n, I k,
                      bool tokens_reduce, bool recompute = false) {
        if (experts <= 0 || tokens <= 0 || n <= 0 || k <= 0) return;
        Step s;
        s.label = label;
        s.kernel = KernelKind::GroupedGemm;
        s.tensor_core = true;
        s.flags = Step::GroupedGemm;
        s.launches = eager() ? 2 : 1;
        s.host_weight = host_weight(false);
        const int element = precision_ == Precision::Fp8 ? 1 : 2;
        s.duration =
            grouped_gemm_time(experts, tokens, n, k, tokens_reduce, precision_, gpu_, compute_) +
            compute_.launch_overhead * s.launches + compute_.op_overhead;
        const Flops f{2.0 * static_cast<double>(experts) * static_cast<double>(tokens) *
                      static_cast<double>(n) * static_cast<double>(k)};
        s.hardware_flops = f;
        s.model_flops = recompute ? Flops{} : f;
        const I rows = experts * tokens;
        s.hbm_bytes = tokens_reduce ? Bytes{element * (rows * n + rows * k + experts * n * k)}
                                    : Bytes{element * (rows * k + experts * n * k + rows * n)};
        pass.steps.push_back(s);
    }

    // Flash attention on the 16-bit tensor cores (also in fp8 runs): `model` FLOPs for MFU, the
    // block's executed FLOPs at its efficiency.
    void attention(PassPlan& pass, const char* label, const AttentionBlock& block, bool backward,
                   bool recompute = false) {
        Step s;
        s.label = label;
        s.kernel = KernelKind::Attention;
        s.tensor_core = true;
        s.launches = attention_launches(block, backward, compute_.framework);
        s.host_weight = host_weight(false);
        s.duration =
            attention_time(block, backward, gpu_, compute_) + overheads(compute_, s.launches);
        const Flops model{block.model_flops() * (backward ? 2 : 1)};
        s.hardware_flops = model;
        s.model_flops = recompute ? Flops{} : model;
        s.hbm_bytes = block.hbm_bytes(backward);
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
        s.kernel = KernelKind::Gemm;
        s.tensor_core = true;
        const FlopRate rate = scaled(peak_rate(gpu_, Precision::Bf16),
                                     compute_.gemm(gpu_).peak_fraction * compute_.efficiency_scale);
        s.duration = roofline_time(flops, rate, bytes, gpu_, compute_, 1, kind);
        s.hardware_flops = model;
        s.model_flops = recompute ? Flops{} : model;
        s.hbm_bytes = bytes;
        s.mem_kind = kind;
        pass.steps.push_back(s);
    }

    // `launches` kernels of one kind moving `bytes` together (plus the kind's fixed time per
    // kernel, RooflineCalibration::kind_latency).
    void memory(PassPlan& pass, const char* label, KernelKind kernel, Bytes bytes,
                MemKind kind = MemKind::Fused, int repeat = 1, int launches = 1,
                bool module = false) {
        if (bytes.value <= 0 && default_calibration().kind_latency(kind) == Time::zero()) return;
        Step s;
        s.label = label;
        s.kernel = kernel;
        s.launches = launches;
        s.host_weight = host_weight(module);
        s.duration = transfer_time(bytes, achievable_hbm(gpu_, compute_, kind)) +
                     default_calibration().kind_latency(kind) * launches +
                     overheads(compute_, launches);
        s.hbm_bytes = bytes;
        s.mem_kind = kind;
        s.repeat = repeat;
        pass.steps.push_back(s);
    }

    // torch.argsort of `keys` 64-bit keys (RooflineCalibration::small_sort and large_sort): one
    // block radix sort and its copies for a few keys, cub's onesweep passes and memsets above.
    void sort(PassPlan& pass, const char* label, I keys) {
        const auto& cal = default_calibration();
        const bool small = keys <= RooflineCalibration::kSmallSortKeys;
        Step s;
        s.label = label;
        s.kernel = KernelKind::Sort;
        s.launches = small ? 5 : 22;
        s.host_weight = host_weight(false);
        s.duration = (small ? cal.small_sort : cal.large_sort) + overheads(compute_, s.launches);
        s.hbm_bytes = Bytes{4 * 8 * keys};
        s.mem_kind = MemKind::Sort;
        pass.steps.push_back(s);
    }

    // Eager PyTorch adds each parameter tensor's gradient in a kernel of its own (one launch per
    // tensor): into the fp32 main gradient (read 4 + 2, write 4 bytes per parameter, a
    // mixed-type kernel) or into .grad in the parameters' 16-bit type (read 2 + 2, write 2).
    // Megatron-LM fuses it into the weight-gradient GEMMs: nothing to add. Either way its kernel
    // class is MixedAccumulate: the gradient accumulation, which diff compares on its own.
    void main_grad_accumulate(PassPlan& pass, std::int64_t params, std::int64_t tensors) {
        if (!eager()) return;
        const bool fp32 = compute_.main_grads == MainGrads::Fp32;
        memory(pass, "main grad accumulate", KernelKind::MixedAccumulate,
               Bytes{(fp32 ? 10 : 6) * params},
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
    Fp8Recipe recipe_;
    bool bias_;
    bool backward_ = false;
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

// Marks every step of the four passes as `part`'s (roofline_embedding, roofline_output_layer: a
// layer's steps keep Step's default, ModelPart::Layers).
void set_part(LayerPasses& r, ModelPart part) {
    for (PassPlan* p : {&r.forward, &r.backward, &r.backward_input, &r.backward_weight})
        for (auto& s : p->steps)
            s.part = part;
}

// Per-GPU sizes of one microbatch through one layer.
struct Dims {
    I t, tokens, norm_tokens, h, q, kv, seq_local, seq_full, b, head_dim, heads, kv_heads;
    bool sp, rotary, rms;
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
    // Heads on one GPU: K/V heads fewer than tp are replicated (one per rank).
    d.heads = std::max<I>(1, m.attention_heads / layout.tp);
    d.kv_heads = std::max<I>(1, m.kv_heads / layout.tp);
    d.rotary = m.rotary;
    d.rms = m.norm == Norm::RmsNorm;
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

const char* pick(bool recompute, const char* normal, const char* again) {
    return recompute ? again : normal;
}

// A norm over `tokens` rows of h (docs/compute-model.md section 3). Forward reads x and writes y
// (16-bit); backward reads dy and x and writes dx, and eager PyTorch reads dy and x once more
// for the weight (and bias) gradient in a second kernel. LayerNorm and RMSNorm run PyTorch's
// layer-norm kernels with their own rates (MemKind::Norm, MemKind::RmsNorm).
void norm_forward(PassPlan& pass, PassBuilder& pb, const Dims& d, I tokens, bool recompute,
                  const char* label = "norm") {
    const MemKind kind = pb.kind(d.rms ? MemKind::RmsNorm : MemKind::Norm);
    pb.memory(pass, recompute ? "recompute norm" : label, KernelKind::Norm, Bytes{4 * tokens * d.h},
              kind, 1, 1, true);
}
void norm_backward(PassPlan& pass, PassBuilder& pb, const Dims& d, I tokens,
                   const char* label = "norm bwd") {
    const MemKind kind = pb.kind(d.rms ? MemKind::RmsNorm : MemKind::Norm);
    pb.memory(pass, label, KernelKind::Norm, Bytes{(pb.eager() ? 10 : 6) * tokens * d.h}, kind, 1,
              pb.eager() ? 2 : 1);
}

// Rotate-half rotary embedding of q and k (heads and K/V heads of head_dim on this GPU, N
// elements each), forward or backward (the same kernels on the gradients). Eager PyTorch, per
// tensor: x·cos (reads x and the s x head_dim table, writes N), neg of one half (N/2 each way),
// cat of the halves (N each way), ·sin, and the add (reads 2N, writes N): 20N + 4·s·head_dim
// bytes in 5 kernels over the strided views of the qkv output (MemKind::Rotary). Megatron-LM's
// fused RoPE (--apply-rope-fusion): one kernel per tensor reading and writing it, 4N.
void rotary(PassPlan& pass, PassBuilder& pb, const Dims& d, bool backward, bool recompute) {
    if (!d.rotary) return;
    const I n = d.tokens * (d.heads + d.kv_heads) * d.head_dim;
    const I table = 2 * d.seq_local * d.head_dim * kActivationBytes;
    const char* label = backward ? "rotary bwd" : pick(recompute, "rotary", "recompute rotary");
    if (pb.eager())
        pb.memory(pass, label, KernelKind::Rotary, Bytes{20 * n + 2 * table}, MemKind::Rotary, 1,
                  10);
    else
        pb.memory(pass, label, KernelKind::Rotary, Bytes{4 * n + table}, MemKind::Fused, 1, 2);
}

// The attention block of a layer on this GPU for one microbatch.
AttentionBlock attention_block(const Dims& d) {
    AttentionBlock a;
    a.b = d.b;
    a.q_len = d.seq_local;
    a.kv_len = d.seq_full;
    a.heads = d.heads;
    a.kv_heads = d.kv_heads;
    a.head_dim = d.head_dim;
    a.causal = true;
    return a;
}

// The attention core of one layer, forward. Model FLOPs are 4·b·s_local·s_full·q/t (QK^T and
// the context product, the whole score matrix, as Narayanan eq. 3 counts them).
//  flash:   one kernel (AttentionBlock); causal masking skips half the scores; HBM traffic is
//           Q, K, V and the output.
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
        pb.attention(pass, rc("attention", "recompute attention"), attention_block(d), false,
                     recompute);
        return;
    }
    const double scores = static_cast<double>(d.b) * (d.q / d.head_dim / d.t) * d.seq_local *
                          static_cast<double>(d.seq_full);
    const Bytes q_bytes{e * d.tokens * d.q / d.t};
    const Bytes kv_bytes{e * d.b * d.seq_full * d.kv / d.t};
    const Bytes score_bytes = Bytes{static_cast<std::int64_t>(std::ceil(scores * e))};
    pb.batched_gemm(pass, rc("attention scores", "recompute attention scores"), Flops{model / 2},
                    Flops{model / 2}, q_bytes + kv_bytes + score_bytes, recompute);
    pb.memory(pass, rc("softmax", "recompute softmax"), KernelKind::Softmax,
              score_bytes + score_bytes, MemKind::Scores);
    pb.memory(pass, rc("attention dropout", "recompute attention dropout"), KernelKind::Elementwise,
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
        pb.attention(in, "attention bwd", attention_block(d), true);
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
    pb.memory(in, "attention dropout bwd", KernelKind::Elementwise, score_io(2.0 * e + 1),
              MemKind::ScoresBackward);
    pb.memory(in, "softmax bwd", KernelKind::Softmax, score_io(3.0 * e), MemKind::ScoresBackward);
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

// The MLP activation on `rows` rows of width f (per GPU), forward. GELU: read and write (4f
// bytes per row), MemKind::Activation. SwiGLU on the gate|up output of one GEMM: eager PyTorch
// runs silu on the strided gate half (4f) and multiplies by the strided up half (reads 2f, writes
// f: 6f), MemKind::Swiglu; Megatron-LM's fused kernel reads 2f and writes f.
void activation_forward(PassPlan& pass, PassBuilder& pb, const ModelSpec& m, I rows, I f,
                        bool recompute, int repeat = 1) {
    const I e = kActivationBytes;
    if (m.activation != Activation::SwiGlu) {
        pb.memory(pass, pick(recompute, "activation", "recompute activation"),
                  KernelKind::Activation, Bytes{2 * rows * f * e}, pb.kind(MemKind::Activation),
                  repeat, 1, true);
    } else if (pb.eager()) {
        pb.memory(pass, pick(recompute, "swiglu", "recompute swiglu"), KernelKind::Swiglu,
                  Bytes{5 * rows * f * e}, MemKind::Swiglu, repeat, 2);
    } else {
        pb.memory(pass, pick(recompute, "swiglu", "recompute swiglu"), KernelKind::Swiglu,
                  Bytes{3 * rows * f * e}, MemKind::Fused, repeat);
    }
}
// Backward. GELU reads x and dy, writes dx (6f). SwiGLU in eager PyTorch: d(up) = dy·silu(gate)
// (contiguous, vectorised: 6f, elementwise), d(silu) = dy·up (strided: 6f) and silu's backward
// (reads it and the gate, writes: 6f), both MemKind::Swiglu, then the cat of the two halves into
// the GEMM's output gradient (8f, contiguous, elementwise). Megatron-LM's fused backward reads
// dy, gate and up and writes both halves (10f).
void activation_backward(PassPlan& pass, PassBuilder& pb, const ModelSpec& m, I rows, I f,
                         int repeat = 1) {
    const I e = kActivationBytes;
    if (m.activation != Activation::SwiGlu) {
        pb.memory(pass, "activation bwd", KernelKind::Activation, Bytes{3 * rows * f * e},
                  pb.kind(MemKind::Activation), repeat);
    } else if (pb.eager()) {
        pb.memory(pass, "swiglu bwd product", KernelKind::Elementwise, Bytes{3 * rows * f * e},
                  MemKind::Elementwise, repeat);
        pb.memory(pass, "swiglu bwd", KernelKind::Swiglu, Bytes{6 * rows * f * e}, MemKind::Swiglu,
                  repeat, 2);
        pb.memory(pass, "swiglu bwd concat", KernelKind::Elementwise, Bytes{4 * rows * f * e},
                  MemKind::Elementwise, repeat);
    } else {
        pb.memory(pass, "swiglu bwd", KernelKind::Swiglu, Bytes{5 * rows * f * e}, MemKind::Fused,
                  repeat);
    }
}

// Tokens each local expert receives for one microbatch with balanced routing: the ep ranks'
// tokens x top_k spread evenly over the experts.
I tokens_per_expert(const ModelSpec& m, const ParallelLayout& layout, const Dims& d) {
    return std::max<I>(1, (d.tokens * m.top_k * layout.ep + m.experts - 1) / m.experts);
}

// The router of an MoE layer, forward: the router GEMM (T x E x h), then (MemKind::Routing, a
// fixed time per kernel plus bytes) the fp32 softmax and top-k of the T x E logits with the
// index arithmetic of the assignment and the gather of the combine weights; the sort of the T·k
// assignments by expert, and the tokens per expert (a scatter-add and a cumulative sum).
// Eager PyTorch: a cast, the softmax, top-k (2 kernels), 5 index kernels and the gather, the
// argsort, then the division to token indices, 2 fills, the scatter-add, 2 scan kernels and a
// cast. Megatron-LM: softmax and top-k (3 kernels) and the routing map (2), its permutation
// indices from the map without a sort (3).
void router_forward(PassPlan& pass, PassBuilder& pb, const ModelSpec& m, const Dims& d,
                    bool recompute) {
    const I tokens = d.tokens, experts = m.experts, k = m.top_k;
    pb.gemm(pass, pick(recompute, "router", "recompute router"), {tokens, experts, d.h}, recompute);
    // Logits read as 16-bit, cast to fp32, softmax read and written, top-k read; k fp32 values
    // and 64-bit indices written.
    const Bytes scores{tokens * experts * (2 + 4 + 8 + 4) + tokens * k * 12};
    const Bytes counts{tokens * k * 8 * 4};
    if (pb.eager()) {
        pb.memory(pass, pick(recompute, "routing", "recompute routing"), KernelKind::Routing,
                  scores, MemKind::Routing, 1, 10);
        pb.sort(pass, pick(recompute, "routing sort", "recompute routing sort"), tokens * k);
        pb.memory(pass, pick(recompute, "expert counts", "recompute expert counts"),
                  KernelKind::Routing, counts, MemKind::Routing, 1, 7);
    } else {
        pb.memory(pass, pick(recompute, "routing", "recompute routing"), KernelKind::Routing,
                  scores, MemKind::Routing, 1, 5);
        pb.memory(pass, pick(recompute, "expert counts", "recompute expert counts"),
                  KernelKind::Routing, counts, MemKind::Routing, 1, 3);
    }
}

// The experts of an MoE layer on this GPU, forward, from the permutation to the combined output.
void experts_forward(PassPlan& pass, PassBuilder& pb, const ModelSpec& m,
                     const ParallelLayout& layout, const Dims& d, bool recompute) {
    const I e = kActivationBytes;
    const I f = m.moe_ffn_hidden_size / d.t;
    const I k = m.top_k;
    const I routed_rows = d.tokens * k;
    const I up = m.activation == Activation::SwiGlu ? 2 : 1;
    const Bytes routed{routed_rows * d.h * e};
    // Permutation: a gather of the T·k token rows (and of their 64-bit indices).
    pb.memory(pass, pick(recompute, "permute", "recompute permute"), KernelKind::Permute,
              Bytes{(d.tokens * d.h + routed_rows * d.h) * e + routed_rows * 8}, MemKind::Permute,
              1, pb.eager() ? 2 : 1);
    if (layout.ep > 1)
        PassBuilder::collective(pass, "all-to-all ep dispatch", CollectiveKind::AllToAll,
                                GroupKind::Ep, routed);
    const I local = local_expert_count(m, layout);
    const I per_expert = tokens_per_expert(m, layout, d);
    if (pb.compute().moe_grouped_gemm) {
        pb.grouped_gemm(pass, pick(recompute, "expert fc1", "recompute expert fc1"), local,
                        per_expert, up * f, d.h, false, recompute);
        activation_forward(pass, pb, m, local * per_expert, f, recompute);
        pb.grouped_gemm(pass, pick(recompute, "expert fc2", "recompute expert fc2"), local,
                        per_expert, d.h, f, false, recompute);
    } else {
        // One GEMM pair per local expert (SequentialMLP), the outputs joined by a cat.
        const int rep = static_cast<int>(local);
        pb.gemm(pass, pick(recompute, "expert fc1", "recompute expert fc1"),
                {per_expert, up * f, d.h}, recompute, rep, KernelKind::GroupedGemm);
        activation_forward(pass, pb, m, per_expert, f, recompute, rep);
        pb.gemm(pass, pick(recompute, "expert fc2", "recompute expert fc2"), {per_expert, d.h, f},
                recompute, rep, KernelKind::GroupedGemm);
        if (pb.eager())
            pb.memory(pass, pick(recompute, "expert cat", "recompute expert cat"),
                      KernelKind::Elementwise, Bytes{2 * local * per_expert * d.h * e},
                      MemKind::Elementwise);
    }
    if (layout.ep > 1)
        PassBuilder::collective(pass, "all-to-all ep combine", CollectiveKind::AllToAll,
                                GroupKind::Ep, routed);
    // Combine: the expert rows times their routing weights (a broadcast over h: strided), then
    // the scatter-add back to token order into a zeroed output (atomics: MemKind::Unpermute).
    pb.memory(pass, pick(recompute, "combine weights", "recompute combine weights"),
              KernelKind::StridedCopy, Bytes{2 * routed_rows * d.h * e + routed_rows * e},
              pb.kind(MemKind::StridedCopy), 1, pb.eager() ? 2 : 1);
    pb.memory(pass, pick(recompute, "unpermute zero", "recompute unpermute zero"),
              KernelKind::Elementwise, Bytes{d.tokens * d.h * e}, pb.kind(MemKind::Elementwise));
    pb.memory(pass, pick(recompute, "unpermute", "recompute unpermute"), KernelKind::Unpermute,
              Bytes{(routed_rows * d.h + d.tokens * d.h) * e + routed_rows * 8},
              MemKind::Unpermute);
}

// The MLP block of a layer, forward (after its norm and TP entry): a dense MLP, or an MoE block
// (router, experts, shared experts added to their output).
void mlp_forward(PassPlan& pass, PassBuilder& pb, const ModelSpec& m, const ParallelLayout& layout,
                 const Dims& d, bool moe_layer, bool recompute) {
    const I up = m.activation == Activation::SwiGlu ? 2 : 1;
    if (!moe_layer) {
        const I f = m.ffn_hidden_size / d.t;
        pb.gemm(pass, pick(recompute, "fc1", "recompute fc1"), {d.tokens, up * f, d.h}, recompute);
        activation_forward(pass, pb, m, d.tokens, f, recompute);
        pb.gemm(pass, pick(recompute, "fc2", "recompute fc2"), {d.tokens, d.h, f}, recompute);
        return;
    }
    router_forward(pass, pb, m, d, recompute);
    experts_forward(pass, pb, m, layout, d, recompute);
    if (m.shared_experts > 0) {
        const I fs = I{m.shared_experts} * m.moe_ffn_hidden_size / d.t;
        pb.gemm(pass, pick(recompute, "shared fc1", "recompute shared fc1"),
                {d.tokens, up * fs, d.h}, recompute);
        activation_forward(pass, pb, m, d.tokens, fs, recompute);
        pb.gemm(pass, pick(recompute, "shared fc2", "recompute shared fc2"), {d.tokens, d.h, fs},
                recompute);
        pb.memory(pass, pick(recompute, "shared add", "recompute shared add"),
                  KernelKind::Elementwise, Bytes{3 * d.tokens * d.h * kActivationBytes},
                  pb.kind(MemKind::Elementwise));
    }
}

// The forward ops of one layer. With `recompute` the same ops are emitted as re-executed work.
void layer_forward(PassPlan& pass, PassBuilder& pb, const ModelSpec& m,
                   const ParallelLayout& layout, const Dims& d, bool moe_layer, bool recompute) {
    const I e = kActivationBytes;
    const Bytes hidden_full{d.tokens * d.h * e};
    const Bytes residual_io{3 * d.norm_tokens * d.h * e};
    norm_forward(pass, pb, d, d.norm_tokens, recompute);
    tp_enter(pass, d, hidden_full);
    pb.gemm(pass, pick(recompute, "qkv", "recompute qkv"), {d.tokens, (d.q + 2 * d.kv) / d.t, d.h},
            recompute);
    rotary(pass, pb, d, false, recompute);
    if (layout.cp > 1)
        PassBuilder::collective(pass, "all-gather cp", CollectiveKind::AllGather, GroupKind::Cp,
                                Bytes{d.b * d.seq_full * 2 * d.kv / d.t * e});
    attention_forward(pass, pb, d, recompute);
    pb.gemm(pass, pick(recompute, "proj", "recompute proj"), {d.tokens, d.h, d.q / d.t}, recompute);
    tp_leave(pass, d, hidden_full);
    pb.memory(pass, pick(recompute, "residual", "recompute residual"), KernelKind::Elementwise,
              residual_io, pb.kind(MemKind::Elementwise));
    norm_forward(pass, pb, d, d.norm_tokens, recompute);
    tp_enter(pass, d, hidden_full);
    mlp_forward(pass, pb, m, layout, d, moe_layer, recompute);
    tp_leave(pass, d, hidden_full);
    pb.memory(pass, pick(recompute, "residual", "recompute residual"), KernelKind::Elementwise,
              residual_io, pb.kind(MemKind::Elementwise));
}

// dgrad and wgrad of a forward GEMM {m, n, k}: dX[m,k] = dY[m,n] W^T, dW[k,n] = X^T dY. With
// biases, eager PyTorch sums dY over the tokens in a separate kernel (Megatron-LM's fused GEMMs
// produce the bias gradient in their epilogue). `kernel`: the GEMMs' class (PassBuilder::gemm).
void gemm_backward(PassPlan& input, PassPlan& weight, PassBuilder& pb, const char* dgrad,
                   const char* wgrad, GemmShape fwd, int repeat = 1, bool bias = false,
                   KernelKind kernel = KernelKind::Gemm) {
    pb.gemm(input, dgrad, {fwd.m, fwd.k, fwd.n}, false, repeat, kernel);
    pb.gemm(weight, wgrad, {fwd.k, fwd.n, fwd.m}, false, repeat, kernel);
    if (bias && pb.eager())
        pb.memory(weight, "bias grad", KernelKind::Reduce, Bytes{kActivationBytes * fwd.m * fwd.n},
                  MemKind::Reduce, repeat);
}

// The experts' backward, from the combine to the permutation (mirroring experts_forward).
void experts_backward(PassPlan& in, PassPlan& w, PassBuilder& pb, const ModelSpec& m,
                      const ParallelLayout& layout, const Dims& d, bool bias) {
    const I e = kActivationBytes;
    const I f = m.moe_ffn_hidden_size / d.t;
    const I routed_rows = d.tokens * m.top_k;
    const I up = m.activation == Activation::SwiGlu ? 2 : 1;
    const Bytes routed{routed_rows * d.h * e};
    // The scatter-add's gradient is a gather; the combine's: dY·weight (strided) for the rows
    // and the sum of dY·Y over h for the weights (a product and a reduction).
    pb.memory(in, "unpermute bwd", KernelKind::Permute,
              Bytes{(d.tokens * d.h + routed_rows * d.h) * e + routed_rows * 8}, MemKind::Permute);
    pb.memory(in, "combine weights bwd", KernelKind::StridedCopy,
              Bytes{2 * routed_rows * d.h * e + routed_rows * e}, pb.kind(MemKind::StridedCopy));
    if (pb.eager()) {
        pb.memory(in, "combine weights grad", KernelKind::Elementwise,
                  Bytes{3 * routed_rows * d.h * e}, MemKind::Elementwise);
        pb.memory(in, "combine weights sum", KernelKind::Reduce, Bytes{routed_rows * d.h * e},
                  MemKind::Reduce);
    }
    if (layout.ep > 1)
        PassBuilder::collective(in, "all-to-all ep combine bwd", CollectiveKind::AllToAll,
                                GroupKind::Ep, routed);
    const I local = local_expert_count(m, layout);
    const I per_expert = tokens_per_expert(m, layout, d);
    if (pb.compute().moe_grouped_gemm) {
        pb.grouped_gemm(in, "expert fc2 dgrad", local, per_expert, f, d.h, false);
        pb.grouped_gemm(w, "expert fc2 wgrad", local, per_expert, d.h, f, true);
        activation_backward(in, pb, m, local * per_expert, f);
        pb.grouped_gemm(in, "expert fc1 dgrad", local, per_expert, d.h, up * f, false);
        pb.grouped_gemm(w, "expert fc1 wgrad", local, per_expert, up * f, d.h, true);
    } else {
        const int rep = static_cast<int>(local);
        gemm_backward(in, w, pb, "expert fc2 dgrad", "expert fc2 wgrad", {per_expert, d.h, f}, rep,
                      bias, KernelKind::GroupedGemm);
        activation_backward(in, pb, m, per_expert, f, rep);
        gemm_backward(in, w, pb, "expert fc1 dgrad", "expert fc1 wgrad", {per_expert, up * f, d.h},
                      rep, bias, KernelKind::GroupedGemm);
    }
    if (layout.ep > 1)
        PassBuilder::collective(in, "all-to-all ep dispatch bwd", CollectiveKind::AllToAll,
                                GroupKind::Ep, routed);
    // The gather's gradient: a scatter-add of the expert rows into zeroed token rows.
    pb.memory(in, "permute bwd zero", KernelKind::Elementwise, Bytes{d.tokens * d.h * e},
              pb.kind(MemKind::Elementwise));
    pb.memory(in, "permute bwd", KernelKind::Unpermute,
              Bytes{(routed_rows * d.h + d.tokens * d.h) * e + routed_rows * 8},
              MemKind::Unpermute);
}

// The MLP block's backward (last op first).
void mlp_backward(PassPlan& in, PassPlan& w, PassBuilder& pb, const ModelSpec& m,
                  const ParallelLayout& layout, const Dims& d, bool moe_layer, bool bias) {
    const I up = m.activation == Activation::SwiGlu ? 2 : 1;
    if (!moe_layer) {
        const I f = m.ffn_hidden_size / d.t;
        gemm_backward(in, w, pb, "fc2 dgrad", "fc2 wgrad", {d.tokens, d.h, f}, 1, bias);
        activation_backward(in, pb, m, d.tokens, f);
        gemm_backward(in, w, pb, "fc1 dgrad", "fc1 wgrad", {d.tokens, up * f, d.h}, 1, bias);
        return;
    }
    if (m.shared_experts > 0) {
        const I fs = I{m.shared_experts} * m.moe_ffn_hidden_size / d.t;
        gemm_backward(in, w, pb, "shared fc2 dgrad", "shared fc2 wgrad", {d.tokens, d.h, fs}, 1,
                      bias);
        activation_backward(in, pb, m, d.tokens, fs);
        gemm_backward(in, w, pb, "shared fc1 dgrad", "shared fc1 wgrad", {d.tokens, up * fs, d.h},
                      1, bias);
    }
    experts_backward(in, w, pb, m, layout, d, bias);
    // The router: the gradient of the gathered weights scattered into zeroed scores, the
    // softmax's and the cast's backward (MemKind::Routing), then the router GEMM's.
    pb.memory(in, "routing bwd", KernelKind::Routing,
              Bytes{d.tokens * m.experts * (4 + 8 + 6) + d.tokens * m.top_k * 12}, MemKind::Routing,
              1, pb.eager() ? 5 : 2);
    gemm_backward(in, w, pb, "router dgrad", "router wgrad", {d.tokens, m.experts, d.h});
    // Shared experts' and routed experts' input gradients join.
    if (m.shared_experts > 0)
        pb.memory(in, "shared join", KernelKind::Elementwise,
                  Bytes{3 * d.tokens * d.h * kActivationBytes}, pb.kind(MemKind::Elementwise));
}

// A calibration's unmapped share (RooflineCompute::residual): the GPU time of kernels the model
// has no op for, as a step of its own after the pass's kernels, in proportion to their time.
void add_residual(PassPlan& pass, const RooflineCompute& compute) {
    if (compute.residual <= 0) return;
    const Time t = pass.compute_time();
    if (t == Time::zero()) return;
    Step s;
    s.label = "unmapped (calibration residual)";
    s.kernel = KernelKind::Unmapped;
    s.launches = 0;
    s.duration = Time::ps(static_cast<std::int64_t>(
        std::llround(static_cast<double>(t.count_ps()) * compute.residual)));
    pass.steps.push_back(s);
}

// Parameter tensors of one layer on a GPU, each accumulated by a kernel of its own in eager
// PyTorch: the attention's two linears, the MLP's (or the router, the experts' stacked weights
// of a grouped GEMM or two linears per local expert, and the shared experts' two), the two
// norms; with biases each linear has two tensors and LayerNorm two per norm.
I layer_parameter_tensors(const ModelSpec& m, const ParallelLayout& layout, bool moe_layer,
                          bool grouped) {
    const I per_linear = m.bias ? 2 : 1;
    I linears = 2;  // qkv, proj
    if (!moe_layer) {
        linears += 2;
    } else {
        linears +=
            1 + (grouped ? 2 : 2 * local_expert_count(m, layout)) + (m.shared_experts > 0 ? 2 : 0);
    }
    return linears * per_linear + (m.norm == Norm::LayerNorm ? 4 : 2);
}

}  // namespace

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
    PassBuilder pb(gpu, compute, training, model.bias);
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
    pb.set_backward(true);

    const Bytes hidden_full{d.tokens * d.h * e};
    const Bytes residual_io{3 * d.norm_tokens * d.h * e};  // add the two gradient branches
    const MemKind add_kind = pb.kind(MemKind::Elementwise);

    // MLP block, last op first. Entering the block backward mirrors leaving it forward.
    if (d.t > 1 && d.sp)
        PassBuilder::collective(in, "all-gather tp", CollectiveKind::AllGather, GroupKind::Tp,
                                hidden_full);
    mlp_backward(in, w, pb, model, layout, d, moe_layer, bias);
    tp_leave(in, d, hidden_full);
    norm_backward(in, pb, d, d.norm_tokens);
    pb.memory(in, "residual bwd", KernelKind::Elementwise, residual_io, add_kind);

    // Attention block.
    if (d.t > 1 && d.sp)
        PassBuilder::collective(in, "all-gather tp", CollectiveKind::AllGather, GroupKind::Tp,
                                hidden_full);
    gemm_backward(in, w, pb, "proj dgrad", "proj wgrad", {d.tokens, d.h, d.q / d.t}, 1, bias);
    attention_backward(in, pb, d);
    if (layout.cp > 1)
        PassBuilder::collective(in, "reduce-scatter cp", CollectiveKind::ReduceScatter,
                                GroupKind::Cp, Bytes{d.b * d.seq_full * 2 * d.kv / d.t * e});
    rotary(in, pb, d, true, false);
    const I qkv_width = (d.q + 2 * d.kv) / d.t;
    if (pb.eager()) {
        // The q, k and v gradients come out of the attention kernel head-major: torch.cat joins
        // them (read + write) into the qkv output's gradient. A GPT block (q, k, v split by
        // view and permuted) then lays the result out token-major with a strided copy; the
        // Llama block's split_with_sizes of the fused output takes the cat as it is.
        const Bytes qkv_grad{2 * d.tokens * qkv_width * e};
        pb.memory(in, "qkv grad concat", KernelKind::Concat, qkv_grad, MemKind::Concat);
        if (!d.rotary)
            pb.memory(in, "qkv grad copy", KernelKind::StridedCopy, qkv_grad, MemKind::StridedCopy);
    }
    gemm_backward(in, w, pb, "qkv dgrad", "qkv wgrad", {d.tokens, qkv_width, d.h}, 1, bias);
    tp_leave(in, d, hidden_full);
    norm_backward(in, pb, d, d.norm_tokens);
    pb.memory(in, "residual bwd", KernelKind::Elementwise, residual_io, add_kind);

    // The layer's gradients accumulate across microbatches (PassBuilder::main_grad_accumulate):
    // its parameters on this GPU and its parameter tensors, one kernel each.
    if (pb.eager()) {
        const I routed = moe_layer ? routed_expert_parameter_count(model) : 0;
        const I params =
            (layer_parameter_count(model, moe_layer) - routed) / d.t + routed / (d.t * layout.ep);
        pb.main_grad_accumulate(
            w, params, layer_parameter_tensors(model, layout, moe_layer, compute.moe_grouped_gemm));
    }

    apply_sustained({&r.forward, &in, &w}, gpu, compute);
    add_residual(r.forward, compute);
    add_residual(in, compute);
    append(r.backward, r.backward_input);
    append(r.backward, r.backward_weight);
    r.activation_memory =
        layer_activation_bytes(model, layout, training, moe_layer, compute.framework);
    r.activation_send = Bytes{d.norm_tokens * d.h * e};
    return r;
}

LayerPasses roofline_embedding(const ModelSpec& model, const ParallelLayout& layout,
                               const TrainingSpec& training, const topology::GpuModel& gpu,
                               const RooflineCompute& compute) {
    const Dims d = dims_of(model, layout, training);
    const I e = kActivationBytes;
    PassBuilder pb(gpu, compute, training, model.bias);
    LayerPasses r;
    if (model.vocab_size == 0) return r;
    // Gather rows of the (vocab-parallel) table, add positions: read + write the hidden states.
    // Eager PyTorch gathers (write), then adds the position rows in a kernel of its own.
    if (pb.eager()) {
        pb.memory(r.forward, "embedding", KernelKind::Elementwise, Bytes{d.tokens * d.h * e},
                  MemKind::Elementwise);
        if (model.position_embeddings > 0)
            pb.memory(r.forward, "position add", KernelKind::Elementwise,
                      Bytes{3 * d.tokens * d.h * e}, MemKind::Elementwise);
    } else {
        pb.memory(r.forward, "embedding", KernelKind::Elementwise, Bytes{2 * d.tokens * d.h * e});
    }
    tp_leave(r.forward, d, Bytes{d.tokens * d.h * e});
    pb.set_backward(true);
    if (d.t > 1 && d.sp)
        PassBuilder::collective(r.backward_weight, "all-gather tp", CollectiveKind::AllGather,
                                GroupKind::Tp, Bytes{d.tokens * d.h * e});
    // Scatter-add of the output gradient into the table's gradient (read-modify-write rows).
    // Eager PyTorch's embedding_dense_backward sorts the token ids, sums the gradient rows of
    // each id and scatters the sums (reading the rows twice, writing partial sums and the
    // table's rows: 4 x T x h x 2 bytes at the scatter-add's rate, MemKind::Unpermute, in about
    // ten small kernels) into a dense gradient of the (vocab-parallel) table zeroed before.
    if (pb.eager())
        pb.memory(r.backward_weight, "embedding wgrad", KernelKind::Unpermute,
                  Bytes{4 * d.tokens * d.h * e}, MemKind::Unpermute, 1, 10);
    else
        pb.memory(r.backward_weight, "embedding wgrad", KernelKind::Unpermute,
                  Bytes{3 * d.tokens * d.h * e});
    if (pb.eager()) {
        const I rows = (I{model.vocab_size} + d.t - 1) / d.t;
        pb.memory(r.backward_weight, "embedding grad zero", KernelKind::Elementwise,
                  Bytes{rows * d.h * e}, MemKind::Elementwise);
        const I params = rows * d.h + I{model.position_embeddings} * d.h;
        pb.main_grad_accumulate(r.backward_weight, params, model.position_embeddings > 0 ? 2 : 1);
    }
    append(r.backward, r.backward_weight);
    r.activation_send = Bytes{d.norm_tokens * d.h * e};
    set_part(r, ModelPart::Embedding);
    return r;
}

LayerPasses roofline_output_layer(const ModelSpec& model, const ParallelLayout& layout,
                                  const TrainingSpec& training, const topology::GpuModel& gpu,
                                  const RooflineCompute& compute) {
    const Dims d = dims_of(model, layout, training);
    const I e = kActivationBytes;
    PassBuilder pb(gpu, compute, training, model.bias);
    LayerPasses r;
    if (model.vocab_size == 0) return r;
    const I v = (I{model.vocab_size} + d.t - 1) / d.t;
    const Bytes hidden_full{d.tokens * d.h * e};
    norm_forward(r.forward, pb, d, d.norm_tokens, false, "final norm");
    tp_enter(r.forward, d, hidden_full);
    pb.gemm(r.forward, "logits", {d.tokens, v, d.h});
    if (pb.eager()) {
        // Eager cross entropy on logits.float(): the cast (read 2, write 4 per logit; a
        // non-vectorised conversion) and the log-softmax (read 4, write 4), both at the loss
        // kernels' rate (MemKind::Softmax), then the NLL gather (small).
        pb.memory(r.forward, "cross entropy", KernelKind::Softmax,
                  Bytes{d.tokens * v * (e + 4 + 8)}, MemKind::Softmax, 1, 3);
    } else {
        // Vocab-parallel cross entropy: fp32 logits read twice (max, then exp-sum), with
        // all-reduces of the per-token max, sum and target logit over the TP group.
        pb.memory(r.forward, "cross entropy", KernelKind::Softmax, Bytes{2 * d.tokens * v * 4});
    }
    if (d.t > 1)
        PassBuilder::collective(r.forward, "all-reduce tp", CollectiveKind::AllReduce,
                                GroupKind::Tp, Bytes{3 * d.tokens * 4});

    pb.set_backward(true);
    if (pb.eager()) {
        // NLL backward (zeroing an fp32 gradient of the logits, then a scatter), log-softmax
        // backward (read 4 + 4, write 4) and the cast of the gradient back to 16 bits (read 4,
        // write 2).
        pb.memory(r.backward_input, "nll bwd", KernelKind::Elementwise, Bytes{d.tokens * v * 4},
                  MemKind::Elementwise, 1, 2);
        pb.memory(r.backward_input, "log softmax bwd", KernelKind::Softmax,
                  Bytes{d.tokens * v * 12}, MemKind::Softmax);
        pb.memory(r.backward_input, "logits grad to bf16", KernelKind::Elementwise,
                  Bytes{d.tokens * v * (4 + e)}, MemKind::Elementwise);
    } else {
        pb.memory(r.backward_input, "cross entropy bwd", KernelKind::Unmapped,
                  Bytes{d.tokens * v * (4 + e)});
    }
    gemm_backward(r.backward_input, r.backward_weight, pb, "logits dgrad", "logits wgrad",
                  {d.tokens, v, d.h});
    tp_leave(r.backward_input, d, hidden_full);
    norm_backward(r.backward_input, pb, d, d.norm_tokens, "final norm bwd");
    if (pb.eager()) {
        const I norm_tensors = model.norm == Norm::LayerNorm ? 2 : 1;
        const I params = (model.tied_embeddings ? 0 : v * d.h) + norm_tensors * d.h;
        pb.main_grad_accumulate(r.backward_weight, params,
                                norm_tensors + (model.tied_embeddings ? 0 : 1));
    }
    apply_sustained({&r.forward, &r.backward_input, &r.backward_weight}, gpu, compute);
    append(r.backward, r.backward_input);
    append(r.backward, r.backward_weight);
    // The loss's fp32 buffer held to the backward (the transient ones count at the peak:
    // memory.hpp's loss_buffer_bytes).
    r.activation_memory = loss_buffer_bytes(model, layout, training, compute.framework).held;
    set_part(r, ModelPart::Head);
    return r;
}

AttentionBlock layer_attention_block(const ModelSpec& model, const ParallelLayout& layout,
                                     const TrainingSpec& training) {
    return attention_block(dims_of(model, layout, training));
}

Step flash_attention_step(const topology::GpuModel& gpu, const RooflineCompute& compute,
                          const char* label, const AttentionBlock& block, Flops model,
                          bool backward, bool recompute) {
    PassBuilder pb(gpu, compute, TrainingSpec{}, false);
    pb.set_backward(backward);
    PassPlan pass;
    pb.attention(pass, label, block, backward, recompute);
    Step& s = pass.steps.back();
    s.hardware_flops = model;
    s.model_flops = recompute ? Flops{} : model;
    s.flags |= Step::AttentionCore;
    return s;
}

std::vector<OptimizerKernel> optimizer_step_kernels(std::int64_t held, std::int64_t owned,
                                                    Precision precision,
                                                    const RooflineCompute& compute) {
    std::vector<OptimizerKernel> out;
    if (held <= 0 && owned <= 0) return out;
    const double h = static_cast<double>(held), o = static_cast<double>(owned);
    const auto bytes = [](double b) { return Bytes{static_cast<std::int64_t>(std::ceil(b))}; };
    if (eager(compute)) {
        out.push_back({"adamw", bytes(28 * o), MemKind::Optimizer});
        if (precision != Precision::Fp32)
            out.push_back({"master copy", bytes(6 * o), MemKind::Elementwise});
        out.push_back({"zero main grads", bytes(gradient_bytes_per_parameter(precision) * h),
                       MemKind::Elementwise});
        return out;
    }
    const bool fp16 = precision == Precision::Fp16;
    const double zero_bytes_per_held = gradient_bytes_per_parameter(precision);
    const double to_fp32_bytes_per_owned = fp16 ? 2 + 4 : 0;
    const double unscale_bytes_per_owned = fp16 ? 4 + 4 : 0;
    const double norm_bytes_per_owned = 4;
    const double adam_bytes_per_owned = 4 * 4 + 3 * 4;
    const double to_weights_bytes_per_owned = precision == Precision::Fp32 ? 0 : 4 + 2;
    out.push_back({"optimizer",
                   bytes(zero_bytes_per_held * h +
                         (to_fp32_bytes_per_owned + unscale_bytes_per_owned + norm_bytes_per_owned +
                          adam_bytes_per_owned + to_weights_bytes_per_owned) *
                             o),
                   MemKind::Fused});
    return out;
}

Time roofline_optimizer_step(std::int64_t held, std::int64_t owned, Precision precision,
                             const topology::GpuModel& gpu, const RooflineCompute& compute) {
    Time t;
    for (const auto& k : optimizer_step_kernels(held, owned, precision, compute))
        t += memory_bound_time(k.bytes, gpu, compute, k.kind);
    return t;
}

}  // namespace cs::workload
