#include "workload/flops.hpp"

namespace cs::workload {
namespace {

using I = std::int64_t;

I q_width(const ModelSpec& m) {
    return I{m.attention_heads} * m.head_dim;
}
I kv_width(const ModelSpec& m) {
    return I{m.kv_heads} * m.head_dim;
}
I norm_parameters(const ModelSpec& m) {
    return m.norm == Norm::LayerNorm ? 2 * I{m.hidden_size} : I{m.hidden_size};
}

// Weights and biases of one MLP of width f.
I mlp_parameters(const ModelSpec& m, I f) {
    const I h = m.hidden_size;
    const I up = m.activation == Activation::SwiGlu ? 2 * f : f;  // gate and up projections
    I p = h * up + f * h;
    if (m.bias) p += up + h;
    return p;
}
I mlp_matmul_weights(const ModelSpec& m, I f) {
    const I h = m.hidden_size;
    return (m.activation == Activation::SwiGlu ? 3 : 2) * h * f;
}

I attention_parameters(const ModelSpec& m) {
    const I h = m.hidden_size;
    I p = h * (q_width(m) + 2 * kv_width(m)) + q_width(m) * h;
    if (m.bias) p += q_width(m) + 2 * kv_width(m) + h;
    return p;
}

}  // namespace

bool is_moe_layer(const ModelSpec& m, int layer) {
    return m.experts > 0 && layer >= m.dense_layers;
}

int moe_layer_count(const ModelSpec& m) {
    return m.experts > 0 ? m.layers - m.dense_layers : 0;
}

std::int64_t routed_expert_parameter_count(const ModelSpec& m) {
    return I{m.experts} * mlp_parameters(m, m.moe_ffn_hidden_size);
}

std::int64_t layer_parameter_count(const ModelSpec& m, bool moe_layer) {
    I p = attention_parameters(m) + 2 * norm_parameters(m);
    if (moe_layer) {
        const I h = m.hidden_size;
        p += h * m.experts;  // router
        p += routed_expert_parameter_count(m);
        p += I{m.shared_experts} * mlp_parameters(m, m.moe_ffn_hidden_size);
    } else {
        p += mlp_parameters(m, m.ffn_hidden_size);
    }
    return p;
}

std::int64_t embedding_parameter_count(const ModelSpec& m) {
    return (I{m.vocab_size} + m.position_embeddings) * m.hidden_size;
}

std::int64_t output_parameter_count(const ModelSpec& m) {
    return m.tied_embeddings ? 0 : I{m.vocab_size} * m.hidden_size;
}

std::int64_t final_norm_parameter_count(const ModelSpec& m) {
    return norm_parameters(m);
}

std::int64_t parameter_count(const ModelSpec& m) {
    const int moe = moe_layer_count(m);
    return I{m.layers - moe} * layer_parameter_count(m, false) +
           I{moe} * layer_parameter_count(m, true) + embedding_parameter_count(m) +
           output_parameter_count(m) + final_norm_parameter_count(m);
}

std::int64_t active_parameter_count(const ModelSpec& m) {
    const int moe = moe_layer_count(m);
    const I inactive_per_layer = I{m.experts - m.top_k} * mlp_parameters(m, m.moe_ffn_hidden_size);
    return parameter_count(m) - I{moe} * inactive_per_layer;
}

std::int64_t layer_matmul_weights_per_token(const ModelSpec& m, bool moe_layer) {
    const I h = m.hidden_size;
    const I attention = h * (q_width(m) + 2 * kv_width(m)) + q_width(m) * h;
    if (!moe_layer) return attention + mlp_matmul_weights(m, m.ffn_hidden_size);
    return attention + h * m.experts +
           (I{m.top_k} + m.shared_experts) * mlp_matmul_weights(m, m.moe_ffn_hidden_size);
}

Flops attention_core_forward_flops(const ModelSpec& m, std::int64_t sequences,
                                   std::int64_t seq_length) {
    return Flops{4.0 * static_cast<double>(sequences) * static_cast<double>(seq_length) *
                 static_cast<double>(seq_length) * static_cast<double>(q_width(m))};
}

Flops layer_forward_flops(const ModelSpec& m, bool moe_layer, std::int64_t sequences,
                          std::int64_t seq_length) {
    const double tokens = static_cast<double>(sequences) * static_cast<double>(seq_length);
    const double gemm =
        2.0 * tokens * static_cast<double>(layer_matmul_weights_per_token(m, moe_layer));
    return Flops{gemm} + attention_core_forward_flops(m, sequences, seq_length);
}

Flops logits_forward_flops(const ModelSpec& m, std::int64_t sequences, std::int64_t seq_length) {
    return Flops{2.0 * static_cast<double>(sequences) * static_cast<double>(seq_length) *
                 static_cast<double>(m.hidden_size) * static_cast<double>(m.vocab_size)};
}

IterationFlops iteration_flops(const ModelSpec& m, std::int64_t global_batch,
                               std::int64_t seq_length, Recompute recompute) {
    const int moe = moe_layer_count(m);
    const double dense_fwd = layer_forward_flops(m, false, global_batch, seq_length).value;
    const double moe_fwd = layer_forward_flops(m, true, global_batch, seq_length).value;
    const double layers_fwd = (m.layers - moe) * dense_fwd + moe * moe_fwd;
    const double logits_fwd = logits_forward_flops(m, global_batch, seq_length).value;
    IterationFlops f;
    f.model = Flops{3.0 * (layers_fwd + logits_fwd)};
    double extra = 0;
    if (recompute == Recompute::Selective)
        extra = m.layers * attention_core_forward_flops(m, global_batch, seq_length).value;
    else if (recompute == Recompute::Full)
        extra = layers_fwd;
    f.hardware = Flops{f.model.value + extra};
    return f;
}

}  // namespace cs::workload
