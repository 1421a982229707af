#include "replay/host.hpp"

#include <algorithm>
#include <cmath>

namespace cs::replay {

std::vector<KernelBlock> kernel_blocks(std::span<const workload::Step> steps,
                                       std::span<const Time> step_times) {
    std::vector<KernelBlock> blocks;
    blocks.reserve(steps.size());
    for (std::size_t i = 0; i < steps.size(); ++i)
        blocks.push_back(KernelBlock{step_times[i] * steps[i].repeat,
                                     std::int64_t{steps[i].launches} * steps[i].repeat,
                                     steps[i].host_weight});
    return blocks;
}

HostIssue host_issue(Time pass, Time launch, std::span<const KernelBlock> blocks) {
    HostIssue h;
    Time gpu = Time::zero();
    Time host = Time::zero();
    // The host's time for one kernel of a block (whole picoseconds).
    const auto per = [&](const KernelBlock& b) {
        return b.host_weight == 1
                   ? launch
                   : Time::ps(std::llround(static_cast<double>(launch.count_ps()) * b.host_weight));
    };
    Time first_launch = Time::zero();
    for (const auto& b : blocks) {
        const std::int64_t k = std::max<std::int64_t>(0, b.kernels);
        if (k > 0 && h.launches == 0) first_launch = per(b);
        h.launches += k;
        host += per(b) * k;
        gpu += b.time;
    }
    h.issue = pass + host;
    if (h.launches == 0) {
        h.first_issue = pass;
        h.earliest_end = pass + gpu;
        return h;
    }
    h.first_issue = pass + first_launch;
    // Walk the blocks keeping `suffix`, the GPU time from the current block to the end, and
    // `issued`, the host's time for the kernels issued before the current block.
    Time suffix = gpu;
    Time issued = Time::zero();
    Time best = Time::zero();
    for (const auto& b : blocks) {
        if (b.kernels > 0) {
            const Time each_launch = per(b);
            const Time first = pass + issued + each_launch + suffix;
            const Time each = Time::ps((b.time.count_ps() + b.kernels - 1) / b.kernels);
            const Time after = suffix - b.time;  // the blocks after this one
            const Time last = pass + issued + each_launch * b.kernels + each + after;
            best = std::max({best, first, last});
            issued += each_launch * b.kernels;
        }
        suffix -= b.time;
    }
    h.earliest_end = best;
    return h;
}

Time pass_lead(const workload::HostModel& host, const schedule::Schedule& schedule, bool backward) {
    Time lead = host.pass + (backward ? host.backward : Time::zero());
    if (schedule.on_torch_pipeline_runtime()) lead += host.runtime_pass;
    return lead;
}

}  // namespace cs::replay
