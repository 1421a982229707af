#include "replay/bound.hpp"

#include <cstddef>
#include <vector>

#include "core/errors.hpp"
#include "replay/pass_cost.hpp"
#include "schedule/critical_path.hpp"
#include "workload/groups.hpp"

namespace cs::replay {

Time iteration_lower_bound(const PreparedIteration& p, CollectiveCosts& costs) {
    const auto& spec = p.spec;
    const workload::RankLayout ranks(spec.layout);
    const double interference =
        spec.compute.framework != workload::Framework::None ? spec.compute.interference : 0.0;
    // Each (virtual stage, pass kind)'s compute and compute plus collectives, costed once.
    constexpr std::size_t kKinds = 4;
    struct Cost {
        bool made = false;
        Time compute, gpu;
    };
    std::vector<Cost> of(p.plan.virtual_stages.size() * kKinds);
    const auto cost_of = [&](const schedule::PipelineOp& op, int vs) -> const Cost& {
        Cost& c = of[static_cast<std::size_t>(vs) * kKinds + static_cast<std::size_t>(op.pass)];
        if (!c.made) {
            const auto steps = cost_steps(
                pass_plan(p.plan.virtual_stages[static_cast<std::size_t>(vs)], op.pass),
                [&](const workload::Step& s) {
                    return costs.cost(s.collective, ranks.group(s.group, 0, 0).gpus, s.size);
                },
                interference);
            c = {true, steps.compute, steps.compute + steps.collective};
        }
        return c;
    };
    // The ops of overlapped groups: an op with overlap n and the n after it.
    std::vector<std::vector<bool>> grouped(p.orders.size());
    std::vector<Time> tail;
    for (std::size_t d = 0; d < p.orders.size(); ++d) {
        const auto& order = p.orders[d];
        grouped[d].assign(order.size(), false);
        for (std::size_t k = 0; k < order.size(); ++k)
            if (order[k].overlap > 0)
                for (std::size_t j = k;
                     j <= k + static_cast<std::size_t>(order[k].overlap) && j < order.size(); ++j)
                    grouped[d][j] = true;
        tail.push_back(p.plan.devices[d].optimizer_step);
    }
    const auto duration = [&](int d, std::size_t k, const schedule::PipelineOp& op, int vs) {
        const Cost& c = cost_of(op, vs);
        return grouped[static_cast<std::size_t>(d)][k] ? c.compute : c.gpu;
    };
    const auto path = schedule::critical_path(*p.schedule, p.shape, p.orders, duration, tail);
    // Orders that deadlock are a schedule's bug (the contract tests run every registered one):
    // the replay would stall on them too.
    if (!path)
        throw SimulationError("replay", "schedule " + p.schedule->name() +
                                            "'s op orders deadlock: no bound can be given");
    return *path;
}

}  // namespace cs::replay
