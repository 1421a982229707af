#include "workload/memory.hpp"

#include <algorithm>
#include <cmath>

#include "core/errors.hpp"
#include "workload/flops.hpp"

namespace cs::workload {
namespace {

using I = std::int64_t;

// Optimizer state per owned parameter: Adam's m and v (fp32), plus in mixed precision the fp32
// master weight, plus in fp16 the fp32 copy of the gradients the optimizer steps on (Megatron-LM's
// distributed-optimizer table: fp16 4 + 16/d, bf16 6 + 12/d, fp32 8 + 8/d bytes per parameter).
double optimizer_bytes_per_parameter(Precision precision) {
    if (precision == Precision::Fp32) return 4 + 4;
    return precision == Precision::Fp16 ? 4 + 4 + 4 + 4 : 4 + 4 + 4;
}

// Bytes per token of the activations an MLP of width f stores beyond its input: the first
// GEMM's output and the activation's output (SwiGLU: gate and up outputs, then their product;
// eager PyTorch's silu keeps its own output for the product's backward too).
double mlp_activation_bytes_per_token(const ModelSpec& m, double f, bool eager) {
    if (m.activation != Activation::SwiGlu) return 4 * f;
    return eager ? 8 * f : 6 * f;
}

Bytes ceil_bytes(double b) {
    return Bytes{static_cast<I>(std::ceil(b))};
}

// Parameters of one GPU split into the dense part (sharded over dp by the distributed optimizer)
// and the routed experts (sharded over the expert-data-parallel replicas, dp / ep).
struct Parameters {
    I dense = 0;
    I experts = 0;
};

Parameters stage_parameters(const ModelSpec& m, const ParallelLayout& layout, int first_layer,
                            int layers_on_stage, bool has_embedding, bool has_output) {
    const I tp = layout.tp;
    const I norms = 2 * final_norm_parameter_count(m);  // the two norms of a layer, replicated
    Parameters p;
    // Sums of up to a million layers of a (syntactically valid) huge model can pass 2^63.
    const auto add = [](I& sum, I v) {
        if (__builtin_add_overflow(sum, v, &sum))
            throw ConfigError(
                "model: one pipeline stage would hold more than 2^63 parameters; the model is too "
                "large to simulate (fewer or smaller layers, or more pipeline stages)");
    };
    for (int i = 0; i < layers_on_stage; ++i) {
        const bool moe = is_moe_layer(m, first_layer + i);
        const I all = layer_parameter_count(m, moe);
        if (moe) {
            const I routed = routed_expert_parameter_count(m);
            const I router = I{m.hidden_size} * m.experts;  // replicated
            add(p.experts, routed / (tp * layout.ep));
            add(p.dense, (all - routed - router - norms) / tp + router + norms);
        } else {
            add(p.dense, (all - norms) / tp + norms);
        }
    }
    const I word = I{m.vocab_size} * m.hidden_size;
    if (has_embedding) add(p.dense, word / tp + I{m.position_embeddings} * m.hidden_size);
    if (has_output) {
        // An untied output layer has its own weight; a tied one is a copy of the word embedding
        // on the last stage when the embedding sits on another stage (Megatron-LM keeps both in
        // sync with an all-reduce).
        if (!m.tied_embeddings || !has_embedding) add(p.dense, word / tp);
        add(p.dense, final_norm_parameter_count(m));
    }
    return p;
}

// The parameters of `p` whose optimizer state one GPU owns (see optimizer_parameters_per_gpu).
double owned_parameters(const Parameters& p, const ParallelLayout& layout) {
    double dense_shards = 1, expert_shards = 1;
    if (layout.distributed_optimizer) {
        // Sharded over the shard group (dp, or the HSDP group inside it) and cp.
        dense_shards = static_cast<double>(layout.shard_group_size()) * layout.cp;
        expert_shards = std::max(1.0, dense_shards / layout.ep);
    }
    return static_cast<double>(p.dense) / dense_shards +
           static_cast<double>(p.experts) / expert_shards;
}

}  // namespace

std::vector<std::int64_t> unit_parameters_per_gpu(const ModelSpec& m, const ParallelLayout& layout,
                                                  int first_layer, int layers, bool has_embedding,
                                                  bool has_output) {
    std::vector<std::int64_t> units;
    units.reserve(static_cast<std::size_t>(std::max(layers, 0)));
    for (int i = 0; i < layers; ++i) {
        const auto p = stage_parameters(m, layout, first_layer + i, 1, has_embedding && i == 0,
                                        has_output && i == layers - 1);
        units.push_back(p.dense + p.experts);
    }
    return units;
}

std::optional<ShardedStates> sharded_model_states(const ExperimentSpec& spec,
                                                  std::int64_t largest_unit, double parameters) {
    const auto& l = spec.layout;
    const double n = l.shard_group_size();
    if (l.sharding < Sharding::Gradients || n <= 1) return std::nullopt;
    const double unit = static_cast<double>(largest_unit);
    const double w = weight_bytes_per_parameter(spec.training.precision);
    const double g = gradient_bytes_per_parameter(spec.training.precision);
    ShardedStates r;
    // The gradient shard, and one unit's unsharded gradients before their reduce-scatter.
    r.gradients = g * parameters / n + g * unit;
    r.parameters = w * parameters;
    if (l.sharding == Sharding::Parameters) {
        // The parameter shard, plus the gathered units: the one computing and the one prefetched
        // (resharded after forward), or every unit held from its forward to its backward.
        const double gathered =
            l.reshard_after_forward ? (l.shard_prefetch ? 2 : 1) * unit : parameters;
        r.parameters = w * parameters / n + w * gathered;
    }
    return r;
}

double gradient_bytes_per_parameter(Precision precision) {
    return precision == Precision::Fp16 ? 2 : 4;
}

double weight_bytes_per_parameter(Precision precision) {
    return precision == Precision::Fp32 ? 4 : 2;
}

Bytes layer_activation_bytes(const ModelSpec& m, const ParallelLayout& layout,
                             const TrainingSpec& training, bool moe_layer, Framework framework) {
    const double t = layout.tp;
    const double s = static_cast<double>(training.seq_length) / layout.cp;
    const double b = training.micro_batch_size;
    const double h = m.hidden_size;
    const double sb = s * b;
    const bool sp = layout.sequence_parallel && layout.tp > 1;
    const bool eager = framework == Framework::Pytorch;
    if (training.recompute == Recompute::Full) return ceil_bytes(2 * sb * h / (sp ? t : 1));

    // Kept whole by every TP rank unless sequence parallel: the two norm inputs (2h each), the
    // QKV and MLP inputs (2h each) and the two dropout masks (1 byte each): 10·sbh (8·sbh for a
    // model without dropout, ModelSpec::dropout).
    const double replicated = (m.dropout ? 10 : 8) * h;
    // Split over TP ranks: Q and K (2 bytes each), V, the projection input, and the MLP's
    // intermediate tensors. GPT: 8h + 16h = 24h.
    const double q = static_cast<double>(m.attention_heads) * m.head_dim;
    const double kv = static_cast<double>(m.kv_heads) * m.head_dim;
    double split = 4 * q + 4 * kv;
    // Eager PyTorch's rotate-half rotary embedding keeps its inputs (the qkv output: q and k
    // before rotation) and the rotated halves for its backward beside the rotated q and k the
    // attention keeps; Megatron-LM's fused RoPE needs only the tables.
    if (m.rotary && eager) split += 4 * q + 4 * kv;
    if (moe_layer) {
        // Each token is dispatched to top_k experts, whose inputs and intermediates are stored;
        // eager PyTorch (and Megatron-LM's unpermutation with the routing weights) keeps the
        // experts' outputs for the weights' gradient, and the router its fp32 scores.
        const double f = m.moe_ffn_hidden_size;
        split += m.top_k * (4 * h + mlp_activation_bytes_per_token(m, f, eager)) +
                 m.shared_experts * mlp_activation_bytes_per_token(m, f, eager);
        // The router's fp32 softmax output and the chosen experts' indices (64-bit), kept whole
        // on every TP rank.
        split += (4.0 * m.experts + 8.0 * m.top_k) * t;
    } else {
        split += mlp_activation_bytes_per_token(m, m.ffn_hidden_size, eager);
    }
    double per_token = sp ? (replicated + split) / t : replicated + split / t;
    double total = sb * per_token;
    // Unfused attention keeps the softmax output (2 bytes), its dropout mask (1) and the dropout
    // output (2) per score: 5·a·s²·b, split over TP ranks (Korthikanti Table 2); with context
    // parallelism each rank scores its s/cp queries against all s keys. Selective recomputation
    // recomputes them instead. A flash-attention kernel stores no scores, only the
    // per-row log-sum-exp of the softmax (4 bytes per head and token).
    if (training.recompute == Recompute::None) {
        if (training.attention == Attention::Unfused)
            total += 5.0 * m.attention_heads * s * training.seq_length * b / t;
        else
            total += 4.0 * m.attention_heads * s * b / t;
    }
    return ceil_bytes(total);
}

LossBuffers loss_buffer_bytes(const ModelSpec& m, const ParallelLayout& layout,
                              const TrainingSpec& training, Framework framework) {
    const double logits = static_cast<double>(training.micro_batch_size) * training.seq_length /
                          layout.cp * std::ceil(static_cast<double>(m.vocab_size) / layout.tp);
    LossBuffers r;
    r.held = ceil_bytes(4 * logits);
    r.transient = ceil_bytes((framework == Framework::Pytorch ? 4 + 4 : 2) * logits);
    return r;
}

std::int64_t parameters_per_gpu(const ModelSpec& m, const ParallelLayout& layout, int first_layer,
                                int layers_on_stage, bool has_embedding, bool has_output) {
    const auto p =
        stage_parameters(m, layout, first_layer, layers_on_stage, has_embedding, has_output);
    return p.dense + p.experts;
}

std::int64_t optimizer_parameters_per_gpu(const ModelSpec& m, const ParallelLayout& layout,
                                          int first_layer, int layers_on_stage, bool has_embedding,
                                          bool has_output) {
    const auto p =
        stage_parameters(m, layout, first_layer, layers_on_stage, has_embedding, has_output);
    return static_cast<std::int64_t>(std::ceil(owned_parameters(p, layout)));
}

namespace {

// The framework whose kernels (and so saved tensors and buffers) the experiment runs.
Framework framework_of(const ExperimentSpec& spec) {
    return spec.compute.framework == Framework::None ? spec.compute.roofline.framework
                                                     : spec.compute.framework;
}

// What the peak holds beyond the activations of the held chunks, on a GPU holding `layers`
// (first, count) ranges and, with `has_output`, the output layer: the loss's transient buffers
// (loss_buffer_bytes) and, with full recomputation, the activations of the one layer being
// recomputed during its backward (its stored input stays).
double transient_activations(const ExperimentSpec& spec, const std::vector<LayerRange>& layers,
                             bool has_output) {
    const Framework fw = framework_of(spec);
    double transient = 0;
    if (has_output && spec.model.vocab_size > 0)
        transient += static_cast<double>(
            loss_buffer_bytes(spec.model, spec.layout, spec.training, fw).transient.value);
    if (spec.training.recompute == Recompute::Full) {
        TrainingSpec plain = spec.training;
        plain.recompute = Recompute::None;
        double largest = 0;
        for (const LayerRange& c : layers)
            for (int i = c.first; i < c.first + c.count; ++i)
                largest = std::max(largest, static_cast<double>(
                                                layer_activation_bytes(
                                                    spec.model, spec.layout, plain,
                                                    is_moe_layer(spec.model, i), fw)
                                                    .value));
        transient += largest;
    }
    return transient;
}

// The memory of one GPU holding parameters `p` (the largest of its FSDP units: `largest_unit`)
// and `activations` bytes of activations at its peak (transients included).
MemoryBreakdown memory_of(const ExperimentSpec& spec, const Parameters& p, double activations,
                          std::int64_t largest_unit) {
    const auto& layout = spec.layout;
    const double dense = static_cast<double>(p.dense);
    const double experts = static_cast<double>(p.experts);
    const double weight_bytes = weight_bytes_per_parameter(spec.training.precision);
    double parameters = weight_bytes * (dense + experts);
    double gradients = gradient_bytes_per_parameter(spec.training.precision) * (dense + experts);
    const double optimizer_states =
        optimizer_bytes_per_parameter(spec.training.precision) * owned_parameters(p, layout);
    const auto sharded = sharded_model_states(spec, largest_unit, dense + experts);
    if (sharded) {
        parameters = sharded->parameters;
        gradients = sharded->gradients;
    }
    // Eager PyTorch with fp32 main gradients: autograd writes each parameter's gradient into its
    // 16-bit .grad, added to the main gradient after each microbatch and kept to the optimizer
    // step (the measured peaks of the public H200 runs, 20 bytes per parameter with Adam).
    // Megatron-LM accumulates into the main gradient inside the weight-gradient GEMMs.
    const bool temporary = framework_of(spec) == Framework::Pytorch &&
                           spec.compute.roofline.main_grads == MainGrads::Fp32 &&
                           spec.training.precision != Precision::Fp32 && !sharded;
    const double temporary_gradients = temporary ? weight_bytes * (dense + experts) : 0;
    // Found by fuzzing (docs/robustness.md): absurd sizes give more than 2^63 bytes, which Bytes
    // cannot hold.
    if (!(parameters + gradients + optimizer_states + activations + temporary_gradients < 9.2e18))
        throw ConfigError(spec.layout_where,
                          "the memory per GPU of this model and layout is more than 2^63 bytes "
                          "(about 9.2 EB); check the model's sizes, seq_length and "
                          "micro_batch_size");
    MemoryBreakdown r;
    r.parameters = ceil_bytes(parameters);
    r.gradients = ceil_bytes(gradients);
    r.optimizer_states = ceil_bytes(optimizer_states);
    r.activations = ceil_bytes(activations);
    r.temporary_gradients = ceil_bytes(temporary_gradients);
    r.total = r.parameters + r.gradients + r.optimizer_states +
              std::max(r.activations, r.temporary_gradients);
    return r;
}

}  // namespace

MemoryBreakdown memory_per_gpu(const ExperimentSpec& spec, int stage, int layers_on_stage,
                               int inflight_microbatches, bool has_embedding, bool has_output) {
    const auto& m = spec.model;
    const int first_layer = stage * layers_on_stage;
    double activations = 0;
    for (int i = 0; i < layers_on_stage; ++i)
        activations += static_cast<double>(
            layer_activation_bytes(m, spec.layout, spec.training, is_moe_layer(m, first_layer + i))
                .value);
    activations *= inflight_microbatches;
    activations += transient_activations(spec, {{first_layer, layers_on_stage}}, has_output);
    std::int64_t largest_unit = 0;
    for (const auto u : unit_parameters_per_gpu(m, spec.layout, first_layer, layers_on_stage,
                                                has_embedding, has_output))
        largest_unit = std::max(largest_unit, u);
    return memory_of(
        spec,
        stage_parameters(m, spec.layout, first_layer, layers_on_stage, has_embedding, has_output),
        activations, largest_unit);
}

MemoryBreakdown memory_per_gpu(const ExperimentSpec& spec, const std::vector<LayerRange>& chunks,
                               Bytes activations, bool has_embedding, bool has_output) {
    // The embedding and output flags go with one call only: a device holding both keeps tied
    // weights once (stage_parameters).
    Parameters sum = stage_parameters(spec.model, spec.layout, 0, 0, has_embedding, has_output);
    for (const LayerRange& c : chunks) {
        const auto p = stage_parameters(spec.model, spec.layout, c.first, c.count, false, false);
        if (__builtin_add_overflow(sum.dense, p.dense, &sum.dense) ||
            __builtin_add_overflow(sum.experts, p.experts, &sum.experts))
            throw ConfigError(
                "model: one pipeline stage would hold more than 2^63 parameters; the model is too "
                "large to simulate (fewer or smaller layers, or more pipeline stages)");
    }
    // The largest FSDP unit: the embedding folds into the device's first layer, the output layer
    // into its last (unit_parameters_per_gpu).
    std::int64_t largest_unit = 0;
    if (spec.layout.sharding >= Sharding::Gradients && !chunks.empty()) {
        const auto first = std::min_element(
            chunks.begin(), chunks.end(),
            [](const LayerRange& x, const LayerRange& y) { return x.first < y.first; });
        const auto last = std::max_element(chunks.begin(), chunks.end(),
                                           [](const LayerRange& x, const LayerRange& y) {
                                               return x.first + x.count < y.first + y.count;
                                           });
        for (auto c = chunks.begin(); c != chunks.end(); ++c)
            for (const auto u :
                 unit_parameters_per_gpu(spec.model, spec.layout, c->first, c->count,
                                         has_embedding && c == first, has_output && c == last))
                largest_unit = std::max(largest_unit, u);
    }
    return memory_of(spec, sum,
                     static_cast<double>(activations.value) +
                         transient_activations(spec, chunks, has_output),
                     largest_unit);
}

}  // namespace cs::workload
