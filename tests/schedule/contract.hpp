// The schedule contract, for every implementation of Schedule: the bundled ones
// (test_schedule.cpp) and schedules registered by tests (test_schedule_registry.cpp).
// A tiny list-scheduling simulator runs the per-device orders with unit-time passes and the
// dependencies of schedule.hpp's header comment; the replay layer is not used.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/errors.hpp"
#include "schedule/schedule.hpp"

namespace cs::schedule::test {

struct Costs {
    long forward = 1;
    long backward = 2;         // full backward
    long backward_input = 1;   // split backward: B
    long backward_weight = 1;  // split backward: W
};

struct Run {
    bool completed = false;
    long makespan = 0;
    std::vector<long> busy;   // per device
    std::vector<long> first;  // per device: start of its first op (-1 if none ran)
    // The longest span of a device from the start of its first op to the end of its last.
    long longest_span() const {
        long span = 0;
        for (std::size_t d = 0; d < busy.size(); ++d)
            if (first[d] >= 0) span = std::max(span, ends[d] - first[d]);
        return span;
    }
    std::vector<long> ends;  // per device: end of its last op
    std::string stuck;       // the first op of each device that could not run, if not completed
};

// Every device runs its order one op at a time; an op starts when the device is free and every
// op it depends on has ended. Start times do not depend on the order in which devices are
// visited, so sweeping until nothing moves gives the unique as-soon-as-possible execution.
inline Run simulate(const Schedule& schedule, const PipelineShape& shape, const Costs& costs) {
    const int p = shape.devices;
    const int m = shape.microbatches;
    const int stages = schedule.virtual_stages(shape);
    enum Kind { kForward, kGradient, kWeight };  // kGradient: Backward or BackwardInput
    std::vector<long> ends(3 * static_cast<std::size_t>(stages) * m, -1);
    auto end_of = [&](Kind kind, int vs, int i) -> long& {
        return ends[(static_cast<std::size_t>(kind) * stages + vs) * m + i];
    };
    std::vector<std::vector<PipelineOp>> orders;
    for (int d = 0; d < p; ++d)
        orders.push_back(schedule.order(shape, d));
    std::vector<std::size_t> next(p, 0);
    std::vector<long> clock(p, 0);
    Run run;
    run.busy.assign(p, 0);
    run.first.assign(p, -1);
    bool moved = true;
    while (moved) {
        moved = false;
        for (int d = 0; d < p; ++d) {
            while (next[d] < orders[d].size()) {
                const PipelineOp& op = orders[d][next[d]];
                const int vs = schedule.virtual_stage(shape, d, op.chunk, op.microbatch);
                const int i = op.microbatch;
                std::vector<long> deps;
                long cost = 0;
                Kind kind = kForward;
                switch (op.pass) {
                    case Pass::Forward:
                        if (vs > 0) deps.push_back(end_of(kForward, vs - 1, i));
                        cost = costs.forward;
                        break;
                    case Pass::Backward:
                    case Pass::BackwardInput:
                        deps.push_back(end_of(kForward, vs, i));
                        if (vs < stages - 1) deps.push_back(end_of(kGradient, vs + 1, i));
                        cost = op.pass == Pass::Backward ? costs.backward : costs.backward_input;
                        kind = kGradient;
                        break;
                    case Pass::BackwardWeight:
                        deps.push_back(end_of(kGradient, vs, i));
                        cost = costs.backward_weight;
                        kind = kWeight;
                        break;
                }
                if (std::any_of(deps.begin(), deps.end(), [](long e) { return e < 0; })) break;
                long start = clock[d];
                for (long e : deps)
                    start = std::max(start, e);
                if (run.first[d] < 0) run.first[d] = start;
                clock[d] = start + cost;
                run.busy[d] += cost;
                end_of(kind, vs, i) = clock[d];
                ++next[d];
                moved = true;
            }
        }
    }
    run.completed = true;
    for (int d = 0; d < p; ++d) {
        if (next[d] < orders[d].size()) {
            run.completed = false;
            const PipelineOp& op = orders[d][next[d]];
            run.stuck += "device " + std::to_string(d) + " at " + pass_letter(op.pass) +
                         std::to_string(op.microbatch) + "c" + std::to_string(op.chunk) + "; ";
        }
        run.makespan = std::max(run.makespan, clock[d]);
    }
    run.ends = clock;
    return run;
}

inline std::string describe(const std::string& name, const PipelineShape& s) {
    return name + " p=" + std::to_string(s.devices) + " m=" + std::to_string(s.microbatches) +
           " v=" + std::to_string(s.chunks);
}

// Every shape with p in 1..8, m in 1..32 and v from chunks_for(1..4) that the schedule accepts.
inline std::vector<PipelineShape> accepted_shapes(const Schedule& schedule) {
    std::set<int> chunk_counts;
    for (int vpp = 1; vpp <= 4; ++vpp)
        chunk_counts.insert(schedule.chunks_for(vpp));
    std::vector<PipelineShape> shapes;
    for (int p = 1; p <= 8; ++p) {
        for (int m = 1; m <= 32; ++m) {
            for (int v : chunk_counts) {
                PipelineShape shape{p, m, v};
                if (schedule.check(shape).empty()) shapes.push_back(shape);
            }
        }
    }
    return shapes;
}

// Every (virtual stage, microbatch) runs F and B (or Bi and W) exactly once, placement is a
// bijection, the orders run to completion and peak in-flight activations are within bounds, on
// every shape of accepted_shapes().
inline void check_contract(const Schedule& schedule) {
    const std::string name = schedule.name();
    const std::vector<PipelineShape> shapes = accepted_shapes(schedule);
    // Each schedule accepts some shape in the range (interleaved: m a multiple of p, v >= 2).
    REQUIRE_MESSAGE(!shapes.empty(), name);
    for (const PipelineShape& shape : shapes) {
        INFO(describe(name, shape));
        const int p = shape.devices;
        const int m = shape.microbatches;
        const int stages = schedule.virtual_stages(shape);
        // Placement: each microbatch's virtual stages sit on distinct (device, chunk) slots, and
        // virtual_stage inverts place. With one model copy every slot is used by every
        // microbatch; with two (DualPipe) each microbatch uses half of them.
        CHECK(stages * schedule.model_copies() == p * shape.chunks);
        for (int i = 0; i < m; ++i) {
            std::set<std::pair<int, int>> slots;
            for (int vs = 0; vs < stages; ++vs) {
                const Placement at = schedule.place(shape, vs, i);
                REQUIRE(at.device >= 0);
                REQUIRE(at.device < p);
                REQUIRE(at.chunk >= 0);
                REQUIRE(at.chunk < shape.chunks);
                CHECK(schedule.virtual_stage(shape, at.device, at.chunk, i) == vs);
                slots.insert({at.device, at.chunk});
            }
            CHECK(static_cast<int>(slots.size()) == stages);
        }
        // orders() gives every device's order() at once, index for index.
        const auto all = schedule.orders(shape);
        REQUIRE(static_cast<int>(all.size()) == p);
        for (int d = 0; d < p; ++d)
            CHECK(all[static_cast<std::size_t>(d)] == schedule.order(shape, d));
        // Pass counts per (pass, virtual stage, microbatch).
        std::map<std::tuple<Pass, int, int>, int> count;
        for (int d = 0; d < p; ++d) {
            for (const PipelineOp& op : schedule.order(shape, d)) {
                REQUIRE(op.chunk >= 0);
                REQUIRE(op.chunk < shape.chunks);
                REQUIRE(op.microbatch >= 0);
                REQUIRE(op.microbatch < m);
                const bool split_pass =
                    op.pass == Pass::BackwardInput || op.pass == Pass::BackwardWeight;
                if (op.pass != Pass::Forward) CHECK(split_pass == schedule.splits_backward());
                const int vs = schedule.virtual_stage(shape, d, op.chunk, op.microbatch);
                ++count[{op.pass, vs, op.microbatch}];
            }
        }
        // Expected: stages * m forwards and as many of each backward pass, each exactly once.
        const std::vector<Pass> passes =
            schedule.splits_backward()
                ? std::vector<Pass>{Pass::Forward, Pass::BackwardInput, Pass::BackwardWeight}
                : std::vector<Pass>{Pass::Forward, Pass::Backward};
        CHECK(count.size() == passes.size() * static_cast<std::size_t>(stages) * m);
        for (Pass pass : passes) {
            for (int vs = 0; vs < stages; ++vs) {
                for (int i = 0; i < m; ++i)
                    CHECK(count[{pass, vs, i}] == 1);
            }
        }
        const Run run = simulate(schedule, shape, Costs{});
        CHECK_MESSAGE(run.completed, run.stuck);
        // Peak in-flight activations is at least one (every device runs a forward) and at
        // most everything the device ever holds (m microbatches on each of its chunks).
        for (int d = 0; d < p; ++d) {
            const int peak = peak_inflight_microbatches(schedule, shape, d);
            CHECK(peak >= 1);
            CHECK(peak <= m * shape.chunks);
        }
    }
}

// Rejected shapes are reported with the schedule's name first, and order() refuses them.
inline void check_rejections(const Schedule& schedule) {
    const std::string name = schedule.name();
    for (const PipelineShape& bad :
         {PipelineShape{0, 4, schedule.chunks_for(2)}, PipelineShape{4, 0, schedule.chunks_for(2)},
          PipelineShape{4, 4, 0}}) {
        INFO(describe(name, bad));
        const std::string message = schedule.check(bad);
        CHECK(message.find(name) == 0);
        CHECK_THROWS_AS(schedule.order(bad, 0), cs::SimulationError);
    }
    PipelineShape fine{4, 8, schedule.chunks_for(2)};
    REQUIRE(schedule.check(fine).empty());
    CHECK_THROWS_AS(schedule.order(fine, 4), cs::SimulationError);
}

}  // namespace cs::schedule::test
