#include "fit/validate.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "config/document.hpp"
#include "core/atomic_file.hpp"
#include "core/errors.hpp"
#include "core/name_table.hpp"
#include "core/quantity.hpp"
#include "engine/simulation.hpp"
#include "fit/format.hpp"
#include "ingest/inputs.hpp"
#include "network/network.hpp"
#include "replay/host.hpp"
#include "topology/topology_yaml.hpp"
#include "workload/flops.hpp"
#include "workload/groups.hpp"
#include "workload/roofline.hpp"

namespace cs::api {

const char* status_name(ValidationStatus s) {
    switch (s) {
        case ValidationStatus::Pass:
            return "pass";
        case ValidationStatus::Fail:
            return "FAIL";
        case ValidationStatus::KnownGap:
            return "known gap";
        case ValidationStatus::NotReproduced:
            return "not reproduced";
    }
    return "?";
}

namespace {

using detail::fmt;

// Significant digits that keep small and large values readable.
std::string number(double v) {
    const double a = std::fabs(v);
    if (a >= 100) return fmt("%.1f", v);
    if (a >= 10) return fmt("%.2f", v);
    if (a >= 1) return fmt("%.3f", v);
    return fmt("%.4f", v);
}

}  // namespace

std::string error_text(const ValidationCase& r, bool absolute) {
    if (r.status == ValidationStatus::NotReproduced) return "-";
    return absolute ? fmt("%+.4f", r.error) : fmt("%+.1f%%", 100 * r.error);
}

namespace {

std::vector<std::string> string_list(const config::Reader& r, const std::string& key) {
    std::vector<std::string> out;
    if (!r.has(key)) return out;
    const YAML::Node node = r.value(key);
    if (!node.IsSequence()) r.fail(key, "expected a list of strings");
    for (const auto& item : node)
        out.push_back(item.as<std::string>());
    return out;
}

std::string join(const std::vector<std::string>& items, const char* sep) {
    std::string out;
    for (const auto& s : items)
        out += (out.empty() ? "" : sep) + s;
    return out;
}

Time require_time(const config::Reader& r, const std::string& key) {
    const auto t = r.time_opt(key);
    return t ? *t : Time::zero();
}

std::string layout_text(const workload::ExperimentSpec& spec) {
    const auto& m = spec.model;
    const auto& l = spec.layout;
    const auto& t = spec.training;
    std::ostringstream o;
    o << m.layers << "L h" << m.hidden_size << " a" << m.attention_heads << "; tp" << l.tp << " pp"
      << l.pp << " dp" << l.dp;
    if (l.vpp > 1) o << " vpp" << l.vpp;
    if (l.sequence_parallel) o << " sp";
    o << "; b" << t.micro_batch_size << " B" << t.global_batch_size << " m" << t.microbatches(l)
      << " s" << t.seq_length << "; " << spec.schedule << "; recompute "
      << workload::recompute_name(t.recompute) << ", " << workload::precision_name(t.precision)
      << (t.attention == workload::Attention::Unfused ? ", unfused attention" : "") << "; "
      << (spec.compute.kind == workload::ComputeSpec::Kind::Profile ? "profile" : "roofline")
      << "; " << spec.cluster->gpu_count() << " x " << spec.cluster->gpu_model(0).name;
    return o.str();
}

// The simulated time of one point-to-point transfer started by `start` on a fresh network.
template <class Start>
Time transfer_time_alone(const topology::Cluster& cluster, const network::NetworkConfig& config,
                         Start start) {
    struct Client : network::TransferClient {
        Time done = Time::max();
        void on_transfer_done(Simulation& sim, std::uint64_t) override { done = sim.now(); }
    };
    Simulation sim;
    auto net = network::make_network(sim, cluster, config);
    Client client;
    net->set_client(&client);
    start(*net);
    sim.run();
    if (client.done == Time::max())
        throw SimulationError("validate", "a transfer never completed", sim.now());
    return client.done;
}

// A value of a name table (core/name_table.hpp); `also_accepted` are names the caller handled
// before, listed in the message too.
template <class E, std::size_t N>
E pick_named(const config::Reader& r, const std::string& key, const std::array<Named<E>, N>& table,
             const std::vector<std::string>& also_accepted = {}) {
    const std::string value = r.string(key);
    if (auto e = find_named(table, value)) return *e;
    std::vector<std::string> names = names_of(table);
    names.insert(names.end(), also_accepted.begin(), also_accepted.end());
    r.fail(key, "unknown value \"" + value + "\"; expected " + config::join_alternatives(names));
}

topology::Cluster load_topology(const config::Reader& r, const std::vector<std::string>& sets) {
    auto doc = config::load_document(r.path("topology"));
    for (const auto& s : sets) {
        const auto [key, value] = config::split_assignment(s);
        config::apply_override(doc, key, value);
    }
    return topology::load_cluster(doc);
}

// Narayanan et al. eq. 3: FLOPs of one iteration with full recomputation (GEMMs only).
double narayanan_eq3_flops(const workload::ExperimentSpec& spec) {
    const double B = spec.training.global_batch_size, s = spec.training.seq_length;
    const double l = spec.model.layers, h = spec.model.hidden_size, V = spec.model.vocab_size;
    return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
}

void run_experiment(const config::Reader& r, const std::vector<std::string>& sets,
                    const ValidateOptions& options, ValidationCase& out) {
    const auto spec = workload::load_experiment(r.path("experiment"), sets);
    if (!options.run)
        throw SimulationError("validate", "an experiment case needs ValidateOptions::run");
    const auto summary = options.run(spec);
    out.inputs = layout_text(spec);
    const std::string metric = r.string("metric");
    const double t = summary.iteration_time_s;
    if (metric == "iteration_time_s") {
        out.predicted = t;
    } else if (metric == "peak_memory_gb") {
        // The largest GPU's memory at its peak (memory_per_gpu_bytes.total), 1e9 bytes, as
        // torch.cuda.max_memory_allocated reports it in GB.
        out.predicted = static_cast<double>(summary.memory.total.value) * 1e-9;
        out.note = "activations " + number(summary.memory.activations.value * 1e-9) +
                   " GB, 16-bit gradients " +
                   number(summary.memory.temporary_gradients.value * 1e-9) + " GB; iteration " +
                   number(t * 1e3) + " ms";
    } else if (metric == "eq3_tflops_per_gpu") {
        out.predicted = narayanan_eq3_flops(spec) / (t * summary.world_size) * 1e-12;
        const double peak =
            workload::peak_rate(spec.cluster->gpu_model(0), spec.training.precision).flops_per_s;
        out.note = "iteration " + number(t) +
                   " s; summary hfu x peak = " + number(summary.hfu * peak * 1e-12) + " TFLOP/s";
    } else if (metric == "zb_bubble_rate") {
        const auto zr = r.map("zb_times");
        const double work_ms =
            zr.number("forward_ms") + zr.number("backward_ms") + zr.number("weight_ms");
        zr.finish();
        const double work = summary.microbatches * work_ms * 1e-3;
        // The paper's cost: the longest execution time of a stage (first pass start to last
        // pass end). It equals the iteration time for schedules whose first stage starts first
        // and ends last (1F1B, 1F1B-I, ZB-H1), not for ZB-H2's parallelogram.
        double cost = 0;
        for (const auto& st : summary.stages)
            cost = std::max(cost, st.pass_span_s);
        if (!(cost > 0)) throw SimulationError("validate", "no pipeline pass ran");
        out.predicted = (cost - work) / cost;
        out.note = "iteration " + number(t * 1e3) + " ms; longest stage span " +
                   number(cost * 1e3) + " ms; simulator bubble_fraction " +
                   number(summary.bubble_fraction);
    } else {
        r.fail("metric", "unknown metric \"" + metric +
                             "\"; expected iteration_time_s, peak_memory_gb, eq3_tflops_per_gpu "
                             "or zb_bubble_rate");
    }
}

// `part: attention`: only the attention core's kernels of the layer's forward or backward (the
// steps flagged Step::AttentionCore), as an attention microbenchmark times them without the
// layer's projections.
void run_layer_attention(const config::Reader& r, const workload::ExperimentSpec& spec,
                         const workload::LayerPasses& passes, const std::string& which,
                         ValidationCase& out) {
    if (which != "forward" && which != "backward")
        r.fail("layer_pass", "expected forward or backward with part: attention");
    const auto& pass = which == "forward" ? passes.forward : passes.backward;
    Time t;
    std::int64_t launches = 0;
    for (const auto& step : pass.steps) {
        if (!step.has(workload::Step::AttentionCore)) continue;
        t += step.duration * step.repeat;
        launches += std::int64_t{step.launches} * step.repeat;
    }
    if (launches == 0) r.fail("part", "the layer's " + which + " pass has no attention core");
    out.predicted = t.seconds() * 1e3;
    out.inputs = layout_text(spec) + "; " + which + " attention core kernels";
    out.note = std::to_string(launches) + " kernels, GPU time only";
}

// `time: kernels`: the GPU time of the pass's kernels alone (no host, no collectives), as a
// profiler's kernel sum counts it; forward_backward sums both passes.
void run_layer_kernels(const config::Reader& r, const workload::ExperimentSpec& spec,
                       const workload::LayerPasses& passes, const std::string& which,
                       ValidationCase& out) {
    if (which != "forward" && which != "forward_backward")
        r.fail("layer_pass", "expected forward or forward_backward with time: kernels");
    const Time t = passes.forward.compute_time() +
                   (which == "forward" ? Time::zero() : passes.backward.compute_time());
    out.predicted = t.seconds() * 1e3;
    out.inputs = layout_text(spec) + "; " + which + " kernels";
    out.note = std::to_string(passes.forward.launches() +
                              (which == "forward" ? 0 : passes.backward.launches())) +
               " kernels, GPU time only";
}

// A layer call's forward and backward as kernel blocks, and the time of their collectives.
struct LayerCall {
    std::vector<replay::KernelBlock> fwd, bwd;
    Time comm_fwd, comm_bwd;
};

// Each step of the forward, then of the backward, as kernel blocks: compute steps with their
// roofline time, collectives simulated alone on the experiment's network over GPU 0's group
// (worker 0, member 0, in Megatron's rank order: the replay's own).
LayerCall layer_call(const workload::ExperimentSpec& spec, const workload::RankLayout& ranks_of,
                     const workload::LayerPasses& lp) {
    LayerCall c;
    for (const auto* plan : {&lp.forward, &lp.backward}) {
        std::vector<Time> times;
        Time& comm = plan == &lp.forward ? c.comm_fwd : c.comm_bwd;
        for (const auto& step : plan->steps) {
            if (step.kind == workload::Step::Kind::Compute) {
                times.push_back(step.duration);
                continue;
            }
            const auto ranks = ranks_of.group(step.group, 0, 0).gpus;
            const Time one = ranks.size() < 2 ? Time::zero()
                                              : network::isolated_collective_time(
                                                    *spec.cluster, spec.network, step.collective,
                                                    ranks, step.size);
            times.push_back(one);
            comm += one * step.repeat;
        }
        (plan == &lp.forward ? c.fwd : c.bwd) = replay::kernel_blocks(plan->steps, times);
    }
    return c;
}

Time gpu_time(const std::vector<replay::KernelBlock>& blocks) {
    Time t;
    for (const auto& b : blocks)
        t += b.time;
    return t;
}

// With a host model a call is issued kernel by kernel from an idle GPU (no pipeline pass around
// it, so no per-pass framework cost); without one it is the sum of its steps. The forward has no
// framework work before its first kernel (the stage and chunk timings of
// h200-pipeline-runtime.json: 0.03 ms fixed per forward call); the backward starts with the
// framework's and the autograd engine's work (0.37 ms per backward call there): host.pass +
// host.backward, spent after the host has issued the forward's kernels.
Time forward_end(const workload::HostModel& host, const LayerCall& c) {
    return host.enabled ? replay::host_issue(Time::zero(), host.launch, c.fwd).earliest_end
                        : gpu_time(c.fwd);
}

// Forward + backward as one call: kernel j of the backward is issued at (the forward's issue) +
// lead + (j + 1) launch while the GPU may still run the forward, so the call ends at the later
// of the forward's end plus the backward's GPU time and the forward's issue plus the backward's
// own closed form from its lead: a lead shorter than the forward's GPU time is hidden.
Time call_end(const workload::HostModel& host, const LayerCall& c) {
    const Time chained = forward_end(host, c) + gpu_time(c.bwd);
    if (!host.enabled) return chained;
    const auto f = replay::host_issue(Time::zero(), host.launch, c.fwd);
    const auto b = replay::host_issue(host.pass + host.backward, host.launch, c.bwd);
    return std::max(chained, f.issue + b.earliest_end);
}

// The layer's forward or backward as the microbenchmarks time it: two calls of the bare layer,
// each in its own loop: the forward, and forward + backward; the backward row is their
// difference. `fwd_bwd_clocks` gives the clocks of the (forward + backward) loop when they
// differ from the experiment's (docs/validation.md: the longer loop runs under the power cap,
// the forward loop does not).
void run_layer_wall(const config::Reader& r, const workload::ExperimentSpec& spec,
                    const workload::LayerPasses& passes, const std::string& which, bool moe,
                    ValidationCase& out) {
    if (which != "forward" && which != "backward")
        r.fail("layer_pass", "expected forward or backward");
    const std::string clocks =
        r.choice("fwd_bwd_clocks", {"experiment", "sustained", "burst"}, "experiment");
    if (which == "forward" && clocks != "experiment")
        r.fail("fwd_bwd_clocks",
               "applies to backward rows only (the forward row times the "
               "forward alone)");
    const workload::RankLayout ranks_of(spec.layout);
    const auto& host = spec.compute.host;
    const LayerCall alone = layer_call(spec, ranks_of, passes);
    const bool other_clocks =
        clocks != "experiment" && (clocks == "sustained") != spec.compute.roofline.sustained;
    auto compute = spec.compute.roofline;
    compute.sustained = clocks == "sustained";
    const auto both_passes =
        other_clocks ? workload::roofline_layer(spec.model, spec.layout, spec.training,
                                                spec.cluster->gpu_model(0), compute, moe)
                     : passes;
    const LayerCall both = other_clocks ? layer_call(spec, ranks_of, both_passes) : alone;
    const Time fwd_end = forward_end(host, alone);
    const Time total = which == "forward" ? fwd_end : call_end(host, both) - fwd_end;
    const auto& pass = which == "forward" ? passes.forward : both_passes.backward;
    const Time comm = which == "forward" ? alone.comm_fwd : both.comm_bwd;
    out.predicted = total.seconds() * 1e3;
    out.inputs = layout_text(spec) + "; " + which;
    out.note = "kernels and launch gaps " + number(pass.compute_time().seconds() * 1e3) +
               " ms in " + std::to_string(pass.launches()) + " launches + collectives " +
               number(comm.seconds() * 1e3) + " ms";
    if (which == "backward")
        out.note += "; (forward + backward) " + number(call_end(host, both).seconds() * 1e3) +
                    " ms" + (other_clocks ? " at " + clocks + " clocks" : std::string()) +
                    " - forward " + number(fwd_end.seconds() * 1e3) + " ms";
    if (host.enabled)
        out.note += "; host " + format_time(host.launch) + " per launch, " +
                    format_time(host.pass + host.backward) + " before the backward";
}

// One transformer layer's forward or backward pass on one GPU of the experiment's layout: the
// roofline compute of workload::roofline_layer plus its collectives, each simulated alone
// (network::isolated_collective_time) on the experiment's network over GPU 0's group of the
// step's kind, as workload::RankLayout places it (the CP group of GPU 0 is {0, tp, 2 tp, ...}).
void run_layer(const config::Reader& r, const std::vector<std::string>& sets, ValidationCase& out) {
    const auto spec = workload::load_experiment(r.path("experiment"), sets);
    if (spec.compute.kind != workload::ComputeSpec::Kind::Roofline)
        r.fail("experiment", "layer cases need a roofline experiment");
    const auto& gpu = spec.cluster->gpu_model(0);
    const bool moe = workload::is_moe_layer(spec.model, 0);
    const bool kernels = r.choice("time", {"wall", "kernels"}, "wall") == "kernels";
    // A profiler's kernel sum is the kernels' own time: no launch gap between them (the steps
    // carry one per launch for the wall clock) and no per-op overhead. (Under sustained clocks
    // the tensor-core duty is then taken over the kernels alone; every kernel-sum case runs at
    // burst clocks.)
    workload::RooflineCompute compute = spec.compute.roofline;
    if (kernels) {
        compute.launch_overhead = Time::zero();
        compute.op_overhead = Time::zero();
    }
    const auto passes =
        workload::roofline_layer(spec.model, spec.layout, spec.training, gpu, compute, moe);
    const std::string which = r.string("layer_pass");
    const bool attention_only = r.choice("part", {"layer", "attention"}, "layer") == "attention";
    if (attention_only) {
        if (!kernels) r.fail("part", "part: attention needs time: kernels");
        run_layer_attention(r, spec, passes, which, out);
    } else if (kernels) {
        run_layer_kernels(r, spec, passes, which, out);
    } else {
        run_layer_wall(r, spec, passes, which, moe, out);
    }
}

// One bf16 GEMM called back to back: the tensor-core load of the GPU's sustained figure (duty
// cycle 1), at the GEMM curve's in-training (burst) efficiency, plus the per-call overhead.
Time back_to_back_gemm_time(const workload::GemmShape& shape, const topology::GpuModel& gpu,
                            const workload::RooflineCompute& compute) {
    const Time burst = workload::gemm_time(shape, workload::Precision::Bf16, gpu, compute) -
                       compute.launch_overhead;
    return Time::ps(static_cast<std::int64_t>(
               std::llround(static_cast<double>(burst.count_ps()) / gpu.sustained.factor(1.0)))) +
           compute.launch_overhead;
}

workload::GemmShape gemm_shape(const config::Reader& r) {
    const auto g = r.map("gemm");
    const workload::GemmShape shape{g.integer("m"), g.integer("n"), g.integer("k")};
    g.finish();
    return shape;
}

void run_gemm(const config::Reader& r, const std::vector<std::string>& sets, ValidationCase& out) {
    const auto cluster = load_topology(r, sets);
    const auto shape = gemm_shape(r);
    workload::RooflineCompute compute;
    if (auto t = r.time_opt("launch_overhead")) compute.launch_overhead = *t;
    // The microbenchmark calls one GEMM after another.
    const auto& gpu = cluster.gpu_model(0);
    const double sustained = gpu.sustained.factor(1.0);
    const Time t = back_to_back_gemm_time(shape, gpu, compute);
    out.predicted = t.seconds() * 1e3;
    out.inputs = std::to_string(shape.m) + " x " + std::to_string(shape.n) + " x " +
                 std::to_string(shape.k) + " bf16 on " + gpu.name + ", per-call overhead " +
                 format_time(compute.launch_overhead) + ", sustained x" + number(sustained);
    out.note =
        "efficiency " + number(workload::gemm_efficiency(shape, gpu.gemm)) + " at burst clocks";
}

// A rate under sustained load (h200-kernels.json sustained_throughput): a GEMM called back to
// back for seconds (`gemm`, TFLOP/s), or an in-place elementwise add (`elementwise_bytes`, the
// bytes one call reads and writes; GB/s), both without per-call overhead: the measured rates are
// work per window over many calls in flight. The GEMM runs at its burst rate times the GPU's
// sustained factor at duty cycle 1; an elementwise kernel at the roofline's elementwise HBM
// fraction, which the power cap does not lower (it binds the SM clock, not HBM).
void run_sustained(const config::Reader& r, const std::vector<std::string>& sets,
                   ValidationCase& out) {
    const auto cluster = load_topology(r, sets);
    const auto& gpu = cluster.gpu_model(0);
    workload::RooflineCompute compute;
    compute.launch_overhead = Time::zero();
    if (r.has("gemm")) {
        const auto shape = gemm_shape(r);
        const Time t = back_to_back_gemm_time(shape, gpu, compute);
        const Time burst = workload::gemm_time(shape, workload::Precision::Bf16, gpu, compute);
        out.predicted = shape.flops().value / t.seconds() * 1e-12;
        out.inputs = std::to_string(shape.m) + " x " + std::to_string(shape.n) + " x " +
                     std::to_string(shape.k) + " bf16 GEMMs back to back on " + gpu.name;
        out.note = "burst " + number(shape.flops().value / burst.seconds() * 1e-12) +
                   " TFLOP/s x sustained factor " + number(gpu.sustained.factor(1.0)) + " (" +
                   gpu.sustained.source + ")";
    } else if (r.has("elementwise_bytes")) {
        const Bytes bytes = r.bytes("elementwise_bytes");
        const Time t =
            workload::memory_bound_time(bytes, gpu, compute, workload::MemKind::Elementwise);
        out.predicted = static_cast<double>(bytes.value) / t.seconds() * 1e-9;
        out.inputs = "elementwise kernel moving " + r.string("elementwise_bytes") +
                     " per call, back to back on " + gpu.name;
        out.note = "roofline elementwise HBM fraction " +
                   number(workload::default_calibration().hbm_fraction_of(
                       workload::MemKind::Elementwise)) +
                   " of " + number(gpu.hbm_bandwidth.bytes_per_s * 1e-9) + " GB/s";
    } else {
        r.fail("kind", "a sustained case needs `gemm: {m, n, k}` or `elementwise_bytes`");
    }
}

// A tensor-core kernel of the H200 microbenchmarks (h200-microbench.json), timed back to back
// in a CUDA graph (no launch gaps) at the SM clock its row records. The model's time at burst
// clocks is scaled by the tensor-core throughput at that clock relative to 1980 MHz:
// 0.5281 + 0.000230 x MHz, a least-squares line through the bf16 GEMM rows of the same file
// (the dense and fp8 sections' bf16 products against the GEMM curve: 0.983 at 1980 MHz, 0.856
// at 1425), so a row that ran under the power cap is compared at its own clock.
//   grouped_gemm: {experts, tokens, n, k, pass: fwd | dgrad | wgrad} (one expert's GEMM is
//                 tokens x n x k forward; the weight gradient reduces over the tokens)
//   attention:    {batch, heads, kv_heads, seq, head_dim, pass: fwd | bwd}, causal
//   fp8_gemm:     {m, n, k, recipe: tensorwise | rowwise | blockwise}
void run_kernel(const config::Reader& r, const std::vector<std::string>& sets,
                ValidationCase& out) {
    const auto cluster = load_topology(r, sets);
    const auto& gpu = cluster.gpu_model(0);
    workload::RooflineCompute compute;
    compute.launch_overhead = Time::zero();
    const double mhz = r.number("sm_mhz");
    if (!(mhz > 0 && mhz <= 1980)) r.fail("sm_mhz", "must be in (0, 1980]");
    const auto throughput = [](double clock) { return 0.5281 + 0.000230 * clock; };
    const double clock = throughput(mhz) / throughput(1980);
    Time burst;
    double flops = 0;
    if (auto g = r.map_opt("grouped_gemm")) {
        const auto e = g->integer("experts"), t = g->integer("tokens");
        const auto n = g->integer("n"), k = g->integer("k");
        const std::string pass = g->choice("pass", {"fwd", "dgrad", "wgrad"});
        g->finish();
        burst = workload::grouped_gemm_time(e, t, n, k, pass == "wgrad", workload::Precision::Bf16,
                                            gpu, compute);
        flops = 2.0 * static_cast<double>(e * t) * static_cast<double>(n) * static_cast<double>(k);
        out.inputs = std::to_string(e) + " experts x " + std::to_string(t) + " tokens, " +
                     std::to_string(n) + " x " + std::to_string(k) + " " + pass + ", grouped";
        const auto tiling = workload::grouped_gemm_tiling(e, t, n, k, pass == "wgrad");
        out.note = std::to_string(tiling.tiles) + " tiles of " + std::to_string(tiling.tile_m) +
                   " x " + std::to_string(tiling.tile_n) + (tiling.ping_pong ? " ping-pong" : "") +
                   " in " + std::to_string(tiling.waves) + " waves";
    } else if (auto a = r.map_opt("attention")) {
        workload::AttentionBlock b;
        b.b = a->integer("batch");
        b.heads = a->integer("heads");
        b.kv_heads = a->integer("kv_heads");
        b.q_len = b.kv_len = a->integer("seq");
        b.head_dim = a->integer("head_dim");
        const bool backward = a->choice("pass", {"fwd", "bwd"}) == "bwd";
        a->finish();
        burst = workload::attention_time(b, backward, gpu, compute);
        flops = b.executed_flops(backward);
        out.inputs = std::to_string(b.heads) + " heads (" + std::to_string(b.kv_heads) +
                     " K/V) x " + std::to_string(b.q_len) + " tokens x " +
                     std::to_string(b.head_dim) + ", causal " + (backward ? "backward" : "forward");
        out.note = "efficiency " + number(workload::attention_efficiency(b, backward)) +
                   " at burst clocks";
    } else if (auto f = r.map_opt("fp8_gemm")) {
        const workload::GemmShape shape{f->integer("m"), f->integer("n"), f->integer("k")};
        const auto recipe = f->choice("recipe", workload::kFp8RecipeNames);
        f->finish();
        burst = workload::gemm_time(shape, workload::Precision::Fp8, gpu, compute, 1, recipe);
        flops = shape.flops().value;
        out.inputs = std::to_string(shape.m) + " x " + std::to_string(shape.n) + " x " +
                     std::to_string(shape.k) + " fp8 " +
                     std::string(name_of(workload::kFp8RecipeNames, recipe));
        out.note = "the bf16 curve x the recipe's speedup, plus its cost per output";
    } else {
        r.fail_here("a kernel case needs grouped_gemm, attention or fp8_gemm");
    }
    const double seconds = burst.seconds() / clock;
    const std::string unit = r.string_or("unit", "ms");
    out.predicted = unit == "TFLOP/s" ? flops / seconds * 1e-12 : seconds * 1e3;
    out.inputs +=
        " on " + gpu.name + " at " + number(mhz) + " MHz (throughput x " + number(clock) + ")";
}

// A case's `ranks`, each a GPU of `cluster`; errors point at the key in the cases file.
std::vector<int> case_ranks(const config::Reader& r, const topology::Cluster& cluster) {
    const std::string text = r.string("ranks");
    std::vector<int> ranks;
    try {
        ranks = parse_rank_list(text, "ranks");
    } catch (const ConfigError& e) {
        r.fail("ranks", e.message());
    }
    if (ranks.size() < 2)
        r.fail("ranks", "a collective needs two ranks or more; expected a list such as \"0-7\"");
    for (int g : ranks)
        if (g >= cluster.gpu_count())
            r.fail("ranks", "GPU " + std::to_string(g) + " does not exist; " +
                                r.string("topology") + " has GPUs 0-" +
                                std::to_string(cluster.gpu_count() - 1));
    return ranks;
}

// A case's `size`: a zero-byte message takes no time on the wire, so it has no bandwidth to score.
Bytes case_size(const config::Reader& r) {
    const Bytes size = r.bytes("size");
    if (size.value <= 0)
        r.fail("size", "must be more than 0 bytes; expected a size such as \"16MiB\"");
    return size;
}

// A point-to-point message (`op: send`, ranks "SRC,DST"): GB/s of one direction.
void run_send(const config::Reader& r, ValidationCase& out) {
    const auto sets = string_list(r, "set");
    const auto cluster = load_topology(r, sets);
    const auto ranks = case_ranks(r, cluster);
    if (ranks.size() != 2) r.fail("ranks", "a send needs two ranks, source and destination");
    if (ranks[0] == ranks[1])
        r.fail("ranks", "a send from GPU " + std::to_string(ranks[0]) +
                            " to itself; expected two different GPUs, source and destination");
    const Bytes size = case_size(r);
    const Time host = require_time(r, "host_overhead");
    const auto config = network::NetworkConfig::calibrated(network::Fidelity::Flow);
    const Time t =
        transfer_time_alone(cluster, config,
                            [&](network::Network& net) { net.send(ranks[0], ranks[1], size, 1); }) +
        host;
    out.predicted = static_cast<double>(size.value) / t.seconds() * 1e-9;
    out.inputs = "send " + r.string("size") + " from GPU " + std::to_string(ranks[0]) + " to " +
                 std::to_string(ranks[1]) + " (" + r.string("topology") +
                 (sets.empty() ? "" : ", " + join(sets, ", ")) + "), calibrated flow network";
    out.note = "time " + number(t.seconds() * 1e6) + " us" +
               (host > Time::zero() ? " incl. " + format_time(host) + " host launch" : "");
}

void run_collective(const config::Reader& r, ValidationCase& out) {
    if (r.string("op") == "send") {
        run_send(r, out);
        return;
    }
    const auto sets = string_list(r, "set");
    const auto cluster = load_topology(r, sets);
    const auto kind = pick_named(r, "op", network::kCollectiveNames, {"send"});
    const auto algo = r.has("algo") ? network::parse_algorithm(r.string("algo"), r.location("algo"))
                                    : network::Algorithm::Auto;
    const auto ranks = case_ranks(r, cluster);
    for (std::size_t i = 0; i < ranks.size(); ++i)
        if (std::find(ranks.begin(), ranks.begin() + static_cast<std::ptrdiff_t>(i), ranks[i]) !=
            ranks.begin() + static_cast<std::ptrdiff_t>(i))
            r.fail("ranks", "GPU " + std::to_string(ranks[i]) +
                                " is listed twice; expected each GPU of the group once");
    const Bytes size = case_size(r);
    const Time host = require_time(r, "host_overhead");
    const auto config = network::NetworkConfig::calibrated(network::Fidelity::Flow);
    const auto used = algo == network::Algorithm::Auto
                          ? network::choose_algorithm(cluster, kind, ranks, size)
                          : algo;
    const Time t =
        network::isolated_collective_time(cluster, config, kind, ranks, size, used) + host;
    const double algbw = static_cast<double>(size.value) / t.seconds() * 1e-9;
    out.predicted = algbw * network::busbw_factor(kind, static_cast<int>(ranks.size()));
    out.inputs = std::string(network::collective_name(kind)) + " " + r.string("size") + " on " +
                 std::to_string(ranks.size()) + " x " + cluster.gpu_model(ranks.front()).name +
                 " (" + r.string("topology") + (sets.empty() ? "" : ", " + join(sets, ", ")) +
                 "), " + network::algorithm_name(used) + ", calibrated flow network";
    out.note = "time " + number(t.seconds() * 1e6) + " us" +
               (host > Time::zero() ? " incl. " + format_time(host) + " host launch" : "");
}

std::map<std::string, std::string> load_known_gaps(const std::filesystem::path& file) {
    std::map<std::string, std::string> gaps;
    std::ifstream in(file);
    std::string line;
    while (std::getline(in, line)) {
        const auto start = line.find_first_not_of(" \t");
        if (start == std::string::npos || line[start] == '#') continue;
        const auto end = line.find_first_of(" \t", start);
        const std::string id = line.substr(start, end - start);
        std::string why = end == std::string::npos ? "" : line.substr(end);
        why.erase(0, why.find_first_not_of(" \t|"));
        gaps[id] = why;
    }
    return gaps;
}

// The families of cases.yaml: their modes, tolerances and kinds of error.
std::vector<ValidationFamily> read_families(const config::Reader& root) {
    std::vector<ValidationFamily> families;
    for (const auto& f : root.list_of_maps("families")) {
        ValidationFamily fam;
        fam.id = f.string("id");
        fam.title = f.string("title");
        fam.mode = f.string("mode");
        fam.tolerance = f.number("tolerance");
        const auto err = f.string("error");
        if (err != "relative" && err != "absolute")
            f.fail("error", "expected relative or absolute");
        fam.absolute = err == "absolute";
        if (!(fam.tolerance > 0)) f.fail("tolerance", "must be positive");
        f.finish();
        families.push_back(fam);
    }
    return families;
}

void run_case_kind(const config::Reader& c, const std::string& kind, const ValidateOptions& a,
                   const std::vector<std::string>& sets, ValidationCase& res);

// Runs case `c` of kind `kind` (any but not_reproduced): its prediction into `res`.
void run_case(const config::Reader& c, const std::string& kind, const ValidateOptions& a,
              ValidationCase& res) {
    const auto sets = string_list(c, "set");
    // Every time a case predicts is derived from its sizes, rates and durations: one beyond the
    // clock is a case out of range, not a bug.
    try {
        run_case_kind(c, kind, a, sets, res);
    } catch (const ClockOverflow&) {
        c.fail_here(
            "the case's sizes give a time longer than the simulator's clock can hold "
            "(2^63 ps, about 106 days) or 2^63 bytes or more; expected sizes of a real "
            "kernel or collective");
    }
}

void run_case_kind(const config::Reader& c, const std::string& kind, const ValidateOptions& a,
                   const std::vector<std::string>& sets, ValidationCase& res) {
    if (kind == "experiment")
        run_experiment(c, sets, a, res);
    else if (kind == "layer")
        run_layer(c, sets, res);
    else if (kind == "gemm")
        run_gemm(c, sets, res);
    else if (kind == "collective")
        run_collective(c, res);
    else if (kind == "sustained")
        run_sustained(c, sets, res);
    else if (kind == "kernel")
        run_kernel(c, sets, res);
    else
        c.fail("kind", "unknown kind \"" + kind +
                           "\"; expected experiment, layer, gemm, collective, sustained, "
                           "kernel or not_reproduced");
}

// The case's error against its family's tolerance: pass, fail, or a known gap (known_gaps.txt).
void judge(ValidationCase& res, const ValidationFamily& fam,
           const std::map<std::string, std::string>& gaps) {
    res.error = fam.absolute ? res.predicted - res.published : res.predicted / res.published - 1;
    const bool within = std::fabs(res.error) <= fam.tolerance;
    res.status = within ? ValidationStatus::Pass : ValidationStatus::Fail;
    if (const auto g = gaps.find(res.id); g != gaps.end()) {
        if (within) {
            res.note += (res.note.empty() ? "" : "; ") +
                        std::string("listed in known_gaps.txt but now within tolerance");
        } else {
            res.status = ValidationStatus::KnownGap;
            res.note += (res.note.empty() ? "" : "; ") + std::string("known gap: ") + g->second;
        }
    }
}

}  // namespace

std::map<std::string, FamilyStats> family_stats(const std::vector<ValidationFamily>& families,
                                                const std::vector<ValidationCase>& results) {
    std::map<std::string, FamilyStats> stats;
    for (const auto& f : families)
        stats[f.id];
    for (const auto& r : results) {
        auto& s = stats[r.family];
        if (r.status == ValidationStatus::NotReproduced) {
            ++s.not_reproduced;
            continue;
        }
        ++s.reproduced;
        s.mean_abs += std::fabs(r.error);
        if (std::fabs(r.error) >= std::fabs(s.worst)) {
            s.worst = r.error;
            s.worst_id = r.id;
        }
        if (r.status == ValidationStatus::Pass) ++s.passed;
        if (r.status == ValidationStatus::Fail) ++s.failed;
        if (r.status == ValidationStatus::KnownGap) ++s.gaps;
    }
    for (auto& [id, s] : stats)
        if (s.reproduced > 0) s.mean_abs /= s.reproduced;
    return stats;
}

ValidationReport validate(const ValidateOptions& a) {
    const std::filesystem::path dir = a.dir.empty() ? data_root() / "tests" / "validation" : a.dir;
    std::error_code ec;
    if (std::filesystem::exists(dir, ec) && !std::filesystem::is_directory(dir, ec))
        throw ConfigError(SourceLocation{dir.string()},
                          "not a folder: expected a folder holding cases.yaml, such as the "
                          "bundled tests/validation");
    const auto doc = config::load_document(dir / "cases.yaml");
    const auto root = config::root_reader(doc);
    std::vector<ValidationFamily> families = read_families(root);
    const auto gaps = load_known_gaps(dir / "known_gaps.txt");
    std::vector<ValidationCase> results;
    std::map<std::string, SourceLocation> id_places;
    for (const auto& c : root.list_of_maps("cases")) {
        ValidationCase res;
        res.id = c.string("id");
        const auto [first, fresh] = id_places.emplace(res.id, c.location("id"));
        if (!fresh)
            c.fail("id", "duplicate case id \"" + res.id + "\", first used at " +
                             std::to_string(first->second.line) + ":" +
                             std::to_string(first->second.column) + "; expected each case id once");
        res.family = c.string("family");
        const auto fam =
            std::find_if(families.begin(), families.end(),
                         [&](const ValidationFamily& f) { return f.id == res.family; });
        if (fam == families.end()) c.fail("family", "unknown family \"" + res.family + "\"");
        res.source = c.string("source");
        const std::string kind = c.string("kind");
        if (!a.only.empty() && res.id.find(a.only) == std::string::npos) continue;
        if (kind == "not_reproduced") {
            res.note = c.string("reason");
            res.status = ValidationStatus::NotReproduced;
            c.finish();
            results.push_back(res);
            continue;
        }
        res.published = c.number("published");
        res.unit = c.string_or("unit", "");
        res.fitted = c.boolean_or("fitted", false);
        if (!std::isfinite(res.published) || (!fam->absolute && res.published <= 0))
            c.fail("published", "expected the measured or published value in the case's unit, " +
                                    std::string(fam->absolute ? "a finite number"
                                                              : "above 0 (the error is predicted "
                                                                "/ published - 1)"));
        run_case(c, kind, a, res);
        c.finish();
        judge(res, *fam, gaps);
        if (!std::isfinite(res.error) || !std::isfinite(res.predicted))
            c.fail("published", "the error predicted / published - 1 is not finite (predicted " +
                                    number(res.predicted) + ", published " + number(res.published) +
                                    "); expected the measured value in the case's unit");
        if (a.on_case) a.on_case(res, *fam);
        results.push_back(res);
    }
    root.finish();
    ValidationReport report;
    const auto stats = family_stats(families, results);
    for (const auto& f : families)
        report.failed = report.failed || stats.at(f.id).failed > 0;
    report.families = std::move(families);
    report.cases = std::move(results);
    return report;
}

std::string value_text(double v) {
    return number(v);
}

}  // namespace cs::api
