#include "replay/bound.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "core/errors.hpp"
#include "replay/host.hpp"
#include "replay/pass_cost.hpp"
#include "schedule/critical_path.hpp"
#include "workload/groups.hpp"
#include "workload/memory.hpp"
#include "workload/pipeline_comm.hpp"

namespace cs::replay {

namespace {

// The host's part of the bound (workload::HostModel, as Replay::start_on_host issues passes):
// per device a floor on when its host is free, advanced pass by pass in the device's order.
// Each rule below is a line of start_on_host (or maybe_start_optimizer) read as an inequality;
// the replay's times are never earlier than the path's, so neither are its host's.
class HostFloor {
  public:
    HostFloor(const PreparedIteration& p, std::size_t devices)
        : p_(p),
          host_(p.spec.compute.host),
          last_stage_(p.schedule->virtual_stages(p.shape) - 1),
          free_(devices, Time::zero()) {}

    // A device's host issues op r (not a later member of an overlapped group, which rides on
    // its group's first pass) whose GPU time is `gpu` (`whole`: the op is no group's member,
    // so its GPU time is what `issue` was made from). Returns the op's end.
    Time issue(const schedule::OpReady& r, const HostIssue& issue, Time gpu, bool whole) {
        Time& h = free_[static_cast<std::size_t>(r.device)];
        // A receive from another device is posted before the pass; with sync_after_p2p the host
        // then waits for the input (h0 = max(h, arrival), the arrival no earlier than its
        // sender's end).
        Time h0 = h;
        if (r.input) {
            if (remote(r.device, feeder(r), r.op.microbatch)) h0 += host_.p2p;
            if (host_.sync_after_p2p) h0 = std::max(h0, *r.input);
        }
        // The GPU starts no earlier than the first kernel's issue, and a whole pass ends no
        // earlier than host_issue's closed form from h0 (the earliest end of its kernels).
        const Time start = std::max(r.ready, h0 + issue.first_issue);
        Time end = start + gpu;
        issued_end_ = h0 + issue.earliest_end;
        if (whole) end = std::max(end, issued_end_);
        h = h0 + issue.issue;
        // A pass whose output goes to another device posts its send, and with sync_after_p2p
        // the host waits for the pass's end.
        const int target = receiver(r);
        if (target >= 0 && remote(r.device, target, r.op.microbatch)) {
            h += host_.p2p;
            if (host_.sync_after_p2p) h = std::max(h, end);
        }
        return end;
    }

    // The earliest end of the kernels `issue` last issued (host_issue's closed form from its
    // h0): the replay's first pass of an overlapped group ends no earlier (start_on_host).
    Time issued_end() const { return issued_end_; }

    // The optimizer step is issued as one more pass of one kernel once the device's ops are done.
    Time optimizer_start(int device, Time ops_end) const {
        return std::max(ops_end,
                        free_[static_cast<std::size_t>(device)] + host_.pass + host_.launch);
    }

  private:
    // The virtual stage that feeds r's input, and the one r's output goes to (-1: none).
    static int feeder(const schedule::OpReady& r) {
        return r.op.pass == schedule::Pass::Forward ? r.virtual_stage - 1 : r.virtual_stage + 1;
    }
    int receiver(const schedule::OpReady& r) const {
        if (r.op.pass == schedule::Pass::Forward)
            return r.virtual_stage < last_stage_ ? r.virtual_stage + 1 : -1;
        if (r.op.pass == schedule::Pass::Backward || r.op.pass == schedule::Pass::BackwardInput)
            return r.virtual_stage > 0 ? r.virtual_stage - 1 : -1;
        return -1;
    }
    bool remote(int device, int vs, int microbatch) const {
        return p_.schedule->place(p_.shape, vs, microbatch).device != device;
    }

    const PreparedIteration& p_;
    const workload::HostModel& host_;
    int last_stage_;
    std::vector<Time> free_;
    Time issued_end_;
};

// How many devices iteration_lower_bound prices the data-parallel collectives of.
constexpr std::size_t kTailDevices = 2;

// The data-parallel collectives the replay adds around a device's optimizer step
// (replay_dp.cpp), each at its isolated cost on the layout's network (CollectiveCosts, as the
// replay's own collectives are priced), which an analytical run never beats. Every rule is a
// line of the replay read as an inequality; a case it does not cover (HSDP, a last gradient pass
// inside an overlapped group) adds nothing, which keeps the bound a bound.
class DataParallelTail {
  public:
    DataParallelTail(const PreparedIteration& p, const workload::RankLayout& ranks,
                     CollectiveCosts& costs)
        : p_(p), ranks_(ranks), costs_(costs), mode_(DataParallelMode::of(p.spec.layout)) {}

    // The earliest the last gradient reduction of device d's stage can end, given the end of
    // its last pass that completes gradients (B or Bw; `last_grad`) and a time no later than
    // that pass's start (`last_grad_start`), outside ZeRO-2/3's units (Replay::start_dp_sync,
    // launch_bucket): --overlap-grad-reduce's buckets of the pass's chunk become ready during
    // it, the last at its end, and run one after another; without it the chunk's whole
    // reduction starts at the pass's end, or, under grad_reduce_after_backward, every chunk's
    // one after another. The optimizer step waits for it (maybe_start_optimizer).
    Time gradients_reduced(int d, Time last_grad, Time last_grad_start) {
        const auto& l = p_.spec.layout;
        const auto& dev = p_.plan.devices[static_cast<std::size_t>(d)];
        if (mode_.sharded_units || mode_.hsdp || l.dp * l.cp <= 1 ||
            dev.dp_gradient_bytes.value <= 0)
            return Time::zero();
        const auto kind = dev.dp_sharded ? network::CollectiveKind::ReduceScatter
                                         : network::CollectiveKind::AllReduce;
        const auto group = dp_group(d);
        if (l.overlap_grad_reduce) {
            // Every bucket of the chunk becomes ready during that pass (schedule_buckets), and
            // they run one after another on the stage's communicator (launch_bucket).
            const int buckets = gradient_buckets(dev, l);
            const Time last =
                costs_.cost(kind, group, gradient_bucket_bytes(dev, l, buckets, buckets - 1));
            // (The full buckets' sizes differ by rounding: a byte less than the first.)
            const Time full =
                buckets > 1
                    ? costs_.cost(kind, group,
                                  Bytes{gradient_bucket_bytes(dev, l, buckets, 0).value - 1})
                    : Time::zero();
            return std::max(last_grad + last, last_grad_start + full * (buckets - 1) + last);
        }
        const Time chunk = costs_.cost(kind, group, dev.dp_gradient_bytes);
        return last_grad +
               (workload::dp_reduce_after_backward(p_.spec) ? chunk * p_.shape.chunks : chunk);
    }

    // The distributed optimizer's parameter all-gather after the step, which the iteration
    // includes (Replay::start_parameter_gather; none with --overlap-param-gather, ZeRO-3 or HSDP).
    Time after_step(int d) {
        const auto& l = p_.spec.layout;
        const auto& dev = p_.plan.devices[static_cast<std::size_t>(d)];
        if (!dev.dp_sharded || l.dp * l.cp <= 1 || dev.dp_gradient_bytes.value <= 0 ||
            l.sharding == workload::Sharding::Parameters || mode_.param_prefetch || mode_.hsdp)
            return Time::zero();
        return costs_.cost(network::CollectiveKind::AllGather, dp_group(d),
                           Bytes{dev.dp_parameter_bytes.value * p_.shape.chunks});
    }

    // ZeRO-2/3 (replay's sharded units): each shard group's all-gathers run one after another
    // on one stream, its reduce-scatters on another, one collective per unit a pass runs
    // (Replay::request_unit, launch_unit_collectives); the device's passes end only after its
    // last gather and its step starts only after its last reduce. So the step starts no earlier
    // than either stream's collectives back to back.
    Time streams(int d, const std::vector<schedule::PipelineOp>& order) {
        if (!mode_.sharded_units) return Time::zero();
        const auto& l = p_.spec.layout;
        const bool zero3 = l.sharding == workload::Sharding::Parameters;
        std::vector<int> gpus;
        for (int i = 0; i < mode_.shard_size; ++i)
            gpus.push_back(ranks_.gpu(0, 0, i, d));
        const auto precision = p_.spec.training.precision;
        std::int64_t gathers = 0, reduces = 0;
        for (const auto& op : order) {
            const int vs = p_.schedule->virtual_stage(p_.shape, d, op.chunk, op.microbatch);
            const bool gather =
                zero3 && (op.pass == schedule::Pass::Forward ||
                          (l.reshard_after_forward && (op.pass == schedule::Pass::Backward ||
                                                       op.pass == schedule::Pass::BackwardInput)));
            const bool reduce =
                op.pass == schedule::Pass::Backward || op.pass == schedule::Pass::BackwardWeight;
            if (gather) gathers += units_cost(vs, true, gpus, precision);
            if (reduce) reduces += units_cost(vs, false, gpus, precision);
        }
        return Time::ps(std::max(gathers, reduces));
    }

  private:
    std::vector<int> dp_group(int d) const {
        return ranks_.dp_cp_group(ranks_.worker(d, 0), 0).gpus;
    }
    // One pass's unit collectives on virtual stage vs (all-gathers of the 16-bit weights or
    // reduce-scatters of the gradients), costed once per stage and kind.
    std::int64_t units_cost(int vs, bool gather, const std::vector<int>& gpus,
                            workload::Precision precision) {
        const auto key = static_cast<std::size_t>(vs) * 2 + (gather ? 0 : 1);
        if (unit_costs_.size() <= key) unit_costs_.resize(key + 1, -1);
        if (unit_costs_[key] >= 0) return unit_costs_[key];
        const double per = gather ? workload::weight_bytes_per_parameter(precision)
                                  : workload::gradient_bytes_per_parameter(precision);
        std::int64_t total = 0;
        for (const std::int64_t params :
             p_.plan.virtual_stages[static_cast<std::size_t>(vs)].unit_parameters)
            total += costs_
                         .cost(gather ? network::CollectiveKind::AllGather
                                      : network::CollectiveKind::ReduceScatter,
                               gpus,
                               Bytes{static_cast<std::int64_t>(
                                   std::llround(static_cast<double>(params) * per))})
                         .count_ps();
        return unit_costs_[key] = total;
    }

    const PreparedIteration& p_;
    const workload::RankLayout& ranks_;
    CollectiveCosts& costs_;
    DataParallelMode mode_;
    std::vector<std::int64_t> unit_costs_;
};

// Each (virtual stage, pass kind)'s compute, compute plus blocking collectives and host issue, as
// the replay prices them (cost_steps with the replay's CollectiveCosts; Replay::cost_pass),
// costed once.
class PassCosts {
  public:
    struct Cost {
        bool made = false;
        Time compute, gpu;
        HostIssue issue;
    };

    PassCosts(const PreparedIteration& p, const workload::RankLayout& ranks, CollectiveCosts& costs)
        : p_(p), ranks_(ranks), costs_(costs), of_(p.plan.virtual_stages.size() * kKinds) {}

    const Cost& of(const schedule::PipelineOp& op, int vs) { return of(op.pass, vs); }
    const Cost& of(schedule::Pass kind, int vs) {
        Cost& c = of_[static_cast<std::size_t>(vs) * kKinds + static_cast<std::size_t>(kind)];
        if (c.made) return c;
        const auto& plan = pass_plan(p_.plan.virtual_stages[static_cast<std::size_t>(vs)], kind);
        const auto steps = cost_steps(
            plan,
            [&](const workload::Step& s) {
                return costs_.cost(s.collective, group(s.group), s.size);
            },
            interference());
        c = {true, steps.compute, steps.compute + steps.collective, {}};
        const auto& host = p_.spec.compute.host;
        if (host.enabled) {
            const bool backward =
                kind == schedule::Pass::Backward || kind == schedule::Pass::BackwardInput;
            c.issue = host_issue(pass_lead(host, *p_.schedule, backward), host.launch,
                                 kernel_blocks(plan.steps, steps.step_times));
        }
        return c;
    }

    double interference() const {
        const auto& compute = p_.spec.compute;
        return compute.framework != workload::Framework::None ? compute.interference : 0.0;
    }

  private:
    static constexpr std::size_t kKinds = 4;
    // Worker 0's member-0 group of `kind` (the one every pass is priced on), made once.
    const std::vector<int>& group(workload::GroupKind kind) {
        auto& g = groups_[static_cast<std::size_t>(kind)];
        if (!g) g = ranks_.group(kind, 0, 0).gpus;
        return *g;
    }
    std::array<std::optional<std::vector<int>>, workload::kGroupKindNames.size()> groups_;
    const PreparedIteration& p_;
    const workload::RankLayout& ranks_;
    CollectiveCosts& costs_;
    std::vector<Cost> of_;
};

// Per op of a device's order, the index of the first op of the overlapped group it belongs to
// (PipelineOp::overlap: an op with overlap n and the n after it, taken as Replay::try_start takes
// them), or -1 for an op of no group.
std::vector<std::ptrdiff_t> group_leads(const std::vector<schedule::PipelineOp>& order) {
    std::vector<std::ptrdiff_t> lead(order.size(), -1);
    for (std::size_t k = 0; k < order.size();) {
        const auto n = static_cast<std::size_t>(1 + std::max<int>(0, order[k].overlap));
        if (n > 1)
            for (std::size_t j = k; j < k + n && j < order.size(); ++j)
                lead[j] = static_cast<std::ptrdiff_t>(k);
        k += n;
    }
    return lead;
}

}  // namespace

OpCensus op_census(const PreparedIteration& p) {
    OpCensus census;
    for (std::size_t d = 0; d < p.orders.size(); ++d) {
        const auto& order = p.orders[d];
        const auto lead = group_leads(order);
        std::map<std::tuple<int, int, bool>, std::int64_t> counts;
        for (std::size_t k = 0; k < order.size(); ++k) {
            const auto& op = order[k];
            const int vs =
                p.schedule->virtual_stage(p.shape, static_cast<int>(d), op.chunk, op.microbatch);
            ++counts[{vs, static_cast<int>(op.pass), lead[k] >= 0}];
        }
        auto& device = census.devices.emplace_back();
        for (const auto& [key, ops] : counts)
            device.push_back({std::get<0>(key), static_cast<schedule::Pass>(std::get<1>(key)),
                              std::get<2>(key), ops});
    }
    return census;
}

Time iteration_floor(const PreparedIteration& p, CollectiveCosts& costs, const OpCensus* census) {
    const workload::RankLayout ranks(p.spec.layout);
    PassCosts pass(p, ranks, costs);
    const OpCensus own = census ? OpCensus{} : op_census(p);
    const OpCensus& counted = census ? *census : own;
    Time latest = Time::zero();
    for (std::size_t d = 0; d < counted.devices.size(); ++d) {
        // Each op at what the bound charges it at least (integer picoseconds: the sum does not
        // depend on the order of its terms).
        std::int64_t busy = 0;
        for (const auto& n : counted.devices[d]) {
            const auto& c = pass.of(n.pass, n.virtual_stage);
            busy += n.ops * (n.grouped ? c.compute : c.gpu).count_ps();
        }
        latest = std::max(latest, Time::ps(busy) + p.plan.devices[d].optimizer_step);
    }
    return latest;
}

namespace {

// Op `given` with its input, when it comes from another device, taken to arrive no earlier than
// its sender's end plus one part of the message sent alone (member 0's: Replay::start_message
// sends every member's part and delivers the message once all are in; batched exchanges post
// it no earlier).
schedule::OpReady after_transfer(const PreparedIteration& p, const workload::RankLayout& ranks,
                                 CollectiveCosts& costs, const schedule::OpReady& given) {
    schedule::OpReady r = given;
    if (!r.input) return r;
    const bool forward = r.op.pass == schedule::Pass::Forward;
    const int from = forward ? r.virtual_stage - 1 : r.virtual_stage + 1;
    const int sender = p.schedule->place(p.shape, from, r.op.microbatch).device;
    if (sender == r.device) return r;
    const auto& message =
        p.plan.virtual_stages[static_cast<std::size_t>(forward ? from : r.virtual_stage)]
            .activation_bytes;
    const Time arrival =
        *r.input + costs.send(ranks.member_gpu(ranks.worker(sender, 0), 0),
                              ranks.member_gpu(ranks.worker(r.device, 0), 0), message);
    r.input = arrival;
    r.ready = std::max(r.ready, arrival);
    return r;
}

// The end of an overlapped group (order[first..last] on `device`, run whole) whose last pass the
// path ends at `e`: the group takes overlapped_time's group (Replay::overlap_group) from its
// first pass's start, and the path reached its last pass no later than that start plus the
// members' compute C, so adding group - C keeps below it. With the host (`issued`: HostFloor's
// issued_end of the first pass), the first pass ends no earlier than its kernels' issue allows
// and the others follow it, each taking at least its compute (Replay::start_group_on_host).
Time close_group(const PreparedIteration& p, PassCosts& pass,
                 const std::vector<schedule::PipelineOp>& order, std::size_t first,
                 std::size_t last, int device, Time e, std::optional<Time> issued) {
    std::int64_t compute = 0, collective = 0, chain_f = 0, chain_b = 0, first_compute = 0;
    for (std::size_t j = first; j <= last; ++j) {
        const auto& op = order[j];
        const auto& m =
            pass.of(op, p.schedule->virtual_stage(p.shape, device, op.chunk, op.microbatch));
        compute += m.compute.count_ps();
        collective += (m.gpu - m.compute).count_ps();
        (j == first ? chain_f : chain_b) += m.gpu.count_ps();
        if (j == first) first_compute = m.compute.count_ps();
    }
    const auto t = overlapped_time(compute, collective, chain_f, chain_b, pass.interference());
    e += Time::ps(t.group - compute);
    if (issued) e = std::max(e, *issued + Time::ps(compute - first_compute));
    return e;
}

// The iteration's end: each device ends with its optimizer step, issued by its host when it has
// one, once its gradients are reduced, and then its parameters' all-gather (DataParallelTail).
// Each device's end with its data-parallel collectives is a bound, and so is its end without
// them; pricing a stage's collectives is an isolated run on the network each (a stage's
// data-parallel group is its own), so they are priced only for the kTailDevices devices that
// end last without them, where they can raise the bound most. `last_grad`: per device, the end
// and a time no later than the start of its last pass that completes gradients (nullopt: none
// usable).
Time devices_end(const PreparedIteration& p, const std::vector<Time>& ends, HostFloor& floor,
                 DataParallelTail& dp,
                 const std::vector<std::optional<std::pair<Time, Time>>>& last_grad) {
    const auto ends_at = [&](std::size_t d, Time ready) {
        const Time step = p.plan.devices[d].optimizer_step;
        return (p.spec.compute.host.enabled && step > Time::zero()
                    ? floor.optimizer_start(static_cast<int>(d), ready)
                    : ready) +
               step;
    };
    std::vector<std::pair<Time, std::size_t>> without(ends.size());
    for (std::size_t d = 0; d < ends.size(); ++d)
        without[d] = {ends_at(d, ends[d]), d};
    const std::size_t tails = std::min(kTailDevices, without.size());
    std::partial_sort(without.begin(), without.begin() + static_cast<std::ptrdiff_t>(tails),
                      without.end(), std::greater<>());
    Time latest = without.empty() ? Time::zero() : without.front().first;
    for (std::size_t k = 0; k < tails; ++k) {
        const std::size_t d = without[k].second;
        const int device = static_cast<int>(d);
        Time ready = std::max(ends[d], dp.streams(device, p.orders[d]));
        if (last_grad[d])
            ready = std::max(
                ready, dp.gradients_reduced(device, last_grad[d]->first, last_grad[d]->second));
        latest = std::max(latest, ends_at(d, ready) + dp.after_step(device));
    }
    return latest;
}

}  // namespace

Time iteration_lower_bound(const PreparedIteration& p, CollectiveCosts& costs) {
    const workload::RankLayout ranks(p.spec.layout);
    const auto& host = p.spec.compute.host;
    PassCosts pass(p, ranks, costs);
    std::vector<std::vector<std::ptrdiff_t>> lead;
    for (const auto& order : p.orders)
        lead.push_back(group_leads(order));
    // Under ZeRO-2/3 the replay runs a group's passes one after another (each with its
    // collectives), so its members' inputs need not all be in when the first starts; only
    // without that does it run the group whole (critical_path_ends' whole_groups), and the
    // group's first start bound its end.
    const bool whole_groups = p.spec.layout.sharding < workload::Sharding::Gradients;
    HostFloor floor(p, p.orders.size());
    // Per device, the end and the ready time (no later than its start) of its last pass that
    // completes gradients (B or Bw), or nullopt when that pass is a member of an overlapped group
    // (whose members' own ends the path does not give) or there is none: what
    // DataParallelTail::gradients_reduced starts from.
    std::vector<std::optional<std::pair<Time, Time>>> last_grad(p.orders.size());
    // Per device, HostFloor::issued_end of its current group's first pass.
    std::vector<Time> group_issued(p.orders.size());
    // Long pipelines: the devices' own chains (bound.hpp, kChainMicrobatches).
    const bool chains =
        p.shape.microbatches >= kChainMicrobatches * p.schedule->virtual_stages(p.shape);
    const auto end = [&](const schedule::OpReady& given) {
        // On the path (not on the chains, which take an input to arrive when the device is free).
        const schedule::OpReady r = chains ? given : after_transfer(p, ranks, costs, given);
        const auto d = static_cast<std::size_t>(r.device);
        const auto& order = p.orders[d];
        const std::ptrdiff_t g = lead[d][r.index];
        const auto& c = pass.of(r.op, r.virtual_stage);
        // A pass of an overlapped group counts its compute only (its collectives may hide
        // behind the other pass's compute) ...
        const Time gpu = g >= 0 ? c.compute : c.gpu;
        Time e = host.enabled && (g < 0 || static_cast<std::size_t>(g) == r.index)
                     ? floor.issue(r, c.issue, gpu, g < 0)
                     : r.ready + gpu;
        // ... and the group as a whole ends as close_group says, from its first pass's issue.
        if (host.enabled && g >= 0 && static_cast<std::size_t>(g) == r.index)
            group_issued[d] = floor.issued_end();
        const bool closes = g >= 0 && (r.index + 1 == order.size() || lead[d][r.index + 1] != g);
        if (closes && whole_groups)
            e = close_group(p, pass, order, static_cast<std::size_t>(g), r.index, r.device, e,
                            host.enabled ? std::optional<Time>(group_issued[d]) : std::nullopt);
        if (r.op.pass == schedule::Pass::Backward || r.op.pass == schedule::Pass::BackwardWeight)
            last_grad[d] =
                g < 0 ? std::optional<std::pair<Time, Time>>({e, r.ready}) : std::nullopt;
        return e;
    };
    const auto ends =
        chains ? std::optional<std::vector<Time>>(
                     schedule::device_chain_ends(*p.schedule, p.shape, p.orders, end))
               : schedule::critical_path_ends(*p.schedule, p.shape, p.orders, end, whole_groups);
    // Orders that deadlock are a schedule's bug (the contract tests run every registered one):
    // the replay would stall on them too.
    if (!ends)
        throw SimulationError("replay", "schedule " + p.schedule->name() +
                                            "'s op orders deadlock: no bound can be given");
    DataParallelTail dp(p, ranks, costs);
    return devices_end(p, *ends, floor, dp, last_grad);
}

}  // namespace cs::replay
