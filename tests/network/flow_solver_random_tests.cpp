// The incremental max-min solver against a from-scratch solve, on random links and flows.
//
// Reference: textbook progressive filling (Bertsekas & Gallager 6.5.2), written independently of
// FlowSolver and quadratic on purpose: raise every unfrozen flow's rate together; the link whose
// fair share (remaining capacity / unfrozen flows) is smallest saturates first and freezes its
// flows at that share; repeat. The max-min allocation is unique, so after every recompute() each
// active flow's rate must match the reference to rounding (1e-9 relative).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "network/flow_solver.hpp"
#include "network/network.hpp"

using namespace cs;
using network::FlowSolver;
using topology::LinkId;

namespace {
const std::vector<network::NetworkObserver*> kNoObservers;

struct Rng {
    std::uint64_t s;
    std::uint64_t next() {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        return s >> 33;
    }
    std::uint64_t below(std::uint64_t n) { return next() % n; }
};

std::vector<double> reference_rates(const std::vector<double>& capacity,
                                    const std::vector<std::vector<LinkId>>& paths) {
    std::vector<double> rate(paths.size(), 0);
    std::vector<bool> frozen(paths.size(), false);
    std::vector<double> remaining = capacity;
    for (;;) {
        std::vector<int> unfrozen(capacity.size(), 0);
        for (std::size_t f = 0; f < paths.size(); ++f)
            if (!frozen[f])
                for (LinkId l : paths[f])
                    ++unfrozen[l];
        double best = INFINITY;
        for (std::size_t l = 0; l < capacity.size(); ++l)
            if (unfrozen[l] > 0) best = std::min(best, std::max(0.0, remaining[l]) / unfrozen[l]);
        if (best == INFINITY) return rate;
        std::vector<bool> saturated(capacity.size(), false);
        for (std::size_t l = 0; l < capacity.size(); ++l)
            saturated[l] =
                unfrozen[l] > 0 && std::max(0.0, remaining[l]) / unfrozen[l] <= best * (1 + 1e-13);
        for (std::size_t f = 0; f < paths.size(); ++f) {
            if (frozen[f]) continue;
            const bool hit = std::any_of(paths[f].begin(), paths[f].end(),
                                         [&](LinkId l) { return saturated[l]; });
            if (!hit) continue;
            frozen[f] = true;
            rate[f] = best;
            for (LinkId l : paths[f])
                remaining[l] -= best;
        }
    }
}

struct Scenario {
    int links;
    int max_hops;
    int initial_flows;
    int steps;
    bool few_capacities;  // capacities from a short list: many exact ties between fair shares
    bool capacity_changes = false;  // steps may also change a link's capacity (links in use too)
    bool repeats = false;  // paths may give a link more than once (the flow counts that often)
};

// Runs one random add/remove sequence on both strategies and checks them against the reference
// after every recompute. Returns the largest relative difference seen.
double run(const Scenario& sc, std::uint64_t seed) {
    Rng rng{seed};
    std::vector<double> capacity(static_cast<std::size_t>(sc.links));
    const double choices[] = {25e9, 50e9, 100e9, 400e9};
    for (double& c : capacity)
        c = sc.few_capacities ? choices[rng.below(4)]
                              : 1e9 * (1 + static_cast<double>(rng.below(1000)));
    FlowSolver incremental(capacity);
    FlowSolver component(capacity, FlowSolver::Strategy::Component);
    // The incremental solver also keeps link tallies, checked at the end against sums made here
    // from the flow counts per step (Tallies below).
    incremental.keep_tallies();

    struct Live {
        FlowSolver::FlowId inc, comp;
        std::vector<LinkId> path;
    };
    std::vector<Live> live;
    // The expected tallies, from scratch: per link its flows now (a flow once per time its path
    // gives the link), the most at once after any single add or remove, the bytes added, and
    // the time with one / two or more flows summed over the steps (the counts only change at
    // a step's instant).
    struct Tallies {
        std::vector<std::uint32_t> flows, peak;
        std::vector<double> bytes;
        std::vector<std::int64_t> busy, shared;
    } want{std::vector<std::uint32_t>(capacity.size()), std::vector<std::uint32_t>(capacity.size()),
           std::vector<double>(capacity.size()), std::vector<std::int64_t>(capacity.size()),
           std::vector<std::int64_t>(capacity.size())};
    auto count = [&](const std::vector<LinkId>& path, int delta, double bytes) {
        for (LinkId l : path) {
            want.flows[l] = static_cast<std::uint32_t>(static_cast<int>(want.flows[l]) + delta);
            want.peak[l] = std::max(want.peak[l], want.flows[l]);
            want.bytes[l] += bytes;
        }
    };
    auto elapse = [&](Time from, Time to) {
        for (std::size_t l = 0; l < capacity.size(); ++l) {
            if (want.flows[l] >= 1) want.busy[l] += (to - from).count_ps();
            if (want.flows[l] >= 2) want.shared[l] += (to - from).count_ps();
        }
    };
    Time now = Time::zero();
    auto add = [&](Time at) {
        std::vector<LinkId> path;
        const auto hops = 1 + rng.below(static_cast<std::uint64_t>(sc.max_hops));
        while (path.size() < hops) {
            const auto l = static_cast<LinkId>(rng.below(capacity.size()));
            if (std::find(path.begin(), path.end(), l) == path.end()) path.push_back(l);
            if (path.size() == capacity.size()) break;
        }
        // A link again, 1 to 3 more times, in one place or apart.
        if (sc.repeats && rng.below(2) == 0) {
            const LinkId l = path[rng.below(path.size())];
            for (auto times = 1 + rng.below(3); times > 0; --times)
                path.insert(path.begin() + static_cast<std::ptrdiff_t>(rng.below(path.size() + 1)),
                            l);
        }
        const double bytes = 1e6 * static_cast<double>(1 + rng.below(1000));
        live.push_back(
            {incremental.add(path, bytes, 0, at, bytes), component.add(path, bytes, 0, at), path});
        count(path, 1, bytes);
    };
    auto remove_at = [&](std::size_t i) {
        incremental.remove(live[i].inc, now);
        component.remove(live[i].comp, now);
        count(live[i].path, -1, 0);
        live[i] = live.back();
        live.pop_back();
    };

    double worst = 0;
    std::vector<FlowSolver::Tally> first;  // the tallies taken halfway
    for (int i = 0; i < sc.initial_flows; ++i)
        add(now);
    for (int step = 0; step <= sc.steps; ++step) {
        incremental.recompute(now, kNoObservers);
        component.recompute(now, kNoObservers);
        std::vector<std::vector<LinkId>> paths;
        for (const Live& f : live)
            paths.push_back(f.path);
        const auto expected = reference_rates(capacity, paths);
        for (std::size_t i = 0; i < live.size(); ++i) {
            const double inc = incremental.rate(live[i].inc);
            const double comp = component.rate(live[i].comp);
            const double diff =
                std::max(std::abs(inc - expected[i]), std::abs(comp - expected[i])) / expected[i];
            worst = std::max(worst, diff);
        }
        std::vector<double> link_total(capacity.size(), 0);
        for (std::size_t i = 0; i < live.size(); ++i)
            for (LinkId l : live[i].path)
                link_total[l] += expected[i];
        for (std::size_t l = 0; l < capacity.size(); ++l)
            worst = std::max(
                worst, std::abs(incremental.link_rate(static_cast<LinkId>(l)) - link_total[l]) /
                           capacity[l]);

        // Halfway, the tallies so far are taken and start again: the two add up to the whole
        // (a span that runs across the take is counted in the second, at its end).
        if (step == sc.steps / 2) {
            for (std::size_t l = 0; l < capacity.size(); ++l)
                first.push_back(incremental.tally(static_cast<LinkId>(l)));
            incremental.take_tallies();
        }
        // Next step: some flows end, some start; sometimes several changes at once.
        const Time before = now;
        now = now + Time::ns(1 + static_cast<std::int64_t>(rng.below(1000)));
        elapse(before, now);
        const auto changes = 1 + rng.below(3);
        for (std::uint64_t c = 0; c < changes; ++c) {
            const bool removing =
                !live.empty() && (rng.below(2) == 0 || live.size() > 2u * sc.initial_flows);
            if (sc.capacity_changes && rng.below(3) == 0) {
                const auto l = static_cast<LinkId>(rng.below(capacity.size()));
                const double cap = sc.few_capacities
                                       ? choices[rng.below(4)]
                                       : 1e9 * (1 + static_cast<double>(rng.below(1000)));
                capacity[l] = cap;
                incremental.set_capacity(l, cap);
                component.set_capacity(l, cap);
            } else if (removing) {
                remove_at(rng.below(live.size()));
            } else {
                add(now);
            }
        }
    }
    CHECK(incremental.active_flows() == live.size());
    // Every flow ends 1 us after the last step: each link's tally then runs to its last change.
    const Time last = now;
    now = now + Time::us(1);
    elapse(last, now);
    while (!live.empty())
        remove_at(live.size() - 1);
    REQUIRE(first.size() == capacity.size());
    for (std::size_t l = 0; l < capacity.size(); ++l) {
        const auto t = incremental.tally(static_cast<LinkId>(l));
        CHECK(t.flows == 0);
        CHECK(std::max(first[l].peak, t.peak) == want.peak[l]);
        CHECK(first[l].bytes + t.bytes == want.bytes[l]);
        CHECK((first[l].busy + t.busy).count_ps() == want.busy[l]);
        CHECK((first[l].shared + t.shared).count_ps() == want.shared[l]);
    }
    return worst;
}
}  // namespace

TEST_CASE("incremental max-min matches a from-scratch solve on random flow sets") {
    // Small sets with many ties, medium sets with continuous capacities, and long paths that
    // chain many links: every scenario runs over many seeds.
    const Scenario scenarios[] = {
        {3, 2, 4, 40, true},   {6, 3, 10, 60, true},   {8, 4, 20, 60, false},
        {12, 3, 30, 80, true}, {20, 6, 40, 80, false}, {40, 4, 120, 60, true},
    };
    double worst = 0;
    for (const Scenario& sc : scenarios)
        for (std::uint64_t seed = 1; seed <= 60; ++seed)
            worst = std::max(worst, run(sc, seed * 7919 + static_cast<std::uint64_t>(sc.links)));
    CHECK(worst <= 1e-9);
    MESSAGE("largest relative difference from the reference: " << worst);
}

TEST_CASE("capacity changes on links in use: incremental max-min still matches the reference") {
    // The same random sequences with a third of the changes setting a random link (often one
    // that flows cross) to a new capacity, higher or lower: after every recompute the rates must
    // be the max-min allocation for the new capacities.
    Scenario scenarios[] = {
        {3, 2, 4, 40, true},   {6, 3, 10, 60, true},   {8, 4, 20, 60, false},
        {12, 3, 30, 80, true}, {20, 6, 40, 80, false}, {40, 4, 120, 60, true},
    };
    double worst = 0;
    for (Scenario& sc : scenarios) {
        sc.capacity_changes = true;
        for (std::uint64_t seed = 1; seed <= 60; ++seed)
            worst = std::max(worst, run(sc, seed * 104729 + static_cast<std::uint64_t>(sc.links)));
    }
    CHECK(worst <= 1e-9);
    MESSAGE("largest relative difference from the reference: " << worst);
}

TEST_CASE("a link given more than once in a path counts the flow that many times") {
    // Member folding gives a link every member shares once per member (Network::fold): the
    // flow stands for that many flows there. The reference counts each path entry, so a flow
    // with link l twice is two flows on l at one rate. Half the flows repeat a link 1-3 times;
    // removals then move hops of the same flow between slots of one link's list.
    Scenario scenarios[] = {
        {3, 2, 4, 40, true},   {6, 3, 10, 60, true},   {8, 4, 20, 60, false},
        {12, 3, 30, 80, true}, {20, 6, 40, 80, false}, {40, 4, 120, 60, true},
    };
    double worst = 0;
    for (Scenario& sc : scenarios) {
        sc.repeats = true;
        sc.capacity_changes = sc.links % 2 == 0;
        for (std::uint64_t seed = 1; seed <= 60; ++seed)
            worst =
                std::max(worst, run(sc, seed * 15485863 + static_cast<std::uint64_t>(sc.links)));
    }
    CHECK(worst <= 1e-9);
    MESSAGE("largest relative difference from the reference: " << worst);
    // By hand: link 0 of 90 GB/s; flow a over (0, 0), flow b over (0): three shares of 30.
    FlowSolver solver({90e9});
    const auto a = solver.add({0, 0}, 1e9, 0, Time::zero());
    const auto b = solver.add({0}, 1e9, 0, Time::zero());
    solver.recompute(Time::zero(), kNoObservers);
    CHECK(solver.rate(a) == doctest::Approx(30e9));
    CHECK(solver.rate(b) == doctest::Approx(30e9));
    CHECK(solver.link_rate(0) == doctest::Approx(90e9));
    // a leaves: b alone gets 90; a back with b gone would get 45 (two shares).
    solver.remove(a, Time::ns(1));
    solver.recompute(Time::ns(1), kNoObservers);
    CHECK(solver.rate(b) == doctest::Approx(90e9));
    const auto c = solver.add({0, 0}, 1e9, 0, Time::ns(2));
    solver.remove(b, Time::ns(2));
    solver.recompute(Time::ns(2), kNoObservers);
    CHECK(solver.rate(c) == doctest::Approx(45e9));
    CHECK(solver.flows_on(0).size() == 2);
}

TEST_CASE("incremental solve re-rates a change on a shared link only as far as it spreads") {
    // Links 0..3 of 100 GB/s; flows a, b on link 0, c on link 1, d on links 2 and 3.
    // a and b get 50 each, c and d 100. A third flow on link 0 gives a, b and e 33.3 each and
    // cannot affect c or d (no shared link): the incremental solve re-rates e, then a and b
    // (they lose their bottleneck to e), never c or d.
    FlowSolver s({100e9, 100e9, 100e9, 100e9});
    const auto a = s.add({0}, 1e9, 0, Time::zero());
    const auto b = s.add({0}, 1e9, 1, Time::zero());
    const auto c = s.add({1}, 1e9, 2, Time::zero());
    const auto d = s.add({2, 3}, 1e9, 3, Time::zero());
    s.recompute(Time::zero(), kNoObservers);
    CHECK(s.rate(a) == doctest::Approx(50e9));
    CHECK(s.rate(d) == doctest::Approx(100e9));
    const auto checked = s.checked_flows();
    const auto e = s.add({0}, 1e9, 4, Time::ms(1));
    s.recompute(Time::ms(1), kNoObservers);
    CHECK(s.rate(a) == doctest::Approx(100e9 / 3));
    CHECK(s.rate(b) == doctest::Approx(100e9 / 3));
    CHECK(s.rate(e) == doctest::Approx(100e9 / 3));
    CHECK(s.rate(c) == doctest::Approx(100e9));
    // Only the three flows on link 0 were checked, once per round (two rounds).
    CHECK(s.checked_flows() - checked <= 6);
}
