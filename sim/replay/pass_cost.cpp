#include "replay/pass_cost.hpp"

#include <string>

#include "core/errors.hpp"
#include "replay/replay.hpp"

namespace cs::replay {

StepCosts cost_steps(const workload::PassPlan& plan,
                     const std::function<Time(const workload::Step&)>& collective,
                     double interference) {
    using workload::Step;
    StepCosts cost;
    const auto& steps = plan.steps;
    cost.step_times.resize(steps.size());
    for (std::size_t k = 0; k < steps.size(); ++k)
        cost.step_times[k] =
            steps[k].kind == Step::Kind::Compute ? steps[k].duration : collective(steps[k]);
    for (std::size_t k = 0; k < steps.size(); ++k) {
        const Step& a = steps[k];
        if (a.kind != Step::Kind::Collective) continue;
        const bool next = a.has(Step::OverlapNext), previous = a.has(Step::OverlapPrevious);
        if (!next && !previous) continue;
        const std::size_t c = next ? k + 1 : k - 1;
        if ((previous && k == 0) || c >= steps.size() || steps[c].kind != Step::Kind::Compute ||
            steps[c].repeat != a.repeat)
            throw SimulationError("replay", std::string("collective step '") + a.label +
                                                "' overlaps a step that is not a compute step "
                                                "of its repeat count");
        const auto t = overlapped_time(cost.step_times[c].count_ps(), cost.step_times[k].count_ps(),
                                       cost.step_times[c].count_ps(), cost.step_times[k].count_ps(),
                                       interference);
        cost.step_times[c] += Time::ps(t.slowed);
        cost.interference += Time::ps(t.slowed) * a.repeat;
        cost.step_times[k] = Time::ps(t.exposed);
    }
    for (std::size_t k = 0; k < steps.size(); ++k) {
        const Time all = cost.step_times[k] * steps[k].repeat;
        if (steps[k].kind == Step::Kind::Compute) {
            cost.compute += all;
            continue;
        }
        cost.collective += all;
        cost.collective_kinds[static_cast<std::size_t>(steps[k].comm_kind())] += all;
    }
    return cost;
}

}  // namespace cs::replay
