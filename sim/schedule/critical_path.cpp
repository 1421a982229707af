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
    const std::function<Time(const OpReady&)>& end, bool whole_groups) {
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

    // Whether op's inputs have ended; if so, ready is raised to their ends and input is the
    // feeding one's end (OpReady::input). `feeding_only`: the input from the neighbouring stage
    // alone (what the replay waits for before a group; the others are the device's own passes,
    // before the op in its order or in its group).
    const auto inputs_in = [&](const PipelineOp& op, int vs, std::int64_t& ready,
                               std::optional<Time>& input, bool feeding_only) {
        const auto need = [&](int stage, Slot s, bool feeds) {
            if (feeding_only && !feeds) return true;
            const std::int64_t e = at(stage, op.microbatch, s);
            if (e < 0) return false;
            ready = std::max(ready, e);
            if (feeds) input = Time::ps(e);
            return true;
        };
        switch (slot_of(op.pass)) {
            case kF:
                return vs == 0 || need(vs - 1, kF, true);
            case kGrad:
                return need(vs, kF, false) && (vs + 1 == stages || need(vs + 1, kGrad, true));
            default:
                return need(vs, kGrad, false);
        }
    };
    std::vector<int> vs;
    std::vector<std::optional<Time>> input;
    // Each sweep runs every device's ops (or whole groups) as far as their inputs allow; a sweep
    // that runs nothing while ops are left is a deadlock. A sweep runs at least one op, so this
    // ends.
    while (left > 0) {
        bool ran = false;
        for (std::size_t d = 0; d < devices; ++d) {
            const auto& order = orders[d];
            while (cursor[d] < order.size()) {
                const std::size_t k = cursor[d];
                const std::size_t n =
                    whole_groups
                        ? std::min(static_cast<std::size_t>(1 + std::max<int>(0, order[k].overlap)),
                                   order.size() - k)
                        : 1;
                std::int64_t ready = free[d];
                vs.assign(n, 0);
                input.assign(n, std::nullopt);
                bool inputs = true;
                for (std::size_t j = 0; j < n && inputs; ++j) {
                    const PipelineOp& op = order[k + j];
                    vs[j] =
                        schedule.virtual_stage(shape, static_cast<int>(d), op.chunk, op.microbatch);
                    inputs = inputs_in(op, vs[j], ready, input[j], n > 1);
                }
                if (!inputs) break;
                std::int64_t e = ready;
                for (std::size_t j = 0; j < n; ++j)
                    e = end(OpReady{static_cast<int>(d), k + j, order[k + j], vs[j], Time::ps(e),
                                    input[j]})
                            .count_ps();
                for (std::size_t j = 0; j < n; ++j)
                    at(vs[j], order[k + j].microbatch, slot_of(order[k + j].pass)) = e;
                free[d] = e;
                cursor[d] += n;
                left -= n;
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
