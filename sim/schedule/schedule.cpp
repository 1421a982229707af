#include "schedule/schedule.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "core/errors.hpp"
#include "schedule/builtin.hpp"

namespace cs::schedule {

const char* pass_letter(Pass p) {
    switch (p) {
        case Pass::Forward:
            return "F";
        case Pass::Backward:
        case Pass::BackwardInput:
            return "B";
        case Pass::BackwardWeight:
            return "W";
    }
    return "?";
}

int Schedule::virtual_stage(const PipelineShape& shape, int device, int chunk,
                            int /*microbatch*/) const {
    return chunk * shape.devices + device;
}

Placement Schedule::place(const PipelineShape& shape, int virtual_stage, int /*microbatch*/) const {
    return Placement{virtual_stage % shape.devices, virtual_stage / shape.devices};
}

const ScheduleRegistry& ScheduleRegistry::builtin() {
    static const ScheduleRegistry registry = [] {
        ScheduleRegistry r;
#define CS_SCHEDULE(factory, name, description) r.add({name, &detail::factory, description});
#include "schedule/builtin_schedules.def"
#undef CS_SCHEDULE
        return r;
    }();
    return registry;
}

ScheduleRegistry& ScheduleRegistry::add(ScheduleEntry entry) {
    if (entry.name.empty()) throw std::invalid_argument("a schedule needs a name");
    if (!entry.make) throw std::invalid_argument("schedule '" + entry.name + "' has no factory");
    if (find(entry.name))
        throw std::invalid_argument("schedule '" + entry.name + "' is already registered");
    entries_.push_back(std::move(entry));
    return *this;
}

const ScheduleEntry* ScheduleRegistry::find(std::string_view name) const {
    for (const ScheduleEntry& e : entries_)
        if (e.name == name) return &e;
    return nullptr;
}

std::vector<std::string> ScheduleRegistry::names() const {
    std::vector<std::string> out;
    out.reserve(entries_.size());
    for (const ScheduleEntry& e : entries_)
        out.push_back(e.name);
    return out;
}

std::vector<std::string> schedule_names(const ScheduleRegistry& registry) {
    return registry.names();
}

std::unique_ptr<Schedule> make_schedule(std::string_view name, const ScheduleRegistry& registry) {
    const ScheduleEntry* entry = registry.find(name);
    return entry ? entry->make() : nullptr;
}

std::unique_ptr<Schedule> require_schedule(std::string_view name, const SourceLocation& where,
                                           const ScheduleRegistry& registry) {
    if (auto schedule = make_schedule(name, registry)) return schedule;
    std::string names;
    const auto all = registry.names();
    for (std::size_t i = 0; i < all.size(); ++i)
        names += (i == 0 ? "" : (i + 1 == all.size() ? " or " : ", ")) + all[i];
    throw ConfigError(where, "unknown schedule \"" + std::string(name) + "\"; expected " + names);
}

std::vector<std::vector<PipelineOp>> Schedule::orders(const PipelineShape& shape) const {
    std::vector<std::vector<PipelineOp>> all;
    all.reserve(static_cast<std::size_t>(std::max(shape.devices, 0)));
    for (int d = 0; d < shape.devices; ++d)
        all.push_back(order(shape, d));
    return all;
}

int peak_inflight_microbatches(const Schedule& schedule, const PipelineShape& shape, int device) {
    detail::require_valid(schedule, shape, device);
    return peak_inflight_microbatches(schedule, schedule.order(shape, device));
}

int peak_inflight_microbatches(const Schedule& schedule, std::span<const PipelineOp> order) {
    const Pass releasing = schedule.splits_backward() ? Pass::BackwardWeight : Pass::Backward;
    int held = 0;
    int peak = 0;
    for (const PipelineOp& op : order) {
        if (op.pass == Pass::Forward) {
            peak = std::max(peak, ++held);
        } else if (op.pass == releasing) {
            --held;
        }
    }
    return peak;
}

std::int64_t peak_inflight_bytes(const Schedule& schedule, const PipelineShape& shape, int device,
                                 const std::function<std::int64_t(int)>& bytes_of_virtual_stage) {
    detail::require_valid(schedule, shape, device);
    return peak_inflight_bytes(schedule, shape, device, schedule.order(shape, device),
                               bytes_of_virtual_stage);
}

std::int64_t peak_inflight_bytes(const Schedule& schedule, const PipelineShape& shape, int device,
                                 std::span<const PipelineOp> order,
                                 const std::function<std::int64_t(int)>& bytes_of_virtual_stage) {
    return peak_held_bytes(peak_held_states(schedule, shape, device, order),
                           bytes_of_virtual_stage);
}

std::vector<HeldState> peak_held_states(const Schedule& schedule, const PipelineShape& shape,
                                        int device, std::span<const PipelineOp> order) {
    const Pass releasing = schedule.splits_backward() ? Pass::BackwardWeight : Pass::Backward;
    // The device's virtual stages, in increasing order, and each op's index among them.
    std::vector<int> stages;
    std::vector<int> slot_of_op(order.size(), -1);
    for (std::size_t i = 0; i < order.size(); ++i) {
        const PipelineOp& op = order[i];
        if (op.pass != Pass::Forward && op.pass != releasing) continue;
        const int vs = schedule.virtual_stage(shape, device, op.chunk, op.microbatch);
        auto at = std::find(stages.begin(), stages.end(), vs);
        if (at == stages.end()) at = stages.insert(stages.end(), vs);
        slot_of_op[i] = static_cast<int>(at - stages.begin());
    }
    std::vector<int> sorted = stages;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int> rank(stages.size());  // slot -> position in increasing virtual stage
    for (std::size_t k = 0; k < stages.size(); ++k)
        rank[k] =
            static_cast<int>(std::find(sorted.begin(), sorted.end(), stages[k]) - sorted.begin());
    // The walk. A state after a forward that another forward follows is held at least as much of
    // by the next one (counts only grow), so only the last forward of each run is a candidate.
    std::vector<std::vector<int>> candidates;
    std::vector<int> held(stages.size(), 0);
    for (std::size_t i = 0; i < order.size(); ++i) {
        if (slot_of_op[i] < 0) continue;
        const auto k = static_cast<std::size_t>(rank[static_cast<std::size_t>(slot_of_op[i])]);
        if (order[i].pass != Pass::Forward) {
            --held[k];
            continue;
        }
        ++held[k];
        std::size_t next = i + 1;
        while (next < order.size() && slot_of_op[next] < 0)
            ++next;
        if (next < order.size() && order[next].pass == Pass::Forward) continue;
        if (candidates.empty() || candidates.back() != held) candidates.push_back(held);
    }
    // Those no other holds at least as much of in every virtual stage (the first of equal ones).
    const auto covers = [](const std::vector<int>& a, const std::vector<int>& b) {
        for (std::size_t k = 0; k < a.size(); ++k)
            if (a[k] < b[k]) return false;
        return true;
    };
    std::vector<const std::vector<int>*> kept;
    for (const auto& c : candidates) {
        if (std::any_of(kept.begin(), kept.end(), [&](const auto* k) { return covers(*k, c); }))
            continue;
        std::erase_if(kept, [&](const auto* k) { return covers(c, *k); });
        kept.push_back(&c);
    }
    std::vector<HeldState> states;
    for (const auto* c : kept) {
        HeldState s;
        for (std::size_t k = 0; k < c->size(); ++k)
            if ((*c)[k] > 0) s.emplace_back(sorted[k], (*c)[k]);
        states.push_back(std::move(s));
    }
    return states;
}

std::int64_t peak_held_bytes(std::span<const HeldState> states,
                             const std::function<std::int64_t(int)>& bytes_of_virtual_stage) {
    std::int64_t peak = 0;
    for (const HeldState& s : states) {
        std::int64_t held = 0;
        for (const auto& [vs, count] : s) {
            const std::int64_t bytes = bytes_of_virtual_stage(vs);
            if (bytes < 0)
                throw SimulationError(
                    "schedule",
                    "virtual stage " + std::to_string(vs) + " holds a negative activation size",
                    Time::zero());
            held += bytes * count;
        }
        peak = std::max(peak, held);
    }
    return peak;
}

namespace detail {

std::string check_positive(const std::string& name, const PipelineShape& shape) {
    if (shape.devices < 1) {
        return name + " needs at least one pipeline stage: p=" + std::to_string(shape.devices) +
               " given; use p >= 1";
    }
    if (shape.microbatches < 1) {
        return name + " needs at least one microbatch: m=" + std::to_string(shape.microbatches) +
               " given; use m >= 1";
    }
    if (shape.chunks < 1) {
        return name +
               " needs at least one model chunk per device: v=" + std::to_string(shape.chunks) +
               " given; use v >= 1";
    }
    return {};
}

std::string check_fixed_chunks(const std::string& name, const PipelineShape& shape, int chunks) {
    std::string problem = check_positive(name, shape);
    if (!problem.empty()) return problem;
    if (shape.chunks != chunks) {
        return name + " runs exactly " + std::to_string(chunks) + " model chunk" +
               (chunks == 1 ? "" : "s") + " per device: v=" + std::to_string(shape.chunks) +
               " given; use v=" + std::to_string(chunks) + " (chunks_for() gives it)";
    }
    return {};
}

void require_valid(const Schedule& schedule, const PipelineShape& shape, int device) {
    std::string problem = schedule.check(shape);
    if (problem.empty() && (device < 0 || device >= shape.devices)) {
        problem = "device " + std::to_string(device) + " is outside 0.." +
                  std::to_string(shape.devices - 1);
    }
    if (!problem.empty()) throw SimulationError("schedule " + schedule.name(), problem);
}

}  // namespace detail
}  // namespace cs::schedule
