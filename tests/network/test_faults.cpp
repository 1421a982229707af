// Link faults on hand-built leaf-spine clusters: degraded links under max-min sharing, failed
// links re-routed over the remaining equal-cost paths, and no path left.
#include <doctest/doctest.h>

#include <map>
#include <vector>

#include "core/errors.hpp"
#include "network/accelerator.hpp"
#include "network/network.hpp"

using namespace cs;
using namespace cs::network;
using topology::Cluster;
using topology::ClusterBuilder;
using topology::Device;
using topology::DeviceKind;
using topology::LinkId;
using topology::LinkKind;

namespace {

constexpr double GB = 1e9;

Device device(const std::string& id, DeviceKind kind, int node) {
    Device d;
    d.id = id;
    d.kind = kind;
    d.node = node;
    d.model = kind == DeviceKind::Gpu ? 0 : -1;
    return d;
}

// Four one-GPU nodes: GPUs 0 and 1 under leaf0, GPUs 2 and 3 under leaf1, `spines` spines, every
// leaf linked once to every spine at 100 GB/s each way, GPUs to leaves at 400 GB/s (never the
// bottleneck), no latency. `up[l][s]` is the forward id (leaf l -> spine s) of each leaf link.
struct LeafSpine {
    Cluster cluster;
    std::vector<std::vector<LinkId>> up;
};
LeafSpine leaf_spine(int spines) {
    ClusterBuilder b;
    b.add_gpu_model({"test", {1e12}, {1e12}, {1e12}, {1e12}, {80'000'000'000}, {1e12}, {}, {}});
    std::vector<topology::DeviceIndex> gpus;
    for (int g = 0; g < 4; ++g)
        gpus.push_back(b.add_device(device("gpu" + std::to_string(g), DeviceKind::Gpu, g)));
    const auto leaf0 = b.add_device(device("leaf0", DeviceKind::Switch, -1));
    const auto leaf1 = b.add_device(device("leaf1", DeviceKind::Switch, -1));
    for (int g = 0; g < 4; ++g)
        b.add_link(gpus[static_cast<std::size_t>(g)], g < 2 ? leaf0 : leaf1, LinkKind::InfiniBand,
                   Bandwidth{400 * GB}, Time::zero());
    LeafSpine out;
    out.up.resize(2);
    for (int s = 0; s < spines; ++s) {
        const auto spine =
            b.add_device(device("spine" + std::to_string(s), DeviceKind::Switch, -1));
        out.up[0].push_back(
            b.add_link(leaf0, spine, LinkKind::InfiniBand, Bandwidth{100 * GB}, Time::zero()));
        out.up[1].push_back(
            b.add_link(leaf1, spine, LinkKind::InfiniBand, Bandwidth{100 * GB}, Time::zero()));
    }
    out.cluster = b.build();
    return out;
}

NetworkConfig nominal_flow() {
    NetworkConfig c;
    c.fidelity = Fidelity::Flow;
    return c;
}

struct Recorder : TransferClient {
    std::map<std::uint64_t, Time> done;
    void on_transfer_done(Simulation& sim, std::uint64_t token) override {
        done[token] = sim.now();
    }
};

// The spine a route between two GPUs of different leaves crosses (its second link goes up).
int spine_of(const LeafSpine& ls, const std::vector<LinkId>& path) {
    for (std::size_t s = 0; s < ls.up[0].size(); ++s)
        for (int leaf = 0; leaf < 2; ++leaf) {
            const LinkId up = ls.up[static_cast<std::size_t>(leaf)][s];
            for (LinkId l : path)
                if (l == up || l == up + 1) return static_cast<int>(s);
        }
    return -1;
}

}  // namespace

TEST_CASE("a halved spine link under a ring all-reduce: the max-min time") {
    // One spine. The ring 0 -> 2 -> 1 -> 3 -> 0 crosses the spine on every edge: leaf0 -> spine
    // carries 0->2 and 1->3, spine -> leaf0 carries 2->1 and 3->0 (and the same on leaf1's side).
    // An all-reduce of S on 4 ranks sends 2(n-1)/n S = 1.5 S over each edge (one pipelined phase
    // of 6 steps, no latency or step overhead here). Max-min: the two flows on each 100 GB/s
    // direction get 50 GB/s each, so S = 1 GB takes 1.5 GB / 50 GB/s = 30 ms. With the
    // leaf0-spine cable at half its bandwidth, 50 GB/s each way, its two flows get 25 GB/s each;
    // leaf1's side would give them 50, so every edge runs at 25 GB/s (the ring's phase ends with
    // its slowest flow, and all four are alike): 1.5 GB / 25 GB/s = 60 ms.
    const LeafSpine ls = leaf_spine(1);
    const std::vector<int> ring{0, 2, 1, 3};
    const Bytes size{1'000'000'000};
    const Time clean = isolated_collective_time(
        ls.cluster, nominal_flow(), CollectiveKind::AllReduce, ring, size, Algorithm::Ring);
    CHECK(clean == Time::ms(30));
    const LinkId l0 = ls.up[0][0];
    const Cluster halved =
        ls.cluster.with_faults({}, {{l0, Bandwidth{50 * GB}}, {l0 + 1, Bandwidth{50 * GB}}});
    CHECK(isolated_collective_time(halved, nominal_flow(), CollectiveKind::AllReduce, ring, size,
                                   Algorithm::Ring) == Time::ms(60));
    // Halved on leaf1's cable as well changes nothing more: every flow already runs at 25 GB/s.
    const LinkId l1 = ls.up[1][0];
    const Cluster both =
        halved.with_faults({}, {{l1, Bandwidth{50 * GB}}, {l1 + 1, Bandwidth{50 * GB}}});
    CHECK(isolated_collective_time(both, nominal_flow(), CollectiveKind::AllReduce, ring, size,
                                   Algorithm::Ring) == Time::ms(60));
}

TEST_CASE("a link failed for the whole run: routes avoid it, or no path remains") {
    const LeafSpine ls = leaf_spine(2);
    const LinkId up00 = ls.up[0][0];
    const Cluster failed = ls.cluster.with_faults({up00, up00 + 1}, {});
    CHECK(failed.link_failed(up00));
    CHECK(failed.link_failed(up00 + 1));
    CHECK_FALSE(failed.link_failed(ls.up[0][1]));
    CHECK_FALSE(ls.cluster.link_failed(up00));
    // Every route from leaf0 to leaf1 now crosses spine1, whatever its ECMP hash.
    for (std::uint64_t id = 0; id < 32; ++id) {
        std::vector<LinkId> path;
        failed.route(0, 2, id, path);
        CHECK(spine_of(ls, path) == 1);
        path.clear();
        failed.route(3, 1, id, path);
        CHECK(spine_of(ls, path) == 1);
    }
    // Two 1 GB sends from leaf0 to leaf1 now share leaf0 -> spine1 (100 GB/s): 50 GB/s each,
    // 20 ms; with that link also at 0.4 of its bandwidth, 20 GB/s each, 50 ms.
    for (const auto& [cluster, expected] :
         {std::pair{failed, Time::ms(20)},
          std::pair{failed.with_faults({up00, up00 + 1}, {{ls.up[0][1], Bandwidth{40 * GB}}}),
                    Time::ms(50)}}) {
        Simulation sim;
        auto net = make_network(sim, cluster, nominal_flow());
        Recorder rec;
        net->set_client(&rec);
        net->send(0, 2, Bytes{1'000'000'000}, 1);
        net->send(1, 3, Bytes{1'000'000'000}, 2);
        sim.run();
        CHECK(rec.done[1] == expected);
        CHECK(rec.done[2] == expected);
    }
    // Both of leaf0's spine links down: leaf0's GPUs reach nothing on leaf1.
    const Cluster cut = failed.with_faults({up00, up00 + 1, ls.up[0][1], ls.up[0][1] + 1}, {});
    std::vector<LinkId> path;
    CHECK_THROWS_AS(cut.route(0, 2, 0, path), NoPathError);
    path.clear();
    cut.route(0, 1, 0, path);  // inside leaf0 still fine
    CHECK(path.size() == 2);
}

TEST_CASE("send_together's memo: the same time for the same parts, forgotten when routes change") {
    // Analytical network on two leaves of two spines (GPU links 400 GB/s, leaf-spine links
    // 100 GB/s, no latency): 1 GB from GPU 0 to
    // GPU 2 and from GPU 1 to GPU 3, together (one completion, at the later arrival: 10 ms,
    // each part alone on its route under the analytical model). The same parts again at 10 ms
    // (the memo's answer, not worked out part by part): arrive at 20 ms. Then every spine link
    // of leaf0 fails (a routing change at 25 ms): the same parts at 30 ms have no route, and the
    // network must say so (NoPathError) rather than answer from what it remembered.
    const LeafSpine ls = leaf_spine(2);
    const Cluster cut =
        ls.cluster.with_faults({ls.up[0][0], ls.up[0][0] + 1, ls.up[0][1], ls.up[0][1] + 1}, {});
    NetworkConfig cfg;
    cfg.fidelity = Fidelity::Analytical;
    Simulation sim;
    KeptState kept(ls.cluster);  // send_together is an accelerator's fast path
    auto net = make_network(sim, ls.cluster, cfg, &kept);
    Recorder rec;
    net->set_client(&rec);
    const std::vector<int> srcs = {0, 1}, dsts = {2, 3};
    struct Again : EventHandler {
        Accelerator* net = nullptr;
        const std::vector<int>* srcs = nullptr;
        const std::vector<int>* dsts = nullptr;
        void on_event(Simulation&, const Event& e) override {
            net->send_together(*srcs, *dsts, Bytes{1'000'000'000}, e.a);
        }
    } again;
    again.net = net->accelerator();
    REQUIRE(again.net != nullptr);
    again.srcs = &srcs;
    again.dsts = &dsts;
    const auto handler = sim.add_handler(again);
    sim.schedule_at(Time::zero(), handler, 0, 1);
    sim.schedule_at(Time::ms(10), handler, 0, 2);
    sim.run();
    CHECK(rec.done[1] == Time::ms(10));
    CHECK(rec.done[2] == Time::ms(20));
    net->schedule_routing(Time::ms(25), cut);
    sim.schedule_at(Time::ms(30), handler, 0, 3);
    CHECK_THROWS_AS(sim.run(), NoPathError);
}

TEST_CASE("a link failing during the run: flows in flight move with the bytes they have left") {
    // Two spines; 1 GB from GPU 0 to GPU 2 (flow A) and 1 GB from GPU 1 to GPU 3 (flow B), both
    // from t = 0, leaf links 100 GB/s. At 2 ms the leaf0 cable of A's spine fails.
    //  - A and B on different spines: each alone at 100 GB/s; at 2 ms both have 0.8 GB left. A
    //    moves to B's spine and they share leaf0 -> spine at 50 GB/s each: 0.8 GB / 50 GB/s =
    //    16 ms more, both end at 18 ms.
    //  - The same spine: 50 GB/s each from the start; 0.9 GB left each at 2 ms; both move to the
    //    other spine, still sharing: 18 ms more, both end at 20 ms.
    const LeafSpine ls = leaf_spine(2);
    // The network hashes a send's route with key src << 32 | dst.
    std::vector<LinkId> path_a, path_b;
    ls.cluster.route(0, 2, (std::uint64_t{0} << 32) | 2, path_a);
    ls.cluster.route(1, 3, (std::uint64_t{1} << 32) | 3, path_b);
    const int spine_a = spine_of(ls, path_a), spine_b = spine_of(ls, path_b);
    REQUIRE(spine_a >= 0);
    const LinkId fails = ls.up[0][static_cast<std::size_t>(spine_a)];
    const Cluster after = ls.cluster.with_faults({fails, fails + 1}, {});
    {
        Simulation sim;
        auto net = make_network(sim, ls.cluster, nominal_flow());
        Recorder rec;
        net->set_client(&rec);
        net->send(0, 2, Bytes{1'000'000'000}, 1);
        net->send(1, 3, Bytes{1'000'000'000}, 2);
        net->schedule_routing(Time::ms(2), after);
        sim.run();
        const Time expected = spine_a != spine_b ? Time::ms(18) : Time::ms(20);
        CHECK(rec.done[1] == expected);
        CHECK(rec.done[2] == expected);
    }
    // The same change decided during the run (a handler at 2 ms schedules it for now), after
    // the flows joined the solver: the same times.
    {
        Simulation sim;
        auto net = make_network(sim, ls.cluster, nominal_flow());
        Recorder rec;
        net->set_client(&rec);
        struct Fail : EventHandler {
            Network* net = nullptr;
            const Cluster* after = nullptr;
            void on_event(Simulation& s, const Event&) override {
                net->schedule_routing(s.now(), *after);
            }
        } fail;
        fail.net = net.get();
        fail.after = &after;
        sim.schedule_at(Time::ms(2), sim.add_handler(fail), 0);
        net->send(0, 2, Bytes{1'000'000'000}, 1);
        net->send(1, 3, Bytes{1'000'000'000}, 2);
        sim.run();
        const Time expected = spine_a != spine_b ? Time::ms(18) : Time::ms(20);
        CHECK(rec.done[1] == expected);
        CHECK(rec.done[2] == expected);
    }
    // A send started after the failure takes the other spine: 1 GB alone at 100 GB/s, 10 ms.
    {
        Simulation sim;
        auto net = make_network(sim, ls.cluster, nominal_flow());
        Recorder rec;
        net->set_client(&rec);
        net->schedule_routing(Time::zero(), after);
        struct Later : EventHandler {
            Network* net = nullptr;
            void on_event(Simulation&, const Event&) override {
                net->send(0, 2, Bytes{1'000'000'000}, 7);
            }
        } later;
        later.net = net.get();
        sim.schedule_at(Time::ms(1), sim.add_handler(later), 0);
        sim.run();
        CHECK(rec.done[7] == Time::ms(11));
    }
    // Every spine link of leaf0 failing mid-transfer leaves no route: NoPathError.
    {
        Simulation sim;
        auto net = make_network(sim, ls.cluster, nominal_flow());
        Recorder rec;
        net->set_client(&rec);
        const Cluster cut = ls.cluster.with_faults(
            {ls.up[0][0], ls.up[0][0] + 1, ls.up[0][1], ls.up[0][1] + 1}, {});
        net->send(0, 2, Bytes{1'000'000'000}, 1);
        net->schedule_routing(Time::ms(2), cut);
        CHECK_THROWS_AS(sim.run(), NoPathError);
    }
}

TEST_CASE("a message sent before a routing change starts its flow on the new routes") {
    // A point-to-point message keeps its route ready from the send (network/ready_p2p.hpp); one
    // whose flow starts after a routing change must take the new routes instead. With a step
    // overhead of 1 ms, 1 GB sent from GPU 0 to GPU 2 at t = 0 starts its flow at 1 ms; the
    // leaf0 cable of its spine fails at 0.5 ms. The flow crosses the other spine (no link of the
    // failed cable) and, alone at 100 GB/s, ends at 1 + 10 = 11 ms. The same message without the
    // failure keeps its spine and also ends at 11 ms.
    const LeafSpine ls = leaf_spine(2);
    std::vector<LinkId> planned;
    ls.cluster.route(0, 2, (std::uint64_t{0} << 32) | 2, planned);
    const int spine = spine_of(ls, planned);
    REQUIRE(spine >= 0);
    const LinkId fails = ls.up[0][static_cast<std::size_t>(spine)];
    const Cluster after = ls.cluster.with_faults({fails, fails + 1}, {});
    struct Paths final : NetworkObserver {
        std::vector<std::vector<LinkId>> started;
        void on_flow_start(const FlowStart& f) override {
            started.emplace_back(f.path.begin(), f.path.end());
        }
    };
    for (const bool failing : {false, true}) {
        CAPTURE(failing);
        NetworkConfig cfg = nominal_flow();
        cfg.step_overhead = Time::ms(1);
        Simulation sim;
        auto net = make_network(sim, ls.cluster, cfg);
        Recorder rec;
        Paths paths;
        net->set_client(&rec);
        net->add_observer(&paths);
        net->send(0, 2, Bytes{1'000'000'000}, 1);
        if (failing) net->schedule_routing(Time::us(500), after);
        sim.run();
        CHECK(rec.done[1] == Time::ms(11));
        REQUIRE(paths.started.size() == 1);
        const auto& path = paths.started[0];
        const bool crosses = std::find(path.begin(), path.end(), fails) != path.end();
        CHECK(crosses == !failing);
        CHECK(spine_of(ls, path) == (failing ? 1 - spine : spine));
    }
}
