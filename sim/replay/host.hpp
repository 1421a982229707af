// The host thread that issues a pass's kernels (workload::HostModel), as a closed form the replay
// evaluates once per pass plan: how long the host spends issuing a pass, and the earliest the
// pass can finish on an otherwise idle GPU given when its kernels are issued.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/units.hpp"
#include "schedule/schedule.hpp"
#include "workload/plan.hpp"

namespace cs::replay {

// `kernels` equal kernels that together run for `time` on the GPU, back to back (a plan step of
// `repeat` r and `launches` n with time t per execution: r x n kernels, r x t in all). A block of
// no kernels is GPU time issued with the kernels before it.
struct KernelBlock {
    Time time;
    std::int64_t kernels = 0;
    // The host's time per kernel of the block in units of HostModel::launch
    // (workload::Step::host_weight).
    double host_weight = 1;
};

struct HostIssue {
    std::int64_t launches = 0;  // kernels issued: the sum of the blocks' kernels
    Time issue;                 // H = pass + launches x launch: the host's time for the pass
    // D, from the moment the host starts the pass: kernel i (from 0) is issued at
    // pass + (i + 1) x launch and starts at max(its issue, the previous kernel's end), so
    // D = max over i of (issue_i + the GPU time of kernels i, i+1, ...). Without kernels: pass + G.
    Time earliest_end;
    Time
        first_issue;  // pass + launch: when the first kernel can start (pass without kernels: pass)
};

// The kernels of `steps` as blocks, step_times[i] being one execution of steps[i]: every step,
// collective steps included (their NCCL kernels are launched too), as repeat x launches kernels
// sharing the step's repeat x time.
std::vector<KernelBlock> kernel_blocks(std::span<const workload::Step> steps,
                                       std::span<const Time> step_times);

// O(blocks): within a block of equal kernels of duration d, issue_i + tail_i changes by
// launch x host_weight - d from one kernel to the next, so its maximum is at the block's first or
// last kernel. A kernel's duration is its block's time / kernels rounded up (the last kernel's
// tail). A kernel of a block takes launch x the block's host_weight of the host's time.
HostIssue host_issue(Time pass, Time launch, std::span<const KernelBlock> blocks);

// The framework's work before a pass's first kernel: host.pass, host.backward more for a backward
// pass (or its input half: the autograd engine's start), and host.runtime_pass more under the
// schedules torch runs on its pipeline runtime.
Time pass_lead(const workload::HostModel& host, const schedule::Schedule& schedule, bool backward);

}  // namespace cs::replay
