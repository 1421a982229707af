// Transformer model descriptions (GPT, Llama, MoE) and the arithmetic on them: parameter counts,
// per-layer operations with FLOPs and HBM bytes, and memory per GPU.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "config/document.hpp"
#include "core/name_table.hpp"
#include "core/units.hpp"

namespace cs::workload {

enum class Norm : std::uint8_t { LayerNorm, RmsNorm };
enum class Activation : std::uint8_t { Gelu, SwiGlu };
enum class Precision : std::uint8_t { Bf16, Fp16, Fp8, Fp32 };
enum class Recompute : std::uint8_t { None, Selective, Full };
// How the attention core runs: one fused FlashAttention-style kernel that never stores the score
// matrix (modern Megatron-LM, PyTorch SDPA), or unfused batched GEMMs with the a·s² scores, their
// softmax and dropout in HBM (Megatron-LM before FlashAttention, 2021-2022; the activation memory
// of Korthikanti et al. Table 2 assumes it).
enum class Attention : std::uint8_t { Flash, Unfused };
// How fp8 GEMMs are scaled (Megatron-LM's --fp8-recipe; the variants of torch._scaled_mm in the
// H200 microbenchmarks): one scale per tensor (Transformer Engine's delayed and current scaling),
// per row, or DeepSeek-V3's blocks (1 x 128 activations, 128 x 128 weights).
enum class Fp8Recipe : std::uint8_t { Tensorwise, Rowwise, Blockwise };

// Names of the precisions: the first three are those a run trains in (`training.precision`, the
// default first); fp32 is named for messages only (optimizer state and master weights).
inline constexpr std::array<Named<Precision>, 4> kPrecisionNames{{
    {"bf16", Precision::Bf16},
    {"fp16", Precision::Fp16},
    {"fp8", Precision::Fp8},
    {"fp32", Precision::Fp32},
}};
inline constexpr std::array<Named<Precision>, 3> kTrainingPrecisionNames{
    {kPrecisionNames[0], kPrecisionNames[1], kPrecisionNames[2]}};

const char* precision_name(Precision p);
const char* recompute_name(Recompute r);
const char* attention_name(Attention a);  // "flash", "unfused"

// Names in `training.recompute` and `training.attention`, the default first.
inline constexpr std::array<Named<Recompute>, 3> kRecomputeNames{{
    {"none", Recompute::None},
    {"selective", Recompute::Selective},
    {"full", Recompute::Full},
}};
inline constexpr std::array<Named<Attention>, 2> kAttentionNames{{
    {"flash", Attention::Flash},
    {"unfused", Attention::Unfused},
}};
// Names in `training.fp8_recipe`, the default first; `delayed` (Megatron-LM's default) scales
// per tensor.
inline constexpr std::array<Named<Fp8Recipe>, 4> kFp8RecipeNames{{
    {"tensorwise", Fp8Recipe::Tensorwise},
    {"delayed", Fp8Recipe::Tensorwise},
    {"rowwise", Fp8Recipe::Rowwise},
    {"blockwise", Fp8Recipe::Blockwise},
}};

struct ModelSpec {
    std::string name = "custom";
    std::string family = "gpt";  // gpt | llama | moe (moe: experts > 0)
    int layers = 0;
    int hidden_size = 0;
    int attention_heads = 0;
    int kv_heads = 0;         // = attention_heads unless grouped-query attention
    int head_dim = 0;         // = hidden_size / attention_heads unless given
    int ffn_hidden_size = 0;  // dense MLP width (4h for gpt by default)
    int vocab_size = 0;       // 0: no embedding or output layer
    Norm norm = Norm::LayerNorm;
    Activation activation = Activation::Gelu;
    bool tied_embeddings = false;  // output layer shares the word embedding (gpt default)
    bool bias = false;             // linear layers carry biases (gpt default)
    int position_embeddings = 0;   // learned absolute positions (0: none, or rotary)
    // Rotary position embedding applied to q and k in every layer (llama and moe by default,
    // when there are no learned positions); no parameters.
    bool rotary = false;
    // Dropout after the attention and the MLP (two 1-byte masks per token kept for the
    // backward): Megatron-LM's GPT runs (0.1); models with RMSNorm (Llama, Mixtral, DeepSeek)
    // train without, the default when norm is rmsnorm.
    bool dropout = true;
    // Mixture of experts (experts == 0: dense).
    int experts = 0;
    int top_k = 0;
    int moe_ffn_hidden_size = 0;
    int shared_experts = 0;
    int dense_layers = 0;  // leading layers that stay dense in an MoE model
};

// Parses `model:` (inline keys, or `from:` a model file plus inline overrides). `from` takes a
// path relative to the document (`from: models/x.yaml`) or a bundled model name (`from:
// llama3-70b`), looked up in bundled_models_dir(document folder). Throws ConfigError.
// `file_read`, when given, receives the model file `from:` named (empty without one). With
// `documents`, the model file is parsed once into that cache and only read.
ModelSpec parse_model(const config::Reader& model, std::filesystem::path* file_read = nullptr,
                      config::DocumentCache* documents = nullptr);

// The bundled model folder: the first `workloads/models` found in `start` or one of its parents
// (so experiments anywhere inside the source tree find it); empty when there is none.
std::filesystem::path bundled_models_dir(const std::filesystem::path& start);

}  // namespace cs::workload
