#include "schedule/critical_path.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace cs::schedule {

namespace {

// What an op's end is recorded as: its forward, its input gradient (B or Bi), its weight
// gradient (Bw).
enum Slot : std::size_t { kF = 0, kGrad = 1, kWeight = 2, kSlots = 3 };

Slot slot_of(Pass p) {
    switch (p) {
        case Pass::Forward:
            return kF;
        case Pass::BackwardWeight:
            return kWeight;
        default:
            return kGrad;
    }
}

}  // namespace

std::optional<std::vector<Time>> critical_path_ends(
    const Schedule& schedule, const PipelineShape& shape,
    const std::vector<std::vector<PipelineOp>>& orders,
    const std::function<Time(const OpReady&)>& end) {
    const int stages = schedule.virtual_stages(shape);
    const auto m = static_cast<std::size_t>(shape.microbatches);
    // ends[(vs * m + i) * kSlots + slot]: when that pass of microbatch i on virtual stage vs
    // ended; -1 until it has run.
    std::vector<std::int64_t> ends(static_cast<std::size_t>(stages) * m * kSlots, -1);
    const auto at = [&](int vs, int i, Slot s) -> std::int64_t& {
        return ends[(static_cast<std::size_t>(vs) * m + static_cast<std::size_t>(i)) * kSlots + s];
    };
    const std::size_t devices = orders.size();
    std::vector<std::size_t> cursor(devices, 0);
    std::vector<std::int64_t> free(devices, 0);
    std::size_t left = 0;
    for (const auto& o : orders)
        left += o.size();

    // Each sweep runs every device's ops as far as their inputs allow; a sweep that runs nothing
    // while ops are left is a deadlock. A sweep runs at least one op, so this ends.
    while (left > 0) {
        bool ran = false;
        for (std::size_t d = 0; d < devices; ++d) {
            const auto& order = orders[d];
            while (cursor[d] < order.size()) {
                const PipelineOp& op = order[cursor[d]];
                const int vs =
                    schedule.virtual_stage(shape, static_cast<int>(d), op.chunk, op.microbatch);
                std::int64_t ready = free[d];
                std::optional<Time> input;
                const auto need = [&](int stage, Slot s, bool feeds) {
                    const std::int64_t e = at(stage, op.microbatch, s);
                    if (e < 0) return false;
                    ready = std::max(ready, e);
                    if (feeds) input = Time::ps(e);
                    return true;
                };
                bool inputs = true;
                switch (slot_of(op.pass)) {
                    case kF:
                        inputs = vs == 0 || need(vs - 1, kF, true);
                        break;
                    case kGrad:
                        inputs =
                            need(vs, kF, false) && (vs + 1 == stages || need(vs + 1, kGrad, true));
                        break;
                    default:
                        inputs = need(vs, kGrad, false);
                        break;
                }
                if (!inputs) break;
                const std::int64_t e =
                    end(OpReady{static_cast<int>(d), cursor[d], op, vs, Time::ps(ready), input})
                        .count_ps();
                at(vs, op.microbatch, slot_of(op.pass)) = e;
                free[d] = e;
                ++cursor[d];
                --left;
                ran = true;
            }
        }
        if (!ran) return std::nullopt;
    }
    std::vector<Time> last(devices);
    for (std::size_t d = 0; d < devices; ++d)
        last[d] = Time::ps(free[d]);
    return last;
}

std::optional<Time> critical_path(
    const Schedule& schedule, const PipelineShape& shape,
    const std::vector<std::vector<PipelineOp>>& orders,
    const std::function<Time(int, std::size_t, const PipelineOp&, int)>& duration,
    std::span<const Time> tail) {
    const auto ends = critical_path_ends(schedule, shape, orders, [&](const OpReady& r) {
        return r.ready + duration(r.device, r.index, r.op, r.virtual_stage);
    });
    if (!ends) return std::nullopt;
    Time latest = Time::zero();
    for (std::size_t d = 0; d < ends->size(); ++d)
        latest = std::max(latest, (*ends)[d] + (d < tail.size() ? tail[d] : Time::zero()));
    return latest;
}

}  // namespace cs::schedule
