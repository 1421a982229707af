#include "schedule/schedule.hpp"

#include <algorithm>
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

std::vector<std::string> schedule_names() {
    return {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v", "dualpipev"};
}

std::unique_ptr<Schedule> make_schedule(const std::string& name) {
    if (name == "gpipe") return detail::make_gpipe();
    if (name == "1f1b") return detail::make_one_f_one_b();
    if (name == "interleaved") return detail::make_interleaved();
    if (name == "zb-h1") return detail::make_zb_h1();
    if (name == "zb-h2") return detail::make_zb_h2();
    if (name == "zb-v") return detail::make_zb_v();
    if (name == "dualpipev") return detail::make_dualpipev();
    return nullptr;
}

int peak_inflight_microbatches(const Schedule& schedule, const PipelineShape& shape, int device) {
    detail::require_valid(schedule, shape, device);
    const Pass releasing = schedule.splits_backward() ? Pass::BackwardWeight : Pass::Backward;
    int held = 0;
    int peak = 0;
    for (const PipelineOp& op : schedule.order(shape, device)) {
        if (op.pass == Pass::Forward) {
            peak = std::max(peak, ++held);
        } else if (op.pass == releasing) {
            --held;
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
