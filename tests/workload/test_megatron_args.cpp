#include <doctest/doctest.h>

#include "../error_of.hpp"

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "workload/megatron_args.hpp"

using namespace cs;
using namespace cs::workload;

namespace {

using cs::test::error_of;

bool contains(const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) != v.end();
}

}  // namespace

TEST_CASE("Narayanan Table 1 145.6B script flags become overrides") {
    // Flags of run_table_1.sh for the 145.6B row (published.md §1.3), as a script writes them.
    const std::string args =
        "--tensor-model-parallel-size 8 --pipeline-model-parallel-size 8 \\\n"
        "  --num-layers 80 --hidden-size 12288 --num-attention-heads 96 \\\n"
        "  --seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 2 \\\n"
        "  --global-batch-size 2304 --num-layers-per-virtual-pipeline-stage 5 \\\n"
        "  --fp16 --activations-checkpoint-method uniform --lr 6.0e-5 --DDP-impl local";
    std::vector<std::string> warnings;
    const auto o = megatron_args_to_overrides(args, warnings);
    const std::vector<std::string> expected = {
        "parallelism.tp=8", "parallelism.pp=8", "model.layers=80", "model.hidden_size=12288",
        "model.attention_heads=96", "training.seq_length=2048", "training.micro_batch_size=2",
        "training.global_batch_size=2304", "training.precision=fp16", "training.recompute=full",
        // --activations-checkpoint-method uniform: full recomputation of groups of 1 layer;
        // learned positions for 2048 tokens, then Megatron's defaults for the switches not given:
        // 4h MLP, GELU, LayerNorm, biases, tied embeddings, kv heads = heads;
        // vpp = 80 layers / 8 stages / 5 per virtual stage.
        "training.recompute_method=uniform", "model.position_embeddings=2048",
        "model.ffn_hidden_size=49152", "model.activation=gelu", "model.norm=layernorm",
        "model.bias=true", "model.tied_embeddings=true", "model.kv_heads=96", "parallelism.vpp=2"};
    CHECK(o == expected);
    // The flags clustersim has no use for are named, each once.
    CHECK(warnings == std::vector<std::string>{"--lr: not used by clustersim (ignored)",
                                               "--DDP-impl: not used by clustersim (ignored)"});
}

TEST_CASE("Llama/MoE flags, --flag=value, quoting, GQA and recompute granularity") {
    std::vector<std::string> warnings;
    const auto o = megatron_args_to_overrides(
        "--num-layers=32 --group-query-attention --num-query-groups 8 --swiglu "
        "--normalization RMSNorm --untie-embeddings-and-output-weights --disable-bias-linear "
        "--position-embedding-type rope --num-experts 8 --moe-router-topk 2 "
        "--moe-ffn-hidden-size 14336 --expert-model-parallel-size 8 --context-parallel-size 2 "
        "--sequence-parallel --use-distributed-optimizer --bf16 --recompute-granularity "
        "selective --data-path '/my data/x' --vocab-size 32000",
        warnings);
    for (const char* s :
         {"model.layers=32", "model.kv_heads=8", "model.activation=swiglu", "model.norm=rmsnorm",
          "model.tied_embeddings=false", "model.bias=false", "model.position_embeddings=0",
          "model.experts=8", "model.top_k=2", "model.moe_ffn_hidden_size=14336", "parallelism.ep=8",
          "parallelism.cp=2", "parallelism.sequence_parallel=true",
          "parallelism.distributed_optimizer=true", "training.precision=bf16",
          "training.recompute=selective", "model.vocab_size=32000"}) {
        CAPTURE(s);
        CHECK(contains(o, s));
    }
    // The quoted path is one value of the unknown flag, not a stray word.
    CHECK(warnings == std::vector<std::string>{"--data-path: not used by clustersim (ignored)"});
}

TEST_CASE("Megatron defaults: SwiGLU MLP width, top_k, padded vocabulary") {
    std::vector<std::string> warnings;
    const auto o = megatron_args_to_overrides(
        "--hidden-size 4096 --num-attention-heads 32 --swiglu --num-experts 8 "
        "--tensor-model-parallel-size 8 --vocab-size 50257 --vocab-file gpt2-vocab.json",
        warnings);
    // SwiGLU without --ffn-hidden-size: int(4h * 2/3 / 64) * 64 = int(10922.67 / 64) * 64 = 10880.
    CHECK(contains(o, "model.ffn_hidden_size=10880"));
    CHECK_FALSE(contains(o, "model.activation=gelu"));
    CHECK(contains(o, "model.top_k=2"));
    // 50257 padded to a multiple of 128 * tp 8 = 1024: 50 * 1024 = 51200.
    CHECK(contains(o, "model.vocab_size=51200"));
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0].find("--vocab-file: the tokenizer is not read") == 0);
}

TEST_CASE("query groups without --group-query-attention are ignored with a warning") {
    std::vector<std::string> warnings;
    const auto o = megatron_args_to_overrides("--num-query-groups 8", warnings);
    CHECK(o.empty());
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0].find("--num-query-groups without --group-query-attention") == 0);
}

TEST_CASE("malformed values and impossible virtual stages are errors") {
    std::vector<std::string> w;
    CHECK(error_of([&] { megatron_args_to_overrides("--tensor-model-parallel-size eight", w); }) ==
          "--megatron-args: --tensor-model-parallel-size: expected a positive integer up to "
          "2147483647, found \"eight\"");
    // Beyond an int (a count), named by its flag (issue 40: the error named the --set key the
    // flag becomes), and the bucket size, which counts parameters, may pass it.
    CHECK(error_of([&] { megatron_args_to_overrides("--num-layers 2147483648", w); }) ==
          "--megatron-args: --num-layers: expected a positive integer up to 2147483647, found "
          "\"2147483648\"");
    CHECK(megatron_args_to_overrides("--ddp-bucket-size 4000000000", w) ==
          std::vector<std::string>{"parallelism.ddp_bucket_size=4000000000"});
    CHECK(error_of([&] { megatron_args_to_overrides("--num-layers", w); }) ==
          "--megatron-args: --num-layers: missing value");
    CHECK(error_of([&] {
              megatron_args_to_overrides("--recompute-granularity some", w);
          }).find("expected full or selective") != std::string::npos);
    // 24 layers over 4 stages = 6 per stage, not a multiple of 4 per virtual stage.
    CHECK(error_of([&] {
              megatron_args_to_overrides(
                  "--num-layers 24 --pipeline-model-parallel-size 4 "
                  "--num-layers-per-virtual-pipeline-stage 4",
                  w);
          }).find("does not divide the 24 layers over 4 pipeline stages") != std::string::npos);
    CHECK(error_of([&] {
              megatron_args_to_overrides("--num-layers-per-virtual-pipeline-stage 2", w);
          }).find("needs --num-layers and --pipeline-model-parallel-size") != std::string::npos);
    CHECK(error_of([&] { megatron_args_to_overrides("--fp16 'open", w); }).find("unterminated") !=
          std::string::npos);
}

TEST_CASE("shared experts from the shared intermediate size") {
    std::vector<std::string> warnings;
    auto o = megatron_args_to_overrides(
        "--moe-ffn-hidden-size 2048 --moe-shared-expert-intermediate-size 4096", warnings);
    CHECK(contains(o, "model.shared_experts=2"));
    CHECK(warnings.empty());
    o = megatron_args_to_overrides("--moe-shared-expert-intermediate-size 4096", warnings);
    CHECK_FALSE(contains(o, "model.shared_experts=2"));
    CHECK(warnings.size() == 1);
}

TEST_CASE("attention backend flags choose flash or unfused attention") {
    std::vector<std::string> w;
    CHECK(megatron_args_to_overrides("--use-flash-attn", w) ==
          std::vector<std::string>{"training.attention=flash"});
    // Megatron-LM's AttnBackend values: unfused and local materialise the scores.
    for (const char* v : {"unfused", "local"})
        CHECK(megatron_args_to_overrides(std::string("--attention-backend ") + v, w) ==
              std::vector<std::string>{"training.attention=unfused"});
    for (const char* v : {"flash", "fused", "auto"})
        CHECK(megatron_args_to_overrides(std::string("--attention-backend=") + v, w) ==
              std::vector<std::string>{"training.attention=flash"});
    CHECK(error_of([&] { megatron_args_to_overrides("--attention-backend magic", w); }) ==
          "--megatron-args: --attention-backend: expected flash, fused, unfused, local or auto, "
          "found \"magic\"");
    CHECK(w.empty());
}

TEST_CASE("--fp8-recipe: Transformer Engine's recipes as training.fp8_recipe") {
    std::vector<std::string> w;
    // delayed (Megatron-LM's default) and tensorwise both scale per tensor: the model's tensorwise.
    CHECK(megatron_args_to_overrides("--fp8-format hybrid --fp8-recipe delayed", w) ==
          std::vector<std::string>{"training.precision=fp8", "training.fp8_recipe=tensorwise"});
    CHECK(megatron_args_to_overrides("--fp8-recipe=tensorwise", w) ==
          std::vector<std::string>{"training.fp8_recipe=tensorwise"});
    CHECK(megatron_args_to_overrides("--fp8-format e4m3 --fp8-recipe blockwise", w) ==
          std::vector<std::string>{"training.precision=fp8", "training.fp8_recipe=blockwise"});
    CHECK(error_of([&] { megatron_args_to_overrides("--fp8-recipe mxfp8", w); }) ==
          "--megatron-args: --fp8-recipe: expected delayed, tensorwise or blockwise, found "
          "\"mxfp8\" (mxfp8, Blackwell's microscaling, has no measured rate here)");
    CHECK(error_of([&] { megatron_args_to_overrides("--fp8-recipe rowwise", w); }) ==
          "--megatron-args: --fp8-recipe: expected delayed, tensorwise or blockwise, found "
          "\"rowwise\"");
    CHECK(w.empty());
}

TEST_CASE("gradient-reduction overlap and bucket size flags") {
    std::vector<std::string> w;
    CHECK(megatron_args_to_overrides("--overlap-grad-reduce --ddp-bucket-size 50000000", w) ==
          std::vector<std::string>{"parallelism.overlap_grad_reduce=true",
                                   "parallelism.ddp_bucket_size=50000000"});
    CHECK(w.empty());
}

TEST_CASE("sharded data parallelism flags: distributed optimizer, Megatron-FSDP, instances") {
    std::vector<std::string> w;
    auto o = megatron_args_to_overrides("--use-distributed-optimizer", w);
    CHECK(contains(o, "parallelism.distributed_optimizer=true"));
    // --use-megatron-fsdp (or --use-custom-fsdp) with a strategy: ZeRO-1/2/3 by name.
    o = megatron_args_to_overrides(
        "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params "
        "--use-distributed-optimizer --num-distributed-optimizer-instances 4",
        w);
    CHECK(contains(o, "parallelism.sharding=optim_grads_params"));
    CHECK(contains(o, "parallelism.shard_replicas=4"));
    w.clear();
    o = megatron_args_to_overrides(
        "--use-custom-fsdp --data-parallel-sharding-strategy=optim_grads", w);
    CHECK(contains(o, "parallelism.sharding=optim_grads"));
    CHECK(w.empty());
    // no_shard leaves the choice to --use-distributed-optimizer; one instance is no HSDP.
    o = megatron_args_to_overrides(
        "--use-megatron-fsdp --data-parallel-sharding-strategy no_shard "
        "--num-distributed-optimizer-instances 1",
        w);
    CHECK(o.empty());
    // The strategy without Megatron-FSDP is ignored, as Megatron-LM ignores it, and said.
    w.clear();
    o = megatron_args_to_overrides("--data-parallel-sharding-strategy optim_grads", w);
    CHECK(o.empty());
    REQUIRE(w.size() == 1);
    CHECK(w[0].find("applies only with --use-megatron-fsdp") != std::string::npos);
    CHECK(error_of([&] {
              megatron_args_to_overrides(
                  "--use-megatron-fsdp --data-parallel-sharding-strategy full_shard", w);
          }) ==
          "--megatron-args: --data-parallel-sharding-strategy: expected no_shard, optim, "
          "optim_grads or optim_grads_params, found \"full_shard\"");
}

TEST_CASE("uneven pipeline flags map to the split keys, with Megatron-LM's virtual stage rules") {
    std::vector<std::string> w;
    auto o = megatron_args_to_overrides(
        "--num-layers 126 --pipeline-model-parallel-size 16 "
        "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split "
        "--num-layers-per-virtual-pipeline-stage 4",
        w);
    CHECK(contains(o, "parallelism.account_for_embedding=true"));
    CHECK(contains(o, "parallelism.account_for_loss=true"));
    // (126 + 1 + 1) / 16 = 8 counted layers per stage, 4 per virtual stage: 2 chunks.
    CHECK(contains(o, "parallelism.vpp=2"));
    CHECK(w.empty());
    // Without the accounting 126 / 16 does not divide.
    CHECK(error_of([&] {
              megatron_args_to_overrides(
                  "--num-layers 126 --pipeline-model-parallel-size 16 "
                  "--num-layers-per-virtual-pipeline-stage 4",
                  w);
          }).find("does not divide the 126 layers over 16 pipeline stages") != std::string::npos);
    CHECK(error_of([&] {
              megatron_args_to_overrides(
                  "--num-layers 126 --pipeline-model-parallel-size 16 "
                  "--account-for-loss-in-pipeline-split --num-layers-per-virtual-pipeline-stage 4",
                  w);
          })
              .find("does not divide the 127 layers (126 with the embedding and/or loss counted "
                    "as layers) over 16 pipeline stages") != std::string::npos);

    o = megatron_args_to_overrides(
        "--decoder-first-pipeline-num-layers 6 --decoder-last-pipeline-num-layers=8 "
        "--num-virtual-stages-per-pipeline-rank 2",
        w);
    CHECK(contains(o, "parallelism.first_stage_layers=6"));
    CHECK(contains(o, "parallelism.last_stage_layers=8"));
    CHECK(contains(o, "parallelism.vpp=2"));
    CHECK(error_of([&] {
              megatron_args_to_overrides(
                  "--num-layers 30 --pipeline-model-parallel-size 4 "
                  "--decoder-first-pipeline-num-layers 6 "
                  "--num-layers-per-virtual-pipeline-stage 2",
                  w);
          }).find("give the virtual stages with --num-virtual-stages-per-pipeline-rank") !=
          std::string::npos);
    CHECK(error_of([&] {
              megatron_args_to_overrides(
                  "--num-layers 32 --pipeline-model-parallel-size 4 "
                  "--num-virtual-stages-per-pipeline-rank 2 "
                  "--num-layers-per-virtual-pipeline-stage 4",
                  w);
          }).find("cannot be set at the same time") != std::string::npos);
    CHECK(error_of([&] {
              megatron_args_to_overrides("--decoder-first-pipeline-num-layers 0", w);
          }).find("expected a positive integer") != std::string::npos);
}

TEST_CASE("partial recomputation flags map to recompute_method and recompute_layers") {
    std::vector<std::string> w;
    auto o = megatron_args_to_overrides(
        "--recompute-granularity full --recompute-method block --recompute-num-layers 3", w);
    CHECK(contains(o, "training.recompute=full"));
    CHECK(contains(o, "training.recompute_method=block"));
    CHECK(contains(o, "training.recompute_layers=3"));
    CHECK(w.empty());
    // The old spellings: --activations-checkpoint-method implies full recomputation.
    o = megatron_args_to_overrides(
        "--activations-checkpoint-method uniform --activations-checkpoint-num-layers 2", w);
    CHECK(contains(o, "training.recompute=full"));
    CHECK(contains(o, "training.recompute_method=uniform"));
    CHECK(contains(o, "training.recompute_layers=2"));
    // Without full recomputation Megatron-LM ignores them, and says so here.
    o = megatron_args_to_overrides("--recompute-method block --recompute-num-layers 3", w);
    CHECK(o.empty());
    REQUIRE(w.size() == 1);
    CHECK(w[0].find("without --recompute-granularity full: ignored") != std::string::npos);
}

TEST_CASE("--pipeline-model-parallel-layout: Megatron-LM's DeepSeek-V3 layout as stage_layers") {
    // Megatron-LM's documented DeepSeek-V3 layout for PP16 x VPP2: "Et*3|(tt|)*29,m|L" expands to
    // 32 stages: E ttt | 29 x (tt) | m | L. Transformer layers per stage: 3, 29 twos, 0 (the MTP
    // layer, not modelled), 0 (loss): 3 + 58 = 61; 32 stages / 16 ranks = 2 virtual stages.
    std::vector<std::string> w;
    const auto o = megatron_args_to_overrides(
        "--num-layers 61 --pipeline-model-parallel-size 16 "
        "--pipeline-model-parallel-layout \"Et*3|(tt|)*29,m|L\"",
        w);
    std::string expected = "parallelism.stage_layers=[3";
    for (int i = 0; i < 29; ++i)
        expected += ",2";
    expected += ",0,0]";
    CHECK(contains(o, expected));
    CHECK(contains(o, "parallelism.vpp=2"));
    // The MTP layer is named in a warning.
    CHECK(std::any_of(w.begin(), w.end(), [](const std::string& s) {
        return s.find("multi-token-prediction layers (m) are not modelled: 1 left out") !=
               std::string::npos;
    }));

    // One stage per rank: no vpp override. "Ett|tt|ttL": 2, 2, 2.
    w.clear();
    const auto even = megatron_args_to_overrides(
        "--pipeline-model-parallel-size 3 --pipeline-model-parallel-layout Ett|tt|ttL", w);
    CHECK(contains(even, "parallelism.stage_layers=[2,2,2]"));
    CHECK(std::none_of(even.begin(), even.end(),
                       [](const std::string& s) { return s.rfind("parallelism.vpp", 0) == 0; }));
    CHECK(w.empty());
}

TEST_CASE("--pipeline-model-parallel-layout errors name what does not fit") {
    std::vector<std::string> w;
    const auto err = [&](const std::string& args) {
        return error_of([&] { megatron_args_to_overrides(args, w); });
    };
    // 3 stages on 2 ranks.
    CHECK(err("--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout Et|t|tL")
              .find("3 stages are not a multiple of the 2 pipeline stages") != std::string::npos);
    // 4 layers in the layout, 6 in the model.
    CHECK(err("--num-layers 6 --pipeline-model-parallel-size 2 --pipeline-model-parallel-layout "
              "Ett|ttL")
              .find("holds 4 transformer layers (t), but --num-layers is 6") != std::string::npos);
    CHECK(err("--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout tt|ttL")
              .find("the first stage must start with the embedding (E)") != std::string::npos);
    CHECK(err("--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout Et|tt")
              .find("the last stage must end with the loss (L)") != std::string::npos);
    CHECK(err("--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout EtL|tL")
              .find("the loss (L) must close the last stage, and only it") != std::string::npos);
    CHECK(err("--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout Et|tx")
              .find("unexpected 'x' at character 5") != std::string::npos);
    CHECK(err("--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout E(t|tL")
              .find("a '(' without its ')'") != std::string::npos);
    CHECK(err("--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout Et*|tL")
              .find("'*' must be followed by a count") != std::string::npos);
    CHECK(err("--pipeline-model-parallel-layout Et|tL")
              .find("needs --pipeline-model-parallel-size") != std::string::npos);
    CHECK(err("--pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 1 "
              "--pipeline-model-parallel-layout Et|tL")
              .find("cannot be combined with --decoder-first-pipeline-num-layers") !=
          std::string::npos);
    CHECK(err("--pipeline-model-parallel-size 2 --account-for-loss-in-pipeline-split "
              "--pipeline-model-parallel-layout Et|tL")
              .find("cannot be combined with --account-for-loss-in-pipeline-split") !=
          std::string::npos);
}

TEST_CASE("--moe-layer-freq: leading dense layers become model.dense_layers") {
    std::vector<std::string> w;
    // DeepSeek-V3: 3 dense layers, then 58 MoE layers.
    CHECK(contains(
        megatron_args_to_overrides("--num-layers 61 --moe-layer-freq \"([0]*3+[1]*58)\"", w),
        "model.dense_layers=3"));
    CHECK(contains(megatron_args_to_overrides("--moe-layer-freq [0,0,1,1]", w),
                   "model.dense_layers=2"));
    // Every layer MoE: nothing to override.
    CHECK(megatron_args_to_overrides("--moe-layer-freq 1", w).empty());
    const auto err = [&](const std::string& args) {
        return error_of([&] { megatron_args_to_overrides(args, w); });
    };
    CHECK(err("--moe-layer-freq 2").find("MoE on every k-th layer only is not modelled") !=
          std::string::npos);
    CHECK(err("--moe-layer-freq [0,1,0,1]")
              .find("dense layers after the first MoE layer are not modelled") !=
          std::string::npos);
    CHECK(err("--moe-layer-freq [0,0]").find("no MoE layer") != std::string::npos);
    CHECK(err("--num-layers 4 --moe-layer-freq ([0]*1+[1]*2)")
              .find("gives 3 layers, but --num-layers is 4") != std::string::npos);
    CHECK(err("--moe-layer-freq [0,2]").find("entries must be 0 or 1") != std::string::npos);
}
