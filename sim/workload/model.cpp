#include "workload/model.hpp"

#include <algorithm>
#include <memory>
#include <optional>

namespace cs::workload {

const char* precision_name(Precision p) {
    return name_of(kPrecisionNames, p).data();
}

const char* recompute_name(Recompute r) {
    return name_of(kRecomputeNames, r).data();
}

const char* attention_name(Attention a) {
    return name_of(kAttentionNames, a).data();
}

namespace {

// The keys of a model mapping, each unset until some file or the inline mapping gives it. The
// inline keys are read after the `from` file, so they override it.
struct ModelKeys {
    std::optional<std::string> name, family, norm, activation;
    std::optional<int> layers, hidden_size, attention_heads, kv_heads, head_dim, ffn_hidden_size,
        vocab_size, position_embeddings, experts, top_k, moe_ffn_hidden_size, shared_experts,
        dense_layers;
    std::optional<bool> tied_embeddings, bias, rotary, dropout;
};

void read_int(const config::Reader& r, const char* key, std::optional<int>& out, int min_value,
              std::int64_t max_value = config::kMaxCount) {
    if (!r.has(key)) return;
    const std::int64_t v = r.count(key, min_value);
    if (v > max_value)
        r.fail(key,
               "must be at most " + std::to_string(max_value) + ", found " + std::to_string(v));
    out = static_cast<int>(v);
}

// Work grows with the layer count (plans, memory, pipeline chunks walk the layers); a million is
// about ten thousand times the deepest published model and takes under a second.
constexpr std::int64_t kMaxLayers = 1'000'000;

void read_keys(const config::Reader& r, ModelKeys& k) {
    if (r.has("name")) k.name = r.string("name");
    if (r.has("family")) k.family = r.choice("family", {"gpt", "llama", "moe"});
    if (r.has("norm")) k.norm = r.choice("norm", {"layernorm", "rmsnorm"});
    if (r.has("activation")) k.activation = r.choice("activation", {"gelu", "swiglu"});
    read_int(r, "layers", k.layers, 1, kMaxLayers);
    read_int(r, "hidden_size", k.hidden_size, 1);
    read_int(r, "attention_heads", k.attention_heads, 1);
    read_int(r, "kv_heads", k.kv_heads, 1);
    read_int(r, "head_dim", k.head_dim, 1);
    read_int(r, "ffn_hidden_size", k.ffn_hidden_size, 1);
    read_int(r, "vocab_size", k.vocab_size, 0);
    read_int(r, "position_embeddings", k.position_embeddings, 0);
    read_int(r, "experts", k.experts, 0);
    read_int(r, "top_k", k.top_k, 1);
    read_int(r, "moe_ffn_hidden_size", k.moe_ffn_hidden_size, 1);
    read_int(r, "shared_experts", k.shared_experts, 0);
    read_int(r, "dense_layers", k.dense_layers, 0);
    if (r.has("tied_embeddings")) k.tied_embeddings = r.boolean_or("tied_embeddings", false);
    if (r.has("bias")) k.bias = r.boolean_or("bias", false);
    if (r.has("rotary")) k.rotary = r.boolean_or("rotary", false);
    if (r.has("dropout")) k.dropout = r.boolean_or("dropout", false);
}

std::vector<std::string> bundled_names(const std::filesystem::path& dir) {
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec))
        if (e.path().extension() == ".yaml") names.push_back(e.path().stem().string());
    std::sort(names.begin(), names.end());
    return names;
}

// Resolves `from:`: a value naming a file (a '/' or a .yaml suffix) is relative to the document;
// a bare name is a bundled model.
std::filesystem::path resolve_from(const config::Reader& r) {
    const std::string from = r.string("from");
    const bool is_path = from.find('/') != std::string::npos ||
                         (from.size() > 5 && from.substr(from.size() - 5) == ".yaml");
    if (is_path) return r.path("from");
    const auto dir = bundled_models_dir(r.document().folder);
    if (dir.empty())
        r.fail("from", "no bundled model folder (workloads/models) found above " +
                           r.document().folder.string() + "; give a path such as models/" + from +
                           ".yaml");
    const auto file = dir / (from + ".yaml");
    std::error_code ec;
    if (!std::filesystem::exists(file, ec)) {
        r.fail("from", "unknown bundled model \"" + from +
                           "\"; bundled models: " + config::join_alternatives(bundled_names(dir)));
    }
    return file;
}

// Cross-key errors are reported at the key in the inline mapping when it was given there, else at
// the model mapping itself.
[[noreturn]] void fail_at(const config::Reader& model, const char* key,
                          const std::string& message) {
    if (model.has(key)) model.fail(key, message);
    model.fail_here(message);
}

// The value of a key the model needs, or an error naming it.
int required(const config::Reader& model, const std::optional<int>& v, const char* key) {
    if (!v) fail_at(model, key, std::string("missing '") + key + "'");
    return v.value_or(0);
}

// The routed and shared experts of an MoE model (none without `experts`).
void set_experts(const config::Reader& model, const ModelKeys& k, ModelSpec& m) {
    m.experts = k.experts.value_or(0);
    if (m.family == "moe" && m.experts == 0)
        fail_at(model, "experts", "family moe needs 'experts' (the number of routed experts, > 0)");
    if (m.experts == 0) {
        for (const char* key : {"top_k", "moe_ffn_hidden_size", "shared_experts", "dense_layers"})
            if (model.has(key)) model.fail(key, std::string("'") + key + "' needs 'experts' > 0");
    } else {
        m.top_k = required(model, k.top_k, "top_k");
        if (m.top_k > m.experts)
            fail_at(model, "top_k",
                    "top_k " + std::to_string(m.top_k) + " exceeds experts " +
                        std::to_string(m.experts));
        m.shared_experts = k.shared_experts.value_or(0);
        m.dense_layers = k.dense_layers.value_or(0);
        if (m.dense_layers >= m.layers)
            fail_at(model, "dense_layers",
                    "dense_layers " + std::to_string(m.dense_layers) + " leaves no MoE layer in " +
                        std::to_string(m.layers) + " layers");
    }
}

// The dense MLP width: ffn_hidden_size, gpt's 4h, or an MoE model's expert width.
void set_ffn_width(const config::Reader& model, const ModelKeys& k, ModelSpec& m) {
    const bool gpt = m.family == "gpt";
    // Dense MLP width: gpt defaults to 4h. Llama's own rule (8h/3 scaled by a multiplier and
    // rounded to a multiple) has per-model constants, so llama and moe models state it.
    if (k.ffn_hidden_size) {
        m.ffn_hidden_size = *k.ffn_hidden_size;
    } else if (gpt) {
        // 4 x hidden_size must still fit an int (it wraps negative past 536870911).
        if (m.hidden_size > config::kMaxCount / 4)
            fail_at(model, "hidden_size",
                    "hidden_size " + std::to_string(m.hidden_size) +
                        " is too large for the default ffn_hidden_size = 4 x "
                        "hidden_size (at most " +
                        std::to_string(config::kMaxCount / 4) + "); give ffn_hidden_size");
        m.ffn_hidden_size = 4 * m.hidden_size;
    } else if (m.experts > 0 && m.dense_layers == 0 && k.moe_ffn_hidden_size) {
        m.ffn_hidden_size = *k.moe_ffn_hidden_size;
    } else {
        fail_at(model, "ffn_hidden_size",
                "family " + m.family +
                    " needs 'ffn_hidden_size' (the MLP width; gpt defaults to "
                    "4 x hidden_size)");
    }
}

}  // namespace

std::filesystem::path bundled_models_dir(const std::filesystem::path& start) {
    std::error_code ec;
    auto dir = std::filesystem::absolute(start, ec);
    if (ec) return {};
    dir = dir.lexically_normal();
    while (true) {
        const auto candidate = dir / "workloads" / "models";
        if (std::filesystem::is_directory(candidate, ec)) return candidate;
        if (dir.filename() == "workloads" && std::filesystem::is_directory(dir / "models", ec))
            return dir / "models";
        if (!dir.has_parent_path() || dir.parent_path() == dir) return {};
        dir = dir.parent_path();
    }
}

ModelSpec parse_model(const config::Reader& model, std::filesystem::path* file_read,
                      config::DocumentCache* documents) {
    ModelKeys k;
    std::string file_stem;
    if (model.has("from")) {
        const auto file = resolve_from(model);
        if (file_read) *file_read = file;
        // Read through const nodes only, so a cached tree serves every load as it is.
        const auto base =
            documents ? documents->load(file)
                      : std::make_shared<const config::Document>(config::load_document(file));
        const config::Reader base_reader = config::root_reader(*base);
        read_keys(base_reader, k);
        base_reader.finish();  // a model file may not itself use `from`
        file_stem = file.stem().string();
    }
    read_keys(model, k);
    model.finish();

    ModelSpec m;
    m.family = k.family.value_or("gpt");
    m.name = k.name ? *k.name : (file_stem.empty() ? "custom" : file_stem);
    const bool gpt = m.family == "gpt";
    m.layers = required(model, k.layers, "layers");
    m.hidden_size = required(model, k.hidden_size, "hidden_size");
    m.attention_heads = required(model, k.attention_heads, "attention_heads");
    m.kv_heads = k.kv_heads.value_or(m.attention_heads);
    if (!k.head_dim && m.hidden_size % m.attention_heads != 0)
        fail_at(model, "attention_heads",
                "hidden_size " + std::to_string(m.hidden_size) +
                    " is not a multiple of attention_heads " + std::to_string(m.attention_heads) +
                    "; give head_dim");
    m.head_dim = k.head_dim.value_or(m.hidden_size / m.attention_heads);
    if (m.attention_heads % m.kv_heads != 0)
        fail_at(model, "kv_heads",
                "attention_heads " + std::to_string(m.attention_heads) +
                    " is not a multiple of kv_heads " + std::to_string(m.kv_heads));
    m.vocab_size = k.vocab_size.value_or(0);
    m.position_embeddings = k.position_embeddings.value_or(0);
    m.norm = (k.norm ? *k.norm == "layernorm" : gpt) ? Norm::LayerNorm : Norm::RmsNorm;
    m.activation =
        (k.activation ? *k.activation == "gelu" : gpt) ? Activation::Gelu : Activation::SwiGlu;
    m.bias = k.bias.value_or(gpt);
    m.tied_embeddings = k.tied_embeddings.value_or(gpt);
    m.rotary = k.rotary.value_or(!gpt && m.position_embeddings == 0);
    m.dropout = k.dropout.value_or(m.norm == Norm::LayerNorm);
    if (m.rotary && m.position_embeddings > 0)
        fail_at(model, "rotary",
                "rotary: true with position_embeddings " + std::to_string(m.position_embeddings) +
                    ": a model has learned positions or rotary embeddings, not both");

    set_experts(model, k, m);
    set_ffn_width(model, k, m);
    if (m.experts > 0) m.moe_ffn_hidden_size = k.moe_ffn_hidden_size.value_or(m.ffn_hidden_size);
    return m;
}

}  // namespace cs::workload
