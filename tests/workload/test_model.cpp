#include <doctest/doctest.h>

#include "../error_of.hpp"

#include <filesystem>
#include <functional>
#include <string>

#include "config/document.hpp"
#include "workload/flops.hpp"
#include "workload/model.hpp"

using namespace cs;
using namespace cs::workload;

namespace {

const std::filesystem::path kWorkloads = std::filesystem::path(CLUSTERSIM_SOURCE_DIR) / "workloads";

using cs::test::error_of;

// Parses `model:` of an experiment text that notionally lives in workloads/.
ModelSpec model_of(const std::string& text) {
    const auto doc = config::parse_document(text, "exp.yaml", kWorkloads);
    return parse_model(config::root_reader(doc).map("model"));
}

ModelSpec bundled(const std::string& name) {
    return model_of("model: {from: " + name + "}\n");
}

}  // namespace

TEST_CASE("gpt defaults: LayerNorm, GELU, 4h MLP, kv_heads = heads, biases, tied embeddings") {
    const auto m = model_of("model: {layers: 8, hidden_size: 4096, attention_heads: 32}\n");
    CHECK(m.family == "gpt");
    CHECK(m.name == "custom");
    CHECK(m.ffn_hidden_size == 4 * 4096);
    CHECK(m.kv_heads == 32);
    CHECK(m.head_dim == 4096 / 32);
    CHECK(m.norm == Norm::LayerNorm);
    CHECK(m.activation == Activation::Gelu);
    CHECK(m.bias);
    CHECK(m.tied_embeddings);
    CHECK(m.vocab_size == 0);
    CHECK(m.experts == 0);
}

TEST_CASE("llama family: RMSNorm, SwiGLU, no bias, untied; ffn_hidden_size is required") {
    const auto m = model_of(
        "model: {family: llama, layers: 2, hidden_size: 64, attention_heads: 4, kv_heads: 2, "
        "ffn_hidden_size: 176}\n");
    CHECK(m.norm == Norm::RmsNorm);
    CHECK(m.activation == Activation::SwiGlu);
    CHECK_FALSE(m.bias);
    CHECK_FALSE(m.tied_embeddings);
    CHECK(m.kv_heads == 2);
    // The mapping starts at line 1, column 8.
    CHECK(
        error_of([] {
            model_of("model: {family: llama, layers: 2, hidden_size: 64, attention_heads: 4}\n");
        }) ==
        "exp.yaml:1:8: 'model': family llama needs 'ffn_hidden_size' (the MLP width; gpt defaults "
        "to 4 x hidden_size)");
}

TEST_CASE("strict model keys and cross-key errors name the place") {
    CHECK(error_of([] {
              model_of("model: {layers: 2, hidden_size: 64, attention_heads: 4, hiden: 3}\n");
          }).find("exp.yaml:1:57: unknown key 'model.hiden'") == 0);
    // kv_heads at column 57 of line 1.
    CHECK(error_of([] {
              model_of("model: {layers: 2, hidden_size: 64, attention_heads: 4, kv_heads: 3}\n");
          }) ==
          "exp.yaml:1:67: 'model.kv_heads': attention_heads 4 is not a multiple of kv_heads 3");
    CHECK(error_of([] {
              model_of("model: {layers: 2, hidden_size: 64, attention_heads: 4, top_k: 2}\n");
          }).find("'top_k' needs 'experts' > 0") != std::string::npos);
    CHECK(error_of([] {
              model_of("model: {layers: 2, hidden_size: 64, attention_heads: 5}\n");
          }).find("hidden_size 64 is not a multiple of attention_heads 5") != std::string::npos);
    CHECK(error_of([] {
              model_of(
                  "model: {family: moe, layers: 2, hidden_size: 64, "
                  "attention_heads: 4, ffn_hidden_size: 8}\n");
          }).find("family moe needs 'experts'") != std::string::npos);
}

TEST_CASE("from: a bundled name or a relative path, with inline overrides") {
    const auto a = bundled("llama3-70b");
    CHECK(a.name == "llama3-70b");
    CHECK(a.layers == 80);
    CHECK(a.kv_heads == 8);
    const auto b = model_of("model: {from: models/llama3-70b.yaml, layers: 4, name: tiny}\n");
    CHECK(b.layers == 4);
    CHECK(b.name == "tiny");
    CHECK(b.hidden_size == 8192);
    CHECK(error_of([] { bundled("llama4"); })
              .find("unknown bundled model \"llama4\"; bundled "
                    "models: deepseek-v3, gpt3-175b") != std::string::npos);
    CHECK(error_of([] { model_of("model: {from: models/none.yaml}\n"); }).find("none.yaml") !=
          std::string::npos);
}

TEST_CASE("bundled_models_dir searches upward from the document folder") {
    const auto from_tests =
        bundled_models_dir(std::filesystem::path(CLUSTERSIM_SOURCE_DIR) / "tests" / "workload");
    CHECK(from_tests == (kWorkloads / "models").lexically_normal());
    CHECK(bundled_models_dir(kWorkloads / "models") == (kWorkloads / "models").lexically_normal());
}

TEST_CASE("every bundled model parses") {
    for (const auto& e : std::filesystem::directory_iterator(kWorkloads / "models")) {
        CAPTURE(e.path());
        const auto m = bundled(e.path().stem().string());
        CHECK(m.name == e.path().stem().string());
        CHECK(parameter_count(m) > 0);
    }
}

TEST_CASE("parameter counts match the published sizes") {
    // Narayanan eq. 2 for GPT-3 175B (l=96, h=12288, V=51200, s=2048):
    // 12*96*12288^2 + 13*96*12288 + (51200+2048)*12288 = 174,615,822,336; we also count the final
    // LayerNorm (2h = 24,576).
    CHECK(parameter_count(bundled("gpt3-175b")) == 174'615'822'336 + 2 * 12288);
    // Eq. 2 reproduces every Table 1 size: 1.7B, 18.4B, 145.6B (to the digit shown).
    CHECK(parameter_count(bundled("narayanan-1.7b")) / 1e9 == doctest::Approx(1.7).epsilon(0.03));
    CHECK(parameter_count(bundled("narayanan-18.4b")) / 1e9 ==
          doctest::Approx(18.4).epsilon(0.003));
    CHECK(parameter_count(bundled("narayanan-145.6b")) / 1e9 ==
          doctest::Approx(145.6).epsilon(0.0005));
    // Llama 3 405B: per layer 2*16384^2 + 2*16384*1024 (attention, GQA with 8 kv heads) +
    // 3*16384*53248 (SwiGLU) + 2*16384 (RMSNorms); x126, + 2*128256*16384 (untied) + 16384
    // = 405,853,388,800.
    CHECK(parameter_count(bundled("llama3-405b")) == 405'853'388'800);
    CHECK(parameter_count(bundled("llama3-8b")) / 1e9 == doctest::Approx(8.03).epsilon(0.001));
    CHECK(parameter_count(bundled("llama3-70b")) / 1e9 == doctest::Approx(70.55).epsilon(0.001));
    // Mixtral: per layer 2*4096^2 + 2*4096*1024 + 8 experts * 3*4096*14336 + router 8*4096 +
    // norms 2*4096, x32, + 2*32000*4096 + 4096 = 46,702,792,704 total; active removes 6 of the 8
    // experts in each layer: - 32*6*3*4096*14336 = 12,879,925,248.
    const auto mixtral = bundled("mixtral-8x7b");
    CHECK(parameter_count(mixtral) == 46'702'792'704);
    CHECK(active_parameter_count(mixtral) == 12'879'925'248);
    CHECK(moe_layer_count(mixtral) == 32);
    const auto dsv3 = bundled("deepseek-v3");
    CHECK(moe_layer_count(dsv3) == 58);
    CHECK_FALSE(is_moe_layer(dsv3, 2));
    CHECK(is_moe_layer(dsv3, 3));
}

TEST_CASE("FLOPs per iteration: Korthikanti eq. 7 and Narayanan eq. 3") {
    const auto m = bundled("gpt3-175b");
    const double B = 1536, s = 2048, l = 96, h = 12288, V = 51200;
    // Eq. 7 (no recomputation): 72 B s l h^2 (1 + s/(6h) + V/(12 l h)).
    const double eq7 = 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
    // Eq. 3 (full recomputation): 96 B s l h^2 (1 + s/(6h) + V/(16 l h)).
    const double eq3 = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
    const auto none = iteration_flops(m, 1536, 2048, Recompute::None);
    CHECK(none.model.value == doctest::Approx(eq7).epsilon(1e-12));
    CHECK(none.hardware.value == doctest::Approx(eq7).epsilon(1e-12));
    const auto full = iteration_flops(m, 1536, 2048, Recompute::Full);
    CHECK(full.model.value == doctest::Approx(eq7).epsilon(1e-12));
    CHECK(full.hardware.value == doctest::Approx(eq3).epsilon(1e-12));
    // Selective recomputes the attention core's forward once per layer: + l * 4 B s^2 h.
    // Korthikanti eq. 8 writes the extra term as 72 B s l h^2 * s/(6h) = 12 B s^2 l h, three times
    // that; we count the FLOPs that are executed again (see docs/compute-model.md).
    const auto selective = iteration_flops(m, 1536, 2048, Recompute::Selective);
    CHECK(selective.hardware.value - selective.model.value ==
          doctest::Approx(l * 4 * B * s * s * h).epsilon(1e-12));
    // Table 1 row 145.6B: F = 5642 PFLOP per iteration (published.md, ours from eq. 3).
    const auto row = iteration_flops(bundled("narayanan-145.6b"), 2304, 2048, Recompute::Full);
    CHECK(row.hardware.value / 1e15 == doctest::Approx(5642).epsilon(5e-4));
}

TEST_CASE("MoE FLOPs count top_k routed plus shared experts") {
    const auto m = model_of(
        "model: {family: moe, layers: 2, hidden_size: 64, attention_heads: 4, "
        "moe_ffn_hidden_size: 32, experts: 8, top_k: 2, shared_experts: 1}\n");
    // Per token: attention 4*64*64 = 16384, router 64*8 = 512, (2+1) SwiGLU experts 3*64*32 each
    // = 18432; total 35328 weights -> 2*35328 FLOPs per token forward.
    CHECK(layer_matmul_weights_per_token(m, true) == 35328);
    // 3 sequences of 16 tokens: 2*35328*48 + attention core 4*3*16^2*64 = 3,391,488 + 196,608.
    CHECK(layer_forward_flops(m, true, 3, 16).value == doctest::Approx(3391488.0 + 196608.0));
    // top_k + shared_experts added in int wrapped past 2^31 (MFU -13.23%): with 2^31 - 1 shared
    // experts, (2 + 2147483647) x 6144 + 16384 + 512 = 13,194,139,539,456 + 16,896.
    const auto many = model_of(
        "model: {family: moe, layers: 2, hidden_size: 64, attention_heads: 4, "
        "moe_ffn_hidden_size: 32, experts: 8, top_k: 2, shared_experts: 2147483647}\n");
    CHECK(layer_matmul_weights_per_token(many, true) == 13194139539456 + 16896);
}
