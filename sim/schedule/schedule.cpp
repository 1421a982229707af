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
    const Pass releasing = schedule.splits_backward() ? Pass::BackwardWeight : Pass::Backward;
    std::int64_t held = 0;
    std::int64_t peak = 0;
    for (const PipelineOp& op : order) {
        const bool takes = op.pass == Pass::Forward;
        if (!takes && op.pass != releasing) continue;
        const std::int64_t bytes =
            bytes_of_virtual_stage(schedule.virtual_stage(shape, device, op.chunk, op.microbatch));
        if (takes) {
            held += bytes;
            peak = std::max(peak, held);
        } else {
            held -= bytes;
        }
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
