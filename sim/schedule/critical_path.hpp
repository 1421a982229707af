// The shortest time a pipeline's op orders can take when each pass costs only its own duration:
// the longest path through the passes' dependency graph. A lower bound on any replay of the
// orders, since the replay runs the same passes in the same order per device and only adds
// waiting (communication, the host, collectives).
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "core/units.hpp"
#include "schedule/schedule.hpp"

namespace cs::schedule {

// Each device runs its ops one after another in `orders[device]` (schedule.order's lists); an op
// starts once the device's previous op and the op's inputs have ended (schedule.hpp,
// "Dependencies": F(vs, i) after F(vs-1, i); B/Bi(vs, i) after F(vs, i) and B/Bi(vs+1, i);
// Bw(vs, i) after Bi(vs, i)). `duration(device, index, op, vs)` is what op `orders[device][index]`
// on virtual stage vs takes; `tail[device]` (empty: none) is added after the device's last op (its
// optimizer step). Returns the latest device end, or nullopt if the orders deadlock (an op waits
// for an input no order produces first), which a valid schedule never does.
std::optional<Time> critical_path(
    const Schedule& schedule, const PipelineShape& shape,
    const std::vector<std::vector<PipelineOp>>& orders,
    const std::function<Time(int, std::size_t, const PipelineOp&, int)>& duration,
    std::span<const Time> tail = {});

// What the general form below asks of each op: the op, where it is, and when it may start as far
// as the pipeline goes.
struct OpReady {
    int device;
    std::size_t index;  // in orders[device]
    const PipelineOp& op;
    int virtual_stage;
    Time ready;  // the latest of the device's previous op's end and the op's inputs' ends
    // The end of the pass on the neighbouring virtual stage that feeds this op (F(vs-1, i) for a
    // forward, B/Bi(vs+1, i) for a backward or its input half); nullopt for an op with none
    // (the first stage's forward, the last stage's backward, a weight-gradient half).
    std::optional<Time> input;
};

// The same walk with each op's end given by `end(ready)` (at least ready.ready for a bound to
// mean anything), called for each device's ops in their order, so the caller may keep state
// per device between calls. With `whole_groups`, an overlapped group (PipelineOp::overlap: an op
// with overlap n and the n after it) runs as the replay runs it when it overlaps them: once
// every member's inputs are in, its members one after another from the latest of those and the
// device's previous end (each member's `ready` the end of the one before), and every member's
// output leaves at the group's end. Returns each device's last end (zero for a device without
// ops), or nullopt if the orders deadlock.
std::optional<std::vector<Time>> critical_path_ends(
    const Schedule& schedule, const PipelineShape& shape,
    const std::vector<std::vector<PipelineOp>>& orders,
    const std::function<Time(const OpReady&)>& end, bool whole_groups = false);

// Each device's ops one after another with the same `end`, each from the device's previous end,
// its feeding input (where it has one) taken to arrive then: the walk without waiting for any
// other device. With `end` monotone in ready and input times, no device's end is later than
// critical_path_ends gives; the orders are not checked for deadlocks.
std::vector<Time> device_chain_ends(const Schedule& schedule, const PipelineShape& shape,
                                    const std::vector<std::vector<PipelineOp>>& orders,
                                    const std::function<Time(const OpReady&)>& end);

}  // namespace cs::schedule
