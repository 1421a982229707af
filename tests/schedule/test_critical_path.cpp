// schedule::critical_path, the bound `plan` prunes layouts with: the as-soon-as-possible end of
// the op orders when each pass costs only its duration.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "contract.hpp"
#include "schedule/critical_path.hpp"
#include "schedule/schedule.hpp"

using namespace cs::schedule;
using cs::Time;

namespace {

std::vector<std::vector<PipelineOp>> orders_of(const Schedule& s, const PipelineShape& shape) {
    std::vector<std::vector<PipelineOp>> orders;
    for (int d = 0; d < shape.devices; ++d)
        orders.push_back(s.order(shape, d));
    return orders;
}

// Pass durations in whole units (1 unit = 1 us), as contract.hpp's Costs.
auto unit_costs(const test::Costs& c) {
    return [c](int, std::size_t, const PipelineOp& op, int) {
        switch (op.pass) {
            case Pass::Forward:
                return Time::us(c.forward);
            case Pass::Backward:
                return Time::us(c.backward);
            case Pass::BackwardInput:
                return Time::us(c.backward_input);
            default:
                return Time::us(c.backward_weight);
        }
    };
}

}  // namespace

TEST_CASE("critical_path: the closed forms of 1f1b and interleaved") {
    // 1F1B with F = 1, B = 2 on every stage: (m + p - 1)(F + B) (the fill and drain of p - 1
    // stages around m microbatches of F + B). p = 4, m = 8: 11 x 3 = 33 units.
    const auto f1b = make_schedule("1f1b");
    const PipelineShape a{4, 8, 1};
    CHECK(critical_path(*f1b, a, orders_of(*f1b, a), unit_costs({1, 2, 1, 1})) == Time::us(33));
    // Interleaved with v chunks of F = 1, B = 2 each (whole stage F = v, B = 2v): the bubble
    // shrinks by v, (v m + p - 1)(F + B) per chunk. p = 4, m = 8, v = 2: (16 + 3) x 3 = 57 units,
    // the makespan docs/schedules.md draws for this shape.
    const auto il = make_schedule("interleaved");
    const PipelineShape b{4, 8, 2};
    CHECK(critical_path(*il, b, orders_of(*il, b), unit_costs({1, 2, 1, 1})) == Time::us(57));
}

TEST_CASE("critical_path: equals the contract's list scheduler on every schedule and shape") {
    // contract.hpp's simulate is an independent as-soon-as-possible execution of the same
    // dependencies; with the same costs the two must agree on every accepted shape. Two cost
    // sets: the contract's default and one with a heavier weight gradient.
    for (const std::string& name : schedule_names()) {
        const auto s = make_schedule(name);
        for (const test::Costs costs : {test::Costs{1, 2, 1, 1}, test::Costs{3, 5, 3, 2}}) {
            for (const PipelineShape& shape : test::accepted_shapes(*s)) {
                INFO(test::describe(name, shape));
                const auto run = test::simulate(*s, shape, costs);
                REQUIRE(run.completed);
                CHECK(critical_path(*s, shape, orders_of(*s, shape), unit_costs(costs)) ==
                      Time::us(run.makespan));
            }
        }
    }
}

TEST_CASE("critical_path: the tail after each device's last op, and deadlocked orders") {
    const auto g = make_schedule("gpipe");
    const PipelineShape shape{2, 2, 1};
    // GPipe p = 2, m = 2, F = 1, B = 2: device 1 ends at (m + p - 1)(F + B) - F... worked by hand:
    // device 0 F0 [0,1] F1 [1,2]; device 1 F0 [1,2] F1 [2,3] B0 [3,5] B1 [5,7]; device 0 B0
    // [5,7] B1 [7,9]. Ends 9 and 7. With tails 1 and 4: max(9 + 1, 7 + 4) = 11.
    const std::vector<Time> tail{Time::us(1), Time::us(4)};
    CHECK(critical_path(*g, shape, orders_of(*g, shape), unit_costs({1, 2, 1, 1})) == Time::us(9));
    CHECK(critical_path(*g, shape, orders_of(*g, shape), unit_costs({1, 2, 1, 1}), tail) ==
          Time::us(11));
    // Device 0 asked to run microbatch 0's backward before its forward: nothing can run it.
    auto orders = orders_of(*g, shape);
    std::swap(orders[0][0], orders[0][2]);  // B0 first on device 0 (order F0 F1 B0 B1)
    REQUIRE(orders[0][0].pass == Pass::Backward);
    CHECK_FALSE(critical_path(*g, shape, orders, unit_costs({1, 2, 1, 1})).has_value());
}
