#include "report/trace_writer.hpp"

#include <algorithm>
#include <memory>

#include "core/errors.hpp"
#include "schedule/schedule.hpp"

namespace cs::report {

namespace {
const char* const kStreamNames[] = {"compute", "tp comm", "cp comm", "ep comm",
                                    "pp send", "pp recv", "dp comm", "host"};
constexpr int kClusterPid = 1;
// Steps are drawn one slice per execution up to this many slices per pass; beyond it, one slice
// per step covers all its executions (arg "repeat").
constexpr int kMaxStepSlices = 64;
// Longest list of peer GPUs written into an argument.
constexpr std::size_t kMaxPeers = 16;

std::string join_gpus(const std::vector<int>& gpus) {
    std::string s;
    for (std::size_t i = 0; i < gpus.size() && i < kMaxPeers; ++i) {
        if (i) s += ',';
        s += std::to_string(gpus[i]);
    }
    if (gpus.size() > kMaxPeers) s += ",... (" + std::to_string(gpus.size()) + " GPUs)";
    return s;
}

double us(Time t) {
    return static_cast<double>(t.count_ps()) * 1e-6;
}

// What a compute step slice is, for `diff` and other readers (its name is for people): its
// kernel class and its piece of the model, with room for the three arguments step_slices adds.
TraceArgs step_kind_args(workload::KernelKind kernel, workload::ModelPart part) {
    TraceArgs args;
    args.reserve(5);
    args.push_back(
        TraceArg::text("kernel", std::string(name_of(workload::kKernelKindNames, kernel))));
    args.push_back(TraceArg::text("part", std::string(name_of(workload::kModelPartNames, part))));
    return args;
}

void flatten(const nlohmann::json& j, const std::string& prefix, TraceArgs& out) {
    if (j.is_object()) {
        for (auto it = j.begin(); it != j.end(); ++it)
            flatten(it.value(), prefix.empty() ? it.key() : prefix + "." + it.key(), out);
    } else if (j.is_array()) {
        for (std::size_t i = 0; i < j.size(); ++i)
            flatten(j[i], prefix + "[" + std::to_string(i) + "]", out);
    } else if (j.is_number_integer() || j.is_number_unsigned()) {
        out.push_back(TraceArg::integer(prefix, j.get<std::int64_t>()));
    } else if (j.is_number_float()) {
        out.push_back(TraceArg::real(prefix, j.get<double>()));
    } else if (j.is_boolean()) {
        out.push_back(TraceArg::integer(prefix, j.get<bool>() ? 1 : 0));
    } else if (j.is_string()) {
        out.push_back(TraceArg::text(prefix, j.get<std::string>()));
    }
}
}  // namespace

std::optional<TraceLinks> trace_links_from_name(const std::string& name) {
    if (name == "auto") return TraceLinks::Auto;
    if (name == "inter-node") return TraceLinks::InterNode;
    if (name == "all") return TraceLinks::All;
    if (name == "none") return TraceLinks::None;
    return std::nullopt;
}

TraceContext TraceContext::of(const workload::ExperimentSpec& spec,
                              const workload::IterationPlan& plan, const replay::Replay& replay) {
    TraceContext c;
    c.cluster = spec.cluster.get();
    c.workers = replay.workers();
    c.ranks = replay.ranks();
    for (const auto& vs : plan.virtual_stages) {
        c.first_layer.push_back(vs.first_layer);
        c.layers.push_back(vs.layers);
        c.activation_memory.push_back(vs.activation_memory);
    }
    for (const auto& d : plan.devices)
        c.stage_memory.push_back(d.memory);
    return c;
}

TraceWriter::TraceWriter(const std::filesystem::path& path, TraceContext context,
                         TraceOptions options)
    : ctx_(std::move(context)), opts_(std::move(options)) {
    if (!ctx_.cluster) throw SimulationError("trace", "no cluster in the trace context");
    const auto& cluster = *ctx_.cluster;
    const int gpus = cluster.gpu_count();
    traced_gpu_.assign(static_cast<std::size_t>(gpus), opts_.ranks.empty() ? 1 : 0);
    for (int r : opts_.ranks) {
        if (r < 0 || r >= gpus)
            throw ConfigError(SourceLocation{"--trace-ranks"},
                              "GPU " + std::to_string(r) + " is not in the cluster, which has " +
                                  std::to_string(gpus) + " GPUs (0-" + std::to_string(gpus - 1) +
                                  ")");
        traced_gpu_[static_cast<std::size_t>(r)] = 1;
    }
    // Opened after the checks so that bad options leave no file behind.
    sink_ = opts_.open_sink ? opts_.open_sink() : make_trace_sink(path, opts_.outputs);

    worker_traced_.assign(ctx_.workers.size(), 0);
    for (std::size_t w = 0; w < ctx_.workers.size(); ++w)
        for (int g : ctx_.workers[w].gpus)
            if (traced(g)) worker_traced_[w] = 1;
    queues_.resize(ctx_.workers.size());
    if (opts_.memory && !ctx_.stage_memory.empty()) memory_.resize(ctx_.workers.size());

    TraceLinks mode = opts_.links;
    if (mode == TraceLinks::Auto)
        mode = cluster.node_count() <= 1 ? TraceLinks::All : TraceLinks::InterNode;
    if (mode != TraceLinks::None) {
        std::vector<char> traced_node(static_cast<std::size_t>(std::max(cluster.node_count(), 1)),
                                      opts_.ranks.empty() ? 1 : 0);
        for (int g = 0; g < gpus; ++g)
            if (traced(g))
                traced_node[static_cast<std::size_t>(std::max(cluster.node_of_gpu(g), 0))] = 1;
        const auto node_traced = [&](int node) {
            return node >= 0 && node < static_cast<int>(traced_node.size()) &&
                   traced_node[static_cast<std::size_t>(node)];
        };
        links_.resize(cluster.links().size());
        for (std::size_t l = 0; l < links_.size(); ++l) {
            const auto& link = cluster.links()[l];
            if (mode == TraceLinks::InterNode && !link.inter_node) continue;
            const int a = cluster.devices()[link.from].node, b = cluster.devices()[link.to].node;
            // With a rank filter, only the links of the traced GPUs' nodes (fabric links have no
            // node and go with the unfiltered trace).
            links_[l].traced = opts_.ranks.empty() || node_traced(a) || node_traced(b);
        }
    }
}

TraceWriter::~TraceWriter() = default;

std::uint64_t TraceWriter::process_uuid(int pid) {
    auto it = processes_.find(pid);
    if (it != processes_.end()) return it->second;
    const std::uint64_t uuid = next_uuid_++;
    sink_->process(uuid, pid, pid == kClusterPid ? "cluster" : "node " + std::to_string(pid - 2));
    processes_.emplace(pid, uuid);
    return uuid;
}

std::uint64_t TraceWriter::gpu_group(int gpu) {
    if (gpu_groups_.empty()) gpu_groups_.assign(traced_gpu_.size(), 0);
    auto& g = gpu_groups_[static_cast<std::size_t>(gpu)];
    if (g) return g;
    const int pid = pid_of_node(ctx_.cluster->node_of_gpu(gpu));
    auto it = gpus_groups_.find(pid);
    if (it == gpus_groups_.end()) {
        const std::uint64_t proc = process_uuid(pid);
        const std::uint64_t uuid = next_uuid_++;
        sink_->group(uuid, proc, "GPUs", 0);
        it = gpus_groups_.emplace(pid, uuid).first;
    }
    g = next_uuid_++;
    sink_->group(g, it->second, "GPU " + std::to_string(gpu), gpu);
    return g;
}

std::uint64_t TraceWriter::lane_track(int gpu, Stream stream, Time start, Time end) {
    const std::uint64_t key = static_cast<std::uint64_t>(gpu) * kStreams + stream;
    auto& lanes = lanes_[key];
    auto& ends = lanes.ends;
    auto& tracks = lanes.tracks;
    std::size_t lane = 0;
    // A lane takes the slice only if it starts after everything already on the lane: slices
    // arrive out of start order (transfers are reported when received), and this keeps each
    // lane both overlap-free and in start order.
    while (lane < ends.size() && start < ends[lane])
        ++lane;
    if (lane == ends.size()) {
        const std::uint64_t group = gpu_group(gpu);
        const std::uint64_t uuid = next_uuid_++;
        std::string name = kStreamNames[stream];
        if (lane > 0) name += " " + std::to_string(lane + 1);
        sink_->track(uuid, group, name, stream * 64 + static_cast<int>(lane));
        ends.push_back(end);
        tracks.push_back(uuid);
    }
    ends[lane] = std::max(ends[lane], end);
    return tracks[lane];
}

std::uint64_t TraceWriter::iteration_track() {
    if (!iteration_track_) {
        const std::uint64_t proc = process_uuid(kClusterPid);
        iteration_track_ = next_uuid_++;
        sink_->track(iteration_track_, proc, "iteration", 0);
    }
    return iteration_track_;
}

// ---- passes ---------------------------------------------------------------------------------

void TraceWriter::on_pass(const replay::PassRecord& p) {
    const auto w = static_cast<std::size_t>(p.worker);
    auto in = incoming_.find(p.id);
    if (!worker_traced_[w]) {
        if (in != incoming_.end()) incoming_.erase(in);
        return;
    }
    if (!memory_.empty() &&
        static_cast<std::size_t>(p.virtual_stage) < ctx_.activation_memory.size()) {
        // As schedule::peak_inflight_microbatches counts: held from the forward pass to the
        // weight-gradient pass when the backward is split, else to the backward pass.
        const auto bytes = ctx_.activation_memory[static_cast<std::size_t>(p.virtual_stage)].value;
        if (p.pass == schedule::Pass::Forward)
            memory_[w].push_back({p.start, bytes});
        else if (p.pass == schedule::Pass::Backward || p.pass == schedule::Pass::BackwardWeight)
            memory_[w].push_back({p.end, -bytes});
    }
    if (!host_queues_.empty()) {
        // The host issued this pass before the GPU ran it: its slice can now be named.
        for (auto& h : host_queues_[w])
            if (h.kind == replay::HostWork::Issue && h.pass == p.id)
                h.name = "issue " + std::string(schedule::pass_letter(p.pass)) +
                         std::to_string(p.microbatch);
        drain_host(p.worker);
    }
    using schedule::Pass;
    const int last_vs = static_cast<int>(ctx_.layers.size()) - 1;
    const bool sends =
        (p.pass == Pass::Forward && p.virtual_stage < last_vs) ||
        ((p.pass == Pass::Backward || p.pass == Pass::BackwardInput) && p.virtual_stage > 0);
    Pending e;
    e.pass = p;
    e.resolved = !sends;
    const std::size_t n = ctx_.workers[w].gpus.size();
    e.out_flow.assign(n, 0);
    e.out_role.assign(n, FlowRef::Role::Begin);
    e.in_flow.assign(n, 0);
    if (in != incoming_.end()) {
        e.in_flow = std::move(in->second.flows);
        e.from_worker = in->second.from_worker;
        e.in_bytes = in->second.bytes;
        incoming_.erase(in);
    }
    queues_[w].push_back(std::move(e));
    drain(p.worker);
}

void TraceWriter::on_optimizer(int worker, Time start, Time end) {
    const auto w = static_cast<std::size_t>(worker);
    if (!worker_traced_[w]) return;
    Pending e;
    e.optimizer = true;
    e.pass.worker = worker;
    e.pass.start = start;
    e.pass.end = end;
    e.resolved = true;
    queues_[w].push_back(std::move(e));
    drain(worker);
}

void TraceWriter::on_host(int worker, Time start, Time end, replay::HostWork kind,
                          std::uint64_t pass) {
    const auto w = static_cast<std::size_t>(worker);
    if (!worker_traced_[w]) return;
    if (host_queues_.empty()) host_queues_.resize(queues_.size());
    HostSlice h{start, end, kind, pass, {}};
    switch (kind) {
        case replay::HostWork::Issue:
            if (pass == 0) h.name = "issue optimizer step";
            break;
        case replay::HostWork::P2p:
            h.name = "p2p";
            break;
        case replay::HostWork::Sync:
            h.name = "sync";
            break;
    }
    host_queues_[w].push_back(std::move(h));
    drain_host(worker);
}

void TraceWriter::drain_host(int worker) {
    // Host slices of a worker come in time order and never overlap: one "host" track per GPU.
    auto& q = host_queues_[static_cast<std::size_t>(worker)];
    const auto& gpus = ctx_.workers[static_cast<std::size_t>(worker)].gpus;
    while (!q.empty() && !q.front().name.empty()) {
        const HostSlice& h = q.front();
        for (int gpu : gpus) {
            if (!traced(gpu)) continue;
            TraceSlice s;
            s.track = lane_track(gpu, kHost, h.start, h.end);
            s.start = h.start;
            s.end = h.end;
            s.name = h.name;
            if (h.pass != 0)
                s.args.push_back(TraceArg::integer("pass_id", static_cast<std::int64_t>(h.pass)));
            sink_->slice(s, {});
        }
        q.pop_front();
    }
}

void TraceWriter::drain(int worker) {
    auto& q = queues_[static_cast<std::size_t>(worker)];
    while (!q.empty() && q.front().resolved) {
        emit(q.front());
        q.pop_front();
    }
}

void TraceWriter::emit(Pending& e) {
    if (!e.optimizer) {
        emit_pass(e);
        return;
    }
    for (int gpu : ctx_.workers[static_cast<std::size_t>(e.pass.worker)].gpus) {
        if (!traced(gpu)) continue;
        TraceSlice s;
        s.track = lane_track(gpu, kCompute, e.pass.start, e.pass.end);
        s.start = e.pass.start;
        s.end = e.pass.end;
        s.name = "optimizer step";
        s.args = step_kind_args(workload::KernelKind::Optimizer, workload::ModelPart::Model);
        sink_->slice(s, {});
    }
}

std::vector<TraceWriter::StepSpan> TraceWriter::step_spans(const replay::PassRecord& p) {
    std::vector<StepSpan> spans;
    if (!p.plan) return spans;
    const auto& steps = p.plan->steps;
    if (p.step_times.size() != steps.size())
        throw SimulationError("trace", "a pass of " + std::to_string(steps.size()) +
                                           " steps came with " +
                                           std::to_string(p.step_times.size()) + " step times");
    int executions = 0;
    for (const auto& s : steps)
        executions += s.repeat;
    const bool expand = executions <= kMaxStepSlices;
    Time t = p.start;
    for (std::size_t i = 0; i < steps.size(); ++i) {
        const int reps = expand ? steps[i].repeat : 1;
        for (int r = 0; r < reps; ++r) {
            StepSpan span;
            span.step = &steps[i];
            span.repeat = expand ? 1 : steps[i].repeat;
            span.index = r;
            span.start = std::min(t, p.end);
            t += p.step_times[i] * span.repeat;
            span.end = std::min(t, p.end);
            spans.push_back(span);
        }
    }
    return spans;
}

std::string TraceWriter::group_ranks(int worker, int index, workload::GroupKind group) const {
    return join_gpus(ctx_.ranks.group(group, worker, index).gpus);
}

std::string TraceWriter::dp_peers(int worker, int member,
                                  replay::TransferRecord::Scope scope) const {
    using S = replay::TransferRecord::Scope;
    const auto& layout = ctx_.ranks.layout();
    if (scope == S::Dp) return group_ranks(worker, member, workload::GroupKind::Dp);
    // Sharded data parallelism: the worker's shard group, or its group across shard groups.
    const int size = layout.shard_group_size();
    const auto& w = ctx_.workers[static_cast<std::size_t>(worker)];
    const int t = member % layout.tp, c = member / layout.tp;
    std::vector<int> gpus;
    if (scope == S::Shard)
        for (int i = 0; i < size; ++i)
            gpus.push_back(ctx_.ranks.gpu(t, c, w.dp / size * size + i, w.stage));
    else
        for (int d = w.dp % size; d < layout.dp; d += size)
            gpus.push_back(ctx_.ranks.gpu(t, c, d, w.stage));
    return join_gpus(gpus);
}

namespace {

// The arguments every GPU's slice of pass `p` of worker `w` shares. Reserved for the per-GPU ones
// that emit_pass appends, so that a pass costs one allocation of its argument list.
TraceArgs pass_args(const replay::PassRecord& p, const replay::Worker& w, const TraceContext& ctx) {
    constexpr std::size_t kMostPassArgs = 18;
    TraceArgs args;
    args.reserve(kMostPassArgs);
    args.push_back(TraceArg::integer("stage", w.stage));
    args.push_back(TraceArg::integer("chunk", p.chunk));
    args.push_back(TraceArg::integer("virtual_stage", p.virtual_stage));
    args.push_back(TraceArg::integer("microbatch", p.microbatch));
    // What the pass is, for `diff` and other readers: the slice's name is for people.
    args.push_back(TraceArg::text("pass", std::string(name_of(schedule::kPassNames, p.pass))));
    args.push_back(TraceArg::integer("dp_replica", w.dp));
    const auto vs = static_cast<std::size_t>(p.virtual_stage);
    if (vs < ctx.layers.size()) {
        args.push_back(TraceArg::integer("first_layer", ctx.first_layer[vs]));
        args.push_back(TraceArg::integer("layers", ctx.layers[vs]));
    }
    if (p.plan) {
        args.push_back(TraceArg::real("model_flops", p.plan->model_flops().value));
        args.push_back(TraceArg::real("hardware_flops", p.plan->hardware_flops().value));
    }
    args.push_back(TraceArg::real("compute_us", us(p.compute)));
    args.push_back(TraceArg::real("collective_us", us(p.collective)));
    // A host-bound pass: the GPU waited this long inside it for kernels to be issued (its steps
    // are drawn back to back from its start, the wait after them).
    if (p.host_stall > Time::zero())
        args.push_back(TraceArg::real("host_stall_us", us(p.host_stall)));
    // A ZeRO-3 pass: the GPU waited this long inside it for its units' parameter all-gathers.
    if (p.gather_wait > Time::zero())
        args.push_back(TraceArg::real("gather_wait_us", us(p.gather_wait)));
    return args;
}

// A collective step's arguments: what runs, on which group, how many bytes; with room for
// `more` that the caller appends, so that the list is allocated once.
TraceArgs collective_args(const workload::Step& step, std::size_t more) {
    TraceArgs args;
    args.reserve(3 + more);
    args.push_back(TraceArg::text("collective", network::collective_name(step.collective)));
    args.push_back(TraceArg::text("group", workload::group_kind_name(step.group)));
    args.push_back(TraceArg::integer("bytes", step.size.value));
    return args;
}

}  // namespace

std::vector<TraceSlice> TraceWriter::step_slices(const std::vector<StepSpan>& spans) {
    std::vector<TraceSlice> children;
    children.reserve(spans.size());
    for (const auto& span : spans) {
        TraceSlice c;
        c.start = span.start;
        c.end = span.end;
        c.name = span.step->label;
        if (span.step->kind == workload::Step::Kind::Compute) {
            c.args = step_kind_args(span.step->kernel, span.step->part);
            c.args.push_back(
                TraceArg::real("model_flops", span.step->model_flops.value * span.repeat));
            if (span.step->hbm_bytes.value > 0)
                c.args.push_back(TraceArg::real(
                    "hbm_bytes", static_cast<double>(span.step->hbm_bytes.value) * span.repeat));
        } else {
            c.args = collective_args(*span.step, 1);  // and repeat or execution
        }
        if (span.repeat > 1)
            c.args.push_back(TraceArg::integer("repeat", span.repeat));
        else if (span.step->repeat > 1)
            c.args.push_back(TraceArg::integer("execution", span.index));
        children.push_back(std::move(c));
    }
    return children;
}

TraceWriter::Stream TraceWriter::collective_stream(workload::GroupKind group) {
    switch (group) {
        case workload::GroupKind::Tp:
            return kTp;
        case workload::GroupKind::Cp:
        case workload::GroupKind::CpInner:
        case workload::GroupKind::CpOuter:
            return kCp;
        case workload::GroupKind::Ep:
            return kEp;
        case workload::GroupKind::Dp:
            return kDp;
    }
    return kTp;
}

void TraceWriter::emit_collectives(const Pending& e, std::size_t g,
                                   const std::vector<StepSpan>& spans, const std::string& name) {
    const auto& p = e.pass;
    const int gpu = ctx_.workers[static_cast<std::size_t>(p.worker)].gpus[g];
    for (const auto& span : spans) {
        if (span.step->kind != workload::Step::Kind::Collective) continue;
        TraceSlice c;
        c.track = lane_track(gpu, collective_stream(span.step->group), span.start, span.end);
        c.start = span.start;
        c.end = span.end;
        c.name = span.step->label;
        c.args = collective_args(*span.step, 3);  // peers, in_pass, repeat
        c.args.push_back(
            TraceArg::text("peers", group_ranks(p.worker, static_cast<int>(g), span.step->group)));
        c.args.push_back(TraceArg::text("in_pass", name));
        if (span.repeat > 1) c.args.push_back(TraceArg::integer("repeat", span.repeat));
        sink_->slice(c, {});
    }
}

void TraceWriter::emit_pass(Pending& e) {
    const auto& p = e.pass;
    const auto& w = ctx_.workers[static_cast<std::size_t>(p.worker)];
    const std::string name =
        std::string(schedule::pass_letter(p.pass)) + std::to_string(p.microbatch);
    const auto spans = step_spans(p);
    // Steps are the same on every GPU of the worker; only their track differs.
    std::vector<TraceSlice> children = step_slices(spans);

    TraceSlice s;
    s.start = p.start;
    s.end = p.end;
    s.name = name;
    s.args = pass_args(p, w, ctx_);
    const std::size_t base_args = s.args.size();
    for (std::size_t g = 0; g < w.gpus.size(); ++g) {
        const int gpu = w.gpus[g];
        if (!traced(gpu)) continue;
        s.track = lane_track(gpu, kCompute, p.start, p.end);
        s.args.resize(base_args);
        s.flows.clear();
        if (e.from_worker >= 0) {
            s.args.push_back(TraceArg::integer(
                "input_from_gpu", ctx_.workers[static_cast<std::size_t>(e.from_worker)].gpus[g]));
            s.args.push_back(TraceArg::integer("input_bytes", e.in_bytes.value));
        }
        if (e.to_worker >= 0) {
            s.args.push_back(TraceArg::integer(
                "output_to_gpu", ctx_.workers[static_cast<std::size_t>(e.to_worker)].gpus[g]));
            s.args.push_back(TraceArg::integer("output_bytes", e.out_bytes.value));
        }
        if (e.out_flow[g] != 0 && e.out_flow[g] == e.in_flow[g]) {
            s.flows.push_back({e.out_flow[g], e.out_role[g]});
        } else {
            if (e.in_flow[g]) s.flows.push_back({e.in_flow[g], FlowRef::Role::End});
            if (e.out_flow[g]) s.flows.push_back({e.out_flow[g], e.out_role[g]});
        }
        for (auto& c : children)
            c.track = s.track;
        sink_->slice(s, children);
        emit_collectives(e, g, spans, name);
    }
}

// ---- transfers ------------------------------------------------------------------------------

void TraceWriter::on_transfer(const replay::TransferRecord& t) {
    using K = replay::TransferRecord::Kind;
    if (t.kind == K::DpGradients || t.kind == K::DpParameters)
        emit_dp_transfer(t);
    else
        emit_p2p_transfer(t);
}

void TraceWriter::emit_dp_transfer(const replay::TransferRecord& t) {
    using K = replay::TransferRecord::Kind;
    const auto& src = ctx_.workers[static_cast<std::size_t>(t.src_worker)];
    // One record per stage (or per shard group): the collective runs for every replica of the
    // stage, or of [replica_first, replica_first + replica_count).
    const char* name = t.label                    ? t.label
                       : t.kind == K::DpGradients ? "dp gradient sync"
                                                  : "dp parameter gather";
    const int replicas = t.replica_count > 0 ? t.replica_count : ctx_.ranks.layout().dp;
    for (std::size_t wi = 0; wi < ctx_.workers.size(); ++wi) {
        const auto& w = ctx_.workers[wi];
        if (w.stage != src.stage || !worker_traced_[wi]) continue;
        if (t.replica_count > 0 &&
            (w.dp < t.replica_first || w.dp >= t.replica_first + t.replica_count))
            continue;
        for (std::size_t g = 0; g < w.gpus.size(); ++g) {
            if (!traced(w.gpus[g])) continue;
            TraceSlice s;
            s.track = lane_track(w.gpus[g], kDp, t.start, t.end);
            s.start = t.start;
            s.end = t.end;
            s.name = name;
            s.args = {TraceArg::integer("stage", w.stage),
                      TraceArg::integer("bytes", t.bytes.value),
                      TraceArg::integer("replicas", replicas),
                      TraceArg::text("peers",
                                     dp_peers(static_cast<int>(wi), static_cast<int>(g), t.scope))};
            sink_->slice(s, {});
        }
    }
}

void TraceWriter::emit_p2p_transfer(const replay::TransferRecord& t) {
    const auto& src = ctx_.workers[static_cast<std::size_t>(t.src_worker)];
    const auto& dst = ctx_.workers[static_cast<std::size_t>(t.dst_worker)];
    auto& q = queues_[static_cast<std::size_t>(t.src_worker)];
    Pending* sender = nullptr;
    for (auto& e : q)
        if (!e.optimizer && e.pass.id == t.from_pass) sender = &e;
    const bool remote = t.src_worker != t.dst_worker;
    const bool gradient = t.kind == replay::TransferRecord::Kind::Gradient;
    const std::string mb = std::to_string(t.microbatch);
    Incoming incoming;
    incoming.flows.assign(dst.gpus.size(), 0);
    incoming.from_worker = t.src_worker;
    incoming.bytes = t.bytes;
    const bool receiver_traced = worker_traced_[static_cast<std::size_t>(t.dst_worker)] != 0;

    for (std::size_t g = 0; g < src.gpus.size() && g < dst.gpus.size(); ++g) {
        const int from = src.gpus[g], to = dst.gpus[g];
        const bool a = sender && traced(from), s = remote && traced(from), r = remote && traced(to),
                   b = receiver_traced && traced(to);
        // A pass that received its input by an arrow continues that arrow to its own output, so
        // every slice carries at most one flow (a JSON X event binds only one).
        const bool chained = a && sender->in_flow[g] != 0;
        const int ends = (chained ? 1 : 0) + a + s + r + b;
        std::uint64_t flow = ends < 2 ? 0 : chained ? sender->in_flow[g] : next_flow_++;
        int seen = chained ? 1 : 0;
        const auto role = [&]() {
            ++seen;
            return seen == 1      ? FlowRef::Role::Begin
                   : seen == ends ? FlowRef::Role::End
                                  : FlowRef::Role::Step;
        };
        if (a) {
            sender->out_role[g] = role();
            sender->out_flow[g] = flow;
        }
        const TraceArgs args{TraceArg::integer("bytes", t.bytes.value),
                             TraceArg::integer("microbatch", t.microbatch),
                             TraceArg::integer("from_stage", src.stage),
                             TraceArg::integer("to_stage", dst.stage),
                             TraceArg::integer("to_virtual_stage", t.virtual_stage),
                             TraceArg::integer("from_gpu", from),
                             TraceArg::integer("to_gpu", to)};
        // The send on the sender's GPU, then the receive on the receiver's: one arrow through both.
        const auto slice = [&](int gpu, Stream stream, const char* what) {
            TraceSlice sl;
            sl.track = lane_track(gpu, stream, t.start, t.end);
            sl.start = t.start;
            sl.end = t.end;
            sl.name = what + mb;
            sl.args = args;
            if (flow) sl.flows.push_back({flow, role()});
            sink_->slice(sl, {});
        };
        if (s) slice(from, kPpSend, gradient ? "send grad " : "send act ");
        if (r) slice(to, kPpRecv, gradient ? "recv grad " : "recv act ");
        if (b) incoming.flows[g] = flow;
    }
    if (receiver_traced) incoming_[t.to_pass] = std::move(incoming);
    if (sender) {
        sender->resolved = true;
        sender->to_worker = t.dst_worker;
        sender->out_bytes = t.bytes;
        drain(t.src_worker);
    }
}

// ---- links, end of iteration ---------------------------------------------------------------

void TraceWriter::flush_link(topology::LinkId id) {
    auto& st = links_[id];
    if (!st.pending) return;
    st.pending = false;
    if (st.value == st.last) return;
    if (!st.track) {
        const auto& cluster = *ctx_.cluster;
        const auto& link = cluster.links()[id];
        int node = cluster.devices()[link.from].node;
        if (node < 0) node = cluster.devices()[link.to].node;
        const int pid = node < 0 ? kClusterPid : pid_of_node(node);
        auto it = links_groups_.find(pid);
        if (it == links_groups_.end()) {
            const std::uint64_t uuid = next_uuid_++;
            sink_->group(uuid, process_uuid(pid), "links", 1);
            it = links_groups_.emplace(pid, uuid).first;
        }
        st.track = next_uuid_++;
        sink_->counter_track(st.track, it->second, cluster.link_name(id), "%",
                             static_cast<int>(id));
    }
    sink_->counter(st.track, st.at, st.value);
    st.last = st.value;
}

void TraceWriter::on_link_rate(Time at, topology::LinkId link, double bytes_per_s, int) {
    if (link >= links_.size() || !links_[link].traced) return;
    auto& st = links_[link];
    // Several changes at one instant (flows starting and ending together) collapse to the last.
    if (st.pending && st.at != at) flush_link(link);
    const double capacity = ctx_.cluster->links()[link].bandwidth.bytes_per_s;
    st.pending = true;
    st.at = at;
    st.value = capacity > 0 ? 100.0 * bytes_per_s / capacity : 0.0;
}

void TraceWriter::on_iteration_end(Time end) {
    for (std::size_t w = 0; w < queues_.size(); ++w) {
        // Anything still waiting has no transfer coming: write it without an outgoing arrow.
        for (auto& e : queues_[w])
            emit(e);
        queues_[w].clear();
    }
    for (std::size_t w = 0; w < host_queues_.size(); ++w) {
        // Every issued pass has run by now; a name still missing would be a replay bug.
        for (auto& h : host_queues_[w])
            if (h.name.empty()) h.name = "issue";
        drain_host(static_cast<int>(w));
    }
    for (std::size_t l = 0; l < links_.size(); ++l)
        flush_link(static_cast<topology::LinkId>(l));
    write_memory(end);
    end_ = end;
    finished_iteration_ = true;
    const std::uint64_t track = iteration_track();
    sink_->instant(track, Time::zero(), "iteration start", {});
    sink_->instant(track, end, "iteration end", {TraceArg::real("iteration_time_us", us(end))});
}

void TraceWriter::write_memory(Time end) {
    constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
    for (std::size_t w = 0; w < memory_.size(); ++w) {
        if (!worker_traced_[w]) continue;
        const auto& worker = ctx_.workers[w];
        if (static_cast<std::size_t>(worker.stage) >= ctx_.stage_memory.size()) continue;
        const auto& m = ctx_.stage_memory[static_cast<std::size_t>(worker.stage)];
        auto changes = std::move(memory_[w]);
        // Frees before allocations at one time: a pass that starts as another ends reuses its
        // memory, as the schedule's count assumes.
        std::stable_sort(changes.begin(), changes.end(),
                         [](const MemoryChange& a, const MemoryChange& b) {
                             return a.at < b.at || (a.at == b.at && a.delta < b.delta);
                         });
        // One value per time: the activations held from then on.
        std::vector<std::pair<Time, std::int64_t>> held{{Time::zero(), 0}};
        std::int64_t now = 0;
        for (const auto& c : changes) {
            now += c.delta;
            if (held.back().first == c.at)
                held.back().second = now;
            else
                held.emplace_back(c.at, now);
        }
        if (held.back().first < end) held.emplace_back(end, now);
        const std::int64_t fixed =
            m.parameters.value + m.gradients.value + m.optimizer_states.value;
        for (const int gpu : worker.gpus) {
            if (!traced(gpu)) continue;
            const std::uint64_t group = gpu_group(gpu);
            const auto track = [&](const char* name, int rank) {
                const std::uint64_t uuid = next_uuid_++;
                // The GPU in the name: Chrome JSON keys counters by process and name.
                sink_->counter_track(uuid, group, "GPU " + std::to_string(gpu) + " memory: " + name,
                                     "GiB", kStreams * 64 + rank);
                return uuid;
            };
            const std::uint64_t total = track("total", 0), params = track("parameters", 1),
                                grads = track("gradients", 2), opt = track("optimizer states", 3),
                                acts = track("activations", 4);
            for (const auto& [at, bytes] : held) {
                sink_->counter(total, at, static_cast<double>(fixed + bytes) / kGiB);
                sink_->counter(acts, at, static_cast<double>(bytes) / kGiB);
            }
            for (const auto& [uuid, bytes] :
                 {std::pair{params, m.parameters.value}, std::pair{grads, m.gradients.value},
                  std::pair{opt, m.optimizer_states.value}}) {
                sink_->counter(uuid, Time::zero(), static_cast<double>(bytes) / kGiB);
                if (end > Time::zero())
                    sink_->counter(uuid, end, static_cast<double>(bytes) / kGiB);
            }
        }
    }
    memory_.clear();
}

void TraceWriter::finish(const nlohmann::json& summary) {
    if (!finished_iteration_)
        throw SimulationError("trace", "finish() before the end of the iteration");
    TraceArgs flat;
    flatten(summary, "", flat);
    sink_->instant(iteration_track(), end_, "summary", flat);
    sink_->finish(flat);
}

}  // namespace cs::report
