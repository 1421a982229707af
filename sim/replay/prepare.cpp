#include "replay/prepare.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "core/errors.hpp"

namespace cs::replay {

std::int64_t PreparedIteration::passes_per_replica() const {
    std::int64_t n = 0;
    for (const auto& order : orders)
        n += static_cast<std::int64_t>(order.size());
    return n;
}

namespace {

// `it`'s op orders and peaks in flight, from the memo's entry for its schedule and shape when it
// has one (made the most recently used), else made here (into `made`) and, with a memo, kept in
// it. Returns the entry they came from, whose peak states weigh the activations.
const OrdersMemo::Entry& orders_for(PreparedIteration& it, OrdersMemo* memo,
                                    OrdersMemo::Entry& made) {
    const auto& name = it.spec.schedule;
    const auto& shape = it.shape;
    if (memo) {
        auto& entries = memo->entries;
        const auto found = std::find_if(entries.begin(), entries.end(), [&](const auto& e) {
            return e.schedule == name && e.shape == shape;
        });
        if (found != entries.end()) {
            std::rotate(found, found + 1, entries.end());  // the most recently used last
            memo->last_kept = true;
            it.orders = entries.back().orders;
            it.peak_inflight = entries.back().peak_inflight;
            return entries.back();
        }
    }
    const auto& sched = *it.schedule;
    made = {name, shape, sched.orders(shape), {}, {}, nullptr, 0};
    for (int s = 0; s < shape.devices; ++s) {
        const auto& order = made.orders[static_cast<std::size_t>(s)];
        made.ops += order.size();
        made.peak_inflight.push_back(schedule::peak_inflight_microbatches(sched, order));
        made.peak_states.push_back(schedule::peak_held_states(sched, shape, s, order));
    }
    it.orders = made.orders;
    it.peak_inflight = made.peak_inflight;
    if (memo) memo->last_kept = made.ops <= OrdersMemo::kOps;
    if (!memo || !memo->last_kept) return made;
    auto& entries = memo->entries;
    std::size_t kept = made.ops;
    for (const auto& e : entries)
        kept += e.ops;
    auto oldest = entries.begin();
    for (std::size_t n = entries.size(); n >= OrdersMemo::kEntries || kept > OrdersMemo::kOps; --n)
        kept -= (oldest++)->ops;
    entries.erase(entries.begin(), oldest);
    entries.push_back(std::move(made));
    return entries.back();
}

}  // namespace

PreparedIteration prepare(workload::ExperimentSpec experiment, std::string_view schedule_name,
                          const PrepareOptions& options) {
    PreparedIteration it;
    it.spec = std::move(experiment);
    if (!schedule_name.empty()) it.spec.schedule = std::string(schedule_name);
    const auto& spec = it.spec;
    it.schedule = schedule::require_schedule(spec.schedule, spec.schedule_where);
    const auto& sched = *it.schedule;
    const int chunks = sched.chunks_for(spec.layout.vpp);
    if (spec.layout.vpp > 1 && chunks == 1)
        it.warnings.push_back("schedule " + spec.schedule + " has no virtual stages: vpp = " +
                              std::to_string(spec.layout.vpp) + " is ignored");
    it.shape = {spec.layout.pp, spec.training.microbatches(spec.layout), chunks};
    if (auto problem = sched.check(it.shape); !problem.empty())
        throw ConfigError(spec.schedule_where, "schedule '" + spec.schedule + "': " + problem);

    it.copies = sched.model_copies();
    // plan_iteration and fill_memory ask for each virtual stage's device once (devices_of).
    const auto device_of = [&it](int vs) { return it.device_of(vs); };
    it.plan = workload::plan_iteration(spec, chunks / it.copies, sched.splits_backward(), device_of,
                                       it.copies);
    if (options.admit) {
        // Each device's memory with one microbatch in flight (its largest chunk's activations):
        // a floor under the memory filled in below, for admit to refuse a layout before its
        // orders. Only worked out for a caller that asks.
        workload::fill_memory(spec, it.plan,
                              std::vector<int>(static_cast<std::size_t>(it.shape.devices), 1),
                              device_of, {}, it.copies);
        options.admit(it);
    }

    OrdersMemo::Entry made;
    const auto& states = orders_for(it, options.orders, made).peak_states;
    // Each device's peak of activation bytes (schedule::peak_inflight_bytes), from its peak
    // states: the walk of its order is made once per shape.
    const auto chunk_activation = [&it](int vs) {
        return it.plan.virtual_stages[static_cast<std::size_t>(vs)].activation_memory.value;
    };
    for (int s = 0; s < it.shape.devices; ++s)
        it.peak_activations.push_back(Bytes{
            schedule::peak_held_bytes(states[static_cast<std::size_t>(s)], chunk_activation)});
    workload::fill_memory(spec, it.plan, it.peak_inflight, device_of, it.peak_activations,
                          it.copies);
    return it;
}

}  // namespace cs::replay
