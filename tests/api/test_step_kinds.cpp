// A compute step's kernel class and part of the model (workload::Step::kernel, Step::part) are
// set where the step is emitted; `clustersim diff` reads them from the trace. Before they existed,
// diff derived both from the step's label. This test keeps that label mapping as its oracle: for
// every step of the plans of every model family the workload builds, the fields give what the
// labels gave (but for one part the labels had wrong, expected_part), and the names are the
// measured side's (ingest's kernel_kind_name).
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <vector>

#include "../workload/scratch.hpp"
#include "ingest/torch_trace.hpp"
#include "workload/experiment.hpp"
#include "workload/plan.hpp"

using namespace cs;
using namespace cs::workload;

namespace {

bool has(const std::string& s, const char* part) {
    return s.find(part) != std::string::npos;
}
bool ends_with(const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The oracle: diff's label -> kind mapping before the steps carried their kind
// (sim/fit/diff.cpp's simulated_kind, as it was, with ingest's KernelKind replaced by its name).
std::string label_kind(const std::string& label) {
    const std::string l = label.rfind("recompute ", 0) == 0 ? label.substr(10) : label;
    if (l == "unmapped (calibration residual)") return "unmapped";
    if (has(l, "optimizer")) return "optimizer";
    if (has(l, "attention dropout")) return "elementwise";
    if (has(l, "attention scores") || has(l, "attention context")) return "gemm";
    if (has(l, "attention")) return "attention";
    if (has(l, "rotary")) return "rotary";
    if (l == "swiglu bwd product" || l == "swiglu bwd concat") return "elementwise";
    if (has(l, "swiglu")) return "swiglu";
    if (l == "routing sort") return "sort";
    if (has(l, "routing") || l == "expert counts") return "routing";
    if (l == "permute" || l == "unpermute bwd") return "permute";
    if (l == "unpermute" || l == "permute bwd" || l == "embedding wgrad") return "unpermute";
    if (l == "combine weights" || l == "combine weights bwd") return "strided_copy";
    if (l == "combine weights sum") return "reduce";
    if (has(l, "grad concat")) return "concat";
    if (has(l, "grad copy")) return "strided_copy";
    if (has(l, "main grad accumulate")) return "mixed_accumulate";
    if (has(l, "bias grad")) return "reduce";
    if (has(l, "norm")) return "norm";
    if (has(l, "softmax") || l == "cross entropy") return "softmax";
    if (has(l, "activation")) return "activation";
    if (l.rfind("expert fc", 0) == 0) return "grouped_gemm";
    for (const char* g :
         {"qkv", "proj", "fc1", "fc2", "logits", "router", "shared fc1", "shared fc2"})
        if (l == g) return "gemm";
    if (ends_with(l, "dgrad") || ends_with(l, "wgrad")) return "gemm";
    for (const char* e :
         {"embedding", "position add", "nll bwd", "shared add", "shared join", "expert cat",
          "combine weights grad", "logits to fp32", "logits grad to bf16"})
        if (l == e) return "elementwise";
    if (l.rfind("residual", 0) == 0 || ends_with(l, " zero")) return "elementwise";
    return "unmapped";
}

// The oracle's part (diff's simulated_part, as it was): the embedding's, the head's or a layer's.
ModelPart label_part(const std::string& label) {
    if (label.rfind("embedding", 0) == 0 || label.rfind("position", 0) == 0)
        return ModelPart::Embedding;
    for (const char* head :
         {"final norm", "logits", "log softmax", "cross entropy", "loss", "output"})
        if (label.rfind(head, 0) == 0) return ModelPart::Head;
    return ModelPart::Layers;
}

// The part the oracle gives, but for the one step whose part the label mapping had wrong: the
// eager loss's NLL backward, which it counted among the layers, is the head's.
ModelPart expected_part(const std::string& label) {
    return label == "nll bwd" ? ModelPart::Head : label_part(label);
}

// What diff reads for a step: a compute step's fields; a collective (no "kernel" argument in
// the trace) unmapped and the layers'. The main-gradient accumulation is a row of its own, so
// its part is not read.
void check_steps(const PassPlan& pass, std::set<std::string>& seen) {
    for (const auto& s : pass.steps) {
        const std::string label = s.label;
        CAPTURE(label);
        seen.insert(label);
        const bool compute = s.kind == Step::Kind::Compute;
        const std::string kind =
            compute ? std::string(name_of(kKernelKindNames, s.kernel)) : "unmapped";
        CHECK(kind == label_kind(label));
        if (compute && s.kernel == KernelKind::MixedAccumulate) continue;
        const ModelPart part = compute ? s.part : ModelPart::Layers;
        CHECK(name_of(kModelPartNames, part) == name_of(kModelPartNames, expected_part(label)));
    }
}

const char* const kCalibration =
    "clustersim_calibration: 2\n"
    "gpu_model: H100-SXM\n"
    "compute: {residual: 0.05}\n";

// Every step of the plan of `experiment` (on four-gpus.yaml, kFourGpus), the backward whole and,
// unless a profile's times cannot split it, split; returns the labels seen.
std::set<std::string> check_plan(const std::string& name, const std::string& experiment,
                                 bool splits = true) {
    test::Scratch scratch("step_kinds_" + name);
    scratch.write("four-gpus.yaml", test::kFourGpus);
    scratch.write("cal.yaml", kCalibration);
    const auto spec = load_experiment(scratch.write("e.yaml", experiment), {});
    std::set<std::string> seen;
    for (const bool split : {false, true}) {
        if (split && !splits) continue;
        const auto plan = plan_iteration(spec, 1, split, [](int vs) { return vs; });
        for (const auto& c : plan.virtual_stages)
            for (const PassPlan* p :
                 {&c.forward, &c.backward, &c.backward_input, &c.backward_weight})
                check_steps(*p, seen);
    }
    return seen;
}

// A two-layer model with a vocabulary on one pipeline stage (embedding, layers and head), tp 2
// with sequence parallelism; `model`, `parallelism`, `training` and `compute` are added to its
// maps.
std::string experiment(const std::string& model, const std::string& compute,
                       const std::string& training = "", const std::string& parallelism = "") {
    return "topology: four-gpus.yaml\n"
           "model: {layers: 2, hidden_size: 512, attention_heads: 8, ffn_hidden_size: 2048, "
           "vocab_size: 1024" +
           model +
           "}\n"
           "parallelism: {tp: 2, sequence_parallel: true" +
           parallelism +
           "}\n"
           "training: {micro_batch_size: 1, global_batch_size: 4, seq_length: 512" +
           training + "}\ncompute: {" + compute + "}\n";
}

const char* const kGpt = ", position_embeddings: 512, bias: true";
const char* const kLlama =
    ", norm: rmsnorm, activation: swiglu, rotary: true, kv_heads: 2, bias: false";
const char* const kMoe =
    ", family: moe, norm: rmsnorm, activation: swiglu, rotary: true, experts: 4, top_k: 2, "
    "moe_ffn_hidden_size: 256, shared_experts: 1";

}  // namespace

TEST_CASE("step kinds: every step's kernel class and part are what its label said") {
    std::set<std::string> seen;
    const auto add = [&](const std::set<std::string>& labels) {
        seen.insert(labels.begin(), labels.end());
    };
    int n = 0;
    for (const char* framework : {"megatron", "pytorch"}) {
        const std::string fw = std::string("model: roofline, framework: ") + framework;
        const auto name = [&](const char* what) {
            return std::string(what) + "_" + framework + std::to_string(n++);
        };
        add(check_plan(name("gpt"), experiment(kGpt, fw)));
        add(check_plan(name("llama"), experiment(kLlama, fw)));
        add(check_plan(name("moe_grouped"), experiment(kMoe, fw, "", ", ep: 2")));
        add(check_plan(name("moe_loop"),
                       experiment(kMoe, fw + ", moe_grouped_gemm: false", "", ", ep: 2")));
        add(check_plan(name("moe_bias"), experiment(std::string(kMoe) + ", bias: true",
                                                    fw + ", moe_grouped_gemm: false")));
        add(check_plan(name("selective"), experiment(kGpt, fw, ", recompute: selective")));
        add(check_plan(name("full"), experiment(kMoe, fw, ", recompute: full")));
        add(check_plan(name("fp8"), experiment(kLlama, fw, ", precision: fp8")));
        add(check_plan(name("unfused"), experiment(kGpt, fw, ", attention: unfused")));
        add(check_plan(name("unfused_full"),
                       experiment(kGpt, fw, ", attention: unfused, recompute: full")));
        add(check_plan(name("residual"), experiment(kLlama, fw + ", calibration: cal.yaml")));
        add(check_plan(name("main_grads_param"), experiment(kGpt, fw + ", main_grads: param")));
        for (const char* cp : {"p2p", "a2a", "allgather"})
            add(check_plan(name("cp"), experiment(kLlama, fw, ", recompute: selective",
                                                  std::string(", cp: 2, cp_comm_type: ") + cp)));
    }
    // Profiled layers: the layer and stage steps, the embedding and output layer as profiled or
    // (unprofiled: roofline) as the roofline costs them.
    add(check_plan("profile",
                   experiment(kGpt,
                              "model: profile, layer_forward: 1ms, layer_backward_input: 1ms, "
                              "layer_backward_weight: 1ms, embedding_forward: 1ms, "
                              "embedding_backward: 1ms, output_forward: 1ms, "
                              "output_backward: 1ms")));
    add(check_plan("stage",
                   experiment(kGpt,
                              "model: profile, stage_forward: 2ms, "
                              "stage_backward: 4ms, embedding_forward: 1ms"),
                   false));
    add(check_plan("unprofiled",
                   experiment(kLlama,
                              "model: profile, layer_forward: 1ms, "
                              "layer_backward: 2ms, unprofiled: roofline, "
                              "framework: pytorch"),
                   false));
    // The cases reach what they are for: every kind of step the label mapping knew.
    for (const char* label : {"attention scores",
                              "recompute attention dropout",
                              "softmax bwd",
                              "rotary bwd",
                              "swiglu bwd product",
                              "routing sort",
                              "expert counts",
                              "permute bwd",
                              "expert cat",
                              "combine weights sum",
                              "expert fc1 wgrad",
                              "shared join",
                              "qkv grad concat",
                              "qkv grad copy",
                              "bias grad",
                              "main grad accumulate",
                              "position add",
                              "embedding wgrad",
                              "embedding grad zero",
                              "nll bwd",
                              "log softmax bwd",
                              "logits grad to bf16",
                              "cross entropy bwd",
                              "unmapped (calibration residual)",
                              "attention cp diagonal",
                              "recompute attention cp block",
                              "send kv cp",
                              "all-to-all cp qkv",
                              "all-to-all ep dispatch",
                              "layer input grad",
                              "layer weight grad",
                              "stage",
                              "output layer",
                              "embedding"})
        CHECK_MESSAGE(seen.count(label) == 1, label);
}

TEST_CASE("step kinds: the names are the measured kernels' kinds, and the optimizer step's") {
    std::set<std::string> measured;
    for (std::size_t k = 0; k < api::kKernelKinds; ++k)
        measured.insert(std::string(api::kernel_kind_name(static_cast<api::KernelKind>(k))));
    for (const auto& row : kKernelKindNames) {
        CAPTURE(row.name);
        CHECK(measured.count(std::string(row.name)) == 1);
    }
    // The trace writer's optimizer slice (KernelKind::Optimizer, ModelPart::Model, which diff
    // counts with the layers) is what its label said.
    CHECK(label_kind("optimizer step") == "optimizer");
    CHECK(label_part("optimizer step") == ModelPart::Layers);
}
