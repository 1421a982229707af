// Max-min fair sharing in the flow solver, on bare links (no topology, no engine).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "core/errors.hpp"
#include "network/flow_solver.hpp"
#include "network/network.hpp"

using namespace cs;
using network::FlowSolver;

namespace {
const std::vector<network::NetworkObserver*> kNoObservers;

struct RateLog : network::NetworkObserver {
    std::vector<std::tuple<std::int64_t, topology::LinkId, double, int>> seen;
    void on_link_rate(Time at, topology::LinkId link, double bytes_per_s, int flows) override {
        seen.emplace_back(at.count_ps(), link, bytes_per_s, flows);
    }
};
}  // namespace

TEST_CASE("two flows on one link get half each") {
    FlowSolver s({100e9});
    const auto a = s.add({0}, 1e9, 0, Time::zero());
    const auto b = s.add({0}, 1e9, 1, Time::zero());
    s.recompute(Time::zero(), kNoObservers);
    // 100 GB/s shared by 2 flows -> 50 GB/s each; 1 GB at 50 GB/s = 20 ms.
    CHECK(s.rate(a) == doctest::Approx(50e9));
    CHECK(s.rate(b) == doctest::Approx(50e9));
    CHECK(s.finish_time(a) == Time::ms(20));
}

TEST_CASE("a flow bottlenecked elsewhere leaves its share to the others") {
    // Link 0: 100 GB/s carries flows f1, f2, f3; link 1: 30 GB/s carries f2 only.
    // Progressive filling: fair shares are 100/3 = 33.3 on link 0 and 30/1 on link 1, so link 1
    // saturates first and fixes f2 at 30. Link 0 has 70 left for f1 and f3: 35 each.
    FlowSolver s({100e9, 30e9});
    const auto f1 = s.add({0}, 1e9, 0, Time::zero());
    const auto f2 = s.add({0, 1}, 1e9, 1, Time::zero());
    const auto f3 = s.add({0}, 1e9, 2, Time::zero());
    s.recompute(Time::zero(), kNoObservers);
    CHECK(s.rate(f1) == doctest::Approx(35e9));
    CHECK(s.rate(f2) == doctest::Approx(30e9));
    CHECK(s.rate(f3) == doctest::Approx(35e9));
}

TEST_CASE("links added later: a private link caps one flow, and is reused with a new capacity") {
    // Link 0: 100 GB/s shared by f1 and f2; f2 also crosses an added private link of 30 GB/s, so
    // f2 gets 30 and f1 the remaining 70. With f2 gone and the private link set to 50 GB/s, a new
    // flow over it gets 50 and f1 50 (its fair share, no longer 70).
    FlowSolver s({100e9});
    const auto cap = s.add_link(30e9);
    CHECK(cap == 1);
    const auto f1 = s.add({0}, 1e9, 0, Time::zero());
    const auto f2 = s.add({0, cap}, 1e9, 1, Time::zero());
    s.recompute(Time::zero(), kNoObservers);
    CHECK(s.rate(f1) == doctest::Approx(70e9));
    CHECK(s.rate(f2) == doctest::Approx(30e9));
    CHECK_THROWS_AS(s.set_capacity(cap, -1), SimulationError);
    CHECK_THROWS_AS(s.set_capacity(7, 50e9), SimulationError);  // no such link
    s.remove(f2, Time::zero());
    s.recompute(Time::zero(), kNoObservers);
    CHECK(s.rate(f1) == doctest::Approx(100e9));
    s.set_capacity(cap, 50e9);
    const auto f3 = s.add({0, cap}, 1e9, 2, Time::zero());
    s.recompute(Time::zero(), kNoObservers);
    CHECK(s.rate(f1) == doctest::Approx(50e9));
    CHECK(s.rate(f3) == doctest::Approx(50e9));
    CHECK_THROWS_AS(s.add_link(0), SimulationError);
    CHECK(s.link_count() == 2);  // the refused link was not added
}

TEST_CASE("a finishing flow hands its bandwidth to the survivors, progress is kept") {
    // 100 GB/s link, flows of 0.5 GB and 1 GB from t=0: 50 GB/s each. The small one ends at
    // 0.5/50 = 10 ms; the big one has sent 0.5 GB and gets 100 GB/s: 0.5/100 = 5 ms more -> 15 ms.
    FlowSolver s({100e9});
    const auto small = s.add({0}, 0.5e9, 0, Time::zero());
    const auto big = s.add({0}, 1e9, 1, Time::zero());
    s.recompute(Time::zero(), kNoObservers);
    CHECK(s.next_finishing() == small);
    CHECK(s.finish_time(small) == Time::ms(10));
    s.remove(small, Time::ms(10));
    s.recompute(Time::ms(10), kNoObservers);
    CHECK(s.rate(big) == doctest::Approx(100e9));
    CHECK(s.finish_time(big) == Time::ms(15));
}

TEST_CASE("flows finish earliest first, equal times by lowest id, after removals anywhere") {
    // 64 links of 1 GB/s, flow i alone on link i with ((7 i) mod 16 + 1) MB: it ends at that many
    // ms (i = 0..63, ids given in order), so every finish time from 1 to 16 ms is four flows'.
    // Flows with i mod 5 = 2 are removed first, wherever they sit in the finish-time heap. The
    // rest must come out of next_finishing() sorted by (time, id): each removed at its time.
    constexpr int kFlows = 64;
    FlowSolver s(std::vector<double>(kFlows, 1e9));
    std::vector<FlowSolver::FlowId> id;
    std::vector<std::pair<std::int64_t, FlowSolver::FlowId>> expected;
    for (int i = 0; i < kFlows; ++i) {
        const int ms = (7 * i) % 16 + 1;
        id.push_back(s.add({static_cast<topology::LinkId>(i)}, ms * 1e6,
                           static_cast<std::uint32_t>(i), Time::zero()));
        CHECK(id.back() == static_cast<FlowSolver::FlowId>(i));
        if (i % 5 != 2) expected.emplace_back(Time::ms(ms).count_ps(), id.back());
    }
    s.recompute(Time::zero(), kNoObservers);
    for (int i = 2; i < kFlows; i += 5)
        s.remove(id[static_cast<std::size_t>(i)], Time::zero());
    s.recompute(Time::zero(), kNoObservers);
    std::sort(expected.begin(), expected.end());
    std::vector<std::pair<std::int64_t, FlowSolver::FlowId>> seen;
    while (s.next_finishing() != FlowSolver::kNoFlow) {
        const auto f = s.next_finishing();
        const Time at = s.finish_time(f);
        seen.emplace_back(at.count_ps(), f);
        s.remove(f, at);
        s.recompute(at, kNoObservers);
    }
    CHECK(seen == expected);
}

TEST_CASE("link tallies: bytes, time with one and with two flows, the most at once") {
    // Link 0 (100 GB/s) and link 1 (50 GB/s). Flow a (1 GB) on 0 and 1 from 0 to 20 ms; flow b
    // (0.5 GB) on 0 alone from 5 to 10 ms; flow c on 1 twice (counted two times there) from 10
    // to 12 ms. Link 0: busy 0-20 = 20 ms, shared 5-10 = 5 ms, at most 2, 1.5 GB told. Link 1:
    // busy 0-20 = 20 ms, shared 10-12 = 2 ms (a and c's two), at most 3, 1 GB + twice c's 7 bytes.
    // The times are the adds' and removes' own: the rates play no part.
    FlowSolver s({100e9, 50e9});
    s.keep_tallies();
    const auto a = s.add({0, 1}, 1e9, 0, Time::zero(), 1e9);
    s.recompute(Time::zero(), kNoObservers);
    const auto b = s.add({0}, 0.5e9, 1, Time::ms(5), 0.5e9);
    s.recompute(Time::ms(5), kNoObservers);
    s.remove(b, Time::ms(10));
    const auto c = s.add({1, 1}, 7, 2, Time::ms(10), 7);
    s.recompute(Time::ms(10), kNoObservers);
    s.remove(c, Time::ms(12));
    s.recompute(Time::ms(12), kNoObservers);
    const auto mid = s.tally(0);
    CHECK(mid.busy == Time::ms(10));  // up to b's end, its last change so far
    CHECK(mid.flows == 1);
    s.remove(a, Time::ms(20));
    const auto l0 = s.tally(0), l1 = s.tally(1);
    CHECK(l0.bytes == 1.5e9);
    CHECK(l0.busy == Time::ms(20));
    CHECK(l0.shared == Time::ms(5));
    CHECK(l0.peak == 2);
    CHECK(l0.flows == 0);
    CHECK(l1.bytes == 1e9 + 14);
    CHECK(l1.busy == Time::ms(20));
    CHECK(l1.shared == Time::ms(2));
    CHECK(l1.peak == 3);
    // Started again: nothing counted, the most at once the flows on it now.
    s.take_tallies();
    CHECK_FALSE(s.tally(0).counted);
    CHECK(s.tally(0).peak == 0);
    CHECK(s.tally(0).busy == Time::zero());
    // A flow across a take: d on link 0 from 25 to 40 ms, tallies taken at 30 ms. Its time is
    // counted at its end, in the tally after the take, which no flow was added to: still told.
    const auto d = s.add({0}, 1e9, 3, Time::ms(25), 1e9);
    const auto before = s.tally(0);
    CHECK(before.counted);
    CHECK(before.busy == Time::zero());  // nothing on link 0 between a's end and d's start
    s.take_tallies();
    CHECK(s.tally(0).peak == 1);  // d, on it at the take
    s.remove(d, Time::ms(40));
    const auto after = s.tally(0);
    CHECK(after.counted);
    CHECK(after.bytes == 0);
    CHECK(after.busy == Time::ms(15));
    // Tallies are kept from the first flow or not at all.
    CHECK_FALSE(s.keep_tallies());  // flows came before: a new taker's tallies would miss them
    CHECK(s.keeps_tallies());       // the ones kept go on
    FlowSolver late({100e9});
    late.add({0}, 1e9, 0, Time::zero());
    CHECK_FALSE(late.keep_tallies());
    CHECK_FALSE(late.keeps_tallies());
}

TEST_CASE("the component strategy re-rates only the connected set of flows") {
    // Links 0 and 1 are disjoint; flows on link 1 do not see a change on link 0.
    FlowSolver s({100e9, 100e9}, FlowSolver::Strategy::Component);
    s.add({0}, 1e9, 0, Time::zero());
    s.add({1}, 1e9, 1, Time::zero());
    s.add({1}, 1e9, 2, Time::zero());
    s.recompute(Time::zero(), kNoObservers);
    const auto before = s.rerated_flows();  // 3: the first solve sees everything
    CHECK(before == 3);
    s.add({0}, 1e9, 3, Time::ms(1));
    s.recompute(Time::ms(1), kNoObservers);
    // Only the two flows on link 0 were touched.
    CHECK(s.rerated_flows() - before == 2);
}

TEST_CASE("rate notifications") {
    // Same scenario as above (0.5 GB and 1 GB on 100 GB/s). Rate notifications: 100 GB/s with 2
    // flows at 0, 100 GB/s with 1 flow at 10 ms, 0 with 0 flows at 15 ms (link accounting is an
    // observer of these: report::LinkAccounting).
    FlowSolver s({100e9});
    RateLog log;
    const std::vector<network::NetworkObserver*> obs{&log};
    const auto small = s.add({0}, 0.5e9, 0, Time::zero());
    const auto big = s.add({0}, 1e9, 1, Time::zero());
    s.recompute(Time::zero(), obs);
    s.remove(small, Time::ms(10));
    s.recompute(Time::ms(10), obs);
    s.remove(big, Time::ms(15));
    s.recompute(Time::ms(15), obs);
    REQUIRE(log.seen.size() == 3);
    CHECK(std::get<0>(log.seen[0]) == 0);
    CHECK(std::get<2>(log.seen[0]) == doctest::Approx(100e9));
    CHECK(std::get<3>(log.seen[0]) == 2);
    CHECK(std::get<0>(log.seen[1]) == Time::ms(10).count_ps());
    CHECK(std::get<3>(log.seen[1]) == 1);
    CHECK(std::get<0>(log.seen[2]) == Time::ms(15).count_ps());
    CHECK(std::get<2>(log.seen[2]) == 0.0);
    CHECK(std::get<3>(log.seen[2]) == 0);
}

TEST_CASE("a new flow alone on its links is rated outside the solve; emptied links report zero") {
    // Links 0: 100 GB/s, 1: 40, 2: 100, 3: 25, 4: 100. At t = 0: x on {0} (1 GB), y on {0, 1}
    // (1 GB), v on {2} (0.5 GB), u on {4} (0.5 GB). Link 1 saturates first (40 / 1 < 100 / 2):
    // y = 40 GB/s, x takes the rest of link 0, 60; v and u are alone, 100 each, and end at
    // 0.5 GB / 100 GB/s = 5 ms. At 5 ms v and u are removed and w starts on {2, 3} (0.5 GB) in
    // the same re-solve: w is then the only flow on links 2 and 3 (settle_isolated), so it runs
    // at the least capacity of its route, 25 GB/s, and ends at 5 + 0.5 / 25 s = 25 ms; link 4 is
    // left without flows (kept out of L, its rate told as 0 with 0 flows); x and y keep 60 and
    // 40 (x: 1 - 0.3 GB left at 5 ms, ends at 5 + 0.7 / 60 s = 16.667 ms). The component strategy,
    // which re-solves every flow connected to a change and settles none outside, gives the same
    // rates and times; the observer hears links 2, 3 and 4 at 5 ms in link order.
    for (const auto strategy :
         {FlowSolver::Strategy::Incremental, FlowSolver::Strategy::Component}) {
        CAPTURE(static_cast<int>(strategy));
        FlowSolver s({100e9, 40e9, 100e9, 25e9, 100e9}, strategy);
        RateLog log;
        const std::vector<network::NetworkObserver*> obs{&log};
        const auto x = s.add({0}, 1e9, 0, Time::zero());
        const auto y = s.add({0, 1}, 1e9, 1, Time::zero());
        const auto v = s.add({2}, 0.5e9, 2, Time::zero());
        const auto u = s.add({4}, 0.5e9, 3, Time::zero());
        s.recompute(Time::zero(), obs);
        CHECK(s.rate(y) == doctest::Approx(40e9));
        CHECK(s.rate(x) == doctest::Approx(60e9));
        CHECK(s.finish_time(v) == Time::ms(5));
        CHECK(s.finish_time(u) == Time::ms(5));
        log.seen.clear();
        s.remove(v, Time::ms(5));
        s.remove(u, Time::ms(5));
        const auto w = s.add({2, 3}, 0.5e9, 4, Time::ms(5));
        s.recompute(Time::ms(5), obs);
        CHECK(s.rate(w) == 25e9);
        CHECK(s.finish_time(w) == Time::ms(25));
        CHECK(s.rate(x) == doctest::Approx(60e9));
        CHECK(s.rate(y) == doctest::Approx(40e9));
        CHECK(s.next_finishing() == x);
        CHECK(s.finish_time(x) == Time::ps(16'666'666'667));
        REQUIRE(log.seen.size() == 3);
        const std::int64_t at = Time::ms(5).count_ps();
        CHECK(log.seen[0] == std::tuple{at, topology::LinkId{2}, 25e9, 1});
        CHECK(log.seen[1] == std::tuple{at, topology::LinkId{3}, 25e9, 1});
        CHECK(log.seen[2] == std::tuple{at, topology::LinkId{4}, 0.0, 0});
    }
}

TEST_CASE("a link halved mid-transfer: progress at the old rate, the rest at the new one") {
    // One 1 GB flow on a 100 GB/s link from t = 0 would end at 10 ms. At 5 ms the link drops to
    // 50 GB/s: 0.5 GB is done, the remaining 0.5 GB at 50 GB/s takes 10 ms: end = 15 ms.
    for (auto strategy : {FlowSolver::Strategy::Incremental, FlowSolver::Strategy::Component}) {
        FlowSolver s({100e9}, strategy);
        const auto f = s.add({0}, 1e9, 0, Time::zero());
        s.recompute(Time::zero(), kNoObservers);
        CHECK(s.finish_time(f) == Time::ms(10));
        s.set_capacity(0, 50e9);
        CHECK(s.dirty());
        s.recompute(Time::ms(5), kNoObservers);
        CHECK(s.rate(f) == doctest::Approx(50e9));
        CHECK(s.finish_time(f) == Time::ms(15));
        CHECK(s.link_rate(0) == doctest::Approx(50e9));
        s.set_capacity(0, 50e9);  // unchanged: nothing to re-solve
        CHECK_FALSE(s.dirty());
    }
}

TEST_CASE("capacity changes spread max-min through shared links; a failed link stalls its flows") {
    // Flow a (1 GB) on link 0 (100 GB/s); flow b (1 GB) on links 0 and 1 (80 GB/s). From t = 0
    // both get 50 GB/s (link 0 is the bottleneck).
    // t = 4 ms: 0.2 GB each done, 0.8 GB left. Link 1 drops to 10 GB/s: b is held to 10 by link
    // 1 and a takes the 90 GB/s left on link 0 (a change on link 1 re-rates a, which never
    // crosses it). a would end at 4 ms + 0.8 GB / 90 GB/s = 12.888...9 ms.
    // t = 8 ms: a has sent 4 ms x 90 = 0.36 GB more (0.44 GB left), b 0.04 GB (0.76 GB left).
    // Link 0 fails (capacity 0): both stall, no finish time.
    // t = 10 ms: link 0 back at 100 GB/s: b 10, a 90 again: a ends at 10 ms + 0.44 / 90 s =
    // 14.888...9 ms. b keeps 10 GB/s (link 1 holds it, whatever a does): 0.76 GB / 10 GB/s =
    // 76 ms after 10 ms, end = 86 ms, unchanged when a leaves.
    for (auto strategy : {FlowSolver::Strategy::Incremental, FlowSolver::Strategy::Component}) {
        FlowSolver s({100e9, 80e9}, strategy);
        const auto a = s.add({0}, 1e9, 0, Time::zero());
        const auto b = s.add({0, 1}, 1e9, 1, Time::zero());
        s.recompute(Time::zero(), kNoObservers);
        CHECK(s.rate(a) == doctest::Approx(50e9));
        CHECK(s.rate(b) == doctest::Approx(50e9));

        s.set_capacity(1, 10e9);
        s.recompute(Time::ms(4), kNoObservers);
        CHECK(s.rate(a) == doctest::Approx(90e9));
        CHECK(s.rate(b) == doctest::Approx(10e9));
        CHECK(s.finish_time(a) == Time::ps(12'888'888'889));  // 4 ms + 8.888...9 ms, rounded up

        s.set_capacity(0, 0);
        s.recompute(Time::ms(8), kNoObservers);
        CHECK(s.rate(a) == 0.0);
        CHECK(s.rate(b) == 0.0);
        CHECK(s.finish_time(a) == Time::max());
        CHECK(s.finish_time(b) == Time::max());
        CHECK(s.link_rate(0) == 0.0);

        s.set_capacity(0, 100e9);
        s.recompute(Time::ms(10), kNoObservers);
        CHECK(s.rate(a) == doctest::Approx(90e9));
        CHECK(s.rate(b) == doctest::Approx(10e9));
        CHECK(std::abs((s.finish_time(a) - Time::ps(14'888'888'889)).count_ps()) <= 1);
        CHECK(s.next_finishing() == a);
        const Time a_end = s.finish_time(a);
        s.remove(a, a_end);
        s.recompute(a_end, kNoObservers);
        CHECK(s.rate(b) == doctest::Approx(10e9));
        CHECK(std::abs((s.finish_time(b) - Time::ms(86)).count_ps()) <= 1);
    }
}

TEST_CASE("a link with more flows than its record holds: lists spill, shrink, grow; slots stay") {
    // A link keeps up to 5 flows in its own record and moves the list out past that. 40 flows
    // on link 0 (100 GB/s), every other one also on link 1 (10 GB/s). Link 1 saturates first:
    // 20 flows at 10/20 = 0.5 GB/s; link 0 then has 100 - 10 = 90 for the other 20: 4.5 each.
    // With the even flows removed (the ones on link 1 stay), link 0 carries 20 flows of which 10
    // are on link 1 (1 GB/s each), leaving 90 for 10: 9 each. Each removal moves the last flow
    // of a list into the freed slot, so a wrong slot would remove another flow from a list.
    FlowSolver s({100e9, 10e9});
    std::vector<FlowSolver::FlowId> id;
    for (int i = 0; i < 40; ++i)
        id.push_back(s.add(
            i % 2 == 0 ? std::vector<topology::LinkId>{0} : std::vector<topology::LinkId>{0, 1},
            1e9, static_cast<std::uint32_t>(i), Time::zero()));
    s.recompute(Time::zero(), kNoObservers);
    CHECK(s.flows_on(0).size() == 40);
    CHECK(s.flows_on(1).size() == 20);
    for (int i = 0; i < 40; ++i)
        CHECK(s.rate(id[i]) == doctest::Approx(i % 2 == 0 ? 4.5e9 : 0.5e9));
    for (int i = 0; i < 40; i += 4)  // half the flows on link 0 alone go
        s.remove(id[i], Time::ms(1));
    for (int i = 3; i < 40; i += 4)  // and half of those on link 1
        s.remove(id[i], Time::ms(1));
    s.recompute(Time::ms(1), kNoObservers);
    CHECK(s.flows_on(0).size() == 20);
    CHECK(s.flows_on(1).size() == 10);
    for (int i = 0; i < 40; ++i) {
        if (i % 4 == 0 || i % 4 == 3) continue;
        CHECK(s.rate(id[i]) == doctest::Approx(i % 2 == 0 ? 9e9 : 1e9));
        CHECK(s.owner(id[i]) == static_cast<std::uint32_t>(i));
    }
    for (int i = 0; i < 40; ++i)  // all but flow 37 (odd: on links 0 and 1)
        if ((i % 4 == 1 || i % 4 == 2) && i != 37) s.remove(id[i], Time::ms(2));
    s.recompute(Time::ms(2), kNoObservers);
    CHECK(s.flows_on(0).size() == 1);
    CHECK(s.flows_on(1).size() == 1);
    CHECK(s.rate(id[37]) == doctest::Approx(10e9));  // link 1's 10 GB/s
    CHECK(s.path(id[37]) == std::vector<topology::LinkId>{0, 1});
    // A list that spilled past its record, shrank and grows again: 21 flows on link 1 share its
    // 10 GB/s.
    for (int i = 0; i < 20; ++i)
        s.add({1}, 1e9, 100, Time::ms(2));
    s.recompute(Time::ms(2), kNoObservers);
    CHECK(s.flows_on(1).size() == 21);
    CHECK(s.rate(id[37]) == doctest::Approx(10e9 / 21));
}

TEST_CASE("a route of more than 65,535 links is refused") {
    FlowSolver s(std::vector<double>(70000, 1e9));
    std::vector<topology::LinkId> path(70000);
    for (std::size_t i = 0; i < path.size(); ++i)
        path[i] = static_cast<topology::LinkId>(i);
    CHECK_THROWS_AS(s.add(path, 1e9, 0, Time::zero()), SimulationError);
    path.resize(65535);
    CHECK_NOTHROW(s.add(path, 1e9, 0, Time::zero()));
}
