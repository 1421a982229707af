#include <doctest/doctest.h>

#include "workload/flops.hpp"
#include "workload/memory.hpp"

using namespace cs;
using namespace cs::workload;

namespace {

ModelSpec gpt(int layers, int h, int heads, int vocab) {
    ModelSpec m;
    m.family = "gpt";
    m.layers = layers;
    m.hidden_size = h;
    m.attention_heads = heads;
    m.kv_heads = heads;
    m.head_dim = h / heads;
    m.ffn_hidden_size = 4 * h;
    m.vocab_size = vocab;
    m.position_embeddings = 2048;
    m.bias = true;
    m.tied_embeddings = true;
    return m;
}

double activation_sbh(const ModelSpec& m, int tp, bool sp, Recompute r) {
    ParallelLayout l;
    l.tp = tp;
    l.sequence_parallel = sp;
    TrainingSpec t;
    t.seq_length = 2048;
    t.micro_batch_size = 1;
    t.recompute = r;
    t.attention = Attention::Unfused;  // Table 2 assumes the scores are stored
    const double sbh = 2048.0 * m.hidden_size;
    return static_cast<double>(layer_activation_bytes(m, l, t, false).value) / sbh;
}

}  // namespace

TEST_CASE("activation memory per layer: Korthikanti Table 2") {
    // GPT-3 175B: s = 2048, b = 1, h = 12288, a = 96, t = 8, so 5as/(ht) = 5*96*2048/98304 = 10.
    const auto m = gpt(96, 12288, 96, 51200);
    // No parallelism: 34 + 5as/h = 34 + 80 = 114.
    CHECK(activation_sbh(m, 1, false, Recompute::None) == doctest::Approx(114));
    // TP baseline: 10 + 24/t + 5as/(ht) = 10 + 3 + 10 = 23.
    CHECK(activation_sbh(m, 8, false, Recompute::None) == doctest::Approx(23));
    // TP + SP: 34/t + 5as/(ht) = 4.25 + 10 = 14.25.
    CHECK(activation_sbh(m, 8, true, Recompute::None) == doctest::Approx(14.25));
    // TP + selective: 10 + 24/t = 13; TP + SP + selective: 34/t = 4.25.
    CHECK(activation_sbh(m, 8, false, Recompute::Selective) == doctest::Approx(13));
    CHECK(activation_sbh(m, 8, true, Recompute::Selective) == doctest::Approx(4.25));
    // Full recompute: 2 (the layer input only); with SP the input is split too: 2/t = 0.25.
    CHECK(activation_sbh(m, 8, false, Recompute::Full) == doctest::Approx(2));
    CHECK(activation_sbh(m, 8, true, Recompute::Full) == doctest::Approx(0.25));
    // Selective saves 1 - 13/23 = 43% at t = 8 without SP, and 1 - 4.25/14.25 = 70% with SP
    // (the "70% for GPT-3" of Korthikanti §5).
    CHECK(1 - activation_sbh(m, 8, true, Recompute::Selective) /
                  activation_sbh(m, 8, true, Recompute::None) ==
          doctest::Approx(0.70).epsilon(0.01));
}

TEST_CASE("activation memory: flash attention stores no scores, only the log-sum-exp") {
    const auto m = gpt(96, 12288, 96, 51200);
    ParallelLayout l;
    l.tp = 8;
    TrainingSpec t;
    t.seq_length = 2048;
    t.micro_batch_size = 1;
    // Flash (the default): TP baseline 10 + 24/t = 13 sbh, plus 4 bytes per head and token split
    // over TP: 4·a·s·b/t = 4*96*2048/8 bytes.
    const double sbh = 2048.0 * 12288;
    CHECK(static_cast<double>(layer_activation_bytes(m, l, t, false).value) ==
          doctest::Approx(13 * sbh + 4.0 * 96 * 2048 / 8));
    // Selective recompute is the same as flash without the log-sum-exp: 13 sbh.
    t.recompute = Recompute::Selective;
    CHECK(static_cast<double>(layer_activation_bytes(m, l, t, false).value) ==
          doctest::Approx(13 * sbh));
}

TEST_CASE("activation memory: cp divides the sequence, GQA and SwiGLU change the stored tensors") {
    auto m = gpt(2, 64, 4, 0);
    ParallelLayout l;
    l.cp = 2;
    TrainingSpec t;
    t.seq_length = 32;
    t.micro_batch_size = 1;
    t.attention = Attention::Unfused;
    // Local s = 16 queries against all 32 keys: 16*64*34 + 5*a*16*32 = 34816 + 10240.
    CHECK(layer_activation_bytes(m, l, t, false).value == 34816 + 10240);
    // GQA with 1 kv head of 16 dims: the split part 4q + 4kv = 256 + 64 instead of 512, and a
    // SwiGLU MLP of width 96 stores 6*96 = 576 instead of 4*4h = 1024 bytes per token:
    // per token 10*64 + 320 + 576 = 1536; x16 tokens = 24576, + 10240 for the scores.
    m.kv_heads = 1;
    m.activation = Activation::SwiGlu;
    m.ffn_hidden_size = 96;
    CHECK(layer_activation_bytes(m, l, t, false).value == 24576 + 10240);
}

TEST_CASE("memory per GPU: 18 bytes per parameter, 6 + 12/d with the distributed optimizer") {
    ExperimentSpec spec;
    spec.model = gpt(96, 12288, 96, 51200);
    spec.layout.tp = 8;
    spec.layout.pp = 8;
    spec.layout.dp = 4;
    spec.training.seq_length = 2048;
    spec.training.micro_batch_size = 1;
    spec.training.recompute = Recompute::Selective;
    spec.layout.sequence_parallel = true;
    const double h = 12288;
    // Stage 0 holds 12 layers and the embedding. Per layer 12h^2 + 13h parameters of which the
    // two LayerNorms (4h) are replicated: (12h^2 + 9h)/8 + 4h per GPU; the embedding
    // 51200*h/8 + 2048*h (positions are replicated).
    const double per_layer = (12 * h * h + 9 * h) / 8 + 4 * h;
    const double params = 12 * per_layer + 51200 * h / 8 + 2048 * h;
    CHECK(static_cast<double>(parameters_per_gpu(spec.model, spec.layout, 0, 12, true, false)) ==
          doctest::Approx(params));
    const auto plain = memory_per_gpu(spec, 0, 12, 8, true, false);
    CHECK(static_cast<double>(plain.parameters.value) == doctest::Approx(2 * params));
    CHECK(static_cast<double>(plain.gradients.value) == doctest::Approx(4 * params));
    CHECK(static_cast<double>(plain.optimizer_states.value) == doctest::Approx(12 * params));
    // Activations: 12 layers x 8 in-flight microbatches x sbh*34/t (selective + SP).
    CHECK(static_cast<double>(plain.activations.value) ==
          doctest::Approx(12 * 8 * 2048 * h * 34 / 8));
    CHECK(plain.total.value == plain.parameters.value + plain.gradients.value +
                                   plain.optimizer_states.value + plain.activations.value);
    spec.layout.distributed_optimizer = true;
    const auto sharded = memory_per_gpu(spec, 0, 12, 8, true, false);
    CHECK(static_cast<double>(sharded.optimizer_states.value) == doctest::Approx(12 * params / 4));
    CHECK(sharded.parameters == plain.parameters);
    CHECK(sharded.gradients == plain.gradients);
    // Megatron-LM's distributed-optimizer table, sharded over d = 4: bf16 (above) 6 + 12/d;
    // fp16 4 + 16/d (2-byte weights and gradients; master, m, v and an fp32 gradient copy);
    // fp32 8 + 8/d (4-byte weights and gradients; m and v).
    const auto bytes_per_parameter = [&](Precision precision) {
        spec.training.precision = precision;
        const auto m = memory_per_gpu(spec, 0, 12, 8, true, false);
        return static_cast<double>(m.parameters.value + m.gradients.value +
                                   m.optimizer_states.value) /
               params;
    };
    CHECK(bytes_per_parameter(Precision::Bf16) == doctest::Approx(6 + 12.0 / 4));
    CHECK(bytes_per_parameter(Precision::Fp16) == doctest::Approx(4 + 16.0 / 4));
    CHECK(bytes_per_parameter(Precision::Fp32) == doctest::Approx(8 + 8.0 / 4));
    spec.layout.distributed_optimizer = false;
    CHECK(bytes_per_parameter(Precision::Fp16) == doctest::Approx(20));
    CHECK(bytes_per_parameter(Precision::Fp32) == doctest::Approx(16));
    spec.training.precision = Precision::Bf16;
    spec.layout.distributed_optimizer = true;
    // The optimizer step works on the same shard: dp = 4 replicas own params / 4 each.
    CHECK(static_cast<double>(optimizer_parameters_per_gpu(spec.model, spec.layout, 0, 12, true,
                                                           false)) == doctest::Approx(params / 4));
    spec.layout.distributed_optimizer = false;
    CHECK(optimizer_parameters_per_gpu(spec.model, spec.layout, 0, 12, true, false) ==
          parameters_per_gpu(spec.model, spec.layout, 0, 12, true, false));
}

TEST_CASE("memory per GPU: tied output copy on the last stage, experts split over ep x tp") {
    const auto m = gpt(4, 64, 4, 1000);
    ParallelLayout l;
    // Last stage without the embedding: tied embeddings still need a copy of V*h, plus the final
    // LayerNorm (2h), besides its 2 layers of 12h^2 + 13h (tp = 1).
    const std::int64_t layer = 12 * 64 * 64 + 13 * 64;
    CHECK(parameters_per_gpu(m, l, 2, 2, false, true) == 2 * layer + 1000 * 64 + 2 * 64);
    // With the embedding on the same stage, the tied output adds nothing but the final norm.
    CHECK(parameters_per_gpu(m, l, 0, 4, true, true) == 4 * layer + (1000 + 2048) * 64 + 2 * 64);

    ModelSpec moe = m;
    moe.family = "moe";
    moe.experts = 8;
    moe.top_k = 2;
    moe.moe_ffn_hidden_size = 32;
    l.tp = 2;
    l.ep = 4;
    // One MoE layer: routed experts 8 * (2*64*32 + 32 + 64) = 33536 over ep*tp = 8 -> 4192;
    // attention 4*64^2 + 4*64 = 16640 over tp -> 8320; router 512 and norms 256 replicated.
    CHECK(parameters_per_gpu(moe, l, 0, 1, false, false) == 4192 + 8320 + 512 + 256);
}

TEST_CASE("memory per GPU under ZeRO-1/2/3 and HSDP: the ZeRO paper's accounting") {
    // 4 layers of h = 64 on one stage (tp = pp = 1, no embedding): a layer has
    // 12h^2 + 13h = 49152 + 832 = 49984 parameters, so Psi = 4 x 49984 = 199936 and the largest
    // FSDP unit (one layer) U = 49984.
    ExperimentSpec spec;
    spec.model = gpt(4, 64, 4, 0);
    spec.layout.dp = 8;
    const double psi = 4 * 49984.0, unit = 49984.0;
    REQUIRE(parameters_per_gpu(spec.model, spec.layout, 0, 4, false, false) == 199936);
    CHECK(unit_parameters_per_gpu(spec.model, spec.layout, 0, 4, false, false) ==
          std::vector<std::int64_t>{49984, 49984, 49984, 49984});
    const auto states = [&](Sharding sharding) {
        spec.layout.sharding = sharding;
        spec.layout.distributed_optimizer = sharding != Sharding::None;
        return memory_per_gpu(spec, 0, 4, 0, false, false);
    };
    const auto d = [](Bytes b) { return static_cast<double>(b.value); };
    // fp16, the paper's setting: 2-byte weights and gradients, K = 16 here (fp32 master weight,
    // Adam m and v, and Megatron's fp32 copy of the gradients; the paper's K = 12 has no copy).
    // N_d = 8.
    spec.training.precision = Precision::Fp16;
    // ZeRO-0: (2 + 2 + K) Psi. ZeRO-1 (P_os): 2 Psi + 2 Psi + K Psi / N_d.
    auto m = states(Sharding::None);
    CHECK(d(m.parameters) + d(m.gradients) + d(m.optimizer_states) == 20 * psi);
    m = states(Sharding::Optimizer);
    CHECK(d(m.parameters) == 2 * psi);
    CHECK(d(m.gradients) == 2 * psi);
    CHECK(d(m.optimizer_states) == doctest::Approx(16 * psi / 8));
    // ZeRO-2 (P_os+g): 2 Psi + (2 + K) Psi / N_d, plus one unit's unsharded 2-byte gradients
    // before their reduce-scatter.
    m = states(Sharding::Gradients);
    CHECK(d(m.parameters) == 2 * psi);
    CHECK(d(m.gradients) == doctest::Approx(2 * psi / 8 + 2 * unit));
    CHECK(d(m.optimizer_states) == doctest::Approx(16 * psi / 8));
    // ZeRO-3 (P_os+g+p): (2 + 2 + K) Psi / N_d, plus the gathered units (the one computing and
    // the one prefetched: 2 x 2U) and one unit's gradients (2U).
    m = states(Sharding::Parameters);
    CHECK(d(m.parameters) == doctest::Approx(2 * psi / 8 + 2 * 2 * unit));
    CHECK(d(m.gradients) == doctest::Approx(2 * psi / 8 + 2 * unit));
    CHECK(d(m.parameters) + d(m.gradients) + d(m.optimizer_states) ==
          doctest::Approx(20 * psi / 8 + 6 * unit));
    // Without prefetch one unit is gathered; without reshard_after_forward every unit stays
    // gathered from its forward to its backward (2 Psi on top of the shard).
    spec.layout.shard_prefetch = false;
    CHECK(d(states(Sharding::Parameters).parameters) == doctest::Approx(2 * psi / 8 + 2 * unit));
    spec.layout.reshard_after_forward = false;
    CHECK(d(states(Sharding::Parameters).parameters) == doctest::Approx(2 * psi / 8 + 2 * psi));
    spec.layout.shard_prefetch = true;
    spec.layout.reshard_after_forward = true;

    // bf16: 4-byte (fp32) gradients, K = 12. ZeRO-3 with HSDP, shard groups of 4 of the 8
    // replicas: everything is sharded over 4, not 8: (2 + 4 + 12) Psi / 4 + 2 x 2U + 4U.
    spec.training.precision = Precision::Bf16;
    spec.layout.shard_size = 4;
    m = states(Sharding::Parameters);
    CHECK(d(m.parameters) == doctest::Approx(2 * psi / 4 + 4 * unit));
    CHECK(d(m.gradients) == doctest::Approx(4 * psi / 4 + 4 * unit));
    CHECK(d(m.optimizer_states) == doctest::Approx(12 * psi / 4));
    // ZeRO-1 with HSDP (Megatron's --num-distributed-optimizer-instances 2): 2 + 4 + 12/4.
    m = states(Sharding::Optimizer);
    CHECK(d(m.parameters) + d(m.gradients) + d(m.optimizer_states) ==
          doctest::Approx((6 + 12.0 / 4) * psi));
    // One replica: nothing sharded beyond what ZeRO-1 did (the optimizer states over 1).
    spec.layout.shard_size = 0;
    spec.layout.dp = 1;
    m = states(Sharding::Parameters);
    CHECK(d(m.parameters) + d(m.gradients) + d(m.optimizer_states) == 18 * psi);
}
