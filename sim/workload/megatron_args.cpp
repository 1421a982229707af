#include "workload/megatron_args.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "core/errors.hpp"
#include "core/name_table.hpp"
#include "workload/experiment.hpp"

namespace cs::workload {
namespace {

const SourceLocation kWhere{"--megatron-args", 0, 0};

[[noreturn]] void bad(const std::string& message) {
    throw ConfigError(kWhere, message);
}

// Shell-like splitting: whitespace separates, quotes group, a backslash escapes the next
// character (so "\\\n" continuations vanish).
std::vector<std::string> split_words(const std::string& text) {
    std::vector<std::string> words;
    std::string cur;
    bool in_word = false;
    char quote = 0;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (quote) {
            if (c == quote)
                quote = 0;
            else
                cur += c;
            continue;
        }
        if (c == '\\' && i + 1 < text.size()) {
            const char next = text[++i];
            if (next != '\n') {
                cur += next;
                in_word = true;
            }
            continue;
        }
        if (c == '\'' || c == '"') {
            quote = c;
            in_word = true;
            continue;
        }
        if (std::isspace(static_cast<unsigned char>(c))) {
            if (in_word) words.push_back(cur);
            cur.clear();
            in_word = false;
            continue;
        }
        cur += c;
        in_word = true;
    }
    if (quote) bad(std::string("unterminated ") + quote + " quote");
    if (in_word) words.push_back(cur);
    return words;
}

bool is_flag(const std::string& w) {
    return w.size() > 2 && w[0] == '-' && w[1] == '-';
}

// Counts are ints, as in the YAML (config::kMaxCount): a larger value is refused here, naming the
// flag, before it reaches a product or the --set path that would name the key instead.
constexpr std::int64_t kMaxFlagCount = 2147483647;

std::int64_t positive(const std::string& flag, const std::string& value,
                      std::int64_t max = kMaxFlagCount) {
    std::size_t used = 0;
    long long v = 0;
    try {
        v = std::stoll(value, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used != value.size() || value.empty() || v < 1 || v > max)
        bad(flag + ": expected a positive integer" +
            (max == kMaxFlagCount ? " up to 2147483647" : std::string()) + ", found \"" + value +
            "\"");
    return v;
}

// Flags with a value that map one-to-one onto an integer key.
const std::map<std::string, std::string>& integer_flags() {
    static const std::map<std::string, std::string> m = {
        {"--tensor-model-parallel-size", "parallelism.tp"},
        {"--pipeline-model-parallel-size", "parallelism.pp"},
        {"--context-parallel-size", "parallelism.cp"},
        {"--expert-model-parallel-size", "parallelism.ep"},
        {"--num-virtual-stages-per-pipeline-rank", "parallelism.vpp"},
        {"--ddp-bucket-size", "parallelism.ddp_bucket_size"},
        {"--decoder-first-pipeline-num-layers", "parallelism.first_stage_layers"},
        {"--decoder-last-pipeline-num-layers", "parallelism.last_stage_layers"},
        {"--num-layers", "model.layers"},
        {"--hidden-size", "model.hidden_size"},
        {"--num-attention-heads", "model.attention_heads"},
        {"--ffn-hidden-size", "model.ffn_hidden_size"},
        {"--kv-channels", "model.head_dim"},
        {"--num-experts", "model.experts"},
        {"--moe-router-topk", "model.top_k"},
        {"--moe-ffn-hidden-size", "model.moe_ffn_hidden_size"},
        {"--seq-length", "training.seq_length"},
        {"--micro-batch-size", "training.micro_batch_size"},
        {"--global-batch-size", "training.global_batch_size"},
    };
    return m;
}

// Flags without a value that set a fixed key.
const std::map<std::string, std::string>& switch_flags() {
    static const std::map<std::string, std::string> m = {
        {"--sequence-parallel", "parallelism.sequence_parallel=true"},
        {"--use-distributed-optimizer", "parallelism.distributed_optimizer=true"},
        {"--overlap-grad-reduce", "parallelism.overlap_grad_reduce=true"},
        {"--overlap-param-gather", "parallelism.overlap_param_gather=true"},
        {"--tp-comm-overlap", "parallelism.tp_comm_overlap=true"},
        {"--overlap-p2p-communication", "parallelism.overlap_p2p_comm=true"},
        {"--fp16", "training.precision=fp16"},
        {"--bf16", "training.precision=bf16"},
        {"--recompute-activations", "training.recompute=selective"},
        {"--checkpoint-activations", "training.recompute=full"},
        {"--swiglu", "model.activation=swiglu"},
        {"--untie-embeddings-and-output-weights", "model.tied_embeddings=false"},
        {"--disable-bias-linear", "model.bias=false"},
        {"--use-flash-attn", "training.attention=flash"},
        {"--account-for-embedding-in-pipeline-split", "parallelism.account_for_embedding=true"},
        {"--account-for-loss-in-pipeline-split", "parallelism.account_for_loss=true"},
    };
    return m;
}

// Megatron-FSDP's --data-parallel-sharding-strategy (only with --use-megatron-fsdp, or its older
// name --use-custom-fsdp) and --num-distributed-optimizer-instances (HSDP: that many replicas of
// the sharded state). no_shard leaves the sharding to --use-distributed-optimizer (ZeRO-1).
void append_sharding(bool megatron_fsdp, const std::optional<std::string>& strategy,
                     const std::optional<std::int64_t>& instances, std::vector<std::string>& out,
                     std::vector<std::string>& warnings) {
    if (strategy && !megatron_fsdp)
        warnings.push_back("--data-parallel-sharding-strategy " + *strategy +
                           ": applies only with --use-megatron-fsdp (ignored, as Megatron-LM "
                           "does)");
    if (megatron_fsdp && !strategy)
        warnings.push_back(
            "--use-megatron-fsdp without --data-parallel-sharding-strategy: Megatron-LM's "
            "default no_shard shards nothing beyond --use-distributed-optimizer");
    if (megatron_fsdp && strategy && *strategy != "no_shard")
        out.push_back("parallelism.sharding=" + *strategy);
    if (instances && *instances > 1)
        out.push_back("parallelism.shard_replicas=" + std::to_string(*instances));
}

// Megatron-LM's --pipeline-model-parallel-layout (its PipelineParallelLayerLayout): virtual
// stages in model order separated by '|', each a run of E (embedding), t (transformer layer),
// m (multi-token-prediction layer) and L (loss); "X*n" repeats an item, parentheses group, commas
// and spaces are cosmetic. Returns the expanded stages, e.g. "Et*3|(tt|)*2L" -> {"Ettt", "tt",
// "ttL"}.
std::vector<std::string> expand_layout(const std::string& flag, const std::string& text) {
    constexpr std::size_t kMaxExpanded = 1 << 20;
    std::size_t pos = 0;
    const auto fail = [&](const std::string& what) {
        bad(flag + " \"" + text + "\": " + what +
            " (expected stages of E, t, m and L separated by '|', with (...) groups and *n "
            "repeats)");
    };
    std::function<std::string(bool)> sequence = [&](bool in_group) {
        std::string out;
        while (pos < text.size()) {
            const char c = text[pos];
            if (c == ' ' || c == ',' || c == '\t') {
                ++pos;
                continue;
            }
            if (c == ')') {
                if (!in_group) fail("a ')' without its '('");
                return out;
            }
            std::string item;
            if (c == 'E' || c == 't' || c == 'm' || c == 'L' || c == '|') {
                item = std::string(1, c);
                ++pos;
            } else if (c == '(') {
                ++pos;
                item = sequence(true);
                if (pos >= text.size()) fail("a '(' without its ')'");
                ++pos;  // the ')'
            } else {
                fail(std::string("unexpected '") + c + "' at character " + std::to_string(pos + 1));
            }
            std::int64_t repeat = 1;
            if (pos < text.size() && text[pos] == '*') {
                const auto start = ++pos;
                while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos])))
                    ++pos;
                if (pos == start) fail("'*' must be followed by a count");
                repeat = positive(flag, text.substr(start, pos - start));
            }
            if (static_cast<std::size_t>(repeat) > kMaxExpanded ||
                out.size() + item.size() * static_cast<std::size_t>(repeat) > kMaxExpanded)
                fail("expands to more than " + std::to_string(kMaxExpanded) + " items");
            for (std::int64_t r = 0; r < repeat; ++r)
                out += item;
        }
        if (in_group) fail("a '(' without its ')'");
        return out;
    };
    const std::string flat = sequence(false);
    std::vector<std::string> stages(1);
    for (const char c : flat) {
        if (c == '|')
            stages.emplace_back();
        else
            stages.back() += c;
    }
    return stages;
}

// The layout as overrides: transformer layers per virtual stage (parallelism.stage_layers) and
// the virtual stages per pipeline rank (parallelism.vpp) when there are more stages than ranks.
void append_layout(const std::string& flag, const std::string& text, std::optional<std::int64_t> pp,
                   std::optional<std::int64_t> layers, std::vector<std::string>& out,
                   std::vector<std::string>& warnings) {
    if (!pp) bad(flag + " needs --pipeline-model-parallel-size");
    const auto stages = expand_layout(flag, text);
    const auto n = static_cast<std::int64_t>(stages.size());
    const std::string head = flag + " \"" + text + "\": ";
    if (n % *pp != 0)
        bad(head + std::to_string(n) + " stages are not a multiple of the " + std::to_string(*pp) +
            " pipeline stages (--pipeline-model-parallel-size)");
    if (stages.front().empty() || stages.front()[0] != 'E')
        bad(head + "the first stage must start with the embedding (E)");
    if (stages.back().empty() || stages.back().back() != 'L')
        bad(head + "the last stage must end with the loss (L)");
    std::string list;
    std::int64_t total = 0, mtp = 0;
    for (std::int64_t s = 0; s < n; ++s) {
        const auto& st = stages[static_cast<std::size_t>(s)];
        std::int64_t t = 0;
        for (std::size_t k = 0; k < st.size(); ++k) {
            const char c = st[k];
            if (c == 't') ++t;
            if (c == 'm') ++mtp;
            // As Megatron-LM requires: the embedding opens the first stage, the loss closes the
            // last, each exactly once.
            if (c == 'E' && (s != 0 || k != 0))
                bad(head + "the embedding (E) must open the first stage, and only it");
            if (c == 'L' && (s != n - 1 || k + 1 != st.size()))
                bad(head + "the loss (L) must close the last stage, and only it");
        }
        total += t;
        list += (s ? "," : "") + std::to_string(t);
    }
    if (layers && total != *layers)
        bad(head + "holds " + std::to_string(total) +
            " transformer layers (t), but --num-layers is " + std::to_string(*layers));
    if (mtp > 0)
        warnings.push_back(
            head + "multi-token-prediction layers (m) are not modelled: " + std::to_string(mtp) +
            " left out (their stages hold no transformer layer for them)");
    out.push_back("parallelism.stage_layers=[" + list + "]");
    if (n > *pp) out.push_back("parallelism.vpp=" + std::to_string(n / *pp));
}

// Megatron-LM's --moe-layer-freq: an integer k (every k-th layer is MoE; only 1, all MoE, is
// expressible here) or a per-layer pattern of 0 (dense) and 1 (MoE), written as a Python list
// "[0,0,1,...]" or a product "([0]*3+[1]*58)". clustersim models leading dense layers
// (model.dense_layers), so the pattern must be zeros then ones.
void append_moe_layer_freq(const std::string& flag, const std::string& text,
                           std::optional<std::int64_t> layers, std::vector<std::string>& out) {
    std::string s;
    for (const char c : text)
        if (c != ' ' && c != '\t') s += c;
    const auto fail = [&](const std::string& why) {
        bad(flag + " \"" + text + "\": " + why +
            " (expected 1, or leading dense layers then MoE layers: \"([0]*3+[1]*58)\" or "
            "\"[0,0,0,1,...]\")");
    };
    if (s == "1") return;
    if (!s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
            return std::isdigit(static_cast<unsigned char>(c));
        }))
        fail("MoE on every k-th layer only is not modelled");
    std::vector<int> pattern;
    if (s.size() >= 2 && s.front() == '(' && s.back() == ')') {
        // ([a]*n+[b]*k+...)
        std::size_t pos = 1;
        while (pos < s.size() - 1) {
            if (s.compare(pos, 1, "[") != 0 || pos + 3 > s.size() || s[pos + 2] != ']' ||
                (s[pos + 1] != '0' && s[pos + 1] != '1'))
                fail("cannot read the pattern");
            const int bit = s[pos + 1] - '0';
            pos += 3;
            std::int64_t repeat = 1;
            if (s[pos] == '*') {
                const auto start = ++pos;
                while (pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos])))
                    ++pos;
                repeat = positive(flag, s.substr(start, pos - start));
                if (repeat > (1 << 20)) fail("too many layers");
            }
            pattern.insert(pattern.end(), static_cast<std::size_t>(repeat), bit);
            if (s[pos] == '+')
                ++pos;
            else if (pos != s.size() - 1)
                fail("cannot read the pattern");
        }
    } else if (s.size() >= 2 && s.front() == '[' && s.back() == ']') {
        for (std::size_t pos = 1; pos < s.size() - 1; ++pos) {
            if (s[pos] == ',') continue;
            if (s[pos] != '0' && s[pos] != '1') fail("entries must be 0 or 1");
            pattern.push_back(s[pos] - '0');
        }
    } else {
        fail("cannot read the pattern");
    }
    const auto first_moe = std::find(pattern.begin(), pattern.end(), 1);
    if (first_moe == pattern.end()) fail("no MoE layer");
    if (std::find(first_moe, pattern.end(), 0) != pattern.end())
        fail("dense layers after the first MoE layer are not modelled");
    if (layers && static_cast<std::int64_t>(pattern.size()) != *layers)
        fail("gives " + std::to_string(pattern.size()) + " layers, but --num-layers is " +
             std::to_string(*layers));
    out.push_back("model.dense_layers=" + std::to_string(first_moe - pattern.begin()));
}

// What the flags gave that turns into overrides only with other flags: read in one pass over
// the words, applied after it.
struct GivenFlags {
    std::map<std::string, std::int64_t> integers;  // integer flags as given
    std::set<std::string> switches;                // value-less flags as given
    std::optional<std::int64_t> layers_per_virtual_stage, query_groups, shared_size, max_positions,
        vocab;
    std::int64_t vocab_divisor = 128;  // Megatron-LM's --make-vocab-size-divisible-by default
    bool normalization_given = false;
    bool megatron_fsdp = false;
    std::optional<std::string> sharding_strategy;
    std::optional<std::int64_t> optimizer_instances;
    bool group_query_attention = false;
    std::string position_type = "learned_absolute";
    bool full_recompute = false;
    std::optional<std::string> recompute_method;
    std::optional<std::int64_t> recompute_layers;
    std::optional<std::string> layout, moe_layer_freq;

    std::optional<std::int64_t> get(const char* flag) const {
        const auto it = integers.find(flag);
        if (it == integers.end()) return std::nullopt;
        return it->second;
    }
    bool has(const char* flag) const { return switches.count(flag) > 0; }
};

// The flag at words[i] and the way to its value: `--flag=value`, else the next word unless it
// is another flag (value() then moves i onto it).
struct FlagArg {
    const std::vector<std::string>& words;
    std::size_t& i;
    std::string flag;
    std::optional<std::string> inline_value;

    bool has_next() const { return i + 1 < words.size() && !is_flag(words[i + 1]); }
    std::string value() {
        if (inline_value) return *inline_value;
        if (!has_next()) bad(flag + ": missing value");
        return words[++i];
    }
};

// The flags of training.*: recomputation, attention and FP8. False: not one of them.
bool read_training_flag(FlagArg& a, GivenFlags& g, std::vector<std::string>& out) {
    const std::string& flag = a.flag;
    if (flag == "--recompute-granularity") {
        const auto v = a.value();
        if (v != "full" && v != "selective")
            bad(flag + ": expected full or selective, found \"" + v + "\"");
        out.push_back("training.recompute=" + v);
        g.full_recompute = v == "full";
    } else if (flag == "--activations-checkpoint-method" || flag == "--recompute-method") {
        // uniform/block choose how full recomputation picks its layers (training.
        // recompute_method); the old spelling implies full recomputation.
        const auto v = a.value();
        if (v != "uniform" && v != "block")
            bad(flag + ": expected uniform or block, found \"" + v + "\"");
        if (flag == "--activations-checkpoint-method") {
            out.push_back("training.recompute=full");
            g.full_recompute = true;
        }
        g.recompute_method = v;
    } else if (flag == "--recompute-num-layers" || flag == "--activations-checkpoint-num-layers") {
        g.recompute_layers = positive(flag, a.value());
    } else if (flag == "--attention-backend") {
        // Megatron-LM's AttnBackend: flash, fused (cuDNN) and auto run a fused kernel that
        // keeps no score matrix; unfused and local materialise the scores.
        const auto v = a.value();
        if (v == "unfused" || v == "local")
            out.push_back("training.attention=unfused");
        else if (v == "flash" || v == "fused" || v == "auto")
            out.push_back("training.attention=flash");
        else
            bad(flag + ": expected flash, fused, unfused, local or auto, found \"" + v + "\"");
    } else if (flag == "--fp8-format") {
        const auto v = a.value();
        if (v != "e4m3" && v != "hybrid")
            bad(flag + ": expected e4m3 or hybrid, found \"" + v + "\"");
        out.push_back("training.precision=fp8");
    } else if (flag == "--fp8-recipe") {
        // Transformer Engine's recipes: delayed and tensorwise scale per tensor (the model's
        // tensorwise), blockwise by 1x128 / 128x128 blocks; mxfp8 is Blackwell's microscaling.
        const auto v = a.value();
        if (v == "delayed" || v == "tensorwise")
            out.push_back("training.fp8_recipe=tensorwise");
        else if (v == "blockwise")
            out.push_back("training.fp8_recipe=blockwise");
        else
            bad(flag + ": expected delayed, tensorwise or blockwise, found \"" + v + "\"" +
                (v == "mxfp8" ? " (mxfp8, Blackwell's microscaling, has no measured rate here)"
                              : ""));
    } else {
        return false;
    }
    return true;
}

// The flags of model.*: attention groups, vocabulary, normalization, positions and MoE layers.
// False: not one of them.
bool read_model_flag(FlagArg& a, GivenFlags& g, std::vector<std::string>& out,
                     std::vector<std::string>& warnings) {
    const std::string& flag = a.flag;
    if (flag == "--num-query-groups") {
        g.query_groups = positive(flag, a.value());
    } else if (flag == "--group-query-attention") {
        g.group_query_attention = true;
    } else if (flag == "--vocab-size") {
        g.vocab = positive(flag, a.value());
    } else if (flag == "--make-vocab-size-divisible-by") {
        g.vocab_divisor = positive(flag, a.value());
    } else if (flag == "--vocab-file" || flag == "--tokenizer-model") {
        a.value();
        warnings.push_back(flag +
                           ": the tokenizer is not read; the vocabulary size comes from "
                           "--vocab-size or the experiment's model.vocab_size");
    } else if (flag == "--normalization") {
        g.normalization_given = true;
        const auto v = a.value();
        if (v == "LayerNorm")
            out.push_back("model.norm=layernorm");
        else if (v == "RMSNorm")
            out.push_back("model.norm=rmsnorm");
        else
            bad(flag + ": expected LayerNorm or RMSNorm, found \"" + v + "\"");
    } else if (flag == "--position-embedding-type") {
        // Megatron-LM's choices; only learned_absolute has a table of its own.
        g.position_type = a.value();
        const auto& v = g.position_type;
        if (v != "learned_absolute" && v != "rope" && v != "mrope" && v != "relative" &&
            v != "none")
            bad(flag + ": expected learned_absolute, rope, mrope, relative or none, found \"" + v +
                "\"");
    } else if (flag == "--max-position-embeddings") {
        g.max_positions = positive(flag, a.value());
    } else if (flag == "--moe-layer-freq") {
        g.moe_layer_freq = a.value();
    } else if (flag == "--moe-shared-expert-intermediate-size") {
        g.shared_size = positive(flag, a.value());
    } else {
        return false;
    }
    return true;
}

// The flags of parallelism.*: virtual stages, Megatron-FSDP sharding, context parallelism and
// the pipeline layout. False: not one of them.
bool read_parallel_flag(FlagArg& a, GivenFlags& g, std::vector<std::string>& out) {
    const std::string& flag = a.flag;
    if (flag == "--num-layers-per-virtual-pipeline-stage") {
        g.layers_per_virtual_stage = positive(flag, a.value());
    } else if (flag == "--data-parallel-sharding-strategy") {
        g.sharding_strategy = a.value();
        const auto& v = *g.sharding_strategy;
        if (v != "no_shard" && v != "optim" && v != "optim_grads" && v != "optim_grads_params")
            bad(flag + ": expected no_shard, optim, optim_grads or optim_grads_params, found \"" +
                v + "\"");
    } else if (flag == "--use-megatron-fsdp" || flag == "--use-custom-fsdp") {
        if (a.inline_value) bad(flag + " takes no value");
        g.megatron_fsdp = true;
    } else if (flag == "--num-distributed-optimizer-instances") {
        g.optimizer_instances = positive(flag, a.value());
    } else if (flag == "--cp-comm-type") {
        // Transformer Engine's context-parallel communication (one value for every layer;
        // Megatron-LM also takes one per layer, which clustersim does not model).
        const auto v = a.value();
        if (!find_named(kCpCommTypeNames, v))
            bad(flag + ": expected p2p, a2a, allgather or a2a+p2p, found \"" + v + "\"");
        out.push_back("parallelism.cp_comm_type=" + v);
    } else if (flag == "--hierarchical-context-parallel-sizes") {
        // a2a+p2p: the all-to-all group size first, then the p2p ring's; the first is
        // cp_a2a_size (the product must be --context-parallel-size, checked by the layout).
        const auto first = a.value();
        out.push_back("parallelism.cp_a2a_size=" + std::to_string(positive(flag, first)));
        while (a.has_next())
            positive(flag, a.words[++a.i]);
    } else if (flag == "--pipeline-model-parallel-layout") {
        g.layout = a.value();
    } else {
        return false;
    }
    return true;
}

// One pass over the words: the overrides each flag gives alone go to `out`, the rest to the
// returned GivenFlags.
GivenFlags read_flags(const std::vector<std::string>& words, std::vector<std::string>& out,
                      std::vector<std::string>& warnings) {
    GivenFlags g;
    for (std::size_t i = 0; i < words.size(); ++i) {
        FlagArg a{words, i, words[i], std::nullopt};
        if (!is_flag(a.flag)) {
            warnings.push_back("ignored stray argument \"" + a.flag + "\" (not after a flag)");
            continue;
        }
        if (const auto eq = a.flag.find('='); eq != std::string::npos) {
            a.inline_value = a.flag.substr(eq + 1);
            a.flag = a.flag.substr(0, eq);
        }
        const std::string& flag = a.flag;
        if (const auto it = integer_flags().find(flag); it != integer_flags().end()) {
            // The bucket size counts parameters, which may pass an int.
            const auto v =
                positive(flag, a.value(), flag == "--ddp-bucket-size" ? INT64_MAX : kMaxFlagCount);
            out.push_back(it->second + "=" + std::to_string(v));
            g.integers[flag] = v;
        } else if (const auto sw = switch_flags().find(flag); sw != switch_flags().end()) {
            if (a.inline_value) bad(flag + " takes no value");
            out.push_back(sw->second);
            g.switches.insert(flag);
            if (flag == "--checkpoint-activations") g.full_recompute = true;
            if (flag == "--recompute-activations") g.full_recompute = false;
        } else if (!read_training_flag(a, g, out) && !read_model_flag(a, g, out, warnings) &&
                   !read_parallel_flag(a, g, out)) {
            // Unknown: consume its value, if any, so that it is not mistaken for a stray word.
            if (!a.inline_value && a.has_next()) ++i;
            warnings.push_back(flag + ": not used by clustersim (ignored)");
        }
    }
    return g;
}

// Recomputation's method and layer count, which Megatron-LM reads only for full recomputation.
void append_recompute(const GivenFlags& g, std::vector<std::string>& out,
                      std::vector<std::string>& warnings) {
    if (g.full_recompute) {
        if (g.recompute_method) out.push_back("training.recompute_method=" + *g.recompute_method);
        if (g.recompute_layers)
            out.push_back("training.recompute_layers=" + std::to_string(*g.recompute_layers));
    } else if (g.recompute_method || g.recompute_layers) {
        warnings.push_back(
            "--recompute-method / --recompute-num-layers without --recompute-granularity full: "
            "ignored, as Megatron-LM does");
    }
}

// The model keys that several flags decide together: key-value heads, positions, shared
// experts, Megatron-LM's defaults where the flags describe the model, top-k, the padded
// vocabulary.
void append_model(const GivenFlags& g, std::vector<std::string>& out,
                  std::vector<std::string>& warnings) {
    if (g.query_groups) {
        if (g.group_query_attention)
            out.push_back("model.kv_heads=" + std::to_string(*g.query_groups));
        else
            warnings.push_back(
                "--num-query-groups without --group-query-attention: ignored, as Megatron-LM "
                "does");
    }
    const auto seq = g.get("--seq-length");
    // Rotary embeddings in every layer (they cost kernels, and eager PyTorch's keep activations).
    if (g.position_type == "rope" || g.position_type == "mrope") out.push_back("model.rotary=true");
    if (g.position_type != "learned_absolute")
        out.push_back("model.position_embeddings=0");
    else if (g.max_positions || seq)
        out.push_back("model.position_embeddings=" +
                      std::to_string(g.max_positions ? *g.max_positions : *seq));
    if (g.shared_size) {
        const auto moe_ffn = g.get("--moe-ffn-hidden-size");
        if (!moe_ffn || *g.shared_size % *moe_ffn != 0)
            warnings.push_back("--moe-shared-expert-intermediate-size " +
                               std::to_string(*g.shared_size) +
                               ": needs --moe-ffn-hidden-size dividing it to count shared "
                               "experts (ignored)");
        else
            out.push_back("model.shared_experts=" + std::to_string(*g.shared_size / *moe_ffn));
    }
    // When the flags describe the model, Megatron-LM's defaults for the switches they leave out
    // apply too (they may differ from the experiment file's family defaults).
    if (const auto h = g.get("--hidden-size")) {
        const bool swiglu = g.has("--swiglu");
        if (!g.get("--ffn-hidden-size"))
            out.push_back("model.ffn_hidden_size=" +
                          std::to_string(swiglu ? (4 * *h * 2 / 3) / 64 * 64 : 4 * *h));
        if (!swiglu) out.push_back("model.activation=gelu");
        if (!g.normalization_given) out.push_back("model.norm=layernorm");
        if (!g.has("--disable-bias-linear")) out.push_back("model.bias=true");
        if (!g.has("--untie-embeddings-and-output-weights"))
            out.push_back("model.tied_embeddings=true");
        if (const auto heads = g.get("--num-attention-heads"); heads && !g.group_query_attention)
            out.push_back("model.kv_heads=" + std::to_string(*heads));
    }
    if (g.get("--num-experts") && !g.get("--moe-router-topk"))
        out.push_back("model.top_k=2");  // Megatron-LM's default
    if (g.vocab) {
        // Megatron-LM pads the vocabulary to a multiple of divisor x tp.
        const std::int64_t multiple =
            g.vocab_divisor * g.get("--tensor-model-parallel-size").value_or(1);
        out.push_back("model.vocab_size=" +
                      std::to_string((*g.vocab + multiple - 1) / multiple * multiple));
    }
}

// --pipeline-model-parallel-layout, which replaces every other way of splitting the layers (as
// in Megatron-LM).
void append_layout_flag(const GivenFlags& g, std::vector<std::string>& out,
                        std::vector<std::string>& warnings) {
    for (const char* other :
         {"--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
          "--num-virtual-stages-per-pipeline-rank"})
        if (g.get(other))
            bad(std::string("--pipeline-model-parallel-layout cannot be combined with ") + other);
    if (g.layers_per_virtual_stage)
        bad("--pipeline-model-parallel-layout cannot be combined with "
            "--num-layers-per-virtual-pipeline-stage");
    for (const char* other :
         {"--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"})
        if (g.has(other))
            bad(std::string("--pipeline-model-parallel-layout cannot be combined with ") + other +
                " (the layout places the embedding and loss itself)");
    append_layout("--pipeline-model-parallel-layout", *g.layout,
                  g.get("--pipeline-model-parallel-size"), g.get("--num-layers"), out, warnings);
}

// --num-layers-per-virtual-pipeline-stage as parallelism.vpp.
void append_virtual_stages(const GivenFlags& g, std::vector<std::string>& out) {
    const auto layers = g.get("--num-layers");
    const auto pp = g.get("--pipeline-model-parallel-size");
    if (!layers || !pp) {
        bad("--num-layers-per-virtual-pipeline-stage needs --num-layers and "
            "--pipeline-model-parallel-size to derive the virtual stages");
    }
    // Megatron-LM's rules (arguments.py): the two flags exclude each other, an uneven first
    // or last stage needs the chunk count itself, and the embedding and loss count as layers
    // when they are accounted for in the split.
    if (g.get("--num-virtual-stages-per-pipeline-rank"))
        bad("--num-layers-per-virtual-pipeline-stage and "
            "--num-virtual-stages-per-pipeline-rank cannot be set at the same time");
    if (g.get("--decoder-first-pipeline-num-layers") || g.get("--decoder-last-pipeline-num-layers"))
        bad("with --decoder-first-pipeline-num-layers or --decoder-last-pipeline-num-layers, "
            "give the virtual stages with --num-virtual-stages-per-pipeline-rank (as "
            "Megatron-LM requires)");
    const std::int64_t counted = *layers +
                                 (g.has("--account-for-embedding-in-pipeline-split") ? 1 : 0) +
                                 (g.has("--account-for-loss-in-pipeline-split") ? 1 : 0);
    const std::string what = counted == *layers
                                 ? std::to_string(*layers) + " layers"
                                 : std::to_string(counted) + " layers (" + std::to_string(*layers) +
                                       " with the embedding and/or loss counted as layers)";
    const std::int64_t per_stage = counted / *pp;
    const std::int64_t per_virtual = *g.layers_per_virtual_stage;
    if (counted % *pp != 0 || per_stage % per_virtual != 0)
        bad("--num-layers-per-virtual-pipeline-stage " + std::to_string(per_virtual) +
            " does not divide the " + what + " over " + std::to_string(*pp) +
            " pipeline stages evenly");
    out.push_back("parallelism.vpp=" + std::to_string(per_stage / per_virtual));
}

}  // namespace

std::string megatron_flag_of(const std::string& key) {
    for (const auto& [flag, k] : integer_flags())
        if (k == key) return flag;
    return {};
}

std::vector<std::string> megatron_args_to_overrides(const std::string& args,
                                                    std::vector<std::string>& warnings) {
    std::vector<std::string> out;
    const GivenFlags g = read_flags(split_words(args), out, warnings);
    append_sharding(g.megatron_fsdp, g.sharding_strategy, g.optimizer_instances, out, warnings);
    append_recompute(g, out, warnings);
    append_model(g, out, warnings);
    if (g.moe_layer_freq)
        append_moe_layer_freq("--moe-layer-freq", *g.moe_layer_freq, g.get("--num-layers"), out);
    if (g.layout) append_layout_flag(g, out, warnings);
    if (g.layers_per_virtual_stage) append_virtual_stages(g, out);
    return out;
}

}  // namespace cs::workload

namespace cs::workload {

std::string megatron_args_for(const ExperimentSpec& spec, MegatronSchedule schedule,
                              std::vector<std::string>* notes) {
    const auto& l = spec.layout;
    const auto& t = spec.training;
    std::vector<std::string> flags;
    const auto add = [&](const std::string& flag, std::int64_t value) {
        flags.push_back(flag + " " + std::to_string(value));
    };
    add("--tensor-model-parallel-size", l.tp);
    add("--pipeline-model-parallel-size", l.pp);
    if (l.cp > 1) add("--context-parallel-size", l.cp);
    // Context parallelism's exchange (Transformer Engine's; p2p is its default), with a2a+p2p's
    // group sizes: the all-to-all's first, the ring's second.
    if (l.cp > 1 && l.cp_comm_type != CpCommType::P2p)
        flags.push_back("--cp-comm-type " + std::string(name_of(kCpCommTypeNames, l.cp_comm_type)));
    if (l.cp > 1 && l.cp_comm_type == CpCommType::A2aP2p && l.cp_a2a_size > 0)
        flags.push_back("--hierarchical-context-parallel-sizes " + std::to_string(l.cp_a2a_size) +
                        " " + std::to_string(l.cp / l.cp_a2a_size));
    if (l.ep > 1) add("--expert-model-parallel-size", l.ep);
    if (schedule.in_megatron_lm && schedule.chunks > 1)
        add("--num-virtual-stages-per-pipeline-rank", schedule.chunks);
    if (l.sequence_parallel) flags.push_back("--sequence-parallel");
    add("--micro-batch-size", t.micro_batch_size);
    add("--global-batch-size", t.global_batch_size);
    add("--seq-length", t.seq_length);
    if (t.recompute == Recompute::Selective) flags.push_back("--recompute-granularity selective");
    if (t.recompute == Recompute::Full) {
        flags.push_back("--recompute-granularity full");
        flags.push_back(std::string("--recompute-method ") +
                        std::string(name_of(kRecomputeMethodNames, t.recompute_method)));
        add("--recompute-num-layers", t.recompute_layers);
    }
    if (t.precision == Precision::Bf16 || t.precision == Precision::Fp8) flags.push_back("--bf16");
    if (t.precision == Precision::Fp16) flags.push_back("--fp16");
    if (t.precision == Precision::Fp8) flags.push_back("--fp8-format hybrid");
    if (t.precision == Precision::Fp8 && t.fp8_recipe == Fp8Recipe::Blockwise)
        flags.push_back("--fp8-recipe blockwise");
    if (notes && t.precision == Precision::Fp8 && t.fp8_recipe == Fp8Recipe::Rowwise)
        notes->push_back(
            "Megatron-LM has no rowwise fp8 recipe (torchao's); the flags give Transformer "
            "Engine's default, delayed per-tensor scaling");
    switch (l.sharding) {
        case Sharding::None:
            break;
        case Sharding::Optimizer:
            flags.push_back("--use-distributed-optimizer");
            break;
        case Sharding::Gradients:
            flags.push_back("--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads");
            break;
        case Sharding::Parameters:
            flags.push_back(
                "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params");
            break;
    }
    if (l.hsdp() && l.sharding != Sharding::None)
        add("--num-distributed-optimizer-instances", l.dp / l.shard_size);
    // The overlaps the run models, each as its flag turns it on.
    if (l.overlap_grad_reduce) flags.push_back("--overlap-grad-reduce");
    if (l.overlap_param_gather) flags.push_back("--overlap-param-gather");
    if (l.tp_comm_overlap) flags.push_back("--tp-comm-overlap");
    if (l.overlap_p2p_comm) flags.push_back("--overlap-p2p-communication");
    if (notes && !schedule.in_megatron_lm)
        notes->push_back("Megatron-LM has no flag for the " + spec.schedule +
                         " schedule; the flags give its layout");
    std::string out;
    for (const auto& f : flags)
        out += (out.empty() ? "" : " ") + f;
    return out;
}

}  // namespace cs::workload
