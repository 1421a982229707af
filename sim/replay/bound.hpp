// A lower bound on a prepared iteration's time, without replaying it (`plan` prunes layouts with
// it, docs/plan.md "How it searches").
#pragma once

#include "core/units.hpp"
#include "replay/prepare.hpp"
#include "replay/replay.hpp"

namespace cs::replay {

// The longest path through the passes' dependencies (schedule::critical_path_ends) when every pass
// takes what the replay charges its GPU, compute plus blocking collectives (cost_steps, with
// `costs` pricing the collectives as the replay's own CollectiveCosts does), starts no earlier than
// the replay's host could issue its first kernel (workload::HostModel, as Replay::start_on_host:
// the host's own chain, a receive's post, sync_after_p2p's wait for the input and for a sending
// pass's end) and ends no earlier than host_issue's earliest end, whose input from another device
// arrives no earlier than its sender's end plus one part sent alone (CollectiveCosts::send), and
// each device ends with its optimizer step (issued by its host). A pass of an overlapped group
// (PipelineOp::overlap: DualPipe's F&B, whose collectives may hide behind the other pass's compute)
// counts its compute only; outside ZeRO-2/3 the group runs whole, as the replay runs it: once every
// member's input is in, for overlapped_time's group time, its outputs leaving at its end, and no
// sooner than its first pass's kernels can be issued plus the others' compute (the host issues a
// group as its first pass). Before its optimizer step a device waits for its stage's last gradient
// reduction (the buckets one after another from its last backward's start, or the chunk's reduction
// after it) or, under ZeRO-2/3, for its shard group's unit all-gathers and reduce-scatters back to
// back; after it, the distributed optimizer's parameter all-gather (bound.cpp's DataParallelTail,
// priced for the devices that end last without it).
//
// The replay runs exactly these passes, in these orders, for at least these times, and only
// adds waiting: for pipeline messages, the rest of the data-parallel traffic, contention. So
// with `costs` made for the experiment's cluster and network configuration, no replay of `p` on
// that network model ends sooner, unless a duration model (variability) shortens passes, which
// nothing bundled does (a slow host only lengthens them). Throws
// SimulationError for orders that deadlock (a schedule's bug).
//
// With at least kChainMicrobatches microbatches per virtual stage, each device's ops are taken
// one after another with the same costs and host rules but without waiting for the other
// devices' passes (their inputs taken to arrive when the device is free): a bound no later than
// the walk's, below it by about the pipeline's fill and drain, (stages - 1) passes of m (3% at
// 32 per stage), at a fraction of its cost (no sweeps over the devices, no record of each pass's
// end). DeepSeek-V3's plan bounds 2.07 billion passes over its 31,000 survivors, 96% of them in
// layouts with 32 or more microbatches per virtual stage (its global batch of 15,360 at small
// dp). Those orders are not checked for deadlocks here; a simulation would find one.
inline constexpr int kChainMicrobatches = 32;
Time iteration_lower_bound(const PreparedIteration& p, CollectiveCosts& costs);

// A weaker bound at a fraction of the cost: the busiest device's passes back to back, each at
// what iteration_lower_bound charges it at least (compute plus blocking collectives; a pass of an
// overlapped group its compute), then its optimizer step; no waiting, no host. Never above
// iteration_lower_bound: there every pass ends at least that long after the device's previous
// one (a group adds its overlap time's excess over its compute, never less than 0), and the
// device's optimizer step starts no earlier than its last pass's end. `plan` orders its
// survivors by this floor and works out the full bound only for those that could still be
// simulated (docs/plan.md, step 3). `census`: op_census(p), when the caller has it (else made).
Time iteration_floor(const PreparedIteration& p, CollectiveCosts& costs,
                     const OpCensus* census = nullptr);

// What iteration_floor reads of the op orders: per device, how many ops of each virtual stage and
// pass run inside an overlapped group (charged their compute) and outside one (compute and
// blocking collectives). A function of the schedule and the shape alone, so a caller that
// prepares many layouts of one shape makes it once (plan: OrdersMemo::census), where the floor
// walked every op of every layout (24,576 ops for pp 64 and 128 microbatches).
struct OpCensus {
    struct Count {
        int virtual_stage = 0;
        schedule::Pass pass = schedule::Pass::Forward;
        bool grouped = false;
        std::int64_t ops = 0;
        bool operator==(const Count&) const = default;
    };
    std::vector<std::vector<Count>> devices;  // per device, by (virtual stage, pass, grouped)
};
OpCensus op_census(const PreparedIteration& p);

}  // namespace cs::replay
