#include "workload/plan.hpp"

#include "core/errors.hpp"

namespace cs::workload {

const char* group_kind_name(GroupKind g) {
    switch (g) {
        case GroupKind::Tp: return "tp";
        case GroupKind::Cp: return "cp";
        case GroupKind::Ep: return "ep";
        case GroupKind::Dp: return "dp";
    }
    return "?";
}

Time PassPlan::compute_time() const {
    Time t = Time::zero();
    for (const auto& s : steps)
        if (s.kind == Step::Kind::Compute) t += s.duration * s.repeat;
    return t;
}

Flops PassPlan::model_flops() const {
    Flops f;
    for (const auto& s : steps) f += Flops{s.model_flops.value * s.repeat};
    return f;
}

Flops PassPlan::hardware_flops() const {
    Flops f;
    for (const auto& s : steps) f += Flops{s.hardware_flops.value * s.repeat};
    return f;
}

namespace {

// Model FLOPs of one transformer layer's forward pass for one microbatch on the whole TP group:
// 2 FLOPs per multiply-add of every GEMM plus the attention score and context products.
//   QKV:        2 b s h (h + 2 kv_heads d)      with d = h / heads
//   scores+ctx: 4 b s^2 h
//   projection: 2 b s h^2
//   MLP:        2 b s h f x (3 for SwiGLU, 2 for GELU); MoE: x top_k experts (+ shared experts)
// For GPT (f = 4h, kv = heads) this is 24 b s h^2 + 4 b s^2 h (Narayanan et al. eq. 3's term).
double layer_forward_flops(const ModelSpec& m, const TrainingSpec& t, bool moe) {
    const double b = t.micro_batch_size, s = t.seq_length, h = m.hidden_size;
    const double d = h / m.attention_heads;
    const double qkv = 2 * b * s * h * (h + 2.0 * m.kv_heads * d);
    const double attn = 4 * b * s * s * h;
    const double proj = 2 * b * s * h * h;
    const double mats = m.activation == Activation::SwiGlu ? 3 : 2;
    double mlp = 0;
    if (moe) {
        mlp = 2 * b * s * h * m.moe_ffn_hidden_size * mats * (m.top_k + m.shared_experts);
        mlp += 2 * b * s * h * m.experts;  // router
    } else {
        mlp = 2 * b * s * h * m.ffn_hidden_size * mats;
    }
    return qkv + attn + proj + mlp;
}

// Parameters of one layer (weights and biases/norms), for gradient synchronisation.
double layer_parameters(const ModelSpec& m, bool moe) {
    const double h = m.hidden_size, d = h / m.attention_heads;
    const double mats = m.activation == Activation::SwiGlu ? 3 : 2;
    double p = h * (h + 2.0 * m.kv_heads * d) + h * h + 4 * h;  // attention + 2 norms
    if (moe)
        p += mats * h * m.moe_ffn_hidden_size * (m.experts + m.shared_experts) + h * m.experts;
    else
        p += mats * h * m.ffn_hidden_size;
    return p;
}

Step compute_step(const char* label, Time duration, double flops, int repeat = 1) {
    Step s;
    s.kind = Step::Kind::Compute;
    s.label = label;
    s.duration = duration;
    s.model_flops = Flops{flops};
    s.hardware_flops = Flops{flops};
    s.repeat = repeat;
    return s;
}

void add_if_positive(PassPlan& pass, const char* label, Time duration, Time overhead) {
    if (duration > Time::zero()) pass.steps.push_back(compute_step(label, duration + overhead, 0));
}

}  // namespace

IterationPlan plan_iteration(const ExperimentSpec& spec, int chunks, bool split_backward,
                             const std::function<int(int)>& device_of) {
    const auto& m = spec.model;
    const auto& l = spec.layout;
    const auto& t = spec.training;
    IterationPlan plan;
    plan.stages = l.pp;
    plan.chunks = chunks;
    plan.microbatches = t.microbatches(l);
    const int vstages = l.pp * chunks;
    if (m.layers % vstages != 0)
        throw ConfigError(spec.layout_where,
                          "'parallelism': layers (" + std::to_string(m.layers) +
                              ") must be divisible by pp x chunks = " + std::to_string(l.pp) +
                              " x " + std::to_string(chunks) + " = " + std::to_string(vstages) +
                              " so that every pipeline chunk gets the same number of layers");
    const int per_chunk = m.layers / vstages;
    const double group = static_cast<double>(l.tp) * l.cp;  // GPUs sharing one layer's work
    const int elem = 2;  // activations and gradients travel in 16-bit precision

    plan.virtual_stages.resize(static_cast<std::size_t>(vstages));
    for (int vs = 0; vs < vstages; ++vs) {
        ChunkPlan& c = plan.virtual_stages[static_cast<std::size_t>(vs)];
        c.first_layer = vs * per_chunk;
        c.layers = per_chunk;
        // Megatron's scatter/gather (and sequence parallelism) send 1/tp of the activation.
        c.activation_bytes = Bytes{static_cast<std::int64_t>(t.micro_batch_size) * t.seq_length /
                                   l.cp * m.hidden_size * elem / l.tp};
        double fwd_flops = 0;
        for (int layer = c.first_layer; layer < c.first_layer + per_chunk; ++layer) {
            const bool moe = m.experts > 0 && layer >= m.dense_layers;
            fwd_flops += layer_forward_flops(m, t, moe) / group;
        }
        if (spec.compute.kind != ComputeSpec::Kind::Profile)
            throw ConfigError(spec.layout_where,
                              "the roofline compute model is not available in this build; use "
                              "compute: {model: profile, ...}");
        const auto& p = spec.compute.profile;
        const Time oh = p.op_overhead;
        const bool first = vs == 0, last = vs == vstages - 1;
        if (first) add_if_positive(c.forward, "embedding", p.embedding_forward, oh);
        if (p.layer_forward) {
            auto f = compute_step("layer", *p.layer_forward + oh, fwd_flops / per_chunk, per_chunk);
            c.forward.steps.push_back(f);
            const Time bi = p.layer_backward ? *p.layer_backward : *p.layer_backward_input;
            const Time bw = p.layer_backward ? Time::zero() : *p.layer_backward_weight;
            if (split_backward && p.layer_backward)
                throw ConfigError(spec.schedule_where,
                                  "schedule '" + spec.schedule +
                                      "' splits the backward pass: give compute.layer_backward_input "
                                      "and compute.layer_backward_weight instead of layer_backward");
            const double bflops = 2 * fwd_flops / per_chunk;
            // A full backward is input + weight gradient; weight-gradient GEMMs carry half the
            // backward FLOPs.
            c.backward_input.steps.push_back(compute_step("layer", bi + oh, bflops / 2, per_chunk));
            c.backward_weight.steps.push_back(compute_step("layer", bw + oh, bflops / 2, per_chunk));
            if (p.layer_backward) {
                c.backward.steps.push_back(compute_step("layer", bi + oh, bflops, per_chunk));
            } else {
                c.backward.steps.push_back(
                    compute_step("layer input grad", bi + oh, bflops / 2, per_chunk));
                c.backward.steps.push_back(
                    compute_step("layer weight grad", bw + oh, bflops / 2, per_chunk));
            }
        } else {
            if (split_backward)
                throw ConfigError(spec.schedule_where,
                                  "schedule '" + spec.schedule +
                                      "' splits the backward pass, which stage_forward/"
                                      "stage_backward profiles cannot express; give "
                                      "layer_forward, layer_backward_input, layer_backward_weight");
            const auto fwd = Time::ps(p.stage_forward->count_ps() / chunks);
            const auto bwd = Time::ps(p.stage_backward->count_ps() / chunks);
            c.forward.steps.push_back(compute_step("stage", fwd + oh, fwd_flops));
            c.backward.steps.push_back(compute_step("stage", bwd + oh, 2 * fwd_flops));
        }
        if (last) add_if_positive(c.forward, "output layer", p.output_forward, oh);
        if (last) {
            add_if_positive(c.backward, "output layer", p.output_backward, oh);
            add_if_positive(c.backward_input, "output layer", p.output_backward, oh);
        }
        if (first) {
            add_if_positive(c.backward, "embedding", p.embedding_backward, oh);
            add_if_positive(c.backward_weight, "embedding", p.embedding_backward, oh);
        }
    }

    plan.devices.resize(static_cast<std::size_t>(l.pp));
    for (int s = 0; s < l.pp; ++s) {
        StagePlan& d = plan.devices[static_cast<std::size_t>(s)];
        double params = 0;
        for (int vs = 0; vs < vstages; ++vs) {
            if (device_of(vs) != s) continue;
            for (int layer = vs * per_chunk; layer < (vs + 1) * per_chunk; ++layer)
                params += layer_parameters(m, m.experts > 0 && layer >= m.dense_layers);
        }
        params /= l.tp;
        // Gradients are reduced in 32-bit in Megatron's default (--accumulate-allreduce-grads-in-fp32
        // is off; bf16 grads) -> 2 bytes each, per chunk.
        d.dp_gradient_bytes = Bytes{static_cast<std::int64_t>(params * 2 / chunks)};
        d.dp_sharded = l.distributed_optimizer;
        if (spec.compute.kind == ComputeSpec::Kind::Profile)
            d.optimizer_step = spec.compute.profile.optimizer_step;
    }

    double total_fwd = 0;
    for (int layer = 0; layer < m.layers; ++layer)
        total_fwd += layer_forward_flops(m, t, m.experts > 0 && layer >= m.dense_layers);
    total_fwd += 2.0 * t.micro_batch_size * t.seq_length * m.hidden_size * m.vocab_size;  // logits
    const double per_microbatch = 3 * total_fwd;  // forward + backward (2x forward)
    const double replicas = static_cast<double>(l.dp) * plan.microbatches;
    plan.model_flops_per_iteration = Flops{per_microbatch * replicas};
    double hw = per_microbatch;
    if (t.recompute == Recompute::Full) hw += total_fwd;
    plan.hardware_flops_per_iteration = Flops{hw * replicas};
    plan.tokens_per_iteration = static_cast<std::int64_t>(t.global_batch_size) * t.seq_length;
    return plan;
}

}  // namespace cs::workload
