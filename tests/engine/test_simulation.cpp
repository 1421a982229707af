#include <doctest/doctest.h>

#include <vector>

#include "core/errors.hpp"
#include "engine/simulation.hpp"

using namespace cs;

namespace {
struct Recorder : EventHandler {
    std::vector<std::pair<std::int64_t, std::uint64_t>> seen;  // (time ps, payload a)
    void on_event(Simulation& sim, const Event& e) override {
        seen.emplace_back(sim.now().count_ps(), e.a);
        if (e.kind == 1 && e.b > 0) sim.schedule_in(Time::ps(10), 0, 1, e.a + 100, e.b - 1);
    }
};
}  // namespace

TEST_CASE("events run in (time, insertion) order") {
    Simulation sim;
    Recorder r;
    const auto h = sim.add_handler(r);
    sim.schedule_at(Time::ps(5), h, 0, 1);
    sim.schedule_at(Time::ps(3), h, 0, 2);
    sim.schedule_at(Time::ps(5), h, 0, 3);  // same time as payload 1, inserted later
    sim.schedule_at(Time::ps(0), h, 0, 4);
    sim.run();
    const std::vector<std::pair<std::int64_t, std::uint64_t>> expect{
        {0, 4}, {3, 2}, {5, 1}, {5, 3}};
    CHECK(r.seen == expect);
    CHECK(sim.events_processed() == 4);
    CHECK(sim.now() == Time::ps(5));
}

TEST_CASE("handlers schedule follow-ups; two simulations are independent") {
    Simulation a, b;
    Recorder ra, rb;
    a.add_handler(ra);
    b.add_handler(rb);
    a.schedule_at(Time::ps(1), 0, 1, 0, 3);  // chain of 4 events: t = 1, 11, 21, 31
    b.schedule_at(Time::ps(2), 0, 1, 0, 0);
    a.run();
    b.run();
    CHECK(ra.seen.size() == 4);
    CHECK(ra.seen.back().first == 31);
    CHECK(rb.seen.size() == 1);
}

TEST_CASE("scheduling in the past throws") {
    Simulation sim;
    Recorder r;
    sim.add_handler(r);
    sim.schedule_at(Time::ps(10), 0, 0);
    sim.run();
    CHECK_THROWS_AS(sim.schedule_at(Time::ps(9), 0, 0), SimulationError);
}

TEST_CASE("a large random workload pops in sorted order, also with shuffled ties") {
    for (int shuffle = 0; shuffle < 2; ++shuffle) {
        Simulation sim;
        Recorder r;
        sim.add_handler(r);
        if (shuffle) sim.set_tie_shuffle(42);
        std::uint64_t x = 12345;
        for (int i = 0; i < 20000; ++i) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            sim.schedule_at(Time::ps(static_cast<std::int64_t>(x >> 54)), 0, 0,
                            static_cast<std::uint64_t>(i));
        }
        sim.run();
        REQUIRE(r.seen.size() == 20000);
        bool sorted = true;
        for (std::size_t i = 1; i < r.seen.size(); ++i) {
            if (r.seen[i].first < r.seen[i - 1].first) sorted = false;
            // Without shuffling, same-time events keep insertion order.
            if (!shuffle && r.seen[i].first == r.seen[i - 1].first &&
                r.seen[i].second < r.seen[i - 1].second)
                sorted = false;
        }
        CHECK(sorted);
    }
}

namespace {
// Each event schedules 0 to 3 successors (a quarter of them at the same time, to make ties), so
// the queue grows, shrinks and empties; records the (time, order) key of every processed event.
struct Branching : EventHandler {
    std::uint64_t x = 99;
    std::uint64_t budget = 0;
    std::size_t scheduled = 0;
    std::vector<std::pair<std::int64_t, std::uint64_t>> keys;
    std::vector<std::size_t> pending_seen;
    void on_event(Simulation& sim, const Event& e) override {
        keys.emplace_back(e.at.count_ps(), e.order);
        pending_seen.push_back(sim.pending());
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        const auto fanout = static_cast<int>(x >> 62);
        for (int k = 0; k < fanout && budget > 0; ++k, --budget) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            const auto delay = static_cast<std::int64_t>((x >> 33) % 4 == 0 ? 0 : (x >> 40) % 50);
            sim.schedule_in(Time::ps(delay), e.handler, 0);
            ++scheduled;
        }
    }
};
}  // namespace

TEST_CASE("a branching workload pops every event once, each the smallest (time, order) pending") {
    for (int shuffle = 0; shuffle < 2; ++shuffle) {
        Simulation sim;
        Branching br;
        const auto h = sim.add_handler(br);
        if (shuffle) sim.set_tie_shuffle(7);
        br.budget = 50'000;
        for (int i = 0; i < 64; ++i, ++br.scheduled)
            sim.schedule_at(Time::ps(i % 5), h, 0);
        sim.run();
        CHECK(sim.pending() == 0);
        REQUIRE(br.keys.size() == br.scheduled);
        CHECK(sim.events_processed() == br.scheduled);
        // Without shuffling every later event has a larger key than the one before it (same time
        // means a later insertion), so a strictly increasing sequence proves each pop was the
        // minimum. With shuffling, same-time successors may carry smaller orders: time only.
        bool ordered = true;
        for (std::size_t i = 1; i < br.keys.size(); ++i) {
            if (br.keys[i].first < br.keys[i - 1].first) ordered = false;
            if (!shuffle && br.keys[i] <= br.keys[i - 1]) ordered = false;
        }
        CHECK(ordered);
    }
}

TEST_CASE("pending() excludes the event being processed; run_until stops at the limit") {
    Simulation sim;
    Recorder r;
    sim.add_handler(r);
    struct Probe : EventHandler {
        std::size_t pending_inside = 99;
        void on_event(Simulation& sim, const Event&) override { pending_inside = sim.pending(); }
    } probe;
    const auto p = sim.add_handler(probe);
    sim.schedule_at(Time::ps(1), p, 0);
    sim.schedule_at(Time::ps(2), 0, 0, 7);
    sim.schedule_at(Time::ps(3), 0, 0, 8);
    sim.run_until(Time::ps(2));
    CHECK(probe.pending_inside == 2);  // the events at 2 and 3 ps
    CHECK(sim.now() == Time::ps(2));
    CHECK(sim.pending() == 1);
    CHECK(r.seen == std::vector<std::pair<std::int64_t, std::uint64_t>>{{2, 7}});
    sim.run();
    CHECK(sim.pending() == 0);
    CHECK(r.seen.size() == 2);
}

namespace cs {
// Reaches the insertion counter, to start a test near the end of the 32-bit orders.
struct SimulationTestAccess {
    static std::uint64_t next_seq(const Simulation& sim) { return sim.next_seq_; }
    static void set_next_seq(Simulation& sim, std::uint64_t seq) { sim.next_seq_ = seq; }
};
}  // namespace cs

namespace {
// Each event schedules 0 to 3 successors (a quarter of them at the same time) and numbers every
// insertion in `a`; kind and b are functions of a, to show that payloads travel with their keys.
struct Numbered : EventHandler {
    std::uint64_t x = 5;
    std::uint64_t budget = 0;
    std::uint64_t next_id = 0;
    std::vector<std::pair<std::int64_t, std::uint64_t>> seen;  // (time ps, insertion index)
    bool payloads_intact = true;
    void add(Simulation& sim, Time at, HandlerId h) {
        sim.schedule_at(at, h, static_cast<std::uint32_t>(next_id % 7), next_id, next_id * 3 + 1);
        ++next_id;
    }
    void on_event(Simulation& sim, const Event& e) override {
        seen.emplace_back(e.at.count_ps(), e.a);
        if (e.kind != e.a % 7 || e.b != e.a * 3 + 1) payloads_intact = false;
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        const auto fanout = static_cast<int>(x >> 62);
        for (int k = 0; k < fanout && budget > 0; ++k, --budget) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            const auto delay = static_cast<std::int64_t>((x >> 33) % 4 == 0 ? 0 : (x >> 40) % 50);
            add(sim, sim.now() + Time::ps(delay), e.handler);
        }
    }
};
}  // namespace

TEST_CASE("events keep (time, insertion) order when the 32-bit orders run out") {
    // Orders are 32 bits wide; after 2^32 insertions the engine relabels the pending events by
    // rank. Starting the counter 2,000 insertions short of 2^32 crosses that point mid-run. The
    // insertion index in `a` is the true sequence, so without shuffling every processed event
    // must have a larger (time, a) than the one before it.
    for (int shuffle = 0; shuffle < 2; ++shuffle) {
        Simulation sim;
        Numbered n;
        const auto h = sim.add_handler(n);
        if (shuffle) sim.set_tie_shuffle(3);
        SimulationTestAccess::set_next_seq(sim, (std::uint64_t{1} << 32) - 2'000);
        n.budget = 20'000;
        for (int i = 0; i < 64; ++i)
            n.add(sim, Time::ps(i % 5), h);
        sim.run();
        CHECK(SimulationTestAccess::next_seq(sim) < (std::uint64_t{1} << 32));  // relabelled
        REQUIRE(n.seen.size() == n.next_id);
        CHECK(n.payloads_intact);
        bool ordered = true;
        for (std::size_t i = 1; i < n.seen.size(); ++i) {
            if (n.seen[i].first < n.seen[i - 1].first) ordered = false;
            if (!shuffle && n.seen[i] <= n.seen[i - 1]) ordered = false;
        }
        CHECK(ordered);
    }
}
