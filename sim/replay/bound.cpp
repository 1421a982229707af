#include "replay/bound.hpp"

#include <algorithm>
#include <cstddef>
#include <vector>

#include "core/errors.hpp"
#include "replay/host.hpp"
#include "replay/pass_cost.hpp"
#include "schedule/critical_path.hpp"
#include "workload/groups.hpp"

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
        if (whole) end = std::max(end, h0 + issue.earliest_end);
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

    const Cost& of(const schedule::PipelineOp& op, int vs) {
        Cost& c = of_[static_cast<std::size_t>(vs) * kKinds + static_cast<std::size_t>(op.pass)];
        if (c.made) return c;
        const auto& plan = pass_plan(p_.plan.virtual_stages[static_cast<std::size_t>(vs)], op.pass);
        const auto steps = cost_steps(
            plan,
            [&](const workload::Step& s) {
                return costs_.cost(s.collective, ranks_.group(s.group, 0, 0).gpus, s.size);
            },
            interference());
        c = {true, steps.compute, steps.compute + steps.collective, {}};
        const auto& host = p_.spec.compute.host;
        if (host.enabled) {
            const bool backward =
                op.pass == schedule::Pass::Backward || op.pass == schedule::Pass::BackwardInput;
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

Time iteration_floor(const PreparedIteration& p, CollectiveCosts& costs) {
    const workload::RankLayout ranks(p.spec.layout);
    PassCosts pass(p, ranks, costs);
    Time latest = Time::zero();
    for (std::size_t d = 0; d < p.orders.size(); ++d) {
        const auto& order = p.orders[d];
        const auto lead = group_leads(order);
        std::int64_t busy = 0;
        for (std::size_t k = 0; k < order.size(); ++k) {
            const auto& op = order[k];
            const auto& c = pass.of(op, p.schedule->virtual_stage(p.shape, static_cast<int>(d),
                                                                  op.chunk, op.microbatch));
            busy += (lead[k] >= 0 ? c.compute : c.gpu).count_ps();
        }
        latest = std::max(latest, Time::ps(busy) + p.plan.devices[d].optimizer_step);
    }
    return latest;
}

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
    const auto end = [&](const schedule::OpReady& r) {
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
        // ... and the group as a whole takes overlapped_time's group (Replay::overlap_group)
        // from its first pass's start: the path reached its last pass no later than that start
        // plus the members' compute C, so adding group - C to the last keeps below it.
        const bool closes = g >= 0 && (r.index + 1 == order.size() || lead[d][r.index + 1] != g);
        if (closes && whole_groups) {
            std::int64_t compute = 0, collective = 0, chain_f = 0, chain_b = 0;
            for (auto j = static_cast<std::size_t>(g); j <= r.index; ++j) {
                const auto& op = order[j];
                const auto& m = pass.of(
                    op, p.schedule->virtual_stage(p.shape, r.device, op.chunk, op.microbatch));
                compute += m.compute.count_ps();
                collective += (m.gpu - m.compute).count_ps();
                (j == static_cast<std::size_t>(g) ? chain_f : chain_b) += m.gpu.count_ps();
            }
            const auto t =
                overlapped_time(compute, collective, chain_f, chain_b, pass.interference());
            e += Time::ps(t.group - compute);
        }
        return e;
    };
    // Long pipelines: the devices' own chains (bound.hpp, kChainMicrobatches).
    const auto ends =
        p.shape.microbatches >= kChainMicrobatches * p.schedule->virtual_stages(p.shape)
            ? std::optional<std::vector<Time>>(
                  schedule::device_chain_ends(*p.schedule, p.shape, p.orders, end))
            : schedule::critical_path_ends(*p.schedule, p.shape, p.orders, end, whole_groups);
    // Orders that deadlock are a schedule's bug (the contract tests run every registered one):
    // the replay would stall on them too.
    if (!ends)
        throw SimulationError("replay", "schedule " + p.schedule->name() +
                                            "'s op orders deadlock: no bound can be given");
    // Each device ends with its optimizer step, issued by its host when it has one.
    Time latest = Time::zero();
    for (std::size_t d = 0; d < ends->size(); ++d) {
        const Time step = p.plan.devices[d].optimizer_step;
        const Time start = host.enabled && step > Time::zero()
                               ? floor.optimizer_start(static_cast<int>(d), (*ends)[d])
                               : (*ends)[d];
        latest = std::max(latest, start + step);
    }
    return latest;
}

}  // namespace cs::replay
