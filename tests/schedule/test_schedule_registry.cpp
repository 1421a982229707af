// A schedule added by a test, the way a new schedule is added to clustersim: a Schedule class
// plus one registry row. The toy runs every forward, then every backward in reverse microbatch
// order ("last in, first out"), and goes through the same contract as the bundled schedules.
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "contract.hpp"
#include "core/errors.hpp"
#include "schedule/schedule.hpp"
#include "toy_schedule.hpp"

using namespace cs::schedule;
using namespace cs::schedule::test;

namespace {

// The one registration line, on a copy of the bundled registry.
ScheduleRegistry with_toy() {
    ScheduleRegistry registry = ScheduleRegistry::builtin();
    registry.add({"gpipe-lifo", [] { return std::make_unique<GpipeLifo>(); },
                  "every forward, then every backward in reverse microbatch order"});
    return registry;
}

}  // namespace

TEST_CASE("a registered schedule is found by name, listed, and the bundled table is unchanged") {
    const ScheduleRegistry registry = with_toy();
    auto toy = make_schedule("gpipe-lifo", registry);
    REQUIRE(toy != nullptr);
    CHECK(toy->name() == "gpipe-lifo");
    const auto names = schedule_names(registry);
    const auto bundled = schedule_names();
    // Appended after the seven bundled schedules, which keep their order.
    REQUIRE(names.size() == bundled.size() + 1);
    CHECK(names.back() == "gpipe-lifo");
    CHECK(std::equal(bundled.begin(), bundled.end(), names.begin()));
    // The copy does not leak into the bundled registry.
    CHECK(make_schedule("gpipe-lifo") == nullptr);
    CHECK(ScheduleRegistry::builtin().find("gpipe-lifo") == nullptr);
}

TEST_CASE("the unknown-schedule message lists the names of the registry it was given") {
    const ScheduleRegistry registry = with_toy();
    try {
        require_schedule("1f2b", cs::SourceLocation{"exp.yaml", 3, 11}, registry);
        FAIL("no error for an unknown schedule");
    } catch (const cs::ConfigError& e) {
        const std::string message = e.what();
        CHECK(message.find("exp.yaml:3:11") != std::string::npos);
        CHECK(message.find("unknown schedule \"1f2b\"; expected gpipe, 1f1b") != std::string::npos);
        CHECK(message.find("dualpipev or gpipe-lifo") != std::string::npos);
    }
    CHECK_THROWS_AS(require_schedule("gpipe-lifo", cs::SourceLocation{"x"}), cs::ConfigError);
}

TEST_CASE("registering a taken or empty name, or no factory, is refused") {
    ScheduleRegistry registry = with_toy();
    CHECK_THROWS_AS(registry.add({"gpipe-lifo", [] { return std::make_unique<GpipeLifo>(); }, ""}),
                    std::invalid_argument);
    CHECK_THROWS_AS(registry.add({"1f1b", [] { return std::make_unique<GpipeLifo>(); }, ""}),
                    std::invalid_argument);
    CHECK_THROWS_AS(registry.add({"", [] { return std::make_unique<GpipeLifo>(); }, ""}),
                    std::invalid_argument);
    CHECK_THROWS_AS(registry.add({"toy", nullptr, ""}), std::invalid_argument);
}

TEST_CASE("the toy schedule passes the schedule contract") {
    auto toy = make_schedule("gpipe-lifo", with_toy());
    REQUIRE(toy);
    check_contract(*toy);
    check_rejections(*toy);
}

TEST_CASE("gpipe-lifo: makespan (m+p-1)(F+B) like gpipe, and all m activations held") {
    // F=1, B=2. Forwards fill the pipe: device d ends F_i at d+i+1, the last device its last at
    // p-1+m. B_{m-1} then walks back down one stage per B (2 each), so device 0 starts its first
    // backward at (p-1+m) + 2(p-1) and runs its m backwards back to back (B_{i-1} on device d+1
    // ends exactly when device d finishes B_i): makespan p-1+m+2(p-1)+2m = 3(m+p-1).
    // Every device holds all m forwards before its first backward: peak m.
    auto toy = make_schedule("gpipe-lifo", with_toy());
    REQUIRE(toy);
    for (int p = 1; p <= 8; ++p) {
        for (int m = 1; m <= 32; ++m) {
            const PipelineShape shape{p, m, 1};
            INFO(describe("gpipe-lifo", shape));
            const Run run = simulate(*toy, shape, Costs{1, 2, 1, 1});
            REQUIRE(run.completed);
            CHECK(run.makespan == (m + p - 1) * 3L);
            for (int d = 0; d < p; ++d)
                CHECK(peak_inflight_microbatches(*toy, shape, d) == m);
        }
    }
}
