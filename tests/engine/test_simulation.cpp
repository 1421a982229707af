#include <doctest/doctest.h>

#include <algorithm>
#include <limits>
#include <set>
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
    // Keys' room held by the year's buckets and the run, whether or not they hold keys.
    static std::size_t bucket_room(const Simulation& sim) {
        std::size_t room = sim.run_.capacity;
        for (const auto& bucket : sim.buckets_)
            room += bucket.capacity;
        return room;
    }
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

namespace {
// Checks every processed event against a reference queue (an ordered set of (time, insertion
// index)): without shuffling, the engine must pop exactly the reference's smallest entry. Each
// event schedules successors whose delays follow `spread`, so the calendar's years, buckets and
// far list see evenly spread times, heavy ties, twelve orders of magnitude, two far-apart modes,
// and a queue that grows to 40,000 keys (ten per bucket at the calendar's 4,096) and drains again.
enum class Spread { Even, Ties, Decades, TwoModes, Swell };

struct Referenced : EventHandler {
    Spread spread = Spread::Even;
    std::uint64_t x = 17;
    std::uint64_t budget = 0;
    std::uint64_t next_id = 0;
    std::set<std::pair<std::int64_t, std::uint64_t>> reference;
    std::uint64_t processed = 0;
    std::uint64_t mismatches = 0;
    std::uint64_t pending_mismatches = 0;
    std::size_t most_pending = 0;
    std::uint64_t stop_every = 0;  // calls stop() after every this many events (0: never)

    std::uint64_t next() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        return x;
    }
    std::int64_t delay() {
        const std::uint64_t r = next();
        switch (spread) {
            case Spread::Even:
                return static_cast<std::int64_t>(r % 1'000'000);
            case Spread::Ties:
                return r % 2 == 0 ? 0 : static_cast<std::int64_t>((r >> 1) % 8);
            case Spread::Decades:  // 2^0 .. 2^40 ps, about 1 ps to 1 s
                return static_cast<std::int64_t>((std::uint64_t{1} << ((r >> 8) % 41)) + (r & 255));
            case Spread::TwoModes:  // nine in ten within a microsecond, one in ten a second later
                return r % 10 == 0 ? 1'000'000'000'000
                                   : static_cast<std::int64_t>((r >> 4) % 1'000'000);
            case Spread::Swell:
                return static_cast<std::int64_t>(r % 100'000);
        }
        return 0;
    }
    void add(Simulation& sim, Time at, HandlerId h) {
        sim.schedule_at(at, h, 0, next_id);
        reference.emplace(at.count_ps(), next_id);
        ++next_id;
    }
    void on_event(Simulation& sim, const Event& e) override {
        ++processed;
        if (reference.empty() || *reference.begin() != std::pair{e.at.count_ps(), e.a})
            ++mismatches;
        reference.erase({e.at.count_ps(), e.a});
        if (sim.pending() != reference.size()) ++pending_mismatches;
        most_pending = std::max(most_pending, reference.size());
        if (stop_every > 0 && processed % stop_every == 0) sim.stop();
        int fanout = static_cast<int>(next() % 4);  // 0 to 3 successors, 1.5 on average
        // Swell: two successors each (the queue doubles per generation) until 40,000 are
        // pending, then none, so the queue drains from past the calendar's limit.
        if (spread == Spread::Swell) fanout = most_pending < 40'000 ? 2 : 0;
        for (int k = 0; k < fanout && budget > 0; ++k, --budget)
            add(sim, sim.now() + Time::ps(delay()), e.handler);
    }
};
}  // namespace

TEST_CASE("the calendar queue pops what a reference queue pops, however times are spread") {
    for (const Spread spread :
         {Spread::Even, Spread::Ties, Spread::Decades, Spread::TwoModes, Spread::Swell}) {
        CAPTURE(static_cast<int>(spread));
        Simulation sim;
        Referenced ref;
        ref.spread = spread;
        const auto h = sim.add_handler(ref);
        ref.budget = 150'000;
        for (int i = 0; i < 1'000; ++i)
            ref.add(sim, Time::ps(ref.delay()), h);
        sim.run();
        CHECK(ref.processed == ref.next_id);  // every event, once
        CHECK(ref.mismatches == 0);
        CHECK(ref.pending_mismatches == 0);
        CHECK(ref.reference.empty());
        if (spread == Spread::Swell) CHECK(ref.most_pending >= 40'000);
    }
}

TEST_CASE("run_until in slices, with an event scheduled between slices before what it looked at") {
    // run_until(limit) loads the next bucket to see whether its first event is past the limit;
    // an event then scheduled at now() + 1 ps falls before that bucket and must still come first.
    Simulation sim;
    Referenced ref;
    const auto h = sim.add_handler(ref);
    ref.budget = 100'000;
    for (int i = 0; i < 1'000; ++i)
        ref.add(sim, Time::ps(ref.delay()), h);
    std::int64_t limit = 0;
    int slices = 0;
    while (sim.pending() > 0) {
        limit += 7'777;
        sim.run_until(Time::ps(limit));
        if (ref.budget > 0) {
            ref.add(sim, sim.now() + Time::ps(1), h);
            --ref.budget;
        }
        ++slices;
    }
    // The run lasts about 4.9 M ps (630 slices when written): many slices, each ending in a look.
    CHECK(slices > 100);
    CHECK(ref.processed == ref.next_id);
    CHECK(ref.mismatches == 0);
    CHECK(ref.pending_mismatches == 0);
}

TEST_CASE(
    "times from 0 to the largest pop in order; run_until looks ahead and a later schedule "
    "may fall before what it saw") {
    Simulation sim;
    Recorder r;
    sim.add_handler(r);
    const std::int64_t big = std::numeric_limits<std::int64_t>::max();
    // Times spanning the whole range: the year laid out over them is capped at 2^63 ps.
    sim.schedule_at(Time::ps(big), 0, 0, 1);
    sim.schedule_at(Time::ps(std::int64_t{1} << 62), 0, 0, 2);
    sim.schedule_at(Time::ps(std::int64_t{1} << 40), 0, 0, 3);
    sim.schedule_at(Time::ps(0), 0, 0, 4);
    sim.schedule_at(Time::ps(1), 0, 0, 5);
    sim.schedule_at(Time::ps(big - 1), 0, 0, 6);
    // run_until takes the first bucket (0, 1 and 2^40) as the run and sees 2^40 past the limit ...
    sim.run_until(Time::ps(1'000));
    CHECK(sim.pending() == 4);
    // ... and a new event before it, but after now, still comes first.
    sim.schedule_at(Time::ps(5'000), 0, 0, 7);
    sim.schedule_at(Time::ps(std::int64_t{1} << 40), 0, 0, 8);  // a tie, inserted later
    sim.run();
    const std::vector<std::pair<std::int64_t, std::uint64_t>> expect{{0, 4},
                                                                     {1, 5},
                                                                     {5'000, 7},
                                                                     {std::int64_t{1} << 40, 3},
                                                                     {std::int64_t{1} << 40, 8},
                                                                     {std::int64_t{1} << 62, 2},
                                                                     {big - 1, 6},
                                                                     {big, 1}};
    CHECK(r.seen == expect);
}

TEST_CASE("a burst's array is not kept by every bucket it passes through") {
    // 16 triggers a second apart make a year of 64 buckets (four per key) of 2^40 ps (about 1.1 s:
    // the mean distance is 7.5e12 ps and 8 * 7.5e12 / 64 needs 40 bits). Each trigger schedules
    // 4,000 events at one time 1.5 s later, in a later bucket, which grows to room for 4,096 keys
    // and becomes the run. A used run larger than 64 keys is freed, so at the end the buckets hold
    // at most 64 keys' room each, and the last run its 4,096: 64 * 64 + 4,096 = 8,192. Were each
    // run's array handed to the bucket it came from, the 16 bursts' arrays would stay: 65,536.
    struct Burst : EventHandler {
        std::uint64_t processed = 0;
        void on_event(Simulation& sim, const Event& e) override {
            ++processed;
            if (e.kind != 1) return;
            for (int i = 0; i < 4'000; ++i)
                sim.schedule_in(Time::ps(1'500'000'000'000), e.handler, 0);
        }
    } burst;
    Simulation sim;
    const auto h = sim.add_handler(burst);
    for (std::int64_t i = 0; i < 16; ++i)
        sim.schedule_at(Time::ps(i * 1'000'000'000'000), h, 1);
    sim.run();
    CHECK(burst.processed == 16 * 4'001);
    CHECK(SimulationTestAccess::bucket_room(sim) <= 8'192);
}

TEST_CASE("stop() mid-run, then a schedule from outside and run() again") {
    // The handler stops the run every 1,000 events, while its own successors are pending; the
    // driver then adds an event 3 ps after now() (before most of them) and runs again.
    Simulation sim;
    Referenced ref;
    ref.stop_every = 1'000;
    const auto h = sim.add_handler(ref);
    ref.budget = 60'000;
    for (int i = 0; i < 1'000; ++i)
        ref.add(sim, Time::ps(ref.delay()), h);
    int runs = 0;
    while (sim.pending() > 0) {
        sim.run();
        if (sim.pending() > 0) ref.add(sim, sim.now() + Time::ps(3), h);
        ++runs;
    }
    CHECK(runs > 50);  // about 60,000 events and more, stopped every 1,000
    CHECK(ref.processed == ref.next_id);
    CHECK(ref.mismatches == 0);
    CHECK(ref.pending_mismatches == 0);
}

namespace {
// Records each event with the hint the engine gave just before handing it out, and schedules
// successors at random (some at the same time, most within a few ps, a few far ahead), so that
// events come both from the calendar's run and from the near heap.
struct Hinted : EventHandler {
    std::uint64_t x = 7;
    std::uint64_t budget = 0;
    std::uint64_t next_a = 0;
    struct Seen {
        std::int64_t at;
        std::uint64_t order, a;
        bool scheduled;  // its handler scheduled a successor
        bool hinted;     // a hint came before its handler ran
        std::int64_t hint_at;
        std::uint64_t hint_order, hint_a;
    };
    std::vector<Seen> seen;
    mutable bool have_hint = false;
    mutable Event hint;
    bool wants_hints() const override { return true; }
    void prefetch(const Event& e) const override {
        have_hint = true;
        hint = e;
    }
    void on_event(Simulation& sim, const Event& e) override {
        seen.push_back({e.at.count_ps(), e.order, e.a, false, have_hint, hint.at.count_ps(),
                        hint.order, hint.a});
        have_hint = false;
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        const auto fanout = static_cast<int>(x >> 62);
        for (int k = 0; k < fanout && budget > 0; ++k, --budget) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            const std::uint64_t r = (x >> 33) % 8;
            const auto delay = static_cast<std::int64_t>(r == 0   ? 0
                                                         : r == 1 ? 1'000'000 + (x >> 40) % 999
                                                                  : (x >> 40) % 50);
            sim.schedule_in(Time::ps(delay), e.handler, 0, ++next_a);
            seen.back().scheduled = true;
        }
    }
};
}  // namespace

TEST_CASE("a hint before an event names the next one whenever its handler schedules nothing") {
    // hint_next() looks at the run's earliest key and the near heap's root (or, when the event
    // handed out is the root itself, the root's four children); it does not look into the
    // calendar's buckets, so when both are empty there is no hint. If there is one and the
    // handler then schedules nothing, the next event is the earliest of exactly those keys, so
    // the hint must be it (time, order and payload); if the handler schedules something earlier
    // the hint may be stale, which a hint is allowed to be.
    Simulation sim;
    Hinted hinted;
    const auto h = sim.add_handler(hinted);
    hinted.budget = 40'000;
    for (int i = 0; i < 200; ++i)
        sim.schedule_at(Time::ps(i % 7), h, 0, ++hinted.next_a);
    sim.run();
    const auto& seen = hinted.seen;
    REQUIRE(seen.size() == hinted.next_a);
    std::size_t checked = 0, wrong = 0, hints = 0;
    for (std::size_t i = 0; i + 1 < seen.size(); ++i) {
        if (!seen[i].hinted) continue;
        ++hints;
        if (seen[i].scheduled) continue;
        ++checked;
        const auto& n = seen[i + 1];
        if (seen[i].hint_at != n.at || seen[i].hint_order != n.order || seen[i].hint_a != n.a)
            ++wrong;
    }
    CHECK(checked > 5'000);
    CHECK(wrong == 0);
    CHECK(hints > seen.size() * 9 / 10);  // only a bucket's first event comes unhinted
    CHECK_FALSE(seen.back().hinted);      // nothing pending then: no hint
}

TEST_CASE("no hints for handlers that do not want them") {
    // A handler that overrides prefetch() but not wants_hints(): the simulation has no handler
    // wanting hints, so hint_next() never runs (the engine loop's cost for such simulations is
    // one branch); the same workload with wants_hints() gets a hint before nearly every event.
    struct Counting : Hinted {
        bool wants = false;
        bool wants_hints() const override { return wants; }
    };
    for (const bool wants : {false, true}) {
        Simulation sim;
        Counting c;
        c.wants = wants;
        const auto h = sim.add_handler(c);
        c.budget = 2'000;
        for (int i = 0; i < 20; ++i)
            sim.schedule_at(Time::ps(i), h, 0, ++c.next_a);
        sim.run();
        const auto hinted =
            std::count_if(c.seen.begin(), c.seen.end(), [](const auto& s) { return s.hinted; });
        if (wants)
            CHECK(hinted > static_cast<std::ptrdiff_t>(c.seen.size() / 2));
        else
            CHECK(hinted == 0);
    }
}
