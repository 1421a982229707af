#include "replay/host.hpp"

#include <algorithm>

namespace cs::replay {

std::vector<KernelBlock> kernel_blocks(std::span<const workload::Step> steps,
                                       std::span<const Time> step_times) {
    std::vector<KernelBlock> blocks;
    blocks.reserve(steps.size());
    for (std::size_t i = 0; i < steps.size(); ++i)
        blocks.push_back(KernelBlock{step_times[i] * steps[i].repeat,
                                     std::int64_t{steps[i].launches} * steps[i].repeat});
    return blocks;
}

HostIssue host_issue(Time pass, Time launch, std::span<const KernelBlock> blocks) {
    HostIssue h;
    Time gpu = Time::zero();
    for (const auto& b : blocks) {
        h.launches += std::max<std::int64_t>(0, b.kernels);
        gpu += b.time;
    }
    h.issue = pass + launch * h.launches;
    if (h.launches == 0) {
        h.first_issue = pass;
        h.earliest_end = pass + gpu;
        return h;
    }
    h.first_issue = pass + launch;
    // Walk the blocks keeping `suffix`, the GPU time from the current block to the end, and
    // `issued`, the kernels issued before the current block.
    Time suffix = gpu;
    std::int64_t issued = 0;
    Time best = Time::zero();
    for (const auto& b : blocks) {
        if (b.kernels > 0) {
            const Time first = pass + launch * (issued + 1) + suffix;
            const Time each = Time::ps((b.time.count_ps() + b.kernels - 1) / b.kernels);
            const Time after = suffix - b.time;  // the blocks after this one
            const Time last = pass + launch * (issued + b.kernels) + each + after;
            best = std::max({best, first, last});
            issued += b.kernels;
        }
        suffix -= b.time;
    }
    h.earliest_end = best;
    return h;
}

Time pass_lead(const workload::HostModel& host, const schedule::Schedule& schedule, bool backward) {
    Time lead = host.pass + (backward ? host.backward : Time::zero());
    if (workload::HostModel::runs_on_runtime(schedule.name())) lead += host.runtime_pass;
    return lead;
}

}  // namespace cs::replay
