#include "workload/plan.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string_view>

#include "core/errors.hpp"
#include "workload/context_parallel.hpp"
#include "workload/flops.hpp"
#include "workload/memory.hpp"
#include "workload/pipeline_comm.hpp"
#include "workload/pipeline_split.hpp"
#include "workload/roofline.hpp"
#include "workload/tp_overlap.hpp"

namespace cs::workload {

const char* group_kind_name(GroupKind g) {
    return name_of(kGroupKindNames, g).data();
}

CommKind Step::comm_kind() const {
    if (has(PipelineComm)) return CommKind::Pipeline;
    switch (group) {
        case GroupKind::Tp:
            return CommKind::Tp;
        case GroupKind::Cp:
        case GroupKind::CpInner:
        case GroupKind::CpOuter:
            return CommKind::Cp;
        case GroupKind::Ep:
            return CommKind::Ep;
        case GroupKind::Dp:
            return CommKind::Dp;
    }
    return CommKind::Tp;
}

Time PassPlan::compute_time() const {
    Time t = Time::zero();
    for (const auto& s : steps)
        if (s.kind == Step::Kind::Compute) t += s.duration * s.repeat;
    return t;
}

std::int64_t PassPlan::launches() const {
    std::int64_t n = 0;
    for (const auto& s : steps)
        n += std::int64_t{s.launches} * s.repeat;
    return n;
}

Flops PassPlan::model_flops() const {
    Flops f;
    for (const auto& s : steps)
        f += Flops{s.model_flops.value * s.repeat};
    return f;
}

Flops PassPlan::hardware_flops() const {
    Flops f;
    for (const auto& s : steps)
        f += Flops{s.hardware_flops.value * s.repeat};
    return f;
}

namespace {

Step compute_step(const char* label, Time duration, double model_flops, double hw_flops,
                  int repeat = 1) {
    Step s;
    s.kind = Step::Kind::Compute;
    s.label = label;
    s.duration = duration;
    s.model_flops = Flops{model_flops};
    s.hardware_flops = Flops{hw_flops};
    s.repeat = repeat;
    return s;
}

// A profiled time of the embedding or the output layer (`part`), as one step when it is given.
void add_if_positive(PassPlan& pass, const char* label, Time duration, Time overhead,
                     ModelPart part, KernelKind kernel = KernelKind::Unmapped) {
    if (duration <= Time::zero()) return;
    Step s = compute_step(label, duration + overhead, 0, 0);
    s.part = part;
    s.kernel = kernel;
    pass.steps.push_back(s);
}

// Appends `layers` copies of `from` to `to`, folding the copies into each step's repeat count.
// Room is made once per call, geometrically (a chunk of several layer runs appends several
// times), instead of by the vector's growth step by step.
void append_repeated(PassPlan& to, const PassPlan& from, int layers) {
    const std::size_t first = to.steps.size();
    const std::size_t needed = first + from.steps.size();
    if (to.steps.capacity() < needed) to.steps.reserve(std::max(needed, 2 * to.steps.capacity()));
    to.steps.insert(to.steps.end(), from.steps.begin(), from.steps.end());
    for (std::size_t i = first; i < needed; ++i)
        to.steps[i].repeat *= layers;
}

// Runs of consecutive layers of the same kind (dense or MoE) inside [first, first + count).
template <typename F>
void for_each_layer_run(const ModelSpec& m, int first, int count, F&& f) {
    int start = first;
    while (start < first + count) {
        const bool moe = is_moe_layer(m, start);
        int end = start + 1;
        while (end < first + count && is_moe_layer(m, end) == moe)
            ++end;
        f(moe, end - start);
        start = end;
    }
}

// Layers of a chunk of `layers` whose forward full recomputation re-runs during the backward
// (Megatron-LM's TransformerBlock._checkpointed_forward): all of them with `uniform`, the first
// recompute_layers with `block`, none without full recomputation.
int recomputed_layers(const TrainingSpec& t, int layers) {
    if (t.recompute != Recompute::Full) return 0;
    return t.recompute_method == RecomputeMethod::Block ? std::min(t.recompute_layers, layers)
                                                        : layers;
}

// The training settings of a chunk's layers after the first recomputed_layers(): as given, except
// that with full recomputation they keep everything (block's layers past the first N).
TrainingSpec stored_layers_training(const TrainingSpec& t) {
    TrainingSpec plain = t;
    if (t.recompute == Recompute::Full) plain.recompute = Recompute::None;
    return plain;
}

// Activation bytes the uniform method saves on a chunk of `layers`: it keeps one input per group
// of recompute_layers layers (the last group may be shorter) instead of one per layer.
std::int64_t uniform_group_saving(const ExperimentSpec& spec, int layers) {
    const auto& t = spec.training;
    if (t.recompute != Recompute::Full || t.recompute_method != RecomputeMethod::Uniform ||
        layers == 0)
        return 0;
    // In 64 bits: recompute_layers may be any count up to 2^31 - 1 (one group then).
    const std::int64_t groups =
        (std::int64_t{layers} + t.recompute_layers - 1) / t.recompute_layers;
    return (layers - groups) * layer_activation_bytes(spec.model, spec.layout, t, false).value;
}

void append_passes(ChunkPlan& c, const LayerPasses& lp, int layers) {
    append_repeated(c.forward, lp.forward, layers);
    append_repeated(c.backward, lp.backward, layers);
    append_repeated(c.backward_input, lp.backward_input, layers);
    append_repeated(c.backward_weight, lp.backward_weight, layers);
    c.activation_memory += Bytes{lp.activation_memory.value * layers};
}

// What one layer's backward spends recomputing under `kind` (full: every layer), by the
// profile: a full recomputation runs the layer's forward again (`layer_forward`, the profiled
// time); a selective one its attention core, which a profile does not time, so the roofline
// model's estimate of it (its backward with selective recomputation less its backward without),
// averaged over the chunk's layers (dense and MoE layers differ).
Time layer_recompute_time(const ExperimentSpec& spec, const ChunkPlan& c, Recompute kind,
                          Time layer_forward) {
    if (kind == Recompute::None || c.layers == 0) return Time::zero();
    if (kind == Recompute::Full) return layer_forward;
    const auto& gpu = spec.cluster->gpu_model(0);
    TrainingSpec with = spec.training, without = spec.training;
    with.recompute = Recompute::Selective;
    without.recompute = Recompute::None;
    std::optional<Time> per_kind[2];  // [moe]
    std::int64_t sum = 0;
    for (int layer = c.first_layer; layer < c.first_layer + c.layers; ++layer) {
        const bool moe = is_moe_layer(spec.model, layer);
        auto& t = per_kind[moe ? 1 : 0];
        if (!t) {
            const auto time = [&](const TrainingSpec& training) {
                return roofline_layer(spec.model, spec.layout, training, gpu, spec.compute.roofline,
                                      moe)
                    .backward_input.compute_time();
            };
            t = time(with) - time(without);
        }
        sum += t->count_ps();
    }
    return Time::ps(sum / c.layers);
}

// The change to each layer step's backward (its input-gradient part when split) when the run
// recomputes other than what the profile measured (ProfileCompute::measured_recompute): what
// the run recomputes, averaged over the chunk's layers (block: the first recompute_layers of
// them), less what the measured backward holds. Zero when the profile measured the run's own.
Time profile_recompute_change(const ExperimentSpec& spec, const ChunkPlan& c, Time layer_forward) {
    const auto& p = spec.compute.profile;
    const auto& t = spec.training;
    if (!p.measured_recompute || c.layers == 0) return Time::zero();
    const Recompute measured = *p.measured_recompute;
    const int recomputed = recomputed_layers(t, c.layers);
    // The run's own recomputation was measured (full: on every layer of the chunk).
    if (measured == t.recompute && (measured != Recompute::Full || recomputed == c.layers))
        return Time::zero();
    const Time run = t.recompute == Recompute::Full
                         ? Time::ps(std::llround(static_cast<double>(layer_forward.count_ps()) *
                                                 recomputed / c.layers))
                         : layer_recompute_time(spec, c, t.recompute, layer_forward);
    return run - layer_recompute_time(spec, c, measured, layer_forward);
}

// `backward` changed by `change` (profile_recompute_change), refused below zero: the profile
// says its backward holds more recomputation than its own time.
Time changed_backward(const ExperimentSpec& spec, Time backward, Time change, const char* key) {
    const Time changed = backward + change;
    if (changed < Time::zero())
        throw ConfigError(spec.compute.profile.recompute_where,
                          std::string("'compute.profiled_recompute': ") + key + " (" +
                              format_time(backward) + ") is shorter than the recomputation " +
                              "this run would take out of it (" +
                              format_time(Time::zero() - change) +
                              "); give the recomputation the backward was measured with: none, "
                              "selective or full");
    return changed;
}

// The profiled layer (or stage) steps of a chunk: `per_layer` forward FLOPs a layer (the
// chunk's `fwd_flops` in all), `recompute` recomputed FLOPs a layer step.
void add_profile_layer_steps(const ExperimentSpec& spec, ChunkPlan& c, double per_layer,
                             double fwd_flops, double recompute, int chunks, bool split_backward) {
    const auto& p = spec.compute.profile;
    const Time oh = p.op_overhead;
    if (p.layer_forward) {
        if (split_backward && p.layer_backward)
            throw ConfigError(spec.schedule_where,
                              "schedule '" + spec.schedule +
                                  "' splits the backward pass: give compute.layer_backward_input "
                                  "and compute.layer_backward_weight instead of layer_backward");
    }
    // A chunk without transformer layers (the embedding or the loss counted as its only layer in
    // an uneven split) has no layer steps.
    if (p.layer_forward && c.layers > 0) {
        c.forward.steps.push_back(
            compute_step("layer", *p.layer_forward + oh, per_layer, per_layer, c.layers));
        const Time bi =
            changed_backward(spec, p.layer_backward ? *p.layer_backward : *p.layer_backward_input,
                             profile_recompute_change(spec, c, *p.layer_forward),
                             p.layer_backward ? "layer_backward" : "layer_backward_input");
        // The weight gradient GEMMs carry half of the backward's 2x-forward FLOPs.
        if (p.layer_backward) {
            c.backward.steps.push_back(
                compute_step("layer", bi + oh, 2 * per_layer, 2 * per_layer + recompute, c.layers));
        } else {
            const Time bw = *p.layer_backward_weight;
            c.backward.steps.push_back(compute_step("layer input grad", bi + oh, per_layer,
                                                    per_layer + recompute, c.layers));
            c.backward.steps.push_back(
                compute_step("layer weight grad", bw + oh, per_layer, per_layer, c.layers));
            c.backward_input.steps.push_back(compute_step("layer input grad", bi + oh, per_layer,
                                                          per_layer + recompute, c.layers));
            c.backward_weight.steps.push_back(
                compute_step("layer weight grad", bw + oh, per_layer, per_layer, c.layers));
        }
    } else if (!p.layer_forward) {
        if (split_backward)
            throw ConfigError(spec.schedule_where,
                              "schedule '" + spec.schedule +
                                  "' splits the backward pass, which stage_forward/stage_backward "
                                  "profiles cannot express; give layer_forward, "
                                  "layer_backward_input and layer_backward_weight");
        const auto fwd = Time::ps(p.stage_forward->count_ps() / chunks);
        // The stage's forward stands for its layers' (a layer: fwd / layers) when the run
        // recomputes other than what was measured.
        const Time change =
            c.layers > 0 ? profile_recompute_change(spec, c, Time::ps(fwd.count_ps() / c.layers))
                         : Time::zero();
        const auto bwd = changed_backward(spec, Time::ps(p.stage_backward->count_ps() / chunks),
                                          change * c.layers, "stage_backward");
        c.forward.steps.push_back(compute_step("stage", fwd + oh, fwd_flops, fwd_flops));
        c.backward.steps.push_back(
            compute_step("stage", bwd + oh, 2 * fwd_flops, 2 * fwd_flops + recompute * c.layers));
    }
}

// With compute.framework the host issues the kernels that framework runs for each profiled
// layer (the roofline's kernel list); a plain profile run issues one per step (no host).
void set_profile_launches(const ExperimentSpec& spec, ChunkPlan& c, const topology::GpuModel& gpu) {
    const auto lp = roofline_layer(spec.model, spec.layout, spec.training, gpu,
                                   spec.compute.roofline, is_moe_layer(spec.model, c.first_layer));
    const auto set = [&](PassPlan& pass, std::int64_t layer_launches) {
        for (auto& st : pass.steps) {
            const std::string_view label = st.label;
            if (label == "layer input grad")
                st.launches = static_cast<std::int32_t>(lp.backward_input.launches());
            else if (label == "layer weight grad")
                st.launches = static_cast<std::int32_t>(lp.backward_weight.launches());
            else if (label == "layer")
                st.launches = static_cast<std::int32_t>(layer_launches);
            else if (label == "stage")
                st.launches = static_cast<std::int32_t>(layer_launches * c.layers);
        }
    };
    set(c.forward, lp.forward.launches());
    set(c.backward, lp.backward.launches());
    set(c.backward_input, lp.backward_input.launches());
    set(c.backward_weight, lp.backward_weight.launches());
}

void plan_profile_chunk(const ExperimentSpec& spec, ChunkPlan& c, bool first, bool last, int chunks,
                        bool split_backward) {
    const auto& m = spec.model;
    const auto& t = spec.training;
    const auto& p = spec.compute.profile;
    const Time oh = p.op_overhead;
    const double group = static_cast<double>(spec.layout.tp) * spec.layout.cp;
    // Profile times carry no FLOPs of their own; the model's FLOPs are attached so that MFU and
    // the trace's FLOP counts mean the same thing in both compute models.
    double fwd_flops = 0;
    for (int layer = c.first_layer; layer < c.first_layer + c.layers; ++layer)
        fwd_flops +=
            layer_forward_flops(m, is_moe_layer(m, layer), t.micro_batch_size, t.seq_length).value /
            group;
    const double per_layer = c.layers > 0 ? fwd_flops / c.layers : 0;
    // Recomputed FLOPs (HFU) spread over the chunk's layer steps, which share one profiled time.
    const double recompute =
        c.layers > 0 ? per_layer * recomputed_layers(t, c.layers) / c.layers : 0;

    // With `unprofiled: roofline` the embedding and output layer that have no profiled time are
    // the roofline model's (all their passes, appended like the roofline chunk does).
    const auto& gpu = spec.cluster->gpu_model(0);
    const bool estimate_embedding = p.estimate_unprofiled && !p.embedding_given && m.vocab_size > 0;
    const bool estimate_output = p.estimate_unprofiled && !p.output_given && m.vocab_size > 0;
    if (first && estimate_embedding)
        append_passes(c, roofline_embedding(m, spec.layout, t, gpu, spec.compute.roofline), 1);
    if (first && !estimate_embedding)
        add_if_positive(c.forward, "embedding", p.embedding_forward, oh, ModelPart::Embedding,
                        KernelKind::Elementwise);
    add_profile_layer_steps(spec, c, per_layer, fwd_flops, recompute, chunks, split_backward);
    if (spec.compute.framework != Framework::None) set_profile_launches(spec, c, gpu);
    if (last && estimate_output)
        append_passes(c, roofline_output_layer(m, spec.layout, t, gpu, spec.compute.roofline), 1);
    if (last && !estimate_output) {
        add_if_positive(c.forward, "output layer", p.output_forward, oh, ModelPart::Head);
        add_if_positive(c.backward, "output layer", p.output_backward, oh, ModelPart::Head);
        if (split_backward)
            add_if_positive(c.backward_input, "output layer", p.output_backward, oh,
                            ModelPart::Head);
    }
    if (first && !estimate_embedding) {
        add_if_positive(c.backward, "embedding", p.embedding_backward, oh, ModelPart::Embedding,
                        KernelKind::Elementwise);
        if (split_backward)
            add_if_positive(c.backward_weight, "embedding", p.embedding_backward, oh,
                            ModelPart::Embedding, KernelKind::Elementwise);
    }
}

// One layer's passes as plan_roofline_chunk prices them (roofline_layer, then context parallelism
// and tensor-parallel overlap), by kind: MoE or dense, recomputed or stored. They depend on the
// experiment alone, so an iteration works each out once for all its chunks (a 64-stage pipeline
// priced the same layer 64 times).
struct LayerPassesMemo {
    std::optional<LayerPasses> of[2][2];  // [moe][stored]
};

void plan_roofline_chunk(const ExperimentSpec& spec, ChunkPlan& c, bool first, bool last,
                         LayerPassesMemo& memo) {
    const auto& gpu = spec.cluster->gpu_model(0);
    const auto& rc = spec.compute.roofline;
    if (first && spec.model.vocab_size > 0)
        append_passes(c, roofline_embedding(spec.model, spec.layout, spec.training, gpu, rc), 1);
    // The recomputed layers first (all with uniform, the first N with block), then the others.
    const int recomputed = recomputed_layers(spec.training, c.layers);
    const TrainingSpec stored = stored_layers_training(spec.training);
    const auto add_layers = [&](int from, int count, bool stored_kind) {
        const TrainingSpec& training = stored_kind ? stored : spec.training;
        for_each_layer_run(spec.model, from, count, [&](bool moe, int n) {
            auto& lp = memo.of[moe ? 1 : 0][stored_kind ? 1 : 0];
            if (!lp) {
                lp = roofline_layer(spec.model, spec.layout, training, gpu, rc, moe);
                apply_context_parallel(spec, gpu, *lp);
                apply_tp_comm_overlap(spec, *lp);
            }
            append_passes(c, *lp, n);
            c.activation_bytes = lp->activation_send;
        });
    };
    add_layers(c.first_layer, recomputed, false);
    add_layers(c.first_layer + recomputed, c.layers - recomputed, true);
    c.activation_memory.value -= uniform_group_saving(spec, c.layers);
    if (last && spec.model.vocab_size > 0)
        append_passes(c, roofline_output_layer(spec.model, spec.layout, spec.training, gpu, rc), 1);
}

// A stage's DP bytes: `parameters` x `bytes_per_parameter`. Found by fuzzing under the
// sanitizers (docs/robustness.md): a model whose stage holds fewer than 2^63 parameters can
// still exchange more than 2^63 bytes, which Bytes cannot hold (float-cast-overflow before).
Bytes dp_bytes(const ExperimentSpec& spec, double parameters, double bytes_per_parameter) {
    const double bytes = parameters * bytes_per_parameter;
    if (!(bytes < 9.2e18))
        throw ConfigError(spec.layout_where,
                          "the gradients one pipeline stage reduces over data parallelism would "
                          "be more than 2^63 bytes (about 9.2 EB); check the model's sizes");
    return Bytes{static_cast<std::int64_t>(bytes)};
}

// The activation memory of a profiled chunk's layers: the model's, as the roofline counts it.
void add_profile_activation_memory(const ExperimentSpec& spec, ChunkPlan& c) {
    const auto& m = spec.model;
    const auto& l = spec.layout;
    const auto& t = spec.training;
    const int recomputed = recomputed_layers(t, c.layers);
    const TrainingSpec stored = stored_layers_training(t);
    for_each_layer_run(m, c.first_layer, recomputed, [&](bool moe, int count) {
        c.activation_memory += Bytes{layer_activation_bytes(m, l, t, moe).value * count};
    });
    for_each_layer_run(
        m, c.first_layer + recomputed, c.layers - recomputed, [&](bool moe, int count) {
            c.activation_memory += Bytes{layer_activation_bytes(m, l, stored, moe).value * count};
        });
    c.activation_memory.value -= uniform_group_saving(spec, c.layers);
}

// Each virtual stage's device (`device_of`, asked once each: the loops over devices below ask
// for every virtual stage on each device).
std::vector<int> devices_of(int vstages, const std::function<int(int)>& device_of) {
    std::vector<int> device(static_cast<std::size_t>(vstages));
    for (int vs = 0; vs < vstages; ++vs)
        device[static_cast<std::size_t>(vs)] = device_of(vs);
    return device;
}

// Whether pipeline device `s` of `stages` holds a virtual stage placed on device `on`: its own,
// and with two model copies (DualPipe) the mirrored device's too.
bool holds_stage(int on, int s, int stages, int copies) {
    return on == s || (copies == 2 && on == stages - 1 - s);
}

// Pipeline device `s`: the parameters of the chunks it holds (`device`, by virtual stage; with
// two copies, the mirrored device's too), their data-parallel sizes and the optimizer step.
StagePlan plan_device(const ExperimentSpec& spec, const IterationPlan& plan, int s, int chunks,
                      const std::vector<int>& device, int copies) {
    const auto& m = spec.model;
    const auto& l = spec.layout;
    const auto& t = spec.training;
    const int vstages = static_cast<int>(plan.virtual_stages.size());
    StagePlan d;
    std::int64_t params = 0, owned = 0;
    const auto holds = [&](int vs) {
        return holds_stage(device[static_cast<std::size_t>(vs)], s, l.pp, copies);
    };
    for (int vs = 0; vs < vstages; ++vs)
        if (holds(vs)) {
            const ChunkPlan& c = plan.virtual_stages[static_cast<std::size_t>(vs)];
            const bool embedding = vs == 0, output = vs == vstages - 1;
            params += parameters_per_gpu(m, l, c.first_layer, c.layers, embedding, output);
            owned += optimizer_parameters_per_gpu(m, l, c.first_layer, c.layers, embedding, output);
        }
    // A device holding both the embedding chunk and the output chunk (V placements) holds
    // tied embedding weights once; the chunks counted apart each brought a copy. The
    // difference is zero for untied weights.
    if (vstages > 1 && holds(0) && holds(vstages - 1)) {
        params += parameters_per_gpu(m, l, 0, 0, true, true) -
                  parameters_per_gpu(m, l, 0, 0, true, false) -
                  parameters_per_gpu(m, l, 0, 0, false, true);
        owned += optimizer_parameters_per_gpu(m, l, 0, 0, true, true) -
                 optimizer_parameters_per_gpu(m, l, 0, 0, true, false) -
                 optimizer_parameters_per_gpu(m, l, 0, 0, false, true);
    }
    // One bucket per model chunk, reduced in the gradient buffer's type.
    d.dp_parameters = params / (chunks * copies);
    d.dp_gradient_bytes = dp_bytes(spec, static_cast<double>(d.dp_parameters),
                                   gradient_bytes_per_parameter(t.precision));
    d.dp_parameter_bytes = dp_bytes(spec, static_cast<double>(d.dp_parameters),
                                    weight_bytes_per_parameter(t.precision));
    d.dp_sharded = l.distributed_optimizer;
    const auto& prof = spec.compute.profile;
    const bool profiled = spec.compute.kind == ComputeSpec::Kind::Profile &&
                          (prof.optimizer_given || !prof.estimate_unprofiled);
    if (t.optimizer == Optimizer::None)
        d.optimizer_step = Time::zero();
    else if (profiled)
        d.optimizer_step = prof.optimizer_step;
    else
        d.optimizer_step = roofline_optimizer_step(
            params, owned, t.precision, spec.cluster->gpu_model(0), spec.compute.roofline);
    return d;
}

}  // namespace

IterationPlan plan_iteration(const ExperimentSpec& spec, int chunks, bool split_backward,
                             const std::function<int(int)>& device_of, int copies) {
    const auto& m = spec.model;
    const auto& l = spec.layout;
    const auto& t = spec.training;
    IterationPlan plan;
    plan.stages = l.pp;
    plan.chunks = chunks * copies;
    plan.microbatches = t.microbatches(l);
    const std::vector<int> chunk_layers = split_layers(spec, chunks, device_of);
    const int vstages = static_cast<int>(chunk_layers.size());
    if (!spec.pipeline_split.even() && spec.compute.kind == ComputeSpec::Kind::Profile &&
        spec.compute.profile.stage_forward)
        throw ConfigError(spec.layout_where,
                          "'parallelism': an uneven pipeline split needs per-layer profile times "
                          "(compute.layer_forward, ...): stage_forward and stage_backward give one "
                          "time for every stage");

    plan.virtual_stages.resize(static_cast<std::size_t>(vstages));
    LayerPassesMemo memo;
    for (int vs = 0, next_layer = 0; vs < vstages; ++vs) {
        ChunkPlan& c = plan.virtual_stages[static_cast<std::size_t>(vs)];
        c.first_layer = next_layer;
        c.layers = chunk_layers[static_cast<std::size_t>(vs)];
        next_layer += c.layers;
        // Megatron's scatter/gather (and sequence parallelism) send 1/tp of the b s h activation,
        // in 16-bit precision; context parallelism splits the sequence.
        c.activation_bytes = Bytes{static_cast<std::int64_t>(t.micro_batch_size) * t.seq_length /
                                   l.cp * m.hidden_size * 2 / l.tp};
        const bool first = vs == 0, last = vs == vstages - 1;
        if (spec.compute.kind == ComputeSpec::Kind::Profile) {
            plan_profile_chunk(spec, c, first, last, chunks, split_backward);
            add_profile_activation_memory(spec, c);
        } else {
            plan_roofline_chunk(spec, c, first, last, memo);
        }
    }

    plan.devices.resize(static_cast<std::size_t>(l.pp));
    const std::vector<int> device = devices_of(vstages, device_of);
    for (int s = 0; s < l.pp; ++s)
        plan.devices[static_cast<std::size_t>(s)] =
            plan_device(spec, plan, s, chunks, device, copies);

    plan_shard_units(spec, plan);
    apply_pipeline_comm(spec, plan, device_of, copies);
    const auto flops = iteration_flops(m, t.global_batch_size, t.seq_length, t.recompute);
    plan.model_flops_per_iteration = flops.model;
    plan.hardware_flops_per_iteration = flops.hardware;
    if (t.recompute == Recompute::Full && t.recompute_method == RecomputeMethod::Block) {
        // Only the recomputed layers' forwards count twice (block leaves the others alone).
        double recomputed = 0;
        for (const ChunkPlan& c : plan.virtual_stages)
            for (int i = 0; i < recomputed_layers(t, c.layers); ++i)
                recomputed += layer_forward_flops(m, is_moe_layer(m, c.first_layer + i),
                                                  t.global_batch_size, t.seq_length)
                                  .value;
        plan.hardware_flops_per_iteration = Flops{flops.model.value + recomputed};
    }
    plan.tokens_per_iteration = static_cast<std::int64_t>(t.global_batch_size) * t.seq_length;
    return plan;
}

void plan_shard_units(const ExperimentSpec& spec, IterationPlan& plan) {
    if (spec.layout.sharding < Sharding::Gradients) return;
    const auto last = plan.virtual_stages.size() - 1;
    for (std::size_t vs = 0; vs < plan.virtual_stages.size(); ++vs) {
        auto& c = plan.virtual_stages[vs];
        c.unit_parameters = unit_parameters_per_gpu(spec.model, spec.layout, c.first_layer,
                                                    c.layers, vs == 0, vs == last);
    }
}

void fill_memory(const ExperimentSpec& spec, IterationPlan& plan,
                 const std::vector<int>& peak_inflight_chunks,
                 const std::function<int(int)>& device_of,
                 const std::vector<Bytes>& peak_activations, int copies) {
    const int vstages = static_cast<int>(plan.virtual_stages.size());
    const std::vector<int> device = devices_of(vstages, device_of);
    for (int s = 0; s < plan.stages; ++s) {
        bool emb = false, out = false;
        std::int64_t chunk_activation = 0;
        std::vector<LayerRange> chunks;
        for (int vs = 0; vs < vstages; ++vs) {
            if (!holds_stage(device[static_cast<std::size_t>(vs)], s, plan.stages, copies))
                continue;
            const ChunkPlan& c = plan.virtual_stages[static_cast<std::size_t>(vs)];
            emb |= vs == 0;
            out |= vs == vstages - 1;
            chunks.push_back({c.first_layer, c.layers});
            chunk_activation = std::max(chunk_activation, c.activation_memory.value);
        }
        // Parameters, gradients and optimizer states of the device's layers; activations are the
        // schedule's peak of chunk activations held at once (each chunk's own size when the
        // caller weighed them, else the largest chunk's).
        const Bytes activations =
            static_cast<std::size_t>(s) < peak_activations.size()
                ? peak_activations[static_cast<std::size_t>(s)]
                : Bytes{chunk_activation * peak_inflight_chunks[static_cast<std::size_t>(s)]};
        plan.devices[static_cast<std::size_t>(s)].memory =
            memory_per_gpu(spec, chunks, activations, emb, out);
    }
}

}  // namespace cs::workload
