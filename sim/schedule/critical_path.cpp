#include "schedule/critical_path.hpp"

#include <algorithm>
#include <array>
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

// When each pass of each microbatch on each virtual stage ended: ends[(vs * m + i) * kSlots +
// slot], -1 until it has run.
class PassEnds {
  public:
    PassEnds(int stages, int microbatches)
        : stages_(stages),
          m_(static_cast<std::size_t>(microbatches)),
          ends_(static_cast<std::size_t>(stages) * m_ * kSlots, -1) {}
    int stages() const { return stages_; }
    std::int64_t& at(int vs, int i, Slot s) {
        return ends_[(static_cast<std::size_t>(vs) * m_ + static_cast<std::size_t>(i)) * kSlots +
                     s];
    }

  private:
    int stages_;
    std::size_t m_;
    std::vector<std::int64_t> ends_;
};

// The virtual stage whose pass feeds op on virtual stage vs of `stages` (OpReady::input): vs - 1
// for a forward, vs + 1 for a backward or its input half; -1 for none (the first stage's forward,
// the last stage's backward, a weight-gradient half).
int feeder(const PipelineOp& op, int vs, int stages) {
    switch (slot_of(op.pass)) {
        case kF:
            return vs > 0 ? vs - 1 : -1;
        case kGrad:
            return vs + 1 < stages ? vs + 1 : -1;
        default:
            return -1;
    }
}

// Whether op's inputs have ended; if so, ready is raised to their ends and input is the feeding
// one's end (OpReady::input; -1 for none). `feeding_only`: the input from the neighbouring stage
// alone (what the replay waits for before a group; the others are the device's own passes, before
// the op in its order or in its group).
bool inputs_in(PassEnds& ends, const PipelineOp& op, int vs, bool feeding_only, std::int64_t& ready,
               std::int64_t& input) {
    const auto need = [&](int stage, Slot s, bool feeds) {
        if (feeding_only && !feeds) return true;
        const std::int64_t e = ends.at(stage, op.microbatch, s);
        if (e < 0) return false;
        ready = std::max(ready, e);
        if (feeds) input = e;
        return true;
    };
    const int from = feeder(op, vs, ends.stages());
    switch (slot_of(op.pass)) {
        case kF:
            return from < 0 || need(from, kF, true);
        case kGrad:
            return need(vs, kF, false) && (from < 0 || need(from, kGrad, true));
        default:
            return need(vs, kGrad, false);
    }
}

}  // namespace

std::optional<std::vector<Time>> critical_path_ends(
    const Schedule& schedule, const PipelineShape& shape,
    const std::vector<std::vector<PipelineOp>>& orders,
    const std::function<Time(const OpReady&)>& end, bool whole_groups) {
    PassEnds ends(schedule.virtual_stages(shape), shape.microbatches);
    const std::size_t devices = orders.size();
    std::vector<std::size_t> cursor(devices, 0);
    std::vector<std::int64_t> free(devices, 0);
    std::size_t left = 0;
    for (const auto& o : orders)
        left += o.size();
    // A group runs whole up to kMaxOverlapGroup passes (the replay refuses a longer one); a
    // longer one is walked op by op, which bounds any run of it too.
    std::array<int, kMaxOverlapGroup> vs{};
    std::array<std::int64_t, kMaxOverlapGroup> input{};
    // Each sweep runs every device's ops (or whole groups) as far as their inputs allow; a sweep
    // that runs nothing while ops are left is a deadlock. A sweep runs at least one op, so this
    // ends.
    while (left > 0) {
        bool ran = false;
        for (std::size_t d = 0; d < devices; ++d) {
            const auto& order = orders[d];
            while (cursor[d] < order.size()) {
                const std::size_t k = cursor[d];
                const auto group =
                    std::min(static_cast<std::size_t>(1 + std::max<int>(0, order[k].overlap)),
                             order.size() - k);
                const std::size_t n = whole_groups && group <= kMaxOverlapGroup ? group : 1;
                std::int64_t ready = free[d];
                bool inputs = true;
                for (std::size_t j = 0; j < n && inputs; ++j) {
                    const PipelineOp& op = order[k + j];
                    vs[j] =
                        schedule.virtual_stage(shape, static_cast<int>(d), op.chunk, op.microbatch);
                    input[j] = -1;
                    inputs = inputs_in(ends, op, vs[j], n > 1, ready, input[j]);
                }
                if (!inputs) break;
                std::int64_t e = ready;
                for (std::size_t j = 0; j < n; ++j)
                    e = end(OpReady{static_cast<int>(d), k + j, order[k + j], vs[j], Time::ps(e),
                                    input[j] < 0 ? std::nullopt
                                                 : std::optional<Time>(Time::ps(input[j]))})
                            .count_ps();
                for (std::size_t j = 0; j < n; ++j)
                    ends.at(vs[j], order[k + j].microbatch, slot_of(order[k + j].pass)) = e;
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

std::vector<Time> device_chain_ends(const Schedule& schedule, const PipelineShape& shape,
                                    const std::vector<std::vector<PipelineOp>>& orders,
                                    const std::function<Time(const OpReady&)>& end) {
    const int stages = schedule.virtual_stages(shape);
    std::vector<Time> ends(orders.size(), Time::zero());
    for (std::size_t d = 0; d < orders.size(); ++d) {
        Time& free = ends[d];
        for (std::size_t k = 0; k < orders[d].size(); ++k) {
            const PipelineOp& op = orders[d][k];
            const int vs =
                schedule.virtual_stage(shape, static_cast<int>(d), op.chunk, op.microbatch);
            free = end(
                OpReady{static_cast<int>(d), k, op, vs, free,
                        feeder(op, vs, stages) >= 0 ? std::optional<Time>(free) : std::nullopt});
        }
    }
    return ends;
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
