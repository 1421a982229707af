#include "chakra/export.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "chakra/program.hpp"
#include "core/errors.hpp"
#include "replay/host.hpp"
#include "replay/replay.hpp"
#include "schedule/schedule.hpp"
#include "workload/groups.hpp"
#include "workload/pipeline_comm.hpp"
#include "workload/plan.hpp"

namespace cs::chakra {

namespace {

using schedule::Pass;

std::int64_t comm_type_of(network::CollectiveKind kind) {
    switch (kind) {
        case network::CollectiveKind::AllReduce:
            return static_cast<std::int64_t>(CollectiveCommType::AllReduce);
        case network::CollectiveKind::AllGather:
            return static_cast<std::int64_t>(CollectiveCommType::AllGather);
        case network::CollectiveKind::ReduceScatter:
            return static_cast<std::int64_t>(CollectiveCommType::ReduceScatter);
        case network::CollectiveKind::AllToAll:
            return static_cast<std::int64_t>(CollectiveCommType::AllToAll);
        case network::CollectiveKind::Broadcast:
            return static_cast<std::int64_t>(CollectiveCommType::Broadcast);
        case network::CollectiveKind::SendRecv:
            break;
    }
    throw SimulationError("chakra", "a sendrecv collective has no Chakra collective type");
}

// One rank's file under construction.
class RankWriter {
  public:
    explicit RankWriter(EtFile& file) : file_(file) {}

    Node& add(NodeType type, std::string name) {
        Node n;
        n.id = next_id_++;
        n.name = std::move(name);
        n.type = static_cast<std::uint64_t>(type);
        file_.nodes.push_back(std::move(n));
        return file_.nodes.back();
    }
    Node& compute(std::string name, Time t, double flops, std::int64_t bytes) {
        Node& n = add(NodeType::Comp, std::move(name));
        n.duration_micros =
            static_cast<std::uint64_t>(std::llround(static_cast<double>(t.count_ps()) / 1e6));
        n.attrs.push_back(Attribute::boolean("is_cpu_op", false));
        // Without FLOPs or bytes (the optimizer step) a roofline reader must use the duration.
        if (flops > 0 || bytes > 0) {
            n.attrs.push_back(Attribute::int64("num_ops", std::llround(flops)));
            n.attrs.push_back(Attribute::uint64("tensor_size", static_cast<std::uint64_t>(bytes)));
        }
        n.attrs.push_back(Attribute::int64(kDurationPsAttr, t.count_ps()));
        return n;
    }
    // A host (CPU) node: framework work, kernel launches, p2p postings (`--host`).
    Node& host(std::string name, Time t) {
        Node& n = add(NodeType::Comp, std::move(name));
        n.duration_micros =
            static_cast<std::uint64_t>(std::llround(static_cast<double>(t.count_ps()) / 1e6));
        n.attrs.push_back(Attribute::boolean("is_cpu_op", true));
        n.attrs.push_back(Attribute::int64(kDurationPsAttr, t.count_ps()));
        return n;
    }
    // A wait that occupies neither the GPU nor the host (cs_delay).
    Node& delay(std::string name, Time t) {
        Node& n = host(std::move(name), t);
        n.attrs[0] = Attribute::boolean("is_cpu_op", false);
        n.attrs.push_back(Attribute::boolean(kDelayAttr, true));
        return n;
    }
    Node& collective(std::string name, network::CollectiveKind kind, Bytes size,
                     const std::string& group, bool alone) {
        Node& n = add(NodeType::CommColl, std::move(name));
        n.attrs.push_back(Attribute::boolean("is_cpu_op", false));
        n.attrs.push_back(Attribute::int64("comm_type", comm_type_of(kind)));
        n.attrs.push_back(Attribute::int64("comm_size", size.value));
        n.attrs.push_back(Attribute::string("pg_name", group));
        if (alone) n.attrs.push_back(Attribute::boolean(kCostedAloneAttr, true));
        return n;
    }
    Node& p2p(bool send, std::string name, int peer, std::int32_t tag, Bytes size) {
        Node& n = add(send ? NodeType::CommSend : NodeType::CommRecv, std::move(name));
        n.attrs.push_back(Attribute::boolean("is_cpu_op", false));
        n.attrs.push_back(Attribute::int32(send ? "comm_dst" : "comm_src", peer));
        n.attrs.push_back(Attribute::int32("comm_tag", tag));
        n.attrs.push_back(Attribute::int64("comm_size", size.value));
        return n;
    }

  private:
    EtFile& file_;
    std::uint64_t next_id_ = 1;
};

void depend(Node& n, std::uint64_t ctrl, std::uint64_t data) {
    if (ctrl) n.ctrl_deps.push_back(ctrl);
    if (data && data != ctrl) n.data_deps.push_back(data);
}

}  // namespace

EtSet export_experiment(const workload::ExperimentSpec& experiment, const std::string& schedule,
                        const std::string& prefix, bool with_host) {
    EtSet set;
    set.prefix = prefix;
    workload::ExperimentSpec spec = experiment;
    if (!schedule.empty()) spec.schedule = schedule;
    auto sched = schedule::require_schedule(spec.schedule, spec.schedule_where);
    const int chunks = sched->chunks_for(spec.layout.vpp);
    schedule::PipelineShape shape{spec.layout.pp, spec.training.microbatches(spec.layout), chunks};
    if (auto problem = sched->check(shape); !problem.empty())
        throw ConfigError(spec.schedule_where, "schedule '" + spec.schedule + "': " + problem);
    if (sched->model_copies() != 1)
        throw ConfigError(spec.schedule_where,
                          "schedule '" + spec.schedule +
                              "': the Chakra export does not write schedules holding two model "
                              "copies (the bidirectional DualPipe); use dualpipev");
    const auto device_of = [&](int vs) { return sched->place(shape, vs, 0).device; };
    const workload::IterationPlan plan =
        workload::plan_iteration(spec, chunks, sched->splits_backward(), device_of);
    const workload::RankLayout ranks(spec.layout);
    const auto& layout = spec.layout;
    // The gradient reduction's GPUs: dp x cp (RankLayout::dp_cp_group).
    const int dp_ranks = layout.dp * layout.cp;
    // Every chunk's reduction after the whole backward, one after another.
    const bool after_backward = workload::dp_reduce_after_backward(spec);

    // The export writes the DP collectives of plain DDP and ZeRO-1 (one per chunk at the end);
    // unit-by-unit all-gathers and reduce-scatters and HSDP's two-level reduction are not written.
    if (layout.dp > 1 && (layout.sharding >= workload::Sharding::Gradients || layout.hsdp()))
        throw ConfigError(spec.layout_where,
                          "'parallelism': chakra export does not write sharded data parallelism "
                          "beyond ZeRO-1 (sharding " +
                              std::string(name_of(workload::kShardingNames, layout.sharding)) +
                              (layout.hsdp() ? ", shard_size " + std::to_string(layout.shard_size)
                                             : std::string()) +
                              "); export with sharding: zero1 or none, without shard_size");
    const auto& host = spec.compute.host;
    const bool host_on = with_host && host.enabled;
    if (host.enabled && !with_host)
        set.warnings.push_back(
            "the host model (compute.host) is not exported: the ETs hold GPU work only, so "
            "running them gives the iteration without host delays (export with --host to "
            "include it, or set compute.host.enabled=false to compare like with like)");
    if (spec.variability.any())
        set.warnings.push_back(
            "variability (slow GPUs and hosts) is not exported: the ETs hold the plan's times, so "
            "running them gives the iteration without it");
    if (spec.faults.any())
        set.warnings.push_back(
            "faults (failed or degraded links, failed GPUs) are not exported: the ETs hold the "
            "workload, and running them gives the iteration on the topology as it is");
    bool overlapped_steps = false;
    for (const auto& c : plan.virtual_stages)
        for (const auto* pass : {&c.forward, &c.backward, &c.backward_input, &c.backward_weight})
            for (const auto& st : pass->steps)
                overlapped_steps |= st.has(workload::Step::OverlapNext) ||
                                    st.has(workload::Step::OverlapPrevious);
    if (overlapped_steps)
        set.warnings.push_back(
            "collectives that overlap their neighbouring compute (context parallelism's ring, "
            "tp_comm_overlap) are exported one after the other at their stand-alone time: "
            "running the ETs gives a longer iteration");
    if (workload::batched_p2p(spec) && layout.pp > 1 && !sched->exchange_rounds(shape, 0).empty())
        set.warnings.push_back(
            "Megatron-LM's batched point-to-point exchanges are not exported: the ETs send each "
            "pass's output as it ends and receive it where the next pass needs it, as with "
            "--overlap-p2p-communication (parallelism.overlap_p2p_comm: true runs the replay so)");
    if (host_on && layout.overlap_grad_reduce && dp_ranks > 1)
        set.warnings.push_back(
            "with --host, --overlap-grad-reduce's gradient buckets become ready at their share of "
            "the pass's GPU time, not of its time held back by the host: an approximation where "
            "the host holds back the last backward pass of a chunk");

    const int world = ranks.workers() * ranks.members();
    set.files.resize(static_cast<std::size_t>(world));
    for (int r = 0; r < world; ++r) {
        auto& f = set.files[static_cast<std::size_t>(r)];
        f.version = "0.0.4";
        f.metadata.push_back(Attribute::string("generator", "clustersim chakra export"));
        f.metadata.push_back(Attribute::string("schedule", spec.schedule));
        f.metadata.push_back(Attribute::int64("rank", r));
        f.metadata.push_back(Attribute::int64("world_size", world));
    }
    std::map<std::vector<int>, std::string> group_names;
    const auto group_name = [&](const std::vector<int>& gpus) {
        auto it = group_names.find(gpus);
        if (it != group_names.end()) return it->second;
        const std::string name = std::to_string(group_names.size() + 1);
        group_names.emplace(gpus, name);
        set.groups.emplace(name, gpus);
        return name;
    };
    const int last_vs = shape.devices * shape.chunks - 1;
    const auto tag_of = [&](int vs, int mb, bool gradient) {
        const std::int64_t tag =
            (static_cast<std::int64_t>(vs) * shape.microbatches + mb) * 2 + (gradient ? 1 : 0);
        if (tag > std::numeric_limits<std::int32_t>::max())
            throw ConfigError(spec.layout_where,
                              "too many virtual stages x microbatches for 32-bit Chakra tags");
        return static_cast<std::int32_t>(tag);
    };
    const auto pass_plan = [&](Pass pass, int vs) -> const workload::PassPlan& {
        return replay::pass_plan(plan.virtual_stages[static_cast<std::size_t>(vs)], pass);
    };

    // With the host model: each pass plan's issue, as the replay costs it (host.hpp's closed
    // form over the plan's kernels, collectives at their stand-alone time on worker 0's groups).
    replay::CollectiveCosts costs(*spec.cluster, spec.network);
    std::map<std::pair<int, int>, replay::HostIssue> issues;
    const auto issue_of = [&](Pass pass, int vs) -> const replay::HostIssue& {
        const auto key = std::make_pair(vs, static_cast<int>(pass));
        auto it = issues.find(key);
        if (it != issues.end()) return it->second;
        const auto& steps = pass_plan(pass, vs).steps;
        std::vector<Time> times;
        for (const auto& step : steps)
            times.push_back(
                step.kind == workload::Step::Kind::Compute
                    ? step.duration
                    : costs.cost(step.collective, ranks.group(step.group, 0, 0).gpus, step.size));
        const bool backward = pass == Pass::Backward || pass == Pass::BackwardInput;
        const Time lead = host.pass + (backward ? host.backward : Time::zero());
        return issues
            .emplace(key,
                     replay::host_issue(lead, host.launch, replay::kernel_blocks(steps, times)))
            .first->second;
    };

    // --overlap-grad-reduce (the replay's gradient buckets): per stage, the buckets of a chunk,
    // their bytes, and the isolated time of all but the last (the interference's overlap).
    const auto overlaps = [&](int stage) {
        return layout.overlap_grad_reduce && dp_ranks > 1 &&
               plan.devices[static_cast<std::size_t>(stage)].dp_gradient_bytes.value > 0;
    };
    const auto bucket_count = [&](int stage) {
        const std::int64_t params = plan.devices[static_cast<std::size_t>(stage)].dp_parameters;
        const std::int64_t per = layout.bucket_parameters();
        return static_cast<int>(std::max<std::int64_t>(1, (params + per - 1) / per));
    };
    const auto bucket_fraction = [&](int stage, int b) {
        const double params =
            static_cast<double>(plan.devices[static_cast<std::size_t>(stage)].dp_parameters);
        return std::min(1.0, b * static_cast<double>(layout.bucket_parameters()) / params);
    };
    const auto bucket_bytes = [&](int stage, int b) {
        const auto& dev = plan.devices[static_cast<std::size_t>(stage)];
        const int buckets = bucket_count(stage);
        const auto upto = [&](int k) {
            return k >= buckets ? dev.dp_gradient_bytes.value
                                : static_cast<std::int64_t>(std::llround(
                                      static_cast<double>(dev.dp_gradient_bytes.value) *
                                      bucket_fraction(stage, k)));
        };
        return Bytes{upto(b + 1) - upto(b)};
    };
    const auto dp_kind = [&](int stage) {
        return plan.devices[static_cast<std::size_t>(stage)].dp_sharded
                   ? network::CollectiveKind::ReduceScatter
                   : network::CollectiveKind::AllReduce;
    };
    const bool interferes =
        spec.compute.interference > 0 && spec.compute.framework != workload::Framework::None;
    std::vector<Time> overlapped(static_cast<std::size_t>(layout.pp), Time::zero());
    for (int s = 0; s < layout.pp; ++s)
        if (interferes && overlaps(s))
            for (int b = 0; b + 1 < bucket_count(s); ++b)
                overlapped[static_cast<std::size_t>(s)] += costs.cost(
                    dp_kind(s), ranks.dp_cp_group(ranks.worker(s, 0), 0).gpus,
                    bucket_bytes(s, b));

    for (int w = 0; w < ranks.workers(); ++w) {
        const int stage = ranks.stage_of(w);
        const int dp = ranks.replica_of(w);
        const auto order = sched->order(shape, stage);
        for (int m = 0; m < ranks.members(); ++m) {
            const int gpu = ranks.member_gpu(w, m);
            if (gpu < 0 || gpu >= world)
                throw SimulationError("chakra", "GPU " + std::to_string(gpu) +
                                                    " outside the layout's " +
                                                    std::to_string(world) + " GPUs");
            RankWriter out(set.files[static_cast<std::size_t>(gpu)]);
            std::uint64_t prev = 0;
            std::uint64_t host_prev = 0;  // the host's last node (--host)
            std::map<std::tuple<int, int, bool>, std::uint64_t> local;  // (vs, mb, grad) -> end
            std::vector<std::uint64_t> last_grad(static_cast<std::size_t>(chunks), 0);
            // The last pass completing each chunk's gradients, where its buckets reduce.
            std::vector<std::size_t> last_grad_op(static_cast<std::size_t>(chunks), order.size());
            for (std::size_t k = 0; k < order.size(); ++k)
                if (order[k].pass == Pass::Backward || order[k].pass == Pass::BackwardWeight)
                    last_grad_op[static_cast<std::size_t>(order[k].chunk)] = k;
            std::vector<std::uint64_t> bucket_syncs;  // every bucket's collective, in order
            const std::string dp_name =
                dp_ranks > 1 ? group_name(ranks.dp_cp_group(w, m).gpus) : "";
            for (std::size_t op_index = 0; op_index < order.size(); ++op_index) {
                const auto& op = order[op_index];
                const int vs = sched->virtual_stage(shape, stage, op.chunk, op.microbatch);
                const int mb = op.microbatch;
                const std::string what = std::string(schedule::pass_letter(op.pass)) +
                                         (op.pass == Pass::BackwardInput ? "i" : "") + " mb" +
                                         std::to_string(mb) + " vs" + std::to_string(vs);
                // Its input: an activation from vs - 1 or a gradient from vs + 1.
                std::uint64_t input = 0;
                bool input_remote = false;
                const bool need_act = op.pass == Pass::Forward && vs > 0;
                const bool need_grad =
                    (op.pass == Pass::Backward || op.pass == Pass::BackwardInput) && vs < last_vs;
                if (need_act || need_grad) {
                    const int src_vs = need_grad ? vs + 1 : vs - 1;
                    const int src = ranks.worker(sched->place(shape, src_vs, mb).device, dp);
                    if (src == w) {
                        auto it = local.find({vs, mb, need_grad});
                        if (it == local.end())
                            throw SimulationError(
                                "chakra", "a pass of " + what + " runs before its local input");
                        input = it->second;
                    } else {
                        const Bytes bytes =
                            plan.virtual_stages[static_cast<std::size_t>(need_grad ? vs : vs - 1)]
                                .activation_bytes;
                        Node& r = out.p2p(
                            false,
                            std::string("recv ") + (need_grad ? "gradient " : "activation ") + what,
                            ranks.member_gpu(src, m), tag_of(vs, mb, need_grad), bytes);
                        input = r.id;
                        input_remote = true;
                    }
                }
                // The host (--host): a receive from another GPU is posted first, then the pass's
                // kernels are issued from h0 (after the input's arrival with sync_after_p2p); the
                // GPU starts the pass once the first kernel is issued (first_issue) and ends it
                // no earlier than h0 + earliest_end, which a wait after the issue enforces.
                std::uint64_t issued_first = 0, issued_all = 0;
                Time host_wait = Time::zero();
                if (host_on) {
                    const auto& is = issue_of(op.pass, vs);
                    if (input_remote) {
                        Node& post = out.host("post recv " + what, host.p2p);
                        depend(post, host_prev, 0);
                        host_prev = post.id;
                    }
                    Node& first_kernel = out.host("issue " + what, is.first_issue);
                    depend(first_kernel, host_prev, host.sync_after_p2p ? input : 0);
                    issued_first = first_kernel.id;
                    Node& rest = out.host("issue rest " + what, is.issue - is.first_issue);
                    depend(rest, issued_first, 0);
                    issued_all = host_prev = rest.id;
                    host_wait = std::max(Time::zero(), is.earliest_end - is.issue);
                }
                // The pass: compute folded between collectives, a chain of nodes.
                const auto& pp = pass_plan(op.pass, vs);
                bool first = true;
                std::uint64_t last = 0;
                const auto chain = [&](Node& n) {
                    if (first) {
                        depend(n, prev, input);
                        if (issued_first) n.ctrl_deps.push_back(issued_first);
                    } else {
                        depend(n, last, 0);
                    }
                    first = false;
                    last = n.id;
                };
                Time t = Time::zero();
                double flops = 0;
                std::int64_t bytes = 0;
                bool pending = false;
                const auto flush = [&] {
                    if (!pending) return;
                    chain(out.compute(what + " compute", t, flops, bytes));
                    t = Time::zero();
                    flops = 0;
                    bytes = 0;
                    pending = false;
                };
                for (const auto& step : pp.steps) {
                    if (step.kind == workload::Step::Kind::Compute) {
                        t += step.duration * step.repeat;
                        flops += step.hardware_flops.value * step.repeat;
                        bytes += step.hbm_bytes.value * step.repeat;
                        pending = true;
                        continue;
                    }
                    const auto& g = ranks.group(step.group, w, m).gpus;
                    if (g.size() <= 1 || step.size.value <= 0) continue;  // the replay: no cost
                    flush();
                    const std::string name = group_name(g);
                    for (int k = 0; k < step.repeat; ++k)
                        chain(out.collective(what + " " + step.label, step.collective, step.size,
                                             name, true));
                }
                if (pending || first) {
                    pending = true;
                    flush();
                }
                // --overlap-grad-reduce: the chunk's last backward pass is slowed by the
                // interference, and its buckets become ready at even shares of its time
                // (timers from its start), the last one at its end.
                const bool buckets_here =
                    overlaps(stage) && op_index == last_grad_op[static_cast<std::size_t>(op.chunk)];
                std::vector<std::uint64_t> bucket_ready;
                if (buckets_here) {
                    const Time compute = pp.compute_time();
                    const Time slowed = Time::ps(static_cast<std::int64_t>(std::llround(
                        static_cast<double>(
                            std::min(compute, overlapped[static_cast<std::size_t>(stage)])
                                .count_ps()) *
                        spec.compute.interference)));
                    if (slowed > Time::zero())
                        chain(out.compute(what + " interference", slowed, 0, 0));
                    Time span = compute + slowed;
                    for (const auto& step : pp.steps)
                        if (step.kind == workload::Step::Kind::Collective)
                            span += costs.cost(step.collective, ranks.group(step.group, 0, 0).gpus,
                                               step.size) *
                                    step.repeat;
                    const int buckets = bucket_count(stage);
                    for (int b = 0; b + 1 < buckets; ++b) {
                        const Time at = Time::ps(static_cast<std::int64_t>(std::llround(
                            static_cast<double>(span.count_ps()) * bucket_fraction(stage, b + 1))));
                        Node& timer =
                            out.delay(what + " bucket " + std::to_string(b) + " ready", at);
                        depend(timer, prev, input);
                        if (issued_first) timer.ctrl_deps.push_back(issued_first);
                        bucket_ready.push_back(timer.id);
                    }
                }
                if (host_on) {
                    std::uint64_t until = issued_all;
                    if (host_wait > Time::zero()) {
                        Node& wait = out.delay("host-bound " + what, host_wait);
                        depend(wait, issued_all, 0);
                        until = wait.id;
                    }
                    Node& end = out.compute(what + " end", Time::zero(), 0, 0);
                    depend(end, last, 0);
                    end.ctrl_deps.push_back(until);
                    last = end.id;
                }
                prev = last;
                // Its output: to vs + 1 (activation) or vs - 1 (gradient).
                int target = -1;
                bool gradient = false;
                if (op.pass == Pass::Forward && vs < last_vs) target = vs + 1;
                if ((op.pass == Pass::Backward || op.pass == Pass::BackwardInput) && vs > 0) {
                    target = vs - 1;
                    gradient = true;
                }
                if (target >= 0) {
                    const int dst = ranks.worker(sched->place(shape, target, mb).device, dp);
                    if (dst == w) {
                        local[{target, mb, gradient}] = last;
                    } else {
                        const Bytes b =
                            plan.virtual_stages[static_cast<std::size_t>(gradient ? target : vs)]
                                .activation_bytes;
                        Node& s = out.p2p(
                            true,
                            std::string("send ") + (gradient ? "gradient " : "activation ") + what,
                            ranks.member_gpu(dst, m), tag_of(target, mb, gradient), b);
                        depend(s, 0, last);
                        if (host_on) {  // posting the send; with sync_after_p2p, waiting for it
                            Node& post = out.host("post send " + what, host.p2p);
                            depend(post, host_prev, 0);
                            host_prev = post.id;
                            if (host.sync_after_p2p) {
                                Node& sync = out.host("sync " + what, Time::zero());
                                depend(sync, host_prev, 0);
                                sync.ctrl_deps.push_back(last);
                                host_prev = sync.id;
                            }
                        }
                    }
                }
                if (op.pass == Pass::Backward || op.pass == Pass::BackwardWeight)
                    last_grad[static_cast<std::size_t>(op.chunk)] = last;
                if (buckets_here) {
                    // One communicator: each bucket after the one before (of any chunk).
                    bucket_ready.push_back(last);
                    for (std::size_t b = 0; b < bucket_ready.size(); ++b) {
                        Node& n =
                            out.collective("dp gradients chunk " + std::to_string(op.chunk) +
                                               " bucket " + std::to_string(b),
                                           dp_kind(stage), bucket_bytes(stage, static_cast<int>(b)),
                                           dp_name, false);
                        depend(n, bucket_syncs.empty() ? 0 : bucket_syncs.back(), bucket_ready[b]);
                        bucket_syncs.push_back(n.id);
                    }
                }
            }
            // Data-parallel gradients per chunk, the optimizer step, the parameters.
            const auto& dev = plan.devices[static_cast<std::size_t>(stage)];
            const bool dp_sync = dp_ranks > 1 && dev.dp_gradient_bytes.value > 0;
            std::vector<std::uint64_t> syncs = bucket_syncs;
            const auto& dp_group = ranks.dp_cp_group(w, m).gpus;
            if (dp_sync && !overlaps(stage)) {
                const std::string name = group_name(dp_group);
                for (int c = 0; c < chunks; ++c) {
                    Node& n = out.collective("dp gradients chunk " + std::to_string(c),
                                             dev.dp_sharded ? network::CollectiveKind::ReduceScatter
                                                            : network::CollectiveKind::AllReduce,
                                             dev.dp_gradient_bytes, name, false);
                    depend(n, 0, last_grad[static_cast<std::size_t>(c)]);
                    if (after_backward) {
                        for (const auto g : last_grad)
                            if (g != 0 && g != last_grad[static_cast<std::size_t>(c)])
                                n.data_deps.push_back(g);
                        if (!syncs.empty()) n.data_deps.push_back(syncs.back());
                    }
                    syncs.push_back(n.id);
                }
            }
            std::uint64_t opt_issue = 0;
            if (host_on && dev.optimizer_step > Time::zero()) {
                Node& issue = out.host("issue optimizer step", host.pass + host.launch);
                depend(issue, host_prev, 0);
                opt_issue = host_prev = issue.id;
            }
            Node& opt = out.compute("optimizer step", dev.optimizer_step, 0, 0);
            depend(opt, prev, 0);
            if (opt_issue) opt.ctrl_deps.push_back(opt_issue);
            for (const auto s : syncs)
                opt.data_deps.push_back(s);
            const std::uint64_t opt_id = opt.id;  // `opt` moves when nodes are added
            if (dev.dp_sharded && dp_sync) {
                Node& n = out.collective("dp parameters", network::CollectiveKind::AllGather,
                                         Bytes{dev.dp_parameter_bytes.value * chunks},
                                         group_name(dp_group), false);
                depend(n, 0, opt_id);
            }
        }
    }
    return set;
}

void write_et_set(const EtSet& set, const std::filesystem::path& folder, OutputSet& outputs,
                  const std::string& option) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (fs::exists(folder, ec) && !fs::is_directory(folder, ec))
        throw ConfigError(SourceLocation{option + " " + folder.string(), 0, 0},
                          "not a folder: expected a folder for the ET files");
    std::set<std::string> names;
    for (std::size_t r = 0; r < set.files.size(); ++r)
        names.insert(set.prefix + "." + std::to_string(r) + ".et");
    if (fs::is_directory(folder, ec))
        for (const auto& e : fs::directory_iterator(folder, ec)) {
            const std::string name = e.path().filename().string();
            if (name.size() > 3 && name.substr(name.size() - 3) == ".et" && !names.contains(name))
                throw ConfigError(SourceLocation{option + " " + folder.string(), 0, 0},
                                  "the folder already holds " + name +
                                      ", which is not part of this export (a folder holds one "
                                      "workload): use an empty or new folder");
        }
    fs::create_directories(folder, ec);
    if (ec)
        throw ConfigError(SourceLocation{option + " " + folder.string(), 0, 0},
                          "cannot create the folder: " + ec.message());
    for (std::size_t r = 0; r < set.files.size(); ++r)
        outputs.declare(option, folder / (set.prefix + "." + std::to_string(r) + ".et"));
    outputs.declare(option, folder / kCommGroupsFile);
    for (std::size_t r = 0; r < set.files.size(); ++r) {
        const std::string bytes = encode_et(set.files[r]);
        write_file_atomically(
            folder / (set.prefix + "." + std::to_string(r) + ".et"),
            [&](std::ostream& o) {
                o.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
            },
            &outputs);
    }
    nlohmann::ordered_json groups = nlohmann::ordered_json::object();
    // Numeric names in numeric order.
    std::vector<std::pair<std::size_t, std::string>> sorted;
    for (const auto& [name, members] : set.groups)
        sorted.emplace_back(name.size(), name);
    std::sort(sorted.begin(), sorted.end());
    for (const auto& [length, name] : sorted)
        groups[name] = set.groups.at(name);
    write_file_atomically(
        folder / kCommGroupsFile, [&](std::ostream& o) { o << groups.dump() << "\n"; }, &outputs);
}

}  // namespace cs::chakra
