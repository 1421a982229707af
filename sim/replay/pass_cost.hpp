// What a pass's steps cost as the replay charges them, apart from the host: compute steps at their
// plan's duration, collective steps at what `collective` says (the replay's CollectiveCosts on the
// group of worker 0: every worker has the same shape), and a collective flagged to overlap its
// neighbouring compute step (Step::OverlapNext, OverlapPrevious) taking overlapped_time of the
// pair: the compute slowed by `interference` while they overlap, the collective what is left
// exposed. The replay's pass costs and plan's lower bound on a layout both read this.
#pragma once

#include <functional>
#include <vector>

#include "core/units.hpp"
#include "workload/plan.hpp"

namespace cs::replay {

struct StepCosts {
    Time compute, collective;                // sums over the steps, repeats included
    workload::CommTimes collective_kinds{};  // collective by the kind of its group
    Time interference;                       // part of compute added by overlapped collectives
    std::vector<Time> step_times;            // per step, one repeat
};

// Throws SimulationError for a collective flagged to overlap a step that is not a compute step
// of its repeat count.
StepCosts cost_steps(const workload::PassPlan& plan,
                     const std::function<Time(const workload::Step&)>& collective,
                     double interference);

}  // namespace cs::replay
