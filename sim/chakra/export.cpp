#include "chakra/export.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <tuple>

#include "chakra/program.hpp"
#include "core/errors.hpp"
#include "replay/host.hpp"
#include "replay/prepare.hpp"
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
        n.attrs.reserve(6);  // the most any node gets: no regrowth
        file_.nodes.push_back(std::move(n));
        return file_.nodes.back();
    }
    Node& compute(std::string name, Time t, double flops, std::int64_t bytes) {
        Node& n = add(NodeType::Comp, std::move(name));
        n.duration_micros =
            static_cast<std::uint64_t>(std::llround(static_cast<double>(t.count_ps()) / 1e6));
        n.attrs.push_back(Attribute::boolean("is_cpu_op", false));
        // num_ops is an int64 (and a negative count is no count): a model whose pass needs more
        // FLOPs than that cannot be written (api::chakra_export names the experiment).
        if (!(flops >= 0 && flops < 9.2e18) || bytes < 0)
            throw ConfigError("chakra export: node \"" + n.name + "\" would need num_ops " +
                              std::to_string(flops) + " and tensor_size " + std::to_string(bytes) +
                              ", beyond the 0 to 2^63 a Chakra ET's int64 fields hold; the model "
                              "is too large to export");
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
    // `size` in nccl-tests' meaning (clustersim's network), written in ASTRA-sim's: an
    // all-gather's comm_size is each of the `members` ranks' input, the gathered output over
    // the members (Ring.cc: msg_size = data_size, final_data_size = data_size x n).
    Node& collective(std::string name, network::CollectiveKind kind, Bytes size,
                     const std::string& group, std::size_t members, bool alone) {
        Node& n = add(NodeType::CommColl, std::move(name));
        n.attrs.push_back(Attribute::boolean("is_cpu_op", false));
        n.attrs.push_back(Attribute::int64("comm_type", comm_type_of(kind)));
        std::int64_t comm_size = size.value;
        if (kind == network::CollectiveKind::AllGather && members > 1) {
            const auto m = static_cast<std::int64_t>(members);
            // Rounded up where the output does not split evenly (docs/chakra.md).
            comm_size = (comm_size + m - 1) / m;
        }
        n.attrs.push_back(Attribute::int64("comm_size", comm_size));
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

// The ETs of one prepared iteration: per GPU, its passes in the schedule's order (a pass alone,
// or an overlapped group), then its data-parallel gradients, optimizer step and parameters.
class Exporter {
  public:
    Exporter(const replay::PreparedIteration& it, bool with_host, EtSet& set, const RankSink& sink)
        : it_(it),
          spec_(it.spec),
          layout_(it.spec.layout),
          ranks_(it.spec.layout),
          host_(it.spec.compute.host),
          host_on_(with_host && host_.enabled),
          costs_(*it.spec.cluster, it.spec.network),
          set_(set),
          sink_(sink) {}

    void write() {
        refuse_unwritten();
        warn_approximations();
        start_files();
        for (int s = 0; s < layout_.pp; ++s)
            if (interferes() && overlaps(s))
                for (int b = 0; b + 1 < bucket_count(s); ++b)
                    overlapped_[static_cast<std::size_t>(s)] +=
                        costs_.cost(dp_kind(s), ranks_.dp_cp_group(ranks_.worker(s, 0), 0).gpus,
                                    bucket_bytes(s, b));
        for (int w = 0; w < ranks_.workers(); ++w)
            for (int m = 0; m < ranks_.members(); ++m)
                write_member(w, m);
    }

  private:
    // One GPU's program under construction.
    struct Member {
        RankWriter out;
        int worker = 0, member = 0, stage = 0, dp = 0;
        const std::vector<schedule::PipelineOp>* order = nullptr;
        std::uint64_t prev = 0;       // the end of the GPU's previous pass
        std::uint64_t host_prev = 0;  // the host's last node (--host)
        std::map<std::tuple<int, int, bool>, std::uint64_t> local;  // (vs, mb, grad) -> end
        std::vector<std::uint64_t> last_grad;  // per chunk: the pass completing its gradients
        // Per chunk: the index in the order of the last pass completing its gradients, where its
        // buckets reduce (--overlap-grad-reduce).
        std::vector<std::size_t> last_grad_op;
        std::vector<std::uint64_t> bucket_syncs;  // every bucket's collective, in order
        std::string dp_name;
        explicit Member(EtFile& file) : out(file) {}
    };
    // One pass of the order as written: its input, its end node and its buckets' readiness.
    struct PassNodes {
        schedule::PipelineOp op;
        std::size_t index = 0;  // in the device's order
        int vs = 0;
        std::string what;
        std::uint64_t input = 0;  // the node whose end is its input (0: none)
        bool input_remote = false;
        bool buckets_here = false;
        std::uint64_t end = 0;
        std::vector<std::uint64_t> bucket_ready;
    };

    void refuse_unwritten() const {
        // The export writes the DP collectives of plain DDP and ZeRO-1 (one per chunk at the
        // end); unit-by-unit all-gathers and reduce-scatters and HSDP's two-level reduction are
        // not written.
        if (layout_.dp > 1 && (layout_.sharding >= workload::Sharding::Gradients || layout_.hsdp()))
            throw ConfigError(
                spec_.layout_where,
                "'parallelism': chakra export does not write sharded data parallelism beyond "
                "ZeRO-1 (sharding " +
                    std::string(name_of(workload::kShardingNames, layout_.sharding)) +
                    (layout_.hsdp() ? ", shard_size " + std::to_string(layout_.shard_size)
                                    : std::string()) +
                    "); export with sharding: zero1 or none, without shard_size");
    }

    void warn_approximations() {
        auto& warnings = set_.warnings;
        if (host_.enabled && !host_on_)
            warnings.push_back(
                "the host model (compute.host) is not exported: the ETs hold GPU work only, so "
                "running them gives the iteration without host delays (export with --host to "
                "include it, or set compute.host.enabled=false to compare like with like)");
        if (spec_.variability.any())
            warnings.push_back(
                "variability (slow GPUs and hosts) is not exported: the ETs hold the plan's "
                "times, so running them gives the iteration without it");
        if (spec_.faults.any())
            warnings.push_back(
                "faults (failed or degraded links, failed GPUs) are not exported: the ETs hold "
                "the workload, and running them gives the iteration on the topology as it is");
        bool overlapped_steps = false;
        for (const auto& c : it_.plan.virtual_stages)
            for (const auto* pass :
                 {&c.forward, &c.backward, &c.backward_input, &c.backward_weight})
                for (const auto& step : pass->steps)
                    overlapped_steps |= step.has(workload::Step::OverlapNext) ||
                                        step.has(workload::Step::OverlapPrevious);
        if (overlapped_steps)
            warnings.push_back(
                "collectives that overlap their neighbouring compute (context parallelism's ring, "
                "tp_comm_overlap) are exported one after the other at their stand-alone time: "
                "running the ETs gives a longer iteration");
        if (workload::batched_p2p(spec_) && layout_.pp > 1 &&
            !it_.schedule->exchange_rounds(it_.shape, 0).empty())
            warnings.push_back(
                "Megatron-LM's batched point-to-point exchanges are not exported: the ETs send "
                "each pass's output as it ends and receive it where the next pass needs it, as "
                "with --overlap-p2p-communication (parallelism.overlap_p2p_comm: true runs the "
                "replay so)");
        if (host_on_ && layout_.overlap_grad_reduce && dp_ranks() > 1)
            warnings.push_back(
                "with --host, --overlap-grad-reduce's gradient buckets become ready at their "
                "share of the pass's GPU time, not of its time held back by the host: an "
                "approximation where the host holds back the last backward pass of a chunk");
    }

    int world() const { return ranks_.workers() * ranks_.members(); }

    void start_files() { overlapped_.assign(static_cast<std::size_t>(layout_.pp), Time::zero()); }

    void start_file(EtFile& f, int rank) const {
        f.version = "0.0.4";
        f.metadata.clear();
        f.metadata.push_back(Attribute::string("generator", "clustersim chakra export"));
        f.metadata.push_back(Attribute::string("schedule", spec_.schedule));
        f.metadata.push_back(Attribute::int64("rank", rank));
        f.metadata.push_back(Attribute::int64("world_size", world()));
        f.nodes.clear();
    }

    std::string group_name(const std::vector<int>& gpus) {
        auto it = group_names_.find(gpus);
        if (it != group_names_.end()) return it->second;
        const std::string name = std::to_string(group_names_.size() + 1);
        group_names_.emplace(gpus, name);
        set_.groups.emplace(name, gpus);
        return name;
    }
    int last_vs() const { return it_.schedule->virtual_stages(it_.shape) - 1; }
    std::int32_t tag_of(int vs, int mb, bool gradient) const {
        const std::int64_t tag =
            (static_cast<std::int64_t>(vs) * it_.shape.microbatches + mb) * 2 + (gradient ? 1 : 0);
        if (tag > std::numeric_limits<std::int32_t>::max())
            throw ConfigError(spec_.layout_where,
                              "too many virtual stages x microbatches for 32-bit Chakra tags");
        return static_cast<std::int32_t>(tag);
    }
    const workload::PassPlan& pass_plan(Pass pass, int vs) const {
        return replay::pass_plan(it_.plan.virtual_stages[static_cast<std::size_t>(vs)], pass);
    }
    // A collective step once, run alone on worker 0's group (as the replay costs it).
    Time collective_time(const workload::Step& step) {
        return costs_.cost(step.collective, ranks_.group(step.group, 0, 0).gpus, step.size);
    }
    // Every collective of a pass, each execution run alone.
    Time collectives_time(const workload::PassPlan& plan) {
        Time t = Time::zero();
        for (const auto& step : plan.steps)
            if (step.kind == workload::Step::Kind::Collective)
                t += collective_time(step) * step.repeat;
        return t;
    }

    // With the host model: each pass plan's issue, as the replay costs it (host.hpp's closed
    // form over the plan's kernels, collectives at their stand-alone time on worker 0's groups).
    // `compute`, when given, is the pass's compute as the replay runs it (an overlapped group's
    // first pass, slowed by the interference): its compute kernels scale alike, as the replay's
    // start_on_host scales them.
    replay::HostIssue issue_of(Pass pass, int vs, std::optional<Time> compute = std::nullopt) {
        const auto key = std::make_tuple(vs, static_cast<int>(pass),
                                         compute ? compute->count_ps() : std::int64_t{-1});
        auto found = issues_.find(key);
        if (found != issues_.end()) return found->second;
        const auto& pp = pass_plan(pass, vs);
        std::vector<Time> times;
        for (const auto& step : pp.steps)
            times.push_back(step.kind == workload::Step::Kind::Compute ? step.duration
                                                                       : collective_time(step));
        auto blocks = replay::kernel_blocks(pp.steps, times);
        const Time nominal = pp.compute_time();
        if (compute && *compute != nominal && nominal > Time::zero()) {
            const double scale =
                static_cast<double>(compute->count_ps()) / static_cast<double>(nominal.count_ps());
            for (std::size_t i = 0; i < blocks.size(); ++i)
                if (pp.steps[i].kind == workload::Step::Kind::Compute)
                    blocks[i].time = Time::ps(static_cast<std::int64_t>(
                        std::llround(static_cast<double>(blocks[i].time.count_ps()) * scale)));
        }
        const bool backward = pass == Pass::Backward || pass == Pass::BackwardInput;
        const Time lead = replay::pass_lead(host_, *it_.schedule, backward);
        return issues_.emplace(key, replay::host_issue(lead, host_.launch, blocks)).first->second;
    }

    // --overlap-grad-reduce (the replay's gradient buckets): per stage, the buckets of a chunk,
    // their bytes, and the isolated time of all but the last (the interference's overlap).
    const workload::StagePlan& device(int stage) const {
        return it_.plan.devices[static_cast<std::size_t>(stage)];
    }
    // The gradient reduction's GPUs: dp x cp (RankLayout::dp_cp_group).
    int dp_ranks() const { return layout_.dp * layout_.cp; }
    bool overlaps(int stage) const {
        return layout_.overlap_grad_reduce && dp_ranks() > 1 &&
               device(stage).dp_gradient_bytes.value > 0;
    }
    int bucket_count(int stage) const {
        const std::int64_t params = device(stage).dp_parameters;
        const std::int64_t per = layout_.bucket_parameters();
        return static_cast<int>(std::max<std::int64_t>(1, (params + per - 1) / per));
    }
    double bucket_fraction(int stage, int b) const {
        const double params = static_cast<double>(device(stage).dp_parameters);
        return std::min(1.0, b * static_cast<double>(layout_.bucket_parameters()) / params);
    }
    Bytes bucket_bytes(int stage, int b) const {
        const auto& dev = device(stage);
        const int buckets = bucket_count(stage);
        const auto upto = [&](int k) {
            return k >= buckets ? dev.dp_gradient_bytes.value
                                : static_cast<std::int64_t>(std::llround(
                                      static_cast<double>(dev.dp_gradient_bytes.value) *
                                      bucket_fraction(stage, k)));
        };
        return Bytes{upto(b + 1) - upto(b)};
    }
    network::CollectiveKind dp_kind(int stage) const {
        return device(stage).dp_sharded ? network::CollectiveKind::ReduceScatter
                                        : network::CollectiveKind::AllReduce;
    }
    bool interferes() const {
        return spec_.compute.interference > 0 &&
               spec_.compute.framework != workload::Framework::None;
    }
    // The interference a chunk's last backward pass takes while its buckets reduce.
    Time slowed_by_buckets(int stage, Time compute) const {
        return Time::ps(static_cast<std::int64_t>(std::llround(
            static_cast<double>(
                std::min(compute, overlapped_[static_cast<std::size_t>(stage)]).count_ps()) *
            spec_.compute.interference)));
    }

    void write_member(int w, int m) {
        const int gpu = ranks_.member_gpu(w, m);
        if (gpu < 0 || gpu >= world())
            throw SimulationError("chakra", "GPU " + std::to_string(gpu) +
                                                " outside the layout's " + std::to_string(world()) +
                                                " GPUs");
        // One file at a time, handed to the sink when complete: the memory of one rank's
        // nodes, not the whole workload's.
        start_file(file_, gpu);
        Member st(file_);
        st.worker = w;
        st.member = m;
        st.stage = ranks_.stage_of(w);
        st.dp = ranks_.replica_of(w);
        st.order = &it_.orders[static_cast<std::size_t>(st.stage)];
        const auto& order = *st.order;
        const auto chunks = static_cast<std::size_t>(it_.shape.chunks);
        st.last_grad.assign(chunks, 0);
        st.last_grad_op.assign(chunks, order.size());
        for (std::size_t k = 0; k < order.size(); ++k)
            if (order[k].pass == Pass::Backward || order[k].pass == Pass::BackwardWeight)
                st.last_grad_op[static_cast<std::size_t>(order[k].chunk)] = k;
        st.dp_name = dp_ranks() > 1 ? group_name(ranks_.dp_cp_group(w, m).gpus) : "";
        for (std::size_t k = 0; k < order.size();) {
            const std::size_t n = 1 + static_cast<std::size_t>(std::max<int>(0, order[k].overlap));
            if (k + n > order.size())
                throw SimulationError("chakra", "schedule " + spec_.schedule +
                                                    " overlaps a pass with more passes than "
                                                    "follow it");
            if (n == 1)
                write_pass(st, k);
            else
                write_group(st, k, n);
            k += n;
        }
        write_tail(st);
        sink_(gpu, file_);
    }

    PassNodes begin_pass(const Member& st, std::size_t index) const {
        PassNodes p;
        p.op = (*st.order)[index];
        p.index = index;
        p.vs = it_.schedule->virtual_stage(it_.shape, st.stage, p.op.chunk, p.op.microbatch);
        p.what = std::string(schedule::pass_letter(p.op.pass)) +
                 (p.op.pass == Pass::BackwardInput ? "i" : "") + " mb" +
                 std::to_string(p.op.microbatch) + " vs" + std::to_string(p.vs);
        p.buckets_here =
            overlaps(st.stage) && index == st.last_grad_op[static_cast<std::size_t>(p.op.chunk)];
        return p;
    }

    // Its input: an activation from vs - 1 or a gradient from vs + 1, received from another
    // GPU (a receive node) or handed over on this one.
    void write_input(Member& st, PassNodes& p) {
        const auto& op = p.op;
        const int mb = op.microbatch;
        const bool need_act = op.pass == Pass::Forward && p.vs > 0;
        const bool need_grad =
            (op.pass == Pass::Backward || op.pass == Pass::BackwardInput) && p.vs < last_vs();
        if (!need_act && !need_grad) return;
        const int src_vs = need_grad ? p.vs + 1 : p.vs - 1;
        const int src = ranks_.worker(it_.schedule->place(it_.shape, src_vs, mb).device, st.dp);
        if (src == st.worker) {
            auto found = st.local.find({p.vs, mb, need_grad});
            if (found == st.local.end())
                throw SimulationError("chakra",
                                      "a pass of " + p.what + " runs before its local input");
            p.input = found->second;
            return;
        }
        const Bytes bytes =
            it_.plan.virtual_stages[static_cast<std::size_t>(need_grad ? p.vs : p.vs - 1)]
                .activation_bytes;
        Node& r = st.out.p2p(
            false, std::string("recv ") + (need_grad ? "gradient " : "activation ") + p.what,
            ranks_.member_gpu(src, st.member), tag_of(p.vs, mb, need_grad), bytes);
        p.input = r.id;
        p.input_remote = true;
    }

    // The host (--host) issuing a pass (or an overlapped group, as its first pass): a receive
    // from another GPU is posted first, then the pass's kernels are issued from h0 (after the
    // input's arrival with sync_after_p2p). Returns the first issue's node (the GPU starts the
    // pass once it is done) and sets `issued_all` and `wait` (the end no earlier than
    // h0 + earliest_end, which a wait after the issue enforces).
    std::uint64_t write_issue(Member& st, const PassNodes& p, std::uint64_t& issued_all, Time& wait,
                              std::optional<Time> compute = std::nullopt) {
        const replay::HostIssue is = issue_of(p.op.pass, p.vs, compute);
        if (p.input_remote) {
            Node& post = st.out.host("post recv " + p.what, host_.p2p);
            depend(post, st.host_prev, 0);
            st.host_prev = post.id;
        }
        Node& first_kernel = st.out.host("issue " + p.what, is.first_issue);
        depend(first_kernel, st.host_prev, host_.sync_after_p2p ? p.input : 0);
        const std::uint64_t issued_first = first_kernel.id;
        Node& rest = st.out.host("issue rest " + p.what, is.issue - is.first_issue);
        depend(rest, issued_first, 0);
        issued_all = st.host_prev = rest.id;
        wait = std::max(Time::zero(), is.earliest_end - is.issue);
        return issued_first;
    }

    // The pass's end no earlier than its host allows: a wait after the issue and a zero-time
    // node after both.
    std::uint64_t write_host_end(Member& st, const PassNodes& p, std::uint64_t last,
                                 std::uint64_t issued_all, Time wait) {
        std::uint64_t until = issued_all;
        if (wait > Time::zero()) {
            Node& n = st.out.delay("host-bound " + p.what, wait);
            depend(n, issued_all, 0);
            until = n.id;
        }
        Node& end = st.out.compute(p.what + " end", Time::zero(), 0, 0);
        depend(end, last, 0);
        end.ctrl_deps.push_back(until);
        return end.id;
    }

    // --overlap-grad-reduce: the buckets of the pass (the chunk's last backward) become ready at
    // even shares of `span` from its start (timers on `start_ctrl` and `start_data`, and the
    // first issue with the host), the last one at its end.
    void write_bucket_timers(Member& st, PassNodes& p, Time span, std::uint64_t start_ctrl,
                             const std::vector<std::uint64_t>& start_data,
                             std::uint64_t issued_first) {
        const int buckets = bucket_count(st.stage);
        for (int b = 0; b + 1 < buckets; ++b) {
            const Time at = Time::ps(static_cast<std::int64_t>(std::llround(
                static_cast<double>(span.count_ps()) * bucket_fraction(st.stage, b + 1))));
            Node& timer = st.out.delay(p.what + " bucket " + std::to_string(b) + " ready", at);
            if (start_ctrl) timer.ctrl_deps.push_back(start_ctrl);
            for (auto d : start_data)
                if (d && d != start_ctrl) timer.data_deps.push_back(d);
            if (issued_first) timer.ctrl_deps.push_back(issued_first);
            p.bucket_ready.push_back(timer.id);
        }
    }

    // A pass alone: its compute folded between its collectives, a chain of nodes.
    void write_pass(Member& st, std::size_t index) {
        PassNodes p = begin_pass(st, index);
        write_input(st, p);
        std::uint64_t issued_first = 0, issued_all = 0;
        Time host_wait = Time::zero();
        if (host_on_) issued_first = write_issue(st, p, issued_all, host_wait);
        const auto& pp = pass_plan(p.op.pass, p.vs);
        bool first = true;
        std::uint64_t last = 0;
        const auto chain = [&](Node& n) {
            if (first) {
                depend(n, st.prev, p.input);
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
            chain(st.out.compute(p.what + " compute", t, flops, bytes));
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
            const auto& g = ranks_.group(step.group, st.worker, st.member).gpus;
            if (g.size() <= 1 || step.size.value <= 0) continue;  // the replay: no cost
            flush();
            const std::string name = group_name(g);
            for (int k = 0; k < step.repeat; ++k)
                chain(st.out.collective(p.what + " " + step.label, step.collective, step.size, name,
                                        g.size(), true));
        }
        if (pending || first) {
            pending = true;
            flush();
        }
        if (p.buckets_here) {
            // The chunk's last backward pass is slowed by the interference.
            const Time compute = pp.compute_time();
            const Time slowed = slowed_by_buckets(st.stage, compute);
            if (slowed > Time::zero())
                chain(st.out.compute(p.what + " interference", slowed, 0, 0));
            write_bucket_timers(st, p, compute + slowed + collectives_time(pp), st.prev, {p.input},
                                issued_first);
        }
        if (host_on_) last = write_host_end(st, p, last, issued_all, host_wait);
        st.prev = p.end = last;
        write_outputs(st, p, last, true);
    }

    // Each pass's time in an overlapped group: its compute node (`busy`) and the wait for its
    // exposed collectives (`exposed`), as the replay's overlap_group shares them: compute C and
    // collectives A of every pass, the forward's chain (record 0) and the others', then each
    // pass's share of the slowed compute and the exposed collectives, rounded cumulatively so
    // that they add up exactly.
    struct GroupTimes {
        std::vector<Time> busy, exposed;
    };
    GroupTimes group_times(const Member& st, const std::vector<PassNodes>& passes) {
        const std::size_t n = passes.size();
        std::vector<std::int64_t> compute(n), collective(n);
        std::int64_t c = 0, a = 0, chain_f = 0, chain_b = 0;
        for (std::size_t j = 0; j < n; ++j) {
            const auto& pp = pass_plan(passes[j].op.pass, passes[j].vs);
            Time cj = pp.compute_time();
            if (passes[j].buckets_here) cj += slowed_by_buckets(st.stage, cj);
            compute[j] = cj.count_ps();
            collective[j] = collectives_time(pp).count_ps();
            c += compute[j];
            a += collective[j];
            (j == 0 ? chain_f : chain_b) += compute[j] + collective[j];
        }
        const double i =
            spec_.compute.framework != workload::Framework::None ? spec_.compute.interference : 0.0;
        const auto shared = replay::overlapped_time(c, a, chain_f, chain_b, i);
        const auto share = [](std::int64_t total, std::int64_t upto, std::int64_t of) {
            return of == 0 ? (upto == of ? total : 0)
                           : static_cast<std::int64_t>(std::llround(static_cast<double>(total) *
                                                                    static_cast<double>(upto) /
                                                                    static_cast<double>(of)));
        };
        GroupTimes t{std::vector<Time>(n), std::vector<Time>(n)};
        std::int64_t c_before = 0, a_before = 0, slowed_given = 0, exposed_given = 0;
        for (std::size_t j = 0; j < n; ++j) {
            c_before += compute[j];
            a_before += collective[j];
            const std::int64_t s_upto =
                j + 1 == n ? shared.slowed : share(shared.slowed, c_before, c);
            const std::int64_t e_upto =
                j + 1 == n ? shared.exposed : share(shared.exposed, a_before, a);
            t.busy[j] = Time::ps(compute[j] + s_upto - slowed_given);
            t.exposed[j] = Time::ps(e_upto - exposed_given);
            slowed_given = s_upto;
            exposed_given = e_upto;
        }
        return t;
    }

    // An overlapped group (PipelineOp::overlap, DualPipe's F&B), as the replay runs it: every
    // pass's input in before the first starts; the passes back to back, each one node of its
    // compute (slowed by the interference) and a wait for its exposed collective time, as
    // replay::overlapped_time shares them (the collectives hidden behind the partner's compute
    // are not written as collectives); the host issues the group as its first pass; every
    // pass's outputs leave when the group ends.
    void write_group(Member& st, std::size_t index, std::size_t n) {
        std::vector<PassNodes> passes;
        std::vector<std::uint64_t> inputs;
        for (std::size_t j = 0; j < n; ++j) {
            passes.push_back(begin_pass(st, index + j));
            write_input(st, passes.back());
            inputs.push_back(passes.back().input);
        }
        const auto [busy, exposed] = group_times(st, passes);

        std::uint64_t issued_first = 0, issued_all = 0;
        Time host_wait = Time::zero();
        if (host_on_)
            issued_first = write_issue(st, passes.front(), issued_all, host_wait, busy.front());
        for (std::size_t j = 0; j < n; ++j) {
            PassNodes& p = passes[j];
            const auto& pp = pass_plan(p.op.pass, p.vs);
            const std::uint64_t start = st.prev;
            Node& work = st.out.compute(p.what + " compute", busy[j], pp.hardware_flops().value,
                                        hbm_bytes(pp));
            if (j == 0) {
                if (start) work.ctrl_deps.push_back(start);
                for (auto d : inputs)
                    if (d && d != start) work.data_deps.push_back(d);
                if (issued_first) work.ctrl_deps.push_back(issued_first);
            } else {
                depend(work, start, 0);
            }
            std::uint64_t last = work.id;
            if (exposed[j] > Time::zero()) {
                Node& wait = st.out.delay(p.what + " exposed communication", exposed[j]);
                depend(wait, last, 0);
                last = wait.id;
            }
            if (p.buckets_here)
                write_bucket_timers(st, p, busy[j] + exposed[j], start,
                                    j == 0 ? inputs : std::vector<std::uint64_t>{},
                                    j == 0 ? issued_first : 0);
            if (j == 0 && host_on_) last = write_host_end(st, p, last, issued_all, host_wait);
            st.prev = p.end = last;
        }
        for (std::size_t j = 0; j < n; ++j)
            write_outputs(st, passes[j], st.prev, j == 0);
    }

    static std::int64_t hbm_bytes(const workload::PassPlan& pp) {
        std::int64_t bytes = 0;
        for (const auto& step : pp.steps)
            if (step.kind == workload::Step::Kind::Compute)
                bytes += step.hbm_bytes.value * step.repeat;
        return bytes;
    }

    // A pass's outputs once `done` has ended (the pass, or its group): to vs + 1 (activation) or
    // vs - 1 (gradient), its chunk's gradients, its buckets' collectives. `host_posts`: the
    // host posts its send (the pass it issued).
    void write_outputs(Member& st, PassNodes& p, std::uint64_t done, bool host_posts) {
        const auto& op = p.op;
        const int mb = op.microbatch;
        int target = -1;
        bool gradient = false;
        if (op.pass == Pass::Forward && p.vs < last_vs()) target = p.vs + 1;
        if ((op.pass == Pass::Backward || op.pass == Pass::BackwardInput) && p.vs > 0) {
            target = p.vs - 1;
            gradient = true;
        }
        if (target >= 0) {
            const int dst = ranks_.worker(it_.schedule->place(it_.shape, target, mb).device, st.dp);
            if (dst == st.worker) {
                st.local[{target, mb, gradient}] = done;
            } else {
                const Bytes b =
                    it_.plan.virtual_stages[static_cast<std::size_t>(gradient ? target : p.vs)]
                        .activation_bytes;
                Node& s = st.out.p2p(
                    true, std::string("send ") + (gradient ? "gradient " : "activation ") + p.what,
                    ranks_.member_gpu(dst, st.member), tag_of(target, mb, gradient), b);
                depend(s, 0, done);
                if (host_on_ && host_posts) {  // posting the send; with sync_after_p2p, waiting
                    Node& post = st.out.host("post send " + p.what, host_.p2p);
                    depend(post, st.host_prev, 0);
                    st.host_prev = post.id;
                    if (host_.sync_after_p2p) {
                        Node& sync = st.out.host("sync " + p.what, Time::zero());
                        depend(sync, st.host_prev, 0);
                        sync.ctrl_deps.push_back(p.end);
                        st.host_prev = sync.id;
                    }
                }
            }
        }
        if (op.pass == Pass::Backward || op.pass == Pass::BackwardWeight)
            st.last_grad[static_cast<std::size_t>(op.chunk)] = done;
        if (!p.buckets_here) return;
        // One communicator: each bucket after the one before (of any chunk).
        p.bucket_ready.push_back(p.end);
        for (std::size_t b = 0; b < p.bucket_ready.size(); ++b) {
            Node& n = st.out.collective(
                "dp gradients chunk " + std::to_string(op.chunk) + " bucket " + std::to_string(b),
                dp_kind(st.stage), bucket_bytes(st.stage, static_cast<int>(b)), st.dp_name,
                set_.groups.at(st.dp_name).size(), false);
            depend(n, st.bucket_syncs.empty() ? 0 : st.bucket_syncs.back(), p.bucket_ready[b]);
            st.bucket_syncs.push_back(n.id);
        }
    }

    // Data-parallel gradients per chunk, the optimizer step, the parameters.
    void write_tail(Member& st) {
        const auto& dev = device(st.stage);
        const int chunks = it_.shape.chunks;
        const bool dp_sync = dp_ranks() > 1 && dev.dp_gradient_bytes.value > 0;
        // Every chunk's reduction after the whole backward, one after another.
        const bool after_backward = workload::dp_reduce_after_backward(spec_);
        std::vector<std::uint64_t> syncs = st.bucket_syncs;
        const auto& dp_group = ranks_.dp_cp_group(st.worker, st.member).gpus;
        if (dp_sync && !overlaps(st.stage)) {
            const std::string name = group_name(dp_group);
            for (int c = 0; c < chunks; ++c) {
                Node& n = st.out.collective("dp gradients chunk " + std::to_string(c),
                                            dev.dp_sharded ? network::CollectiveKind::ReduceScatter
                                                           : network::CollectiveKind::AllReduce,
                                            dev.dp_gradient_bytes, name, dp_group.size(), false);
                depend(n, 0, st.last_grad[static_cast<std::size_t>(c)]);
                if (after_backward) {
                    for (const auto g : st.last_grad)
                        if (g != 0 && g != st.last_grad[static_cast<std::size_t>(c)])
                            n.data_deps.push_back(g);
                    if (!syncs.empty()) n.data_deps.push_back(syncs.back());
                }
                syncs.push_back(n.id);
            }
        }
        std::uint64_t opt_issue = 0;
        if (host_on_ && dev.optimizer_step > Time::zero()) {
            Node& issue = st.out.host("issue optimizer step", host_.pass + host_.launch);
            depend(issue, st.host_prev, 0);
            opt_issue = st.host_prev = issue.id;
        }
        Node& opt = st.out.compute("optimizer step", dev.optimizer_step, 0, 0);
        depend(opt, st.prev, 0);
        if (opt_issue) opt.ctrl_deps.push_back(opt_issue);
        for (const auto s : syncs)
            opt.data_deps.push_back(s);
        const std::uint64_t opt_id = opt.id;  // `opt` moves when nodes are added
        if (dev.dp_sharded && dp_sync) {
            Node& n = st.out.collective("dp parameters", network::CollectiveKind::AllGather,
                                        Bytes{dev.dp_parameter_bytes.value * chunks},
                                        group_name(dp_group), dp_group.size(), false);
            depend(n, 0, opt_id);
        }
    }

    const replay::PreparedIteration& it_;
    const workload::ExperimentSpec& spec_;
    const workload::ParallelLayout& layout_;
    const workload::RankLayout ranks_;
    const workload::HostModel& host_;
    const bool host_on_;
    replay::CollectiveCosts costs_;
    EtSet& set_;
    const RankSink& sink_;
    EtFile file_;  // the rank being written
    std::map<std::vector<int>, std::string> group_names_;
    std::map<std::tuple<int, int, std::int64_t>, replay::HostIssue> issues_;
    std::vector<Time> overlapped_;  // per stage: the buckets before the last, run alone
};

}  // namespace

EtSet export_experiment(const workload::ExperimentSpec& spec, const std::string& schedule,
                        const std::string& prefix, bool with_host, const RankSink& sink) {
    EtSet set;
    set.prefix = prefix;
    const replay::PreparedIteration prepared = replay::prepare(spec, schedule);
    set.files.resize(static_cast<std::size_t>(spec.layout.world_size()));
    const RankSink keep = [&set](int rank, EtFile& file) {
        const auto r = static_cast<std::size_t>(rank);
        if (r >= set.files.size()) set.files.resize(r + 1);
        set.files[r] = std::move(file);
    };
    Exporter(prepared, with_host, set, sink ? sink : keep).write();
    if (sink) set.files.clear();
    return set;
}

void prepare_et_folder(const std::filesystem::path& folder, const std::string& prefix, int ranks,
                       OutputSet& outputs, const std::string& option) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (fs::exists(folder, ec) && !fs::is_directory(folder, ec))
        throw ConfigError(SourceLocation{option + " " + folder.string(), 0, 0},
                          "not a folder: expected a folder for the ET files");
    std::set<std::string> names;
    for (int r = 0; r < ranks; ++r)
        names.insert(prefix + "." + std::to_string(r) + ".et");
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
    for (int r = 0; r < ranks; ++r)
        outputs.declare(option, folder / (prefix + "." + std::to_string(r) + ".et"));
    outputs.declare(option, folder / kCommGroupsFile);
}

void write_et_file(const std::filesystem::path& folder, const std::string& prefix, int rank,
                   const EtFile& file, OutputSet& outputs, EtEncoder* encoder) {
    EtEncoder own;
    const std::string& bytes = (encoder ? *encoder : own).encode(file);
    write_file_atomically(
        folder / (prefix + "." + std::to_string(rank) + ".et"),
        [&](std::ostream& o) { o.write(bytes.data(), static_cast<std::streamsize>(bytes.size())); },
        &outputs);
}

void write_comm_groups(const std::filesystem::path& folder,
                       const std::map<std::string, std::vector<int>>& groups, OutputSet& outputs) {
    nlohmann::ordered_json out = nlohmann::ordered_json::object();
    // Numeric names in numeric order.
    std::vector<std::pair<std::size_t, std::string>> sorted;
    for (const auto& [name, members] : groups)
        sorted.emplace_back(name.size(), name);
    std::sort(sorted.begin(), sorted.end());
    for (const auto& [length, name] : sorted)
        out[name] = groups.at(name);
    write_file_atomically(
        folder / kCommGroupsFile, [&](std::ostream& o) { o << out.dump() << "\n"; }, &outputs);
}

void write_et_set(const EtSet& set, const std::filesystem::path& folder, OutputSet& outputs,
                  const std::string& option) {
    const int ranks = static_cast<int>(set.files.size());
    prepare_et_folder(folder, set.prefix, ranks, outputs, option);
    for (int r = 0; r < ranks; ++r)
        write_et_file(folder, set.prefix, r, set.files[static_cast<std::size_t>(r)], outputs);
    write_comm_groups(folder, set.groups, outputs);
}

}  // namespace cs::chakra
