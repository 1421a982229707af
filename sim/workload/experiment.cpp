#include "workload/experiment.hpp"

#include <algorithm>
#include <cmath>

#include "core/checked.hpp"
#include "topology/topology_yaml.hpp"
#include "workload/calibration.hpp"
#include "workload/experiment_parse.hpp"

namespace cs::workload {
namespace {

// `node` written out exactly (every scalar with its length and tag, every mapping and list in
// order): a cache key for an inline topology that two different trees never share. Cheaper than
// YAML::Dump, which a sweep or plan would run once per loaded combination.
void canonical_text(const YAML::Node& node, std::string& out) {
    switch (node.Type()) {
        case YAML::NodeType::Map:
            out += '{';
            for (const auto& kv : node) {
                canonical_text(kv.first, out);
                canonical_text(kv.second, out);
            }
            out += '}';
            return;
        case YAML::NodeType::Sequence:
            out += '[';
            for (const auto& item : node)
                canonical_text(item, out);
            out += ']';
            return;
        case YAML::NodeType::Scalar:
            out.append(std::to_string(node.Tag().size())).append(":").append(node.Tag());
            out.append(std::to_string(node.Scalar().size())).append(":").append(node.Scalar());
            return;
        default:
            out += '~';
            return;
    }
}

// parallelism.sharding, shard_size / shard_replicas, reshard_after_forward, shard_prefetch (the
// layout's dp must be known).
void parse_sharding(const config::Reader& r, ParallelLayout& l) {
    // An explicit sharding decides (so that --set parallelism.sharding=none works on a file
    // with the distributed optimizer); without it distributed_optimizer: true is ZeRO-1.
    if (r.has("sharding"))
        l.sharding = r.choice("sharding", kShardingNames);
    else if (l.distributed_optimizer)
        l.sharding = Sharding::Optimizer;
    l.distributed_optimizer = l.sharding != Sharding::None;
    const bool zero3 = l.sharding == Sharding::Parameters;
    if (r.has("shard_size") && r.has("shard_replicas"))
        r.fail("shard_replicas", "give shard_size or shard_replicas (dp / shard_size), not both");
    const char* hsdp_key = r.has("shard_size") ? "shard_size" : "shard_replicas";
    if (r.has(hsdp_key)) {
        const std::int64_t v = r.count(hsdp_key);
        if (l.sharding == Sharding::None)
            r.fail(hsdp_key, std::string(hsdp_key) +
                                 " needs a sharded data parallelism (sharding: zero1, zero2 or "
                                 "zero3); without sharding nothing is sharded");
        if (v > l.dp || l.dp % v != 0)
            r.fail(hsdp_key, std::string(hsdp_key) + " (" + std::to_string(v) +
                                 ") must divide dp (" + std::to_string(l.dp) +
                                 "): the replicas of a stage are cut into equal shard groups");
        l.shard_size = static_cast<int>(hsdp_key == std::string("shard_size") ? v : l.dp / v);
        if (l.shard_size == 1)
            r.fail(hsdp_key,
                   "a shard group of one replica shards nothing (every replica keeps "
                   "the whole model state); use sharding: none, or a shard group of 2 "
                   "to dp (" +
                       std::to_string(l.dp) + ") replicas");
    }
    for (const char* key : {"reshard_after_forward", "shard_prefetch"})
        if (r.has(key) && !zero3)
            r.fail(key, std::string(key) +
                            " applies to sharded parameters only; it needs sharding: zero3 "
                            "(optim_grads_params)");
    l.reshard_after_forward = r.boolean_or("reshard_after_forward", true);
    l.shard_prefetch = r.boolean_or("shard_prefetch", true);
    if (const auto why = sharding_refusal(l.sharding, l.cp, l.ep); !why.empty())
        r.fail("sharding", why);
}

}  // namespace

std::pair<std::string, std::string> model_split_refusal(const ModelSpec& m, std::int64_t seq_length,
                                                        int tp, int cp, int ep) {
    if (m.attention_heads % tp != 0)
        return {"tp", "attention_heads (" + std::to_string(m.attention_heads) +
                          ") must be divisible by tp (" + std::to_string(tp) + ")"};
    if (m.kv_heads % tp != 0 && tp % m.kv_heads != 0)
        return {"tp", "kv_heads (" + std::to_string(m.kv_heads) + ") and tp (" +
                          std::to_string(tp) + ") must divide one another"};
    if (m.experts == 0 && ep > 1)
        return {"ep", "the model has no experts, so no expert parallelism: ep must be 1 (ep " +
                          std::to_string(ep) + " given)"};
    if (m.experts > 0 && m.experts % ep != 0)
        return {"ep", "experts (" + std::to_string(m.experts) + ") must be divisible by ep (" +
                          std::to_string(ep) + ")"};
    if (seq_length % cp != 0 || (cp > 1 && seq_length % (2 * cp) != 0))
        return {"cp", "seq_length (" + std::to_string(seq_length) +
                          ") must be divisible by 2 x cp for context parallelism"};
    return {};
}

std::string sharding_refusal(Sharding sharding, int cp, int ep) {
    if (sharding < Sharding::Gradients) return {};
    // Gradient and parameter shards are cut over the dp replicas of one context and expert rank;
    // Megatron's sharding over dp x cp and of experts over expert-data-parallel groups is not
    // modelled.
    const std::string name(name_of(kShardingNames, sharding));
    if (cp > 1)
        return "sharding " + name +
               " with cp > 1 is not modelled (gradients and parameters are sharded over dp "
               "only); use cp: 1 or sharding: zero1";
    if (ep > 1)
        return "sharding " + name +
               " with ep > 1 is not modelled (expert parameters would be sharded over "
               "expert-data-parallel groups); use ep: 1 or sharding: zero1";
    return {};
}

namespace {

// The uneven-pipeline keys of `parallelism` (PipelineSplitSpec). What depends on the
// schedule's chunks is checked when the split is made (workload/pipeline_split.cpp).
PipelineSplitSpec parse_pipeline_split(const config::Reader& r) {
    PipelineSplitSpec p;
    if (r.has("first_stage_layers")) {
        p.first_stage_layers = static_cast<int>(r.count("first_stage_layers"));
        p.first_where = r.location("first_stage_layers");
    }
    if (r.has("last_stage_layers")) {
        p.last_stage_layers = static_cast<int>(r.count("last_stage_layers"));
        p.last_where = r.location("last_stage_layers");
    }
    p.account_for_embedding = r.boolean_or("account_for_embedding", false);
    p.embedding_where = r.location("account_for_embedding");
    p.account_for_loss = r.boolean_or("account_for_loss", false);
    p.loss_where = r.location("account_for_loss");
    if (r.has("stage_layers")) {
        const char* expected =
            "a list of layer counts (each >= 0), one per pipeline stage or one per virtual "
            "stage, e.g. [7, 8, 8, 7]";
        const YAML::Node v = r.value("stage_layers");
        if (!v.IsSequence() || v.size() == 0)
            r.fail("stage_layers", std::string("expected ") + expected);
        for (std::size_t i = 0; i < v.size(); ++i) {
            const YAML::Node item = v[i];
            long long n = -1;
            std::size_t used = 0;
            if (item.IsScalar()) {
                try {
                    n = std::stoll(item.Scalar(), &used);
                } catch (const std::exception&) {
                    used = 0;
                }
            }
            if (!item.IsScalar() || used == 0 || used != item.Scalar().size() || n < 0 ||
                n > config::kMaxCount)
                r.fail("stage_layers", "entry " + std::to_string(i) + " (\"" +
                                           (item.IsScalar() ? item.Scalar() : std::string("...")) +
                                           "\") is not a layer count; expected " + expected);
            p.stage_layers.push_back(static_cast<int>(n));
        }
        p.list_where = r.location("stage_layers");
        if (p.first_stage_layers || p.last_stage_layers || p.account_for_embedding ||
            p.account_for_loss)
            r.fail("stage_layers",
                   "give either stage_layers or first_stage_layers / last_stage_layers / "
                   "account_for_embedding / account_for_loss, not both: the list already says "
                   "where every layer goes");
    }
    // Megatron-LM refuses the same combination (TransformerConfig): the first and last stages'
    // counts already decide what the embedding and loss leave room for.
    if ((p.first_stage_layers || p.last_stage_layers) &&
        (p.account_for_embedding || p.account_for_loss))
        r.fail(p.account_for_embedding ? "account_for_embedding" : "account_for_loss",
               "cannot be combined with first_stage_layers / last_stage_layers (as in "
               "Megatron-LM); give the first and last stages' layer counts alone");
    return p;
}

// The keys of `parallelism` that are read as given: the sizes, the overlaps, the context
// parallelism's communication and the rank order.
void read_layout_keys(const config::Reader& r, ParallelLayout& l) {
    l.tp = static_cast<int>(r.count_or("tp", 1));
    l.pp = static_cast<int>(r.count_or("pp", 1));
    l.cp = static_cast<int>(r.count_or("cp", 1));
    l.ep = static_cast<int>(r.count_or("ep", 1));
    l.vpp = static_cast<int>(r.count_or("vpp", 1));
    l.sequence_parallel = r.boolean_or("sequence_parallel", false);
    l.distributed_optimizer = r.boolean_or("distributed_optimizer", false);
    l.overlap_grad_reduce = r.boolean_or("overlap_grad_reduce", false);
    l.grad_reduce_after_backward = r.boolean_or("grad_reduce_after_backward", false);
    if (l.grad_reduce_after_backward && l.overlap_grad_reduce)
        r.fail("grad_reduce_after_backward",
               "cannot be combined with overlap_grad_reduce (which reduces buckets during the last "
               "backward pass); set one of them");
    if (r.has("ddp_bucket_size")) {
        // Parameters, as Megatron-LM's --ddp-bucket-size (not bytes or MB): below 100,000 a
        // model would need millions of buckets, which is a unit mistake, not a layout.
        l.ddp_bucket_size = r.integer("ddp_bucket_size");
        if (l.ddp_bucket_size < 100'000)
            r.fail("ddp_bucket_size",
                   "counted in parameters (Megatron-LM's --ddp-bucket-size), expected at least "
                   "100000, found " +
                       std::to_string(l.ddp_bucket_size));
    }
    l.overlap_p2p_comm = r.boolean_or("overlap_p2p_comm", false);
    l.tp_comm_overlap = r.boolean_or("tp_comm_overlap", false);
    l.overlap_param_gather = r.boolean_or("overlap_param_gather", false);
    l.cp_comm_type = r.choice("cp_comm_type", kCpCommTypeNames, std::optional{CpCommType::P2p});
    if (r.has("cp_a2a_size")) {
        l.cp_a2a_size = static_cast<int>(r.count("cp_a2a_size"));
        if (l.cp_comm_type != CpCommType::A2aP2p)
            r.fail("cp_a2a_size", "applies only with cp_comm_type: a2a+p2p");
    }
    l.order = r.choice("order", kRankOrderNames, std::optional{RankOrder::TpCpDpPp});
}

// The layout's dp: `dp:`, checked against the topology's `world` GPUs, or what the GPUs left over
// by tp x pp x cp make. `part`: a shared-fabric job (session/jobs.hpp), which may take fewer GPUs
// than the topology has and must then give dp.
void layout_dp(const config::Reader& r, ParallelLayout& l, int world, bool part) {
    // In 64 bits and checked: tp = pp = 65536 would wrap an int product to 0.
    const auto product = checked_product({l.tp, l.pp, l.cp});
    if (!product || *product > world)
        r.fail(l.tp >= l.pp && l.tp >= l.cp ? "tp"
               : l.pp >= l.cp               ? "pp"
                                            : "cp",
               "tp x pp x cp = " + std::to_string(l.tp) + " x " + std::to_string(l.pp) + " x " +
                   std::to_string(l.cp) + " = " +
                   (product ? std::to_string(*product) : std::string("more than 2^63")) +
                   " GPUs, more than the topology's " + std::to_string(world) +
                   "; choose tp, pp and cp whose product divides " + std::to_string(world));
    const int model_parallel = static_cast<int>(*product);
    if (r.has("dp")) {
        l.dp = static_cast<int>(r.count("dp"));
        const auto total = checked_product({model_parallel, l.dp});
        if (part && total && *total <= world) {
            // A job on part of a shared topology: any W up to the topology's GPUs.
        } else if (!total || *total != world)
            r.fail("dp", "tp x pp x dp x cp = " + std::to_string(l.tp) + " x " +
                             std::to_string(l.pp) + " x " + std::to_string(l.dp) + " x " +
                             std::to_string(l.cp) + " = " +
                             (total ? std::to_string(*total) : std::string("more than 2^63")) +
                             " GPUs, but the topology has " + std::to_string(world) +
                             (part ? " (a job may take up to all of them)"
                              : world % model_parallel == 0
                                  ? "; use dp: " + std::to_string(world / model_parallel)
                                  : ""));
    } else if (part) {
        r.fail_here("a job on a shared topology needs dp: its GPUs are tp x pp x dp x cp");
    } else {
        if (world % model_parallel != 0)
            r.fail_here("tp x pp x cp = " + std::to_string(model_parallel) +
                        " does not divide the topology's " + std::to_string(world) +
                        " GPUs; choose tp, pp and cp whose product divides " +
                        std::to_string(world));
        l.dp = world / model_parallel;
    }
}

// The layout's rules that join several keys (before sharding is read).
void check_layout(const config::Reader& r, const ParallelLayout& l, ExperimentSpec& spec) {
    if (l.ep > 1 && (l.dp * l.cp) % l.ep != 0)
        r.fail("ep", "expert parallelism " + std::to_string(l.ep) +
                         " must divide dp x cp = " + std::to_string(l.dp * l.cp));
    if (l.sequence_parallel && l.tp == 1)
        spec.warnings.push_back("sequence_parallel has no effect with tp = 1");
    if (l.tp_comm_overlap && !(l.sequence_parallel && l.tp > 1))
        r.fail("tp_comm_overlap",
               "overlaps the tensor-parallel all-gathers and reduce-scatters of sequence "
               "parallelism (Megatron-LM requires --sequence-parallel with --tp-comm-overlap); "
               "set sequence_parallel: true and tp > 1");
    if (l.cp_comm_type == CpCommType::A2aP2p) {
        if (l.cp_a2a_size == 0)
            r.fail("cp_comm_type",
                   "a2a+p2p needs cp_a2a_size: the all-to-all group size inside "
                   "each ring step (Megatron-LM's "
                   "--hierarchical-context-parallel-sizes), dividing cp = " +
                       std::to_string(l.cp));
        if (l.cp_a2a_size < 2 || l.cp % l.cp_a2a_size != 0 || l.cp_a2a_size == l.cp)
            r.fail("cp_a2a_size", "must divide cp = " + std::to_string(l.cp) +
                                      " and lie strictly between 1 and cp (a ring of at least "
                                      "two groups); found " +
                                      std::to_string(l.cp_a2a_size));
    }
}

// The overlaps and reductions that sharding excludes.
void check_layout_sharding(const config::Reader& r, const ParallelLayout& l) {
    if (l.overlap_param_gather && l.sharding != Sharding::Optimizer)
        r.fail("overlap_param_gather",
               "overlaps the distributed optimizer's parameter all-gather (Megatron-LM requires "
               "--use-distributed-optimizer with --overlap-param-gather); set "
               "distributed_optimizer: true or sharding: zero1");
    if (l.grad_reduce_after_backward && l.sharding >= Sharding::Gradients)
        r.fail("grad_reduce_after_backward",
               "cannot be combined with sharding " +
                   std::string(name_of(kShardingNames, l.sharding)) +
                   " (which reduce-scatters each unit's gradients as its backward ends); use "
                   "sharding: none or zero1");
}

// `part`: a shared-fabric job (session/jobs.hpp), which may take fewer GPUs than the topology has
// and must then give dp.
ParallelLayout parse_layout(const config::Reader& r, int world, ExperimentSpec& spec,
                            bool part = false) {
    ParallelLayout l;
    read_layout_keys(r, l);
    layout_dp(r, l, world, part);
    check_layout(r, l, spec);
    parse_sharding(r, l);
    check_layout_sharding(r, l);
    spec.pipeline_split = parse_pipeline_split(r);
    r.finish();
    return l;
}

TrainingSpec parse_training(const config::Reader& r) {
    TrainingSpec t;
    t.micro_batch_size = static_cast<int>(r.count_or("micro_batch_size", 1));
    t.global_batch_size = static_cast<int>(r.count("global_batch_size"));
    t.seq_length = static_cast<int>(r.count_or("seq_length", 2048));
    t.recompute = r.choice("recompute", kRecomputeNames, std::optional{Recompute::None});
    t.recompute_method = r.choice("recompute_method", kRecomputeMethodNames,
                                  std::optional{RecomputeMethod::Uniform});
    t.recompute_layers = static_cast<int>(r.count_or("recompute_layers", 1));
    for (const char* key : {"recompute_method", "recompute_layers"})
        if (r.has(key) && t.recompute != Recompute::Full)
            r.fail(key, std::string("applies to full recomputation only (recompute: full, "
                                    "Megatron-LM's --recompute-granularity full); recompute is ") +
                            recompute_name(t.recompute));
    t.precision = r.choice("precision", kTrainingPrecisionNames, std::optional{Precision::Bf16});
    t.fp8_recipe = r.choice("fp8_recipe", kFp8RecipeNames, std::optional{Fp8Recipe::Tensorwise});
    if (r.has("fp8_recipe") && t.precision != Precision::Fp8)
        r.fail("fp8_recipe", std::string("applies to precision: fp8; precision is ") +
                                 precision_name(t.precision));
    t.attention = r.choice("attention", kAttentionNames, std::optional{Attention::Flash});
    t.optimizer = r.choice("optimizer", kOptimizerNames, std::optional{Optimizer::Adam});
    r.finish();
    return t;
}

// The host of each framework (docs/compute-model.md, "The host", derives every figure).
HostModel default_host(Framework framework) {
    HostModel h;
    switch (framework) {
        case Framework::None:
            return h;
        case Framework::Megatron:
            // Megatron-LM runs eager PyTorch too: the same costs per launch and pass, fewer
            // launches (fused kernels), and torch.cuda.synchronize() after batched p2p.
            h = default_host(Framework::Pytorch);
            h.sync_after_p2p = true;
            h.runtime_pass = Time::zero();
            return h;
        case Framework::Pytorch:
            h.enabled = true;
            h.launch = Time::ns(25'000);
            h.pass = Time::ns(100'000);
            h.backward = Time::ns(300'000);
            h.p2p = Time::ns(200'000);
            h.runtime_pass = Time::ns(250'000);
            h.sync_after_p2p = false;
            return h;
    }
    return h;
}

// `calibration:` (a path relative to the experiment), applied to the roofline and host of `c`.
void read_compute_calibration(const config::Reader& r, ComputeSpec& c) {
    const std::string file = r.string("calibration");
    CalibrationFile cal;
    try {
        cal = load_calibration(r.path("calibration"));
    } catch (const ConfigError& e) {
        if (e.where().line > 0) throw;
        throw ConfigError(r.location("calibration"),
                          "'calibration': cannot load \"" + file + "\" (" +
                              r.document().resolve(file).string() + "): " + e.message());
    }
    if (!cal.has_compute())
        r.fail("calibration", "\"" + file +
                                  "\" holds no compute constants (it was fitted on "
                                  "nccl-tests output alone); a network calibration goes "
                                  "under network: {calibration: FILE}");
    apply_calibration(cal, c.roofline, c.host);
    c.calibration_file = file;
    c.calibration_path = r.document().resolve(file);
    c.calibration_gpu_model = cal.gpu_model;
}

// `host:`, over the framework's default host.
void read_host(const config::Reader& h, ComputeSpec& c) {
    if (c.framework == Framework::None)
        h.fail_here(
            "a host model needs compute.framework (megatron or pytorch): profiled "
            "times are GPU time");
    c.host.enabled = h.boolean_or("enabled", true);
    c.host.launch = h.time_opt("launch").value_or(c.host.launch);
    c.host.pass = h.time_opt("pass").value_or(c.host.pass);
    c.host.backward = h.time_opt("backward").value_or(c.host.backward);
    c.host.p2p = h.time_opt("p2p").value_or(c.host.p2p);
    c.host.runtime_pass = h.time_opt("runtime_pass").value_or(c.host.runtime_pass);
    c.host.sync_after_p2p = h.boolean_or("sync_after_p2p", c.host.sync_after_p2p);
    h.finish();
}

// The keys of `model: profile`: measured times per layer or per stage.
void read_profile(const config::Reader& r, ProfileCompute& p) {
    p.layer_forward = r.time_opt("layer_forward");
    p.layer_backward = r.time_opt("layer_backward");
    p.layer_backward_input = r.time_opt("layer_backward_input");
    p.layer_backward_weight = r.time_opt("layer_backward_weight");
    p.stage_forward = r.time_opt("stage_forward");
    p.stage_backward = r.time_opt("stage_backward");
    p.embedding_forward = r.time_opt("embedding_forward").value_or(Time::zero());
    p.embedding_backward = r.time_opt("embedding_backward").value_or(Time::zero());
    p.output_forward = r.time_opt("output_forward").value_or(Time::zero());
    p.output_backward = r.time_opt("output_backward").value_or(Time::zero());
    p.optimizer_step = r.time_opt("optimizer_step").value_or(Time::zero());
    p.op_overhead = r.time_opt("op_overhead").value_or(Time::zero());
    p.estimate_unprofiled = r.choice("unprofiled", {"zero", "roofline"}, "zero") == "roofline";
    p.embedding_given = r.has("embedding_forward") || r.has("embedding_backward");
    p.output_given = r.has("output_forward") || r.has("output_backward");
    p.optimizer_given = r.has("optimizer_step");
    if (r.has("profiled_recompute")) {
        p.measured_recompute = r.choice("profiled_recompute", kRecomputeNames);
        p.recompute_where = r.location("profiled_recompute");
    }
    const bool per_layer = p.layer_forward.has_value();
    const bool per_stage = p.stage_forward.has_value();
    if (per_layer == per_stage)
        r.fail_here(per_layer ? "give either layer_forward/layer_backward or "
                                "stage_forward/stage_backward, not both"
                              : "profile compute needs layer_forward (with layer_backward, or "
                                "layer_backward_input and layer_backward_weight) or "
                                "stage_forward and stage_backward");
    if (per_layer) {
        const bool split = p.layer_backward_input || p.layer_backward_weight;
        if (p.layer_backward && split)
            r.fail("layer_backward",
                   "give layer_backward or layer_backward_input + "
                   "layer_backward_weight, not both");
        if (!p.layer_backward && !(p.layer_backward_input && p.layer_backward_weight))
            r.fail_here(
                "missing layer_backward (or both layer_backward_input and "
                "layer_backward_weight)");
        if (p.stage_backward) r.fail("stage_backward", "stage_backward goes with stage_forward");
    } else {
        if (!p.stage_backward) r.fail_here("missing stage_backward (stage_forward is given)");
        if (p.layer_backward || p.layer_backward_input || p.layer_backward_weight)
            r.fail_here("layer_backward* keys go with layer_forward, not stage_forward");
    }
}

// The keys of the roofline model.
void read_roofline(const config::Reader& r, RooflineCompute& f) {
    if (auto sus = r.choice("clocks", {"sustained", "burst"}, "sustained"); sus == "burst")
        f.sustained = false;
    f.efficiency_scale = r.number_or("efficiency_scale", 1.0);
    if (f.efficiency_scale <= 0 || f.efficiency_scale > 2)
        r.fail("efficiency_scale", "must be in (0, 2]");
    f.launch_overhead = r.time_opt("launch_overhead").value_or(f.launch_overhead);
    f.op_overhead = r.time_opt("op_overhead").value_or(Time::zero());
}

ComputeSpec parse_compute(const config::Reader& r) {
    ComputeSpec c;
    const auto kind = r.choice("model", {"roofline", "profile"}, "roofline");
    // Measured profile times are GPU time: a plain profile run adds no host and no framework.
    const std::optional<Framework> framework =
        r.has("framework") ? std::optional{r.choice("framework", kFrameworkNames)} : std::nullopt;
    c.framework = framework.value_or(kind == "profile" ? Framework::None : Framework::Megatron);
    c.host = default_host(c.framework);
    c.roofline.framework = c.framework == Framework::None ? Framework::Megatron : c.framework;
    c.roofline.main_grads = r.choice("main_grads", kMainGradsNames, std::optional{MainGrads::Fp32});
    c.roofline.moe_grouped_gemm = r.boolean_or("moe_grouped_gemm", true);
    // A calibration file (path relative to the experiment) goes on top of the catalogue; the
    // keys below, written in the experiment itself, win over it.
    if (r.has("calibration")) read_compute_calibration(r, c);
    if (auto h = r.map_opt("host")) read_host(*h, c);
    c.interference = r.number_or("interference", c.interference);
    if (!(c.interference >= 0 && c.interference <= 1))
        r.fail("interference",
               "must be in [0, 1] (the fraction by which compute slows while "
               "communication overlaps it; 0.10 measured on H200)");
    if (kind == "profile") {
        c.kind = ComputeSpec::Kind::Profile;
        read_profile(r, c.profile);
    } else {
        read_roofline(r, c.roofline);
    }
    r.finish();
    return c;
}

// `file_read`, when given, receives the calibration file `calibration:` named (empty for
// measured or nominal).
network::NetworkConfig parse_network(const config::Reader& r, std::filesystem::path* file_read) {
    const auto fidelity =
        r.choice("model", network::kFidelityNames, std::optional{network::Fidelity::Flow});
    // `calibration: measured` (default) uses the link efficiencies and per-step overhead fitted on
    // the NCCL microbenchmarks; `nominal` uses the links' datasheet capacity with no overhead; a
    // file (clustersim calibrate --nccl-tests, relative to the experiment) puts its per-operation
    // constants on top of `measured`.
    const std::string cal = r.string_or("calibration", "measured");
    network::NetworkConfig n =
        cal == "nominal" ? network::NetworkConfig{} : network::NetworkConfig::calibrated(fidelity);
    if (cal != "measured" && cal != "nominal") {
        CalibrationFile file;
        try {
            file = load_calibration(r.path("calibration"));
        } catch (const ConfigError& e) {
            if (e.where().line > 0) throw;
            r.fail("calibration",
                   "expected measured, nominal or a calibration file; cannot load "
                   "\"" +
                       cal + "\" (" + r.document().resolve(cal).string() + "): " + e.message());
        }
        if (file.network.empty())
            r.fail("calibration", "\"" + cal +
                                      "\" holds no network constants (fit them with clustersim "
                                      "calibrate --nccl-tests)");
        apply_network_calibration(file, n);
        if (file_read) *file_read = r.document().resolve(cal);
    }
    n.fidelity = fidelity;
    if (auto t = r.time_opt("step_overhead")) n.step_overhead = *t;
    // NCCL's protocols (docs/network.md, "Protocols"): per operation auto (as NCCL's tuning
    // picks by size), simple, ll128 or ll.
    if (auto p = r.map_opt("protocols")) {
        for (const auto& op : network::kCollectiveNames)
            if (p->has(std::string(op.name)))
                n.protocol[static_cast<std::size_t>(op.value)] =
                    p->choice(std::string(op.name), network::kProtocolNames);
        p->finish();
    }
    if (r.has("channels")) {
        const auto channels = r.integer("channels");
        if (channels < 1 || channels > 64)
            r.fail("channels",
                   "must be 1 to 64 (NCCL's channels per collective: LL128's "
                   "per-channel rate limit applies this many times)");
        n.channels = static_cast<int>(channels);
    }
    r.finish();
    return n;
}

// The document of `path`, to apply overrides to: parsed, or with `documents` copied from the one
// parsed there.
config::Document editable_document(const std::filesystem::path& path,
                                   config::DocumentCache* documents) {
    return documents ? config::copy_document(*documents->load(path)) : config::load_document(path);
}

// True when `overrides` change tp, pp, cp or the topology and do not give dp (or the whole
// parallelism mapping) themselves.
bool layout_resized_without_dp(const std::vector<std::string>& overrides) {
    bool resized = false;
    for (const auto& o : overrides) {
        const auto [key, value] = config::split_assignment(o);
        if (key == "parallelism" || key == "parallelism.dp") return false;
        resized = resized || key == "parallelism.tp" || key == "parallelism.pp" ||
                  key == "parallelism.cp" || key == "topology" || key.rfind("topology.", 0) == 0;
    }
    return resized;
}

// Overrides for the topology: keys without their `topology.` prefix, with their values.
using TopologyOverrides = std::vector<std::pair<std::string, std::string>>;

// Applies `overrides` to `doc`, but for those under `topology.`, which it returns.
TopologyOverrides apply_overrides(config::Document& doc, const std::vector<std::string>& overrides,
                                  bool part) {
    TopologyOverrides topo_overrides;
    // As Megatron-LM derives its data-parallel size from the world size: a --set that changes the
    // model-parallel sizes or the topology while leaving dp alone lets dp follow the GPU count,
    // rather than keep a file's dp that no longer fits (`run --set parallelism.tp=4` on the
    // default). A job on part of a shared topology keeps its dp: it says how many GPUs it takes.
    if (!part && layout_resized_without_dp(overrides))
        config::apply_override(doc, "parallelism.dp", "~");
    for (const auto& o : overrides) {
        auto [key, value] = config::split_assignment(o);
        if (key.rfind("topology.", 0) == 0) {
            topo_overrides.emplace_back(key.substr(9), value);
            continue;
        }
        config::apply_override(doc, key, value);
    }
    return topo_overrides;
}

// The document of a topology file the experiment names, with the topology's overrides applied.
config::Document topology_file_document(const config::Document& doc, const config::Reader& root,
                                        const YAML::Node& topo_node,
                                        const TopologyOverrides& topo_overrides,
                                        config::DocumentCache* documents) {
    config::Document tdoc;
    try {
        tdoc = editable_document(doc.resolve(topo_node), documents);
    } catch (const ConfigError& e) {
        if (e.where().line > 0) throw;
        throw ConfigError(root.location("topology"),
                          "'topology': cannot load \"" + topo_node.Scalar() + "\" (" +
                              doc.resolve(topo_node).string() + "): " + e.message());
    }
    tdoc.override_prefix = "topology.";
    for (const auto& [k, v] : topo_overrides)
        config::apply_override(tdoc, k, v);
    return tdoc;
}

// An inline topology as a document of its own. Overrides address it as topology.<key> within
// the experiment itself, so they are applied to `doc` too.
config::Document inline_topology_document(config::Document& doc,
                                          const TopologyOverrides& topo_overrides) {
    for (const auto& [k, v] : topo_overrides)
        config::apply_override(doc, "topology." + k, v);
    config::Document tdoc = doc;
    // reset, not assignment: assigning one yaml-cpp node to another rewrites the node both
    // copies share, which would replace the experiment's root by its topology.
    const YAML::Node& experiment_root = doc.root;
    tdoc.root.reset(experiment_root["topology"]);
    tdoc.overrides.clear();
    tdoc.override_prefix = "topology.";
    for (const auto& [k, v] : topo_overrides)
        tdoc.overrides[k] = v;
    return tdoc;
}

// The experiment's cluster: its topology (a path, resolved against the experiment's folder, or
// an inline mapping) with `topo_overrides`, built or taken from `clusters`. Sets
// spec.topology_source.
std::shared_ptr<const topology::Cluster> experiment_cluster(
    config::Document& doc, const config::Reader& root, const TopologyOverrides& topo_overrides,
    std::int64_t max_memory, ClusterCache* clusters, config::DocumentCache* documents,
    ExperimentSpec& spec) {
    const YAML::Node topo_node = root.value("topology");
    if (!topo_node.IsDefined() || topo_node.IsNull())
        root.fail("topology",
                  "missing; expected the path of a topology file, e.g. "
                  "../topologies/h200-2gpu-nvlink.yaml");
    std::shared_ptr<const topology::Cluster> cluster;
    // The cache key: what the cluster is built from, then its overrides and the memory limit.
    const auto cache_key = [&](const std::string& source) {
        std::string key = source;
        key.append("\n").append(std::to_string(max_memory));
        for (const auto& [k, v] : topo_overrides)
            key.append("\n").append(k).append("=").append(v);
        return key;
    };
    const auto build = [&](const std::string& source, const config::Document& tdoc) {
        const auto make = [&] { return topology::load_cluster(tdoc, max_memory); };
        if (clusters) return clusters->get(cache_key(source), make, tdoc.display_path);
        return std::shared_ptr<const topology::Cluster>(
            std::make_shared<topology::Cluster>(make()));
    };
    // A topology file with these overrides already built into the cache loaded, took its
    // overrides and built then: its file is not parsed again (a sweep's combinations).
    if (topo_node.IsScalar() && clusters)
        cluster =
            clusters->find(cache_key(std::string("file ").append(doc.resolve(topo_node).string())),
                           spec.topology_source);
    if (cluster) {
        // held: nothing to load
    } else if (topo_node.IsScalar()) {
        const config::Document tdoc =
            topology_file_document(doc, root, topo_node, topo_overrides, documents);
        spec.topology_source = tdoc.display_path;
        cluster = build(std::string("file ").append(doc.resolve(topo_node).string()), tdoc);
    } else if (topo_node.IsMap()) {
        const config::Document tdoc = inline_topology_document(doc, topo_overrides);
        spec.topology_source = doc.display_path;
        std::string source = std::string("inline ").append(doc.display_path).append("\n");
        canonical_text(tdoc.root, source);
        cluster = build(source, tdoc);
    } else {
        root.fail("topology", "expected a file path or a mapping");
    }
    return cluster;
}

// A calibration fitted on another GPU is allowed (a what-if), but said. Names are compared
// through the catalogue, so that "H200" and "H200-SXM" agree.
void warn_calibration_gpu(ExperimentSpec& spec) {
    const auto canonical = [](const std::string& name) {
        const topology::GpuModel* known = topology::find_catalog_model(name);
        return known ? known->name : name;
    };
    const std::string fitted_name = canonical(spec.compute.calibration_gpu_model);
    for (const auto& m : spec.cluster->gpu_models())
        if (canonical(m.name) != fitted_name)
            spec.warnings.push_back("compute.calibration " + spec.compute.calibration_file +
                                    " was fitted on " + fitted_name + ", applied to " + m.name);
}

// The sections after the topology, each parsed in turn, and the root finished.
void parse_sections(const config::Reader& root, ExperimentSpec& spec, bool part,
                    config::DocumentCache* documents) {
    const topology::Cluster& cluster = *spec.cluster;
    spec.model = parse_model(root.map("model"), &spec.model_file, documents);
    spec.layout_where = root.location("parallelism");
    spec.layout = parse_layout(root.map("parallelism"), cluster.gpu_count(), spec, part);
    spec.training = parse_training(root.map("training"));
    spec.schedule_where = root.location("schedule");
    spec.schedule = root.string_or("schedule", "1f1b");
    // No `compute:` at all means `compute: {}`: the roofline with Megatron-LM's kernels and its
    // host, as documented (docs/yaml/experiment.md), not the roofline without a host.
    if (auto c = root.map_opt("compute"))
        spec.compute = parse_compute(*c);
    else
        spec.compute.host = default_host(spec.compute.framework);
    if (!spec.compute.calibration_file.empty()) warn_calibration_gpu(spec);
    spec.network = network::NetworkConfig::calibrated(network::Fidelity::Flow);
    if (auto n = root.map_opt("network"))
        spec.network = parse_network(*n, &spec.network_calibration_file);
    spec.seed = static_cast<std::uint64_t>(root.count_or("seed", 0, 0));
    if (auto g = root.map_opt("goodput")) spec.goodput = detail::parse_goodput(*g);
    if (auto v = root.map_opt("variability")) {
        spec.variability = detail::parse_variability(*v, cluster);
        if (!spec.variability.hosts.empty() && !spec.compute.host.enabled)
            spec.warnings.push_back(
                "variability.hosts has no effect: there is no host model (compute.host is off "
                "or compute.framework is not given)");
    }
    if (auto f = root.map_opt("faults")) spec.faults = detail::parse_faults(*f, cluster);
    root.has("name");
    root.has("description");
    root.finish();
}

// Checks that need several sections together.
void check_sections(const config::Reader& root, const ExperimentSpec& spec) {
    const auto& m = spec.model;
    const auto& l = spec.layout;
    const auto& t = spec.training;
    const config::Reader par = root.map("parallelism");
    if (t.precision == Precision::Fp8)
        for (const auto& gpu : spec.cluster->gpu_models())
            if (!(gpu.peak_fp8.flops_per_s > 0))
                root.map("training")
                    .fail("precision",
                          "fp8 needs an fp8 peak, and GPU model " + gpu.name +
                              " has none (it has no fp8 tensor cores); use bf16 or "
                              "fp16, or give peak.fp8 under the topology's gpu_models");
    if (const auto [key, why] = model_split_refusal(m, t.seq_length, l.tp, l.cp, l.ep);
        !why.empty())
        par.fail(key, why);
    const config::Reader tr = root.map("training");
    // Byte and FLOP counts of one microbatch multiply these (tokens x width x top_k x ep, in
    // 64-bit integers): sizes whose product leaves no headroom below 2^63 are refused here
    // rather than wrapping later.
    // A token passes through top_k routed and every shared expert.
    const std::int64_t width = std::max({m.hidden_size, m.ffn_hidden_size, m.moe_ffn_hidden_size});
    const std::int64_t experts_per_token =
        std::max<std::int64_t>(1, std::int64_t{m.top_k} + m.shared_experts);
    const auto activations =
        checked_product({t.micro_batch_size, t.seq_length, width, experts_per_token, l.ep, 64});
    if (!activations || *activations > (std::int64_t{1} << 62))
        tr.fail("micro_batch_size",
                "micro_batch_size x seq_length x the model's width (" +
                    std::to_string(t.micro_batch_size) + " x " + std::to_string(t.seq_length) +
                    " x " + std::to_string(width) +
                    (m.shared_experts > 0
                         ? " x top_k + shared_experts " + std::to_string(experts_per_token)
                     : m.top_k > 0 ? " x top_k " + std::to_string(m.top_k)
                                   : std::string()) +
                    ") is too large to simulate; reduce seq_length or micro_batch_size");
    const std::int64_t per_step = std::int64_t{t.micro_batch_size} * l.dp;
    if (t.global_batch_size % per_step != 0)
        tr.fail("global_batch_size", "global_batch_size (" + std::to_string(t.global_batch_size) +
                                         ") must be a multiple of micro_batch_size x dp = " +
                                         std::to_string(t.micro_batch_size) + " x " +
                                         std::to_string(l.dp) + " = " + std::to_string(per_step));
}

// The experiment of `doc` with `overrides` applied (keys under `topology.` go to its topology).
ExperimentSpec load_experiment_document(config::Document doc,
                                        const std::vector<std::string>& overrides,
                                        std::int64_t max_memory, bool part = false,
                                        ClusterCache* clusters = nullptr,
                                        config::DocumentCache* documents = nullptr) {
    ExperimentSpec spec;
    spec.source = doc.display_path;
    const TopologyOverrides topo_overrides = apply_overrides(doc, overrides, part);
    const config::Reader root = config::root_reader(doc);
    if (const YAML::Node& raw = doc.root; raw.IsMap() && raw["jobs"].IsDefined())
        throw ConfigError(root.location("jobs"),
                          "'jobs': a jobs file (several jobs on one topology) runs with "
                          "`clustersim run` (docs/yaml/jobs.md); this command takes one "
                          "experiment");
    spec.cluster =
        experiment_cluster(doc, root, topo_overrides, max_memory, clusters, documents, spec);
    parse_sections(root, spec, part, documents);
    check_sections(root, spec);
    return spec;
}

}  // namespace

std::shared_ptr<const topology::Cluster> ClusterCache::get(
    const std::string& key, const std::function<topology::Cluster()>& build,
    const std::string& source) {
    for (const auto& e : entries_)
        if (e.key == key) return e.cluster;
    auto cluster = std::make_shared<const topology::Cluster>(build());
    ++builds_;
    if (entries_.size() >= kMaxEntries) entries_.erase(entries_.begin());  // the oldest
    entries_.push_back({key, cluster, source});
    return cluster;
}

std::shared_ptr<const topology::Cluster> ClusterCache::find(const std::string& key,
                                                            std::string& source) const {
    for (const auto& e : entries_)
        if (e.key == key) {
            source = e.source;
            return e.cluster;
        }
    return nullptr;
}

ExperimentSpec load_experiment(const std::filesystem::path& path,
                               const std::vector<std::string>& overrides, std::int64_t max_memory,
                               ClusterCache* clusters, config::DocumentCache* documents) {
    return load_experiment_document(editable_document(path, documents), overrides, max_memory,
                                    false, clusters, documents);
}

ExperimentSpec load_experiment(const ExperimentText& source,
                               const std::vector<std::string>& overrides, std::int64_t max_memory,
                               ClusterCache* clusters, config::DocumentCache* documents) {
    return load_experiment_document(
        documents ? config::copy_document(
                        *documents->parse(source.text, source.display_path, source.folder))
                  : config::parse_document(source.text, source.display_path, source.folder),
        overrides, max_memory, false, clusters, documents);
}

ExperimentSpec load_job_experiment(const config::Document& doc, std::int64_t max_memory) {
    return load_experiment_document(doc, {}, max_memory, true);
}

std::string gpu_list_text(const std::vector<int>& gpus) {
    std::string text;
    for (std::size_t i = 0; i < gpus.size();) {
        std::size_t j = i;
        while (j + 1 < gpus.size() && gpus[j + 1] == gpus[j] + 1)
            ++j;
        if (!text.empty()) text += ",";
        text += std::to_string(gpus[i]);
        if (j > i) text.append("-").append(std::to_string(gpus[j]));
        i = j + 1;
    }
    return text;
}

}  // namespace cs::workload
