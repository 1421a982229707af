#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "topology/topology_yaml.hpp"
#include "workload/flops.hpp"
#include "workload/memory.hpp"
#include "workload/roofline.hpp"

using namespace cs;
using namespace cs::workload;

namespace {

// H200 SXM datasheet (published.md §7.1).
// The catalogue's H200 SXM: datasheet peaks, the GEMM curve fitted on its kernels, its
// sustained rates.
topology::GpuModel h200() {
    const topology::GpuModel* g = topology::find_catalog_model("H200");
    REQUIRE(g != nullptr);
    return *g;
}

// Megatron-LM's kernels at burst clocks: the arithmetic below without the sustained factor,
// whose duty cycle changes with what a pass contains.
RooflineCompute burst() {
    RooflineCompute c;
    c.sustained = false;
    return c;
}

ModelSpec gpt_layer(int h, int heads) {
    ModelSpec m;
    m.layers = 1;
    m.hidden_size = h;
    m.attention_heads = heads;
    m.kv_heads = heads;
    m.head_dim = h / heads;
    m.ffn_hidden_size = 4 * h;
    m.bias = true;
    return m;
}

double compute_ms(const PassPlan& p) {
    double s = 0;
    for (const auto& st : p.steps)
        if (st.kind == Step::Kind::Compute) s += st.duration.seconds() * st.repeat;
    return s * 1e3;
}
double model_flops(const PassPlan& p) {
    double s = 0;
    for (const auto& st : p.steps)
        s += st.model_flops.value * st.repeat;
    return s;
}
double hardware_flops(const PassPlan& p) {
    double s = 0;
    for (const auto& st : p.steps)
        s += st.hardware_flops.value * st.repeat;
    return s;
}
int count(const PassPlan& p, network::CollectiveKind k, GroupKind g) {
    int n = 0;
    for (const auto& st : p.steps)
        if (st.kind == Step::Kind::Collective && st.collective == k && st.group == g) ++n;
    return n;
}

}  // namespace

TEST_CASE("GEMM efficiency: small GEMMs are inefficient, large ones reach the MAMF cap") {
    const double tiny = gemm_efficiency({512, 512, 512});
    const double mid = gemm_efficiency({2048, 2048, 2048});
    const double big = gemm_efficiency({16384, 16384, 16384});
    CHECK(tiny < mid);
    CHECK(mid < big);
    // f(x) = x^2/(x^2 + 650^2) per dimension: f(16384)^3 = 0.99843^3 = 0.9953 of the 0.803 cap.
    CHECK(big ==
          doctest::Approx(0.803 * std::pow(16384.0 * 16384 / (16384.0 * 16384 + 650 * 650), 3)));
    // An fp8 GEMM takes the bf16 GEMM's time over its recipe's speedup plus the recipe's cost per
    // output element (the generic curve carries the H200's fit: 1.829 and 0.182 ps per tensor,
    // 1.796 and 0.488 ps per row, 1.641 and 0.650 ps in blocks), not 2x. At 16384^3 the bf16
    // time is t = 2 x 16384^3 / bf16 rate; the fp8 rate over the bf16 one is
    // t / (t / speedup + 16384^2 x per_output).
    topology::GpuModel gpu = h200();
    RooflineCompute rc;
    const GemmShape sq{16384, 16384, 16384};
    const double bf16 = gemm_rate(sq, Precision::Bf16, gpu, rc).flops_per_s;
    const double t = 2.0 * 16384 * 16384 * 16384 / bf16;
    const auto ratio = [&](double speedup, double per_output_ps) {
        return t / (t / speedup + 16384.0 * 16384 * per_output_ps * 1e-12);
    };
    CHECK(gemm_rate(sq, Precision::Fp8, gpu, rc).flops_per_s / bf16 ==
          doctest::Approx(ratio(1.829, 0.182)));
    CHECK(gemm_rate(sq, Precision::Fp8, gpu, rc, Fp8Recipe::Blockwise).flops_per_s / bf16 ==
          doctest::Approx(ratio(1.641, 0.650)));
    CHECK(gemm_rate(sq, Precision::Fp8, gpu, rc, Fp8Recipe::Rowwise).flops_per_s / bf16 ==
          doctest::Approx(ratio(1.796, 0.488)));
    // The cost per output weighs more at short k: at 8192 x 4096 x 2048 (Llama fc2 at h 4096, tp
    // 8) the rowwise rate is a smaller share of the tensorwise one than at 16384^3.
    const GemmShape fc2{8192, 4096, 2048};
    const auto share = [&](const GemmShape& s) {
        return gemm_rate(s, Precision::Fp8, gpu, rc, Fp8Recipe::Rowwise).flops_per_s /
               gemm_rate(s, Precision::Fp8, gpu, rc).flops_per_s;
    };
    CHECK(share(fc2) < share(sq) - 0.02);
    // Below 512 a dimension's factor falls linearly from f(512) = 512^2/(512^2 + 650^2) = 0.3829:
    // an MoE router GEMM (4096 tokens, 8 experts, h 4096) keeps f(8) = 0.3829 * 8/512 = 0.00598.
    const double f4096 = 4096.0 * 4096 / (4096.0 * 4096 + 650 * 650);
    const double f512 = 512.0 * 512 / (512.0 * 512 + 650 * 650);
    CHECK(gemm_efficiency({4096, 8, 4096}) ==
          doctest::Approx(0.803 * f4096 * f4096 * f512 * 8 / 512));
    CHECK(gemm_efficiency({4096, 511, 4096}) < gemm_efficiency({4096, 512, 4096}));
    CHECK(gemm_efficiency({4096, 511, 4096}) ==
          doctest::Approx(gemm_efficiency({4096, 512, 4096})).epsilon(0.003));
}

TEST_CASE("GEMM times against the H200 bf16 GEMM microbenchmarks (the fitting data)") {
    // validation/h200-calibration.json, gemm_bf16: m, n, k, median ms. The benchmark's timed call
    // has a fixed floor (~16-20 us even for 512^3), fitted as a 16 us per-call overhead; the fit
    // leaves every row within 13%.
    struct Row {
        int m, n, k;
        double ms;
    };
    const Row rows[] = {
        {8192, 8192, 8192, 1.4547680020332336},   {2048, 12288, 4096, 0.2940319925546646},
        {2048, 4096, 4096, 0.11134399846196175},  {2048, 16384, 4096, 0.4098079949617386},
        {2048, 4096, 16384, 0.38782399892807007}, {4096, 24576, 8192, 2.196463942527771},
        {4096, 8192, 8192, 0.8395200073719025},   {4096, 32768, 8192, 3.1828800439834595},
        {4096, 8192, 32768, 3.1089439392089844},  {2048, 6144, 2048, 0.10310400277376175},
        {2048, 2048, 2048, 0.046063998714089394}, {1024, 1024, 1024, 0.022591999731957912},
        {512, 512, 512, 0.021871999837458134}};
    // Timed one call after another, each with a ~16 us per-call floor of the eager benchmark
    // loop: the back-to-back load of the sustained figure (duty 1: 0.88 of the burst rate).
    RooflineCompute bench;
    bench.launch_overhead = Time::us(16);
    const double sustained = h200().sustained.factor(1.0);
    CHECK(sustained == doctest::Approx(0.88));
    for (const auto& r : rows) {
        CAPTURE(r.m);
        CAPTURE(r.n);
        CAPTURE(r.k);
        const double burst_ms =
            gemm_time({r.m, r.n, r.k}, Precision::Bf16, h200(), bench).seconds() * 1e3 - 0.016;
        const double predicted = burst_ms / sustained + 0.016;
        CHECK(std::abs(predicted / r.ms - 1) < 0.10);
    }
}

TEST_CASE("eager-PyTorch layer kernels against the measured H200 kernel sums") {
    // h200-kernels.json (tests/validation/data), transformer_layer_kernels: the GPU kernel time of
    // one GPT block (with biases) forward and forward + backward, weights' .grad accumulating in
    // bf16 (main_grads: param), short timed calls (burst clocks). Our sums include 1.5 us of GPU
    // gap per launch, which the measured kernel sums do not. The h = 8192 row ran its GEMMs 11-17%
    // below the curve (clock-throttled; docs/compute-model.md), hence its wider bound.
    struct Row {
        int h, heads, s, mbs;
        double fwd_ms, fwd_bwd_ms, bound;
    };
    const Row rows[] = {{4096, 32, 2048, 1, 1.18623, 4.20004, 0.10},
                        {4096, 32, 4096, 1, 2.71295, 8.58514, 0.10},
                        {2048, 16, 2048, 1, 0.37952, 1.37051, 0.10},
                        {8192, 64, 2048, 1, 5.18687, 18.10867, 0.20},
                        {4096, 32, 2048, 2, 2.52553, 8.15256, 0.10}};
    RooflineCompute eager;
    eager.framework = Framework::Pytorch;
    eager.main_grads = MainGrads::Param;
    eager.sustained = false;
    for (const auto& r : rows) {
        CAPTURE(r.h);
        CAPTURE(r.s);
        CAPTURE(r.mbs);
        TrainingSpec t;
        t.seq_length = r.s;
        t.micro_batch_size = r.mbs;
        auto m = gpt_layer(r.h, r.heads);
        m.bias = true;
        const auto p = roofline_layer(m, ParallelLayout{}, t, h200(), eager, false);
        CHECK(std::abs(compute_ms(p.forward) / r.fwd_ms - 1) < r.bound);
        CHECK(std::abs((compute_ms(p.forward) + compute_ms(p.backward)) / r.fwd_bwd_ms - 1) <
              r.bound);
        // The kernels eager PyTorch launches for this block: 15 forward (4 GEMMs and the
        // attention with a memset each, 2 norms, 2 residual adds, GELU); backward 8 GEMMs with
        // their memsets, 4 bias reductions, attention backward (4), concat and copy of the q, k, v
        // gradients, GELU, 2 norms of 2 kernels, 2 residual adds, 12 gradient accumulations.
        CHECK(p.forward.launches() == 15);
        CHECK(p.backward.launches() == 16 + 4 + 4 + 2 + 1 + 4 + 2 + 12);
    }
}

TEST_CASE("layer FLOPs: model FLOPs per GPU are the layer's FLOPs over tp; backward twice") {
    const auto m = gpt_layer(4096, 32);
    ParallelLayout l;
    l.tp = 4;
    TrainingSpec t;
    t.seq_length = 2048;
    t.micro_batch_size = 2;
    const auto p = roofline_layer(m, l, t, h200(), burst(), false);
    // 24 b s h^2 + 4 b s^2 h, split over 4 TP ranks.
    const double fwd = layer_forward_flops(m, false, 2, 2048).value / 4;
    CHECK(model_flops(p.forward) == doctest::Approx(fwd));
    CHECK(model_flops(p.backward) == doctest::Approx(2 * fwd));
    CHECK(hardware_flops(p.backward) == doctest::Approx(2 * fwd));
    CHECK(model_flops(p.backward_input) + model_flops(p.backward_weight) ==
          doctest::Approx(2 * fwd));
    // Weight gradients: one GEMM per forward GEMM, 24 b s h^2 / tp in all.
    CHECK(model_flops(p.backward_weight) == doctest::Approx(24.0 * 2 * 2048 * 4096.0 * 4096 / 4));

    t.recompute = Recompute::Full;
    const auto full = roofline_layer(m, l, t, h200(), burst(), false);
    CHECK(model_flops(full.backward) == doctest::Approx(2 * fwd));
    CHECK(hardware_flops(full.backward) == doctest::Approx(3 * fwd));
    CHECK(compute_ms(full.backward) > compute_ms(p.backward) + 0.99 * compute_ms(p.forward));

    t.recompute = Recompute::Selective;
    const auto sel = roofline_layer(m, l, t, h200(), burst(), false);
    // + the attention core forward: 4 b s^2 h / tp.
    CHECK(hardware_flops(sel.backward) - model_flops(sel.backward) ==
          doctest::Approx(4.0 * 2 * 2048 * 2048 * 4096 / 4));
}

TEST_CASE("unfused attention: 13 bytes per score forward, 19 backward, the whole matrix computed") {
    // One GPU, h = 1024 with 8 heads of 128, b = 2, s = 1024: N = b·a·s² = 2*8*1024*1024 scores.
    const auto m = gpt_layer(1024, 8);
    ParallelLayout l;
    TrainingSpec t;
    t.seq_length = 1024;
    t.micro_batch_size = 2;
    const auto flash = roofline_layer(m, l, t, h200(), burst(), false);
    t.attention = Attention::Unfused;
    const auto unfused = roofline_layer(m, l, t, h200(), burst(), false);
    const double n = 2.0 * 8 * 1024 * 1024;
    // Both count the same model FLOPs (Narayanan eq. 3 counts the whole score matrix).
    CHECK(model_flops(unfused.forward) == doctest::Approx(model_flops(flash.forward)));
    CHECK(model_flops(unfused.backward) == doctest::Approx(model_flops(flash.backward)));
    double fwd_bytes = 0, bwd_bytes = 0, fwd_attention_ms = 0, bwd_attention_ms = 0;
    const auto is_core = [](const std::string& label) {
        return label.find("attention") != std::string::npos || label.find("softmax") == 0;
    };
    for (const auto& st : unfused.forward.steps) {
        // The AttentionCore flag (what the validator's `part: attention` sums) marks these steps.
        CHECK(st.has(Step::AttentionCore) == is_core(st.label));
        if (is_core(st.label)) {
            fwd_bytes += static_cast<double>(st.hbm_bytes.value);
            fwd_attention_ms += st.duration.seconds() * 1e3;
        }
    }
    for (const auto& st : unfused.backward.steps) {
        CHECK(st.has(Step::AttentionCore) == is_core(st.label));
        if (is_core(st.label)) {
            bwd_bytes += static_cast<double>(st.hbm_bytes.value);
            bwd_attention_ms += st.duration.seconds() * 1e3;
        }
    }
    // Q, K, V and the context are b·s·h·2 = 4 MiB each. Forward, the scores bmm reads Q and K and
    // the context bmm reads V and writes the context: 4 tensors. Backward, each of the two bmm
    // pairs moves two (Q-sized + K/V-sized) operands: 8 tensors. The rest is per score.
    const double qkvo = 2.0 * 1024 * 1024 * 2;  // one b·s·h tensor
    CHECK(fwd_bytes == doctest::Approx(13 * n + 4 * qkvo));
    CHECK(bwd_bytes == doctest::Approx(19 * n + 8 * qkvo));
    // HBM-bound at the score-matrix kinds' fractions (fitted on Megatron-LM's attention on an
    // A100, FlashAttention paper Tables 15-16): forward 0.698 x 4.8 TB/s, backward 0.624, plus
    // the 1.5 us GPU gap per kernel for the 4 kernels of each.
    CHECK(fwd_attention_ms ==
          doctest::Approx((13 * n + 4 * qkvo) / (0.698 * 4.8e12) * 1e3 + 4 * 0.0015).epsilon(1e-3));
    CHECK(bwd_attention_ms ==
          doctest::Approx((19 * n + 8 * qkvo) / (0.624 * 4.8e12) * 1e3 + 4 * 0.0015).epsilon(1e-3));
    // Flash attention's core is one kernel each way, also an attention-core step.
    int flash_core = 0;
    for (const auto& st : flash.forward.steps)
        flash_core += st.has(Step::AttentionCore);
    CHECK(flash_core == 1);
    // Selective recomputation re-runs the four forward kernels as hardware FLOPs only.
    t.recompute = Recompute::Selective;
    const auto sel = roofline_layer(m, l, t, h200(), burst(), false);
    CHECK(hardware_flops(sel.backward) - model_flops(sel.backward) ==
          doctest::Approx(4.0 * 2 * 1024 * 1024 * 1024));
    CHECK(compute_ms(sel.backward) ==
          doctest::Approx(compute_ms(unfused.backward) + fwd_attention_ms).epsilon(1e-6));
}

TEST_CASE("the AttentionCore flag marks exactly the attention core's kernels, by framework") {
    // Expected from the emitting code (roofline.cpp): attention_core_forward emits one flash
    // kernel "attention", or unfused "attention scores", "softmax", "attention dropout",
    // "attention context" (each "recompute ..." when re-executed); attention_core_backward emits
    // "attention bwd", or "attention context bwd", "attention dropout bwd", "softmax bwd",
    // "attention scores bwd". Selective recomputation re-runs the forward core at the start of
    // backward_input; full recomputation the whole layer forward, the core inside it. Both
    // frameworks emit the same core (eager PyTorch changes launches, not which kernels). No
    // other step (projections, norms, the MLP, collectives) carries the flag.
    const auto m = gpt_layer(1024, 8);
    ParallelLayout l;
    l.tp = 2;
    l.sequence_parallel = true;
    const std::vector<std::string> flash_fwd{"attention"};
    const std::vector<std::string> unfused_fwd{"attention scores", "softmax", "attention dropout",
                                               "attention context"};
    const auto recomputed = [](std::vector<std::string> labels) {
        for (auto& x : labels)
            x = "recompute " + x;
        return labels;
    };
    const auto flagged = [](const PassPlan& p) {
        std::vector<std::string> labels;
        for (const auto& st : p.steps)
            if (st.has(Step::AttentionCore)) labels.emplace_back(st.label);
        return labels;
    };
    for (const auto framework : {Framework::Megatron, Framework::Pytorch}) {
        for (const auto attention : {Attention::Flash, Attention::Unfused}) {
            for (const auto recompute : {Recompute::None, Recompute::Selective, Recompute::Full}) {
                CAPTURE(static_cast<int>(framework));
                CAPTURE(static_cast<int>(attention));
                CAPTURE(static_cast<int>(recompute));
                RooflineCompute c = burst();
                c.framework = framework;
                TrainingSpec t;
                t.seq_length = 512;
                t.micro_batch_size = 2;
                t.attention = attention;
                t.recompute = recompute;
                const auto p = roofline_layer(m, l, t, h200(), c, false);
                const bool flash = attention == Attention::Flash;
                const auto fwd = flash ? flash_fwd : unfused_fwd;
                const std::vector<std::string> bwd =
                    flash
                        ? std::vector<std::string>{"attention bwd"}
                        : std::vector<std::string>{"attention context bwd", "attention dropout bwd",
                                                   "softmax bwd", "attention scores bwd"};
                std::vector<std::string> in =
                    recompute == Recompute::None ? std::vector<std::string>{} : recomputed(fwd);
                in.insert(in.end(), bwd.begin(), bwd.end());
                CHECK(flagged(p.forward) == fwd);
                CHECK(flagged(p.backward_input) == in);
                CHECK(flagged(p.backward_weight).empty());
                CHECK(flagged(p.backward) == in);
                // A collective (the TP all-gathers and reduce-scatters around the core) is
                // never flagged.
                for (const auto* pass : {&p.forward, &p.backward})
                    for (const auto& st : pass->steps)
                        if (st.has(Step::AttentionCore)) CHECK(st.kind == Step::Kind::Compute);
            }
        }
    }
}

TEST_CASE("TP collectives: two all-reduces each way, or all-gather + reduce-scatter with SP") {
    using network::CollectiveKind;
    const auto m = gpt_layer(1024, 16);
    ParallelLayout l;
    l.tp = 8;
    TrainingSpec t;
    t.seq_length = 512;
    t.micro_batch_size = 2;
    const auto plain = roofline_layer(m, l, t, h200(), burst(), false);
    CHECK(count(plain.forward, CollectiveKind::AllReduce, GroupKind::Tp) == 2);
    CHECK(count(plain.backward, CollectiveKind::AllReduce, GroupKind::Tp) == 2);
    CHECK(count(plain.backward_input, CollectiveKind::AllReduce, GroupKind::Tp) == 2);
    CHECK(count(plain.backward_weight, CollectiveKind::AllReduce, GroupKind::Tp) == 0);
    for (const auto& st : plain.forward.steps)
        if (st.kind == Step::Kind::Collective) CHECK(st.size.value == 2 * 512 * 1024 * 2);  // bsh*2
    // Without SP every TP rank sends the whole activation to the next stage: b s h 2 bytes.
    CHECK(plain.activation_send.value == 2 * 512 * 1024 * 2);

    l.sequence_parallel = true;
    t.attention = Attention::Unfused;  // Table 2's memory counts the stored scores
    const auto sp = roofline_layer(m, l, t, h200(), burst(), false);
    CHECK(count(sp.forward, CollectiveKind::AllReduce, GroupKind::Tp) == 0);
    CHECK(count(sp.forward, CollectiveKind::AllGather, GroupKind::Tp) == 2);
    CHECK(count(sp.forward, CollectiveKind::ReduceScatter, GroupKind::Tp) == 2);
    CHECK(count(sp.backward, CollectiveKind::AllGather, GroupKind::Tp) == 2);
    CHECK(count(sp.backward, CollectiveKind::ReduceScatter, GroupKind::Tp) == 2);
    CHECK(sp.activation_send.value == 2 * 512 * 1024 * 2 / 8);
    // Korthikanti Table 2, TP + SP: sbh(34/t + 5as/(ht)) = 1048576*(4.25 + 5*16*512/8192).
    CHECK(sp.activation_memory.value == 1048576 * 425 / 100 + 1048576 * 5);

    l.tp = 1;
    l.sequence_parallel = false;
    const auto single = roofline_layer(m, l, t, h200(), burst(), false);
    for (const auto& st : single.forward.steps)
        CHECK(st.kind == Step::Kind::Compute);
}

TEST_CASE("CP exchanges K/V; EP dispatches and combines with all-to-all") {
    using network::CollectiveKind;
    ModelSpec m = gpt_layer(1024, 16);
    m.kv_heads = 4;
    m.experts = 8;
    m.top_k = 2;
    m.moe_ffn_hidden_size = 512;
    ParallelLayout l;
    l.cp = 2;
    l.ep = 4;
    TrainingSpec t;
    t.seq_length = 1024;
    t.micro_batch_size = 1;
    const auto p = roofline_layer(m, l, t, h200(), burst(), true);
    CHECK(count(p.forward, CollectiveKind::AllGather, GroupKind::Cp) == 1);
    CHECK(count(p.backward, CollectiveKind::ReduceScatter, GroupKind::Cp) == 1);
    CHECK(count(p.forward, CollectiveKind::AllToAll, GroupKind::Ep) == 2);
    CHECK(count(p.backward, CollectiveKind::AllToAll, GroupKind::Ep) == 2);
    for (const auto& st : p.forward.steps) {
        // K and V of the whole sequence: 1 * 1024 * 2 * (4 heads * 64) * 2 bytes.
        if (st.group == GroupKind::Cp && st.kind == Step::Kind::Collective)
            CHECK(st.size.value == 1024 * 2 * 256 * 2);
        // Local tokens (512) x top_k x h x 2 bytes.
        if (st.group == GroupKind::Ep && st.kind == Step::Kind::Collective)
            CHECK(st.size.value == 512 * 2 * 1024 * 2);
        // 2 local experts, each gets 512 tokens * top_k 2 * ep 4 / 8 experts = 512 tokens, in
        // one grouped GEMM: 2 experts x 2 x 512 x 512 x 1024 FLOPs.
        if (std::string(st.label) == "expert fc1") {
            CHECK(st.repeat == 1);
            CHECK(st.model_flops.value == doctest::Approx(2 * 2.0 * 512 * 512 * 1024));
        }
    }
    // Without the grouped GEMM (Megatron-LM's SequentialMLP), one GEMM per local expert.
    auto loop = burst();
    loop.moe_grouped_gemm = false;
    int loops = 0;
    for (const auto& st : roofline_layer(m, l, t, h200(), loop, true).forward.steps)
        if (std::string(st.label) == "expert fc1") {
            ++loops;
            CHECK(st.repeat == 2);
            CHECK(st.model_flops.value == doctest::Approx(2.0 * 512 * 512 * 1024));
        }
    CHECK(loops == 1);
    // Model FLOPs: local queries (512) against all 1024 keys, plus GEMMs of the local tokens.
    const double tokens = 512;
    const double weights = static_cast<double>(layer_matmul_weights_per_token(m, true));
    CHECK(model_flops(p.forward) ==
          doctest::Approx(2 * tokens * weights + 4.0 * 512 * 1024 * 1024));
}

TEST_CASE("grouped GEMM tiling: PyTorch's tile choice, 2 x 1 clusters, waves over 132 SMs") {
    // Qwen-MoE fc2 forward, 8 experts x 128 tokens, n 2048, k 1408: 128 rows per expert, so
    // 64 x 128 x 128 ping-pong tiles; row tiles 128/64 = 2 (already even), column tiles
    // 2048/128 = 16: 8 x 2 x 16 = 256 tiles, ceil(256/132) = 2 waves, ceil(1408/128) = 11 steps.
    auto t = grouped_gemm_tiling(8, 128, 2048, 1408, false);
    CHECK(t.ping_pong);
    CHECK(t.tile_m == 64);
    CHECK(t.tile_n == 128);
    CHECK(t.tile_k == 128);
    CHECK(t.tiles == 256);
    CHECK(t.waves == 2);
    CHECK(t.k_steps == 11);
    // Mixtral fc1 forward, 8 x 512 tokens, n 28672, k 4096: 128 x 256 x 64 cooperative tiles;
    // 8 x (512/128 = 4) x (28672/256 = 112) = 3584 tiles; 27 x 132 = 3564 < 3584: 28 waves;
    // 4096/64 = 64 steps.
    t = grouped_gemm_tiling(8, 512, 28672, 4096, false);
    CHECK_FALSE(t.ping_pong);
    CHECK(t.tile_m == 128);
    CHECK(t.tile_n == 256);
    CHECK(t.tile_k == 64);
    CHECK(t.tiles == 3584);
    CHECK(t.waves == 28);
    CHECK(t.k_steps == 64);
    // 384 tokens: ceil(384/128) = 3 row tiles, rounded up to the cluster's 2: 4. With 64 experts
    // and n 2816 (ceil(2816/256) = 11): 64 x 4 x 11 = 2816 tiles, 21 x 132 = 2772: 22 waves.
    t = grouped_gemm_tiling(64, 384, 2816, 2048, false);
    CHECK(t.tiles == 2816);
    CHECK(t.waves == 22);
    // The weight gradient's output is n x k per expert and the tokens are its reduction:
    // n 2048 -> 16 row tiles, k 1408 -> ceil(1408/256) = 6 column tiles, 8 x 16 x 6 = 768 tiles,
    // 6 waves (5 x 132 = 660); 128 tokens / 64 = 2 steps. Cooperative: no side is <= 128.
    t = grouped_gemm_tiling(8, 128, 2048, 1408, true);
    CHECK_FALSE(t.ping_pong);
    CHECK(t.tiles == 768);
    CHECK(t.waves == 6);
    CHECK(t.k_steps == 2);
}

TEST_CASE("grouped GEMM time: waves of tiles or the HBM time, plus the per-call cost") {
    // H200 bf16 peak 989 TFLOP/s over 132 SMs; the defaults: call 7.2 us, tile 2.7 us,
    // efficiency 0.806 (cooperative) and 0.62 (ping-pong), HBM 0.795 x 4.8 TB/s = 3.816 TB/s.
    const double hbm = 0.795 * 4.8e12;
    const auto us = [](Time t) { return t.seconds() * 1e6; };
    // Mixtral fc1 forward at 512 tokens (28 waves, 64 steps, above): a tile is 2 x 128 x 256 x 64
    // x 64 = 2^28 FLOPs at 0.806 x 989e12 / 132 = 6.0389e12 FLOP/s: 44.451 us + 2.7 us =
    // 47.151 us; 28 waves 1320.23 us. Bytes: 4096 rows x (28672 + 4096) + 8 x 28672 x 4096 =
    // 2^30 values, 2^31 bytes: 562.76 us at 3.816 TB/s. Compute-bound: 7.2 + 1320.23 us.
    const double tile_us = std::ldexp(1.0, 28) / (0.806 * 989e12 / 132) * 1e6 + 2.7;
    CHECK(tile_us == doctest::Approx(47.151).epsilon(1e-4));
    CHECK(std::ldexp(2.0, 30) / hbm * 1e6 < 28 * tile_us);
    CHECK(us(grouped_gemm_time(8, 512, 28672, 4096, false, Precision::Bf16, h200(), burst())) ==
          doctest::Approx(7.2 + 28 * tile_us).epsilon(1e-6));
    CHECK(7.2 + 28 * tile_us == doctest::Approx(1327.43).epsilon(1e-5));
    // The same at 128 tokens: ping-pong tiles of 2 x 64 x 128 x 128 x 32 = 2^26 FLOPs at
    // 0.62 x 989e12 / 132: 14.447 + 2.7 = 17.147 us, 28 waves 480.10 us; the bytes, 1024 rows x
    // (28672 + 4096) + 939,524,096 weights = 973,078,528 values, take 510.00 us: HBM-bound.
    const double bytes = 2.0 * (1024.0 * (28672 + 4096) + 8.0 * 28672 * 4096);
    CHECK(28 * (std::ldexp(1.0, 26) / (0.62 * 989e12 / 132) * 1e6 + 2.7) < bytes / hbm * 1e6);
    CHECK(us(grouped_gemm_time(8, 128, 28672, 4096, false, Precision::Bf16, h200(), burst())) ==
          doctest::Approx(7.2 + bytes / hbm * 1e6).epsilon(1e-6));
    CHECK(7.2 + bytes / hbm * 1e6 == doctest::Approx(517.20).epsilon(1e-5));
    // A calibration's grouped_gemm scale multiplies the tiles' rate, not their fixed cost:
    // at scale 2 the tile takes 44.451 / 2 + 2.7 us.
    auto calibrated = burst();
    calibrated.grouped_gemm_scale = 2;
    CHECK(us(grouped_gemm_time(8, 512, 28672, 4096, false, Precision::Bf16, h200(), calibrated)) ==
          doctest::Approx(7.2 + 28 * ((tile_us - 2.7) / 2 + 2.7)).epsilon(1e-6));
}

TEST_CASE("grouped GEMM time depends on the expert's shape, not on tokens per expert alone") {
    // Qwen-MoE fc2 at 8 experts x 512 tokens, forward (n 2048, k 1408) and dgrad (n 1408,
    // k 2048): the same tokens, FLOPs and bytes. Forward: 8 x 4 x 8 = 256 tiles, 2 waves of 22
    // steps; dgrad: 8 x 4 x ceil(1408/256) = 6 -> 192 tiles, also 2 waves, of 32 steps (its
    // last column of tiles is 3/8 empty). A step is 2 x 128 x 256 x 64 FLOPs at
    // 0.806 x 989e12 / 132: 0.69454 us. Forward 7.2 + 2 x (22 x 0.69454 + 2.7) = 43.16 us,
    // dgrad 7.2 + 2 x (32 x 0.69454 + 2.7) = 57.05 us (measured at 1950 MHz: 43.9 and 57.0 us,
    // h200-microbench.json; a function of tokens per expert alone gives both the same time).
    const double step_us = 2.0 * 128 * 256 * 64 / (0.806 * 989e12 / 132) * 1e6;
    const double fwd =
        grouped_gemm_time(8, 512, 2048, 1408, false, Precision::Bf16, h200(), burst()).seconds() *
        1e6;
    const double dgrad =
        grouped_gemm_time(8, 512, 1408, 2048, false, Precision::Bf16, h200(), burst()).seconds() *
        1e6;
    CHECK(fwd == doctest::Approx(7.2 + 2 * (22 * step_us + 2.7)).epsilon(1e-6));
    CHECK(dgrad == doctest::Approx(7.2 + 2 * (32 * step_us + 2.7)).epsilon(1e-6));
    CHECK(fwd == doctest::Approx(43.16).epsilon(1e-3));
    CHECK(dgrad == doctest::Approx(57.05).epsilon(1e-3));
    // At 128 tokens the small Qwen experts run at 5.9e9 FLOPs / 22.53 us = 262 TFLOP/s (2 waves
    // of 256 ping-pong tiles: 7.2 + 2 x (11 steps x 0.4515 us + 2.7) us, just above the
    // 13.95 us of HBM) and Mixtral's at 240.5e9 / 517.2 us = 465 TFLOP/s (above): the rate at
    // the same tokens per expert differs by the expert's n x k.
    const double qwen_flops = 2.0 * 8 * 128 * 2048 * 1408;
    const double mixtral_flops = 2.0 * 8 * 128 * 28672 * 4096;
    const double qwen =
        qwen_flops /
        grouped_gemm_time(8, 128, 2048, 1408, false, Precision::Bf16, h200(), burst()).seconds();
    const double mixtral =
        mixtral_flops /
        grouped_gemm_time(8, 128, 28672, 4096, false, Precision::Bf16, h200(), burst()).seconds();
    CHECK(qwen == doctest::Approx(qwen_flops / 22.532e-6).epsilon(1e-3));
    CHECK(mixtral == doctest::Approx(mixtral_flops / 517.20e-6).epsilon(1e-3));
    CHECK(mixtral / qwen > 1.7);
}

TEST_CASE("embedding, output layer and optimizer step") {
    ModelSpec m = gpt_layer(4096, 32);
    m.vocab_size = 51200;
    ParallelLayout l;
    l.tp = 2;
    TrainingSpec t;
    t.seq_length = 2048;
    t.micro_batch_size = 1;
    const auto out = roofline_output_layer(m, l, t, h200(), burst());
    // Logits: 2 b s h V / tp forward, twice that backward.
    const double logits = 2.0 * 2048 * 4096 * 51200 / 2;
    CHECK(model_flops(out.forward) == doctest::Approx(logits));
    CHECK(model_flops(out.backward) == doctest::Approx(2 * logits));
    const auto emb = roofline_embedding(m, l, t, h200(), burst());
    CHECK(model_flops(emb.forward) == 0);
    CHECK(count(emb.forward, network::CollectiveKind::AllReduce, GroupKind::Tp) == 1);
    CHECK(emb.backward_input.steps.empty());
    // Optimizer step at 0.865 x 4.8 TB/s + 4 us launch. 1e9 parameters held and owned:
    //   fp16: zero the 2-byte gradient buffer 2 + to fp32 6 + unscale 8 + norm 4 + Adam 28 +
    //         copy to weights 6 = 54 bytes per parameter;
    //   bf16: fp32 buffer, no copy to fp32, no unscale: 4 + 4 + 28 + 6 = 42; fp32: no copy, 36.
    // Distributed optimizer over 8 replicas (125e6 owned): 2 x 1e9 + 52 x 125e6 = 8.5e9 bytes.
    const double hbm = 4.8e12 * 0.865;
    const auto step = [&](std::int64_t held, std::int64_t owned, Precision p) {
        return roofline_optimizer_step(held, owned, p, h200(), burst()).seconds();
    };
    CHECK(step(1'000'000'000, 1'000'000'000, Precision::Fp16) ==
          doctest::Approx(54e9 / hbm + 4e-6));
    CHECK(step(1'000'000'000, 1'000'000'000, Precision::Bf16) ==
          doctest::Approx(42e9 / hbm + 4e-6));
    CHECK(step(1'000'000'000, 1'000'000'000, Precision::Fp32) ==
          doctest::Approx(36e9 / hbm + 4e-6));
    CHECK(step(1'000'000'000, 125'000'000, Precision::Fp16) == doctest::Approx(8.5e9 / hbm + 4e-6));
    CHECK(step(0, 0, Precision::Fp16) == 0);
    m.vocab_size = 0;
    CHECK(roofline_output_layer(m, l, t, h200(), burst()).forward.steps.empty());
}
