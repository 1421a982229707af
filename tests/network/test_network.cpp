// The network on hand-built clusters: p2p sends, contention between transfers, collectives with
// closed-form times, fidelities and determinism.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <map>
#include <span>
#include <vector>

#include "config/document.hpp"
#include "core/errors.hpp"
#include "network/accelerator.hpp"
#include "network/network.hpp"
#include "network/plan_size_map.hpp"
#include "topology/topology_yaml.hpp"

using namespace cs;
using namespace cs::network;
using topology::Cluster;
using topology::ClusterBuilder;
using topology::Device;
using topology::DeviceKind;
using topology::LinkKind;

namespace {

constexpr double GB = 1e9;

Device gpu(const std::string& id, int node) {
    Device d;
    d.id = id;
    d.kind = DeviceKind::Gpu;
    d.node = node;
    d.model = 0;
    return d;
}
Device box(const std::string& id, DeviceKind kind, int node) {
    Device d;
    d.id = id;
    d.kind = kind;
    d.node = node;
    return d;
}

void add_model(ClusterBuilder& b) {
    b.add_gpu_model({"test", {1e12}, {1e12}, {1e12}, {1e12}, {80'000'000'000}, {1e12}, {}, {}});
}

// Flow start and end notifications, in order.
struct FlowLog final : NetworkObserver {
    struct Entry {
        bool start = true;
        Time at;
        std::vector<topology::LinkId> path;
        double bytes = 0;
        bool shared = false;
        Time holds;
    };
    std::vector<Entry> seen;
    void on_flow_start(const FlowStart& f) override {
        seen.push_back({true, f.at, {f.path.begin(), f.path.end()}, f.bytes, f.shared, f.holds});
    }
    void on_flow_end(Time at, std::span<const topology::LinkId> path) override {
        seen.push_back({false, at, {path.begin(), path.end()}, 0, true, Time::zero()});
    }
};

// Busy (at least one flow) and shared (two or more) time per link, from the rate notifications.
struct LinkBusy final : NetworkObserver {
    struct Link {
        Time busy, shared, since;
        int flows = 0;
    };
    std::vector<Link> links = std::vector<Link>(8);
    void on_link_rate(Time at, topology::LinkId link, double, int flows) override {
        Link& l = links[link];
        if (l.flows >= 1) l.busy += at - l.since;
        if (l.flows >= 2) l.shared += at - l.since;
        l.since = at;
        l.flows = flows;
    }
};

// Two GPUs joined by one link of `bw` bytes/s each way and `lat` latency.
Cluster pair(double bw, Time lat) {
    ClusterBuilder b;
    add_model(b);
    const auto g0 = b.add_device(gpu("gpu0", 0));
    const auto g1 = b.add_device(gpu("gpu1", 0));
    b.add_link(g0, g1, LinkKind::NvLink, Bandwidth{bw}, lat);
    return b.build();
}

// n GPUs on one NVSwitch; every GPU-switch link has `bw` each way and latency `lat`.
Cluster switch_node(int n, double bw, Time lat) {
    ClusterBuilder b;
    add_model(b);
    std::vector<topology::DeviceIndex> g;
    for (int i = 0; i < n; ++i)
        g.push_back(b.add_device(gpu("gpu" + std::to_string(i), 0)));
    const auto sw = b.add_device(box("nvswitch", DeviceKind::NvSwitch, 0));
    for (auto d : g)
        b.add_link(d, sw, LinkKind::NvSwitch, Bandwidth{bw}, lat);
    return b.build();
}

// Two nodes of two GPUs. Inside a node the GPUs share an NVLink of `nv` each way. GPU g has its
// own NIC (rail) behind a `pcie` link; every NIC has an `ib` link to one fabric switch. No latency.
Cluster two_nodes(double nv, double pcie, double ib, Time ib_latency = Time::zero()) {
    ClusterBuilder b;
    add_model(b);
    std::vector<topology::DeviceIndex> g, nic;
    for (int i = 0; i < 4; ++i)
        g.push_back(b.add_device(gpu("gpu" + std::to_string(i), i / 2)));
    for (int i = 0; i < 4; ++i)
        nic.push_back(b.add_device(box("nic" + std::to_string(i), DeviceKind::Nic, i / 2)));
    const auto sw = b.add_device(box("leaf", DeviceKind::Switch, -1));
    b.add_link(g[0], g[1], LinkKind::NvLink, Bandwidth{nv}, Time::zero());
    b.add_link(g[2], g[3], LinkKind::NvLink, Bandwidth{nv}, Time::zero());
    for (int i = 0; i < 4; ++i) {
        b.add_link(g[i], nic[i], LinkKind::Pcie, Bandwidth{pcie}, Time::zero());
        b.add_link(nic[i], sw, LinkKind::InfiniBand, Bandwidth{ib}, ib_latency);
    }
    return b.build();
}

// Records when each token completed.
struct Recorder : TransferClient {
    std::map<std::uint64_t, Time> done;
    std::vector<std::uint64_t> order;
    void on_transfer_done(Simulation& sim, std::uint64_t token) override {
        done[token] = sim.now();
        order.push_back(token);
    }
};

NetworkConfig flow_config(Time step_overhead = Time::zero()) {
    NetworkConfig c;
    c.fidelity = Fidelity::Flow;
    c.step_overhead = step_overhead;
    return c;
}

Time run_collective(const Cluster& c, const NetworkConfig& cfg, CollectiveKind kind,
                    std::vector<int> ranks, Bytes size, Algorithm algo) {
    Simulation sim;
    auto net = make_network(sim, c, cfg);
    Recorder rec;
    net->set_client(&rec);
    const auto g = net->register_group(std::move(ranks));
    net->collective(kind, g, size, algo, 7);
    sim.run();
    REQUIRE(rec.done.count(7) == 1);
    return rec.done[7];
}

}  // namespace

TEST_CASE("a send takes latency plus size over bandwidth, both directions at full rate") {
    const Cluster c = pair(100 * GB, Time::us(1));
    Simulation sim;
    auto net = make_network(sim, c, flow_config());
    Recorder rec;
    net->set_client(&rec);
    // 1 GB at 100 GB/s = 10 ms, plus 1 us of latency. The reverse direction is its own link.
    net->send(0, 1, Bytes{1'000'000'000}, 1);
    net->send(1, 0, Bytes{1'000'000'000}, 2);
    CHECK(rec.done.empty());  // completions come from events, never from inside send()
    sim.run();
    CHECK(rec.done[1] == Time::ms(10) + Time::us(1));
    CHECK(rec.done[2] == Time::ms(10) + Time::us(1));
}

TEST_CASE("link rates are gathered only when an observer reads them") {
    // Two sends sharing one link under `flow`: three re-solves change its rate (both start,
    // one ends, the other ends). An observer that says it reads no rates
    // (wants_link_rates(): the link accounting, whose busy and shared times come from the
    // flows' starts and ends) hears of none when it is alone, and the times are the same; with
    // an observer that reads them beside it, rates flow again.
    struct Rates final : NetworkObserver {
        bool wants = false;
        int told = 0, starts = 0;
        bool wants_link_rates() const override { return wants; }
        void on_flow_start(const FlowStart&) override { ++starts; }
        void on_link_rates(Time, std::span<const LinkRate> rates) override {
            told += static_cast<int>(rates.size());
        }
    };
    const Cluster c = pair(100 * GB, Time::us(1));
    for (const bool second : {false, true}) {
        Simulation sim;
        auto net = make_network(sim, c, flow_config());
        Recorder rec;
        net->set_client(&rec);
        Rates quiet, reader;
        reader.wants = true;
        net->add_observer(&quiet);
        if (second) net->add_observer(&reader);
        net->send(0, 1, Bytes{500'000'000}, 1);
        net->send(0, 1, Bytes{1'000'000'000}, 2);
        sim.run();
        // 0.5 GB at 50 GB/s each (10 ms), then the last 0.5 GB alone at 100 GB/s (5 ms).
        CHECK(rec.done[1] == Time::ms(10) + Time::us(1));
        CHECK(rec.done[2] == Time::ms(15) + Time::us(1));
        CHECK(quiet.starts == 2);
        CHECK((quiet.told > 0) == second);
        CHECK((reader.told > 0) == second);
    }
}

TEST_CASE("two sends on one link share it; a finished one hands over its bandwidth") {
    const Cluster c = pair(100 * GB, Time::us(1));
    Simulation sim;
    auto net = make_network(sim, c, flow_config());
    Recorder rec;
    net->set_client(&rec);
    FlowLog log;
    net->add_observer(&log);
    net->send(0, 1, Bytes{500'000'000}, 1);
    net->send(0, 1, Bytes{1'000'000'000}, 2);
    sim.run();
    // Both start at 1 us at 50 GB/s: 0.5 GB ends after 10 ms; the 1 GB one has 0.5 GB left at
    // 100 GB/s: 5 ms more.
    CHECK(rec.done[1] == Time::us(1) + Time::ms(10));
    CHECK(rec.done[2] == Time::us(1) + Time::ms(15));
    // Observers saw both flows start on link 0 (gpu0->gpu1) at 1 us and end as above; the
    // reverse direction (link 1) carried nothing.
    REQUIRE(log.seen.size() == 4);
    const std::vector<topology::LinkId> forward{0};
    CHECK(log.seen[0].start);
    CHECK(log.seen[0].at == Time::us(1));
    CHECK(log.seen[0].path == forward);
    CHECK(log.seen[0].bytes == 0.5e9);
    CHECK(log.seen[0].shared);
    CHECK(log.seen[1].bytes == 1e9);
    CHECK(!log.seen[2].start);
    CHECK(log.seen[2].at == Time::us(1) + Time::ms(10));
    CHECK(log.seen[2].path == forward);
    CHECK(!log.seen[3].start);
    CHECK(log.seen[3].at == Time::us(1) + Time::ms(15));
}

TEST_CASE("a data-parallel all-reduce and pipeline sends sharing a NIC slow each other") {
    // two_nodes: NVLink 200 GB/s, PCIe 1000 GB/s, IB 50 GB/s. DP all-reduce between GPU 0
    // (node 0) and GPU 2 (node 1) of 1 GB: ring with n = 2, each direction carries
    // 2(n-1)/n x S = 1 GB. A pipeline send GPU 0 -> GPU 3 of 0.5 GB leaves through GPU 0's NIC
    // too (GPU 0 -> nic0 -> leaf -> nic3 -> GPU 3):
    //   nic0->leaf carries AR(0->2) and P(0->3): 25 GB/s each.
    //   AR(2->0) runs alone at 50 GB/s and ends at 20 ms.
    //   P ends when 0.5 GB went at 25 GB/s: 20 ms. AR(0->2) has sent 0.5 GB by then and gets
    //   50 GB/s for the remaining 0.5 GB: 10 ms more -> the all-reduce ends at 30 ms.
    // Alone, the all-reduce takes 1 GB / 50 GB/s = 20 ms and the send 0.5 / 50 = 10 ms: each
    // is slowed by 10 ms.
    const Cluster c = two_nodes(200 * GB, 1000 * GB, 50 * GB);
    Simulation sim;
    auto net = make_network(sim, c, flow_config());
    Recorder rec;
    net->set_client(&rec);
    const auto dp = net->register_group({0, 2});
    net->collective(CollectiveKind::AllReduce, dp, Bytes{1'000'000'000}, Algorithm::Ring, 1);
    net->send(0, 3, Bytes{500'000'000}, 2);
    sim.run();
    CHECK(rec.done[1] == Time::ms(30));
    CHECK(rec.done[2] == Time::ms(20));
    // Alone.
    CHECK(run_collective(c, flow_config(), CollectiveKind::AllReduce, {0, 2}, Bytes{1'000'000'000},
                         Algorithm::Ring) == Time::ms(20));
}

TEST_CASE("ring all-reduce on an uncontended ring: 2(n-1)/n x S/B plus latency terms") {
    // 4 GPUs on an NVSwitch, 100 GB/s and 1 us per GPU-switch link, step overhead 3 us.
    // Every ring edge is GPU -> switch -> GPU (2 us) and each GPU link carries one ring edge.
    // S = 400 MB: 2(n-1) = 6 steps x (3 + 2) us = 30 us, plus 2 x 3/4 x 400 MB / 100 GB/s = 6 ms.
    const Cluster c = switch_node(4, 100 * GB, Time::us(1));
    const auto cfg = flow_config(Time::us(3));
    const Time expect = Time::ms(6) + Time::us(30);
    CHECK(run_collective(c, cfg, CollectiveKind::AllReduce, {0, 1, 2, 3}, Bytes{400'000'000},
                         Algorithm::Ring) == expect);
    // The analytical model has no sharing to account for and gives the same figure.
    auto analytical = cfg;
    analytical.fidelity = Fidelity::Analytical;
    CHECK(run_collective(c, analytical, CollectiveKind::AllReduce, {0, 1, 2, 3}, Bytes{400'000'000},
                         Algorithm::Ring) == expect);
    // Ideal: zero.
    auto ideal = cfg;
    ideal.fidelity = Fidelity::Ideal;
    CHECK(run_collective(c, ideal, CollectiveKind::AllReduce, {0, 1, 2, 3}, Bytes{400'000'000},
                         Algorithm::Ring) == Time::zero());
}

TEST_CASE("ring all-gather, reduce-scatter, broadcast, sendrecv and all-to-all") {
    // Same 4-GPU switch node, 100 GB/s, 1 us per link (2 us per GPU-GPU route), no overhead.
    const Cluster c = switch_node(4, 100 * GB, Time::us(1));
    const auto cfg = flow_config();
    const std::vector<int> r{0, 1, 2, 3};
    const Bytes s{400'000'000};
    // all_gather of 400 MB output: n-1 = 3 steps x 2 us + 3/4 x 400 MB / 100 GB/s = 3 ms.
    CHECK(run_collective(c, cfg, CollectiveKind::AllGather, r, s, Algorithm::Auto) ==
          Time::ms(3) + Time::us(6));
    CHECK(run_collective(c, cfg, CollectiveKind::ReduceScatter, r, s, Algorithm::Ring) ==
          Time::ms(3) + Time::us(6));
    // broadcast: chain of 3 edges, each carrying 400 MB (4 ms), 3 steps x 2 us.
    CHECK(run_collective(c, cfg, CollectiveKind::Broadcast, r, s, Algorithm::Auto) ==
          Time::ms(4) + Time::us(6));
    // sendrecv: each rank sends 400 MB to the next: 1 step, 2 us + 4 ms.
    CHECK(run_collective(c, cfg, CollectiveKind::SendRecv, r, s, Algorithm::Auto) ==
          Time::ms(4) + Time::us(2));
    // all_to_all pairwise: 3 phases; in each, every GPU sends 100 MB to one peer and receives
    // 100 MB from another: 2 us + 1 ms per phase.
    CHECK(run_collective(c, cfg, CollectiveKind::AllToAll, r, s, Algorithm::Pairwise) ==
          (Time::ms(1) + Time::us(2)) * 3);
    // all_to_all direct: all 3 x 100 MB leave each GPU's link at once: 2 us + 3 ms.
    CHECK(run_collective(c, cfg, CollectiveKind::AllToAll, r, s, Algorithm::Direct) ==
          Time::ms(3) + Time::us(2));
}

TEST_CASE("NVLS all-reduce: every GPU sends and receives S(n+1)/n through the switch") {
    // 8 GPUs, 100 GB/s per GPU-switch link, 1 us, step overhead 2 us. S = 800 MB:
    // 900 MB / 100 GB/s = 9 ms, plus 2 steps x (2 us + 1 us link latency) = 6 us.
    // busbw = S / t x 2(n-1)/n = 800 MB / 9.006 ms x 1.75 = 155.5 GB/s for 100 GB/s links
    // (ring would give at most 100 GB/s).
    const Cluster c = switch_node(8, 100 * GB, Time::us(1));
    const Time t = run_collective(c, flow_config(Time::us(2)), CollectiveKind::AllReduce,
                                  {0, 1, 2, 3, 4, 5, 6, 7}, Bytes{800'000'000}, Algorithm::Nvls);
    CHECK(t == Time::ms(9) + Time::us(6));
    // Auto picks NVLS on an NVSwitch node above 4 GPUs, ring at 4 or fewer.
    CHECK(choose_algorithm(c, CollectiveKind::AllReduce, {0, 1, 2, 3, 4, 5, 6, 7},
                           Bytes{1 << 20}) == Algorithm::Nvls);
    CHECK(choose_algorithm(c, CollectiveKind::AllReduce, {0, 1, 2, 3}, Bytes{1 << 20}) ==
          Algorithm::Ring);
}

TEST_CASE("NVLS rate cap: multimem traffic at nvls_efficiency of the nominal switch bandwidth") {
    // As above with nvls_efficiency 0.5: each GPU's 900 MB each way runs at 50 GB/s, 18 ms, plus
    // the same 6 us. The ports themselves stay at full capacity: a ring all-reduce (14 steps of
    // 2 us + two 1 us hops through the switch, 2 x 7/8 x 800 MB = 1.4 GB per edge at 100 GB/s =
    // 14 ms) is unchanged by the cap.
    const Cluster c = switch_node(8, 100 * GB, Time::us(1));
    NetworkConfig config = flow_config(Time::us(2));
    config.nvls_efficiency = 0.5;
    const std::vector<int> all{0, 1, 2, 3, 4, 5, 6, 7};
    CHECK(run_collective(c, config, CollectiveKind::AllReduce, all, Bytes{800'000'000},
                         Algorithm::Nvls) == Time::ms(18) + Time::us(6));
    CHECK(run_collective(c, config, CollectiveKind::AllReduce, all, Bytes{800'000'000},
                         Algorithm::Ring) == Time::ms(14) + Time::us(56));
    // Analytical fidelity applies the same cap (bottleneck of the flow's path).
    config.fidelity = Fidelity::Analytical;
    CHECK(run_collective(c, config, CollectiveKind::AllReduce, all, Bytes{800'000'000},
                         Algorithm::Nvls) == Time::ms(18) + Time::us(6));
    config.nvls_efficiency = 0;
    CHECK_THROWS_AS(
        run_collective(c, config, CollectiveKind::AllReduce, all, Bytes{1000}, Algorithm::Nvls),
        ConfigError);
}

TEST_CASE("NVLS rate cap with several NVSwitch links per GPU, flow and analytical alike") {
    // 4 GPUs, each with a 50 GB/s, 1 us link to each of 2 NVSwitches; nvls_efficiency 0.5. Every
    // GPU moves S(n+1)/n = 800 MB x 5/4 each way, half on each link, capped at 25 GB/s per link:
    // 500 MB / 25 GB/s = 20 ms, plus 2 steps x 1 us of latency.
    ClusterBuilder b;
    add_model(b);
    std::vector<topology::DeviceIndex> g;
    for (int i = 0; i < 4; ++i)
        g.push_back(b.add_device(gpu("gpu" + std::to_string(i), 0)));
    for (int k = 0; k < 2; ++k) {
        const auto sw = b.add_device(box("nvswitch" + std::to_string(k), DeviceKind::NvSwitch, 0));
        for (auto d : g)
            b.add_link(d, sw, LinkKind::NvSwitch, Bandwidth{50 * GB}, Time::us(1));
    }
    const Cluster c = b.build();
    NetworkConfig config = flow_config();
    config.nvls_efficiency = 0.5;
    const std::vector<int> all{0, 1, 2, 3};
    CHECK(run_collective(c, config, CollectiveKind::AllReduce, all, Bytes{800'000'000},
                         Algorithm::Nvls) == Time::ms(20) + Time::us(2));
    config.fidelity = Fidelity::Analytical;
    CHECK(run_collective(c, config, CollectiveKind::AllReduce, all, Bytes{800'000'000},
                         Algorithm::Nvls) == Time::ms(20) + Time::us(2));
}

TEST_CASE("calibrated network: NVLink, NVSwitch and NVLS constants and where they apply") {
    const NetworkConfig c = NetworkConfig::calibrated();
    const int nvlink = static_cast<int>(LinkKind::NvLink);
    const auto op = [](CollectiveKind k) { return static_cast<int>(k); };
    // tools/fit_nccl_2gpu.py on the 2-GPU NCCL rows: the link runs at sendrecv's rate, the other
    // operations are capped below it.
    CHECK(c.link_efficiency[nvlink] == 0.843);
    CHECK(c.op_efficiency[op(CollectiveKind::SendRecv)][nvlink] == 0.701);
    CHECK(c.op_efficiency[op(CollectiveKind::AllReduce)][nvlink] == 0.669);
    CHECK(c.op_efficiency[op(CollectiveKind::AllGather)][nvlink] == 0.590);
    CHECK(c.op_efficiency[op(CollectiveKind::ReduceScatter)][nvlink] == 0.563);
    CHECK(c.op_latency[op(CollectiveKind::SendRecv)][nvlink] == Time::us(77));
    CHECK(c.op_efficiency[op(CollectiveKind::AllGather)][static_cast<int>(LinkKind::NvSwitch)] ==
          1.0);
    // nvbandwidth's 396.40 GB/s device-to-device copy of a 450 GB/s NVSwitch port.
    CHECK(c.link_efficiency[static_cast<int>(LinkKind::NvSwitch)] ==
          doctest::Approx(0.8809).epsilon(1e-4));
    CHECK(c.nvls_efficiency == 0.669);
    CHECK(c.link_efficiency[static_cast<int>(LinkKind::InfiniBand)] == 1.0);
    CHECK(c.step_overhead == Time::ns(8600));

    // Two H200 on a direct 450 GB/s NVLink (1 us): all_gather of 2 GB (1 GB per rank crosses
    // each direction) runs at 0.590 x 450 = 265.5 GB/s: 3.766 ms, plus one step of 8.6 us + 1 us
    // and the 18 us base.
    const Cluster bond = pair(450 * GB, Time::us(1));
    CHECK(run_collective(bond, c, CollectiveKind::AllGather, {0, 1}, Bytes{2'000'000'000},
                         Algorithm::Ring)
              .seconds() == doctest::Approx(1e9 / (0.590 * 450e9) + 9.6e-6 + 18e-6));
    // A point-to-point send (a pipeline activation) runs at the link's own rate, the one-way fit,
    // with no fixed cost: 1 GB at 0.843 x 450 GB/s = 2.636 ms, plus 8.6 us + 1 us. The sendrecv
    // collective (both directions) pays its cap and its 77 us: 1 GB at 0.701 x 450 GB/s.
    {
        Simulation sim;
        auto net = make_network(sim, bond, c);
        Recorder rec;
        net->set_client(&rec);
        net->send(0, 1, Bytes{1'000'000'000}, 1);
        sim.run();
        CHECK(rec.done[1].seconds() == doctest::Approx(1e9 / (0.843 * 450e9) + 9.6e-6));
    }
    CHECK(run_collective(bond, c, CollectiveKind::SendRecv, {0, 1}, Bytes{1'000'000'000},
                         Algorithm::Auto)
              .seconds() == doctest::Approx(1e9 / (0.701 * 450e9) + 9.6e-6 + 77e-6));
    // Through an NVSwitch (two 450 GB/s hops of 1 us): no operation cap and no base, the port
    // efficiency alone: 1 GB at 396.4 GB/s = 2.523 ms, plus 8.6 us + 2 us.
    const Cluster sw = switch_node(2, 450 * GB, Time::us(1));
    CHECK(run_collective(sw, c, CollectiveKind::AllGather, {0, 1}, Bytes{2'000'000'000},
                         Algorithm::Ring)
              .seconds() == doctest::Approx(1e9 / 396.40e9 + 10.6e-6));
}

TEST_CASE("per-operation rate caps and fixed costs apply on their link kind, flow and analytical") {
    // One 100 GB/s NVLink, 1 us. all_gather is capped at 0.5 of nominal (50 GB/s) with a 10 us
    // fixed cost: 2 GB total = 1 GB per direction at 50 GB/s = 20 ms, + 1 step of 1 us + 10 us.
    // all_reduce is not capped: each direction carries S = 1 GB at 100 GB/s = 10 ms + 2 x 1 us.
    NetworkConfig cfg = flow_config();
    const int nvlink = static_cast<int>(LinkKind::NvLink);
    cfg.op_efficiency[static_cast<int>(CollectiveKind::AllGather)][nvlink] = 0.5;
    cfg.op_latency[static_cast<int>(CollectiveKind::AllGather)][nvlink] = Time::us(10);
    const Cluster c = pair(100 * GB, Time::us(1));
    for (const Fidelity f : {Fidelity::Flow, Fidelity::Analytical}) {
        cfg.fidelity = f;
        CHECK(run_collective(c, cfg, CollectiveKind::AllGather, {0, 1}, Bytes{2'000'000'000},
                             Algorithm::Ring) == Time::ms(20) + Time::us(11));
        CHECK(run_collective(c, cfg, CollectiveKind::AllReduce, {0, 1}, Bytes{1'000'000'000},
                             Algorithm::Ring) == Time::ms(10) + Time::us(2));
    }
    // The ideal network stays free: no fixed cost either.
    cfg.fidelity = Fidelity::Ideal;
    CHECK(run_collective(c, cfg, CollectiveKind::AllGather, {0, 1}, Bytes{2'000'000'000},
                         Algorithm::Ring) == Time::zero());
    // The cap is the flow's own: a send sharing the 0->1 direction takes what the capped flow
    // leaves. Cap 30 GB/s, no latencies: the send gets 70 GB/s, 1 GB in 14.29 ms; the all_gather
    // stays at 30 GB/s after that (its cap, not the link, limits it): 1 GB in 33.33 ms.
    cfg = flow_config();
    cfg.op_efficiency[static_cast<int>(CollectiveKind::AllGather)][nvlink] = 0.3;
    const Cluster z = pair(100 * GB, Time::zero());
    Simulation sim;
    auto net = make_network(sim, z, cfg);
    Recorder rec;
    net->set_client(&rec);
    FlowLog log;
    net->add_observer(&log);
    const auto g = net->register_group({0, 1});
    net->collective(CollectiveKind::AllGather, g, Bytes{2'000'000'000}, Algorithm::Ring, 1);
    net->send(0, 1, Bytes{1'000'000'000}, 2);
    sim.run();
    CHECK(rec.done[2].seconds() == doctest::Approx(1.0 / 70));
    CHECK(rec.done[1].seconds() == doctest::Approx(1.0 / 30));
    // A second round reuses the private cap links and gives the same times.
    net->collective(CollectiveKind::AllGather, g, Bytes{2'000'000'000}, Algorithm::Ring, 3);
    net->send(0, 1, Bytes{1'000'000'000}, 4);
    const Time t0 = sim.now();
    sim.run();
    CHECK((rec.done[4] - t0).seconds() == doctest::Approx(1.0 / 70));
    CHECK((rec.done[3] - t0).seconds() == doctest::Approx(1.0 / 30));
    // Observers hear of the real link only (never the private cap links), with every flow's
    // bytes: 2 x (1 GB of the all-gather on 0->1 + the 1 GB send).
    double bytes_on_0 = 0;
    for (const auto& e : log.seen)
        for (topology::LinkId l : e.path) {
            CHECK(l < z.links().size());
            if (l == 0 && e.start) bytes_on_0 += e.bytes;
        }
    CHECK(bytes_on_0 == doctest::Approx(4e9));
    // An operation efficiency outside (0, 1] is a configuration error.
    cfg.op_efficiency[0][0] = 0;
    Simulation sim2;
    CHECK_THROWS_AS(make_network(sim2, z, cfg), ConfigError);
}

TEST_CASE("multi-node all-reduce: hierarchical, tree and flat ring") {
    // two_nodes with NVLink 200 GB/s, PCIe 1000 GB/s, IB 50 GB/s, S = 1 GB, no latency.
    // Hierarchical: intra-node reduce-scatter (each NVLink direction carries S/2: 2.5 ms), then
    // per rail an all-reduce of S/2 between 2 nodes (each direction 2(m-1)/m x S/2 = 0.5 GB over
    // 50 GB/s: 10 ms; the rails use different NICs), then intra all-gather (2.5 ms): 15 ms.
    // Tree: the same intra phases; per rail two trees each moving S/4 up and S/4 down the one
    // inter-node edge, so each direction carries 0.5 GB: 10 ms. Also 15 ms.
    // Ring: NCCL runs one ring per channel (2 here), each with half the data, entering and leaving
    // every node on one rail: channel 0 is 0-1-3-2 and channel 1 is 1-0-2-3, so each NIC
    // direction carries one channel's edge of 2(n-1)/n x S/2 = 0.75 GB: 15 ms at 50 GB/s (the
    // NVLink edges carry 0.75 GB at 200 GB/s, 3.75 ms, concurrently). A single flat ring would
    // push 1.5 GB through one NIC: 30 ms.
    const Cluster c = two_nodes(200 * GB, 1000 * GB, 50 * GB);
    const std::vector<int> r{0, 1, 2, 3};
    const Bytes s{1'000'000'000};
    CHECK(run_collective(c, flow_config(), CollectiveKind::AllReduce, r, s,
                         Algorithm::Hierarchical) == Time::ms(15));
    CHECK(run_collective(c, flow_config(), CollectiveKind::AllReduce, r, s, Algorithm::Tree) ==
          Time::ms(15));
    CHECK(run_collective(c, flow_config(), CollectiveKind::AllReduce, r, s, Algorithm::Ring) ==
          Time::ms(15));
    // Auto: tree below 64 MiB, ring from 64 MiB up on several nodes.
    CHECK(choose_algorithm(c, CollectiveKind::AllReduce, r, Bytes{1 << 20}) == Algorithm::Tree);
    CHECK(choose_algorithm(c, CollectiveKind::AllReduce, r, s) == Algorithm::Ring);
    // NVLS needs an NVSwitch node.
    CHECK_THROWS_AS(
        run_collective(c, flow_config(), CollectiveKind::AllReduce, r, s, Algorithm::Nvls),
        ConfigError);
}

TEST_CASE("every algorithm of every collective completes on every fidelity") {
    const Cluster c = two_nodes(200 * GB, 1000 * GB, 50 * GB);
    const Cluster sw = switch_node(8, 100 * GB, Time::us(1));
    const CollectiveKind kinds[] = {CollectiveKind::AllReduce,     CollectiveKind::AllGather,
                                    CollectiveKind::ReduceScatter, CollectiveKind::AllToAll,
                                    CollectiveKind::Broadcast,     CollectiveKind::SendRecv};
    const Algorithm algos[] = {Algorithm::Auto,         Algorithm::Ring, Algorithm::Tree,
                               Algorithm::Hierarchical, Algorithm::Nvls, Algorithm::Pairwise,
                               Algorithm::Direct};
    for (const Cluster* cl : {&c, &sw}) {
        std::vector<int> r;
        for (int i = 0; i < cl->gpu_count(); ++i)
            r.push_back(i);
        for (auto k : kinds)
            for (auto a : algos) {
                Algorithm resolved;
                try {
                    resolved = network::choose_algorithm(*cl, k, r, Bytes{1 << 20});
                    if (a != Algorithm::Auto) {
                        // throws ConfigError when `a` does not apply
                        auto cfg = flow_config();
                        cfg.fidelity = Fidelity::Ideal;
                        run_collective(*cl, cfg, k, r, Bytes{1 << 20}, a);
                        resolved = a;
                    }
                } catch (const ConfigError&) {
                    continue;
                }
                CAPTURE(collective_name(k));
                CAPTURE(algorithm_name(resolved));
                Time prev = Time::max();
                for (Fidelity f : {Fidelity::Flow, Fidelity::Analytical, Fidelity::Ideal}) {
                    auto cfg = flow_config(Time::us(1));
                    cfg.fidelity = f;
                    const Time t = run_collective(*cl, cfg, k, r, Bytes{1 << 20}, a);
                    // flow >= analytical (sharing only slows) >= ideal = 0
                    CHECK(t <= prev);
                    prev = t;
                }
                CHECK(prev == Time::zero());
            }
    }
}

namespace {
struct Scenario {
    bool capped = false;  // per-operation rate caps on the NVLinks (private solver links)
    std::vector<std::pair<std::uint64_t, std::int64_t>> run(bool shuffle) {
        const Cluster c = two_nodes(200 * GB, 300 * GB, 50 * GB);
        Simulation sim;
        if (shuffle) sim.set_tie_shuffle(12345);
        NetworkConfig cfg = flow_config(Time::us(2));
        if (capped) {
            const int nvlink = static_cast<int>(LinkKind::NvLink);
            cfg.op_efficiency[static_cast<int>(CollectiveKind::AllReduce)][nvlink] = 0.5;
            cfg.op_efficiency[static_cast<int>(CollectiveKind::AllToAll)][nvlink] = 0.7;
            cfg.op_latency[static_cast<int>(CollectiveKind::AllToAll)][nvlink] = Time::us(3);
        }
        auto net = make_network(sim, c, cfg);
        Recorder rec;
        net->set_client(&rec);
        const auto all = net->register_group({0, 1, 2, 3});
        const auto dp = net->register_group({1, 3});
        for (std::uint64_t i = 0; i < 6; ++i) {
            net->collective(CollectiveKind::AllReduce, all, Bytes{100'000'000 + 7 * int(i)},
                            i % 2 ? Algorithm::Ring : Algorithm::Tree, 100 + i);
            net->collective(CollectiveKind::AllToAll, dp, Bytes{30'000'000}, Algorithm::Auto,
                            200 + i);
            net->send(static_cast<int>(i % 4), static_cast<int>((i + 1) % 4), Bytes{50'000'000},
                      300 + i);
        }
        sim.run();
        std::vector<std::pair<std::uint64_t, std::int64_t>> out;
        for (auto t : rec.order)
            out.emplace_back(t, rec.done[t].count_ps());
        return out;
    }
};
}  // namespace

TEST_CASE("determinism: the same input gives identical completion times") {
    Scenario s;
    const auto a = s.run(false);
    const auto b = s.run(false);
    REQUIRE(a.size() == 18);
    CHECK(a == b);
    // Shuffling same-time event ties changes nothing either.
    auto sorted = [](std::vector<std::pair<std::uint64_t, std::int64_t>> v) {
        std::sort(v.begin(), v.end());
        return v;
    };
    CHECK(sorted(s.run(true)) == sorted(a));
    // The same with per-operation caps: which private link a capped flow gets must not matter.
    s.capped = true;
    const auto c = s.run(false);
    CHECK(c != a);
    CHECK(sorted(s.run(true)) == sorted(c));
}

TEST_CASE("bad input is reported") {
    const Cluster c = pair(100 * GB, Time::us(1));
    Simulation sim;
    auto net = make_network(sim, c, flow_config());
    CHECK_THROWS_AS(net->send(0, 5, Bytes{1}, 1), ConfigError);
    // Once a message has gone (its route kept ready per source GPU), a source or destination
    // that does not exist is still refused, not looked up.
    net->send(0, 1, Bytes{1}, 2);
    CHECK_THROWS_AS(net->send(7, 0, Bytes{1}, 3), ConfigError);
    CHECK_THROWS_AS(net->send(-1, 0, Bytes{1}, 3), ConfigError);
    CHECK_THROWS_AS(net->send(0, 2, Bytes{1}, 3), ConfigError);
    CHECK_THROWS_AS(net->send(0, 1, Bytes{-1}, 3), SimulationError);
    CHECK_THROWS_AS(net->register_group({0, 0}), ConfigError);
    CHECK_THROWS_AS(net->collective(CollectiveKind::AllReduce, net->register_group({0, 1}),
                                    Bytes{1}, Algorithm::Pairwise, 1),
                    ConfigError);
}

TEST_CASE("a link halved mid-transfer: 0.5 GB done at 5 ms, the rest at half rate") {
    // 1 GB over a 100 GB/s link from t = 0, no latency: 0.5 GB is done at 5 ms when the link
    // drops to 50 GB/s; the remaining 0.5 GB takes 10 ms: end = 15 ms (10 ms unchanged).
    const Cluster c = pair(100 * GB, Time::zero());
    Simulation sim;
    auto net = make_network(sim, c, flow_config());
    Recorder rec;
    LinkBusy busy;
    net->set_client(&rec);
    net->add_observer(&busy);
    net->send(0, 1, Bytes{1'000'000'000}, 1);
    net->schedule_link_capacity(Time::ms(5), 0, Bandwidth{50 * GB});
    sim.run();
    CHECK(rec.done[1] == Time::ms(15));
    CHECK(busy.links[0].busy == Time::ms(15));

    // With the link's 1 us latency the flow starts at 1 us, so at 5 ms it has sent
    // 100 GB/s x 4.999 ms = 0.4999 GB; the remaining 0.5001 GB at 50 GB/s takes 10.002 ms:
    // end = 15.002 ms (within the picosecond the double arithmetic may round up).
    const Cluster d = pair(100 * GB, Time::us(1));
    Simulation sim2;
    auto net2 = make_network(sim2, d, flow_config());
    Recorder rec2;
    net2->set_client(&rec2);
    net2->send(0, 1, Bytes{1'000'000'000}, 1);
    net2->schedule_link_capacity(Time::ms(5), 0, Bandwidth{50 * GB});
    sim2.run();
    CHECK(std::abs((rec2.done[1] - (Time::ms(15) + Time::us(2))).count_ps()) <= 1);
}

TEST_CASE("two transfers sharing a halved link keep max-min shares") {
    // 1 GB and 0.5 GB on one 100 GB/s link from t = 0: 50 GB/s each. At 5 ms each has sent
    // 0.25 GB and the link drops to 50 GB/s: 25 GB/s each. The 0.5 GB one has 0.25 GB left:
    // 10 ms, end 15 ms. The 1 GB one has 0.75 - 0.25 = 0.5 GB left at 15 ms, alone at 50 GB/s:
    // 10 ms more, end 25 ms. Busy 25 ms, shared 15 ms.
    const Cluster c = pair(100 * GB, Time::zero());
    Simulation sim;
    auto net = make_network(sim, c, flow_config());
    Recorder rec;
    LinkBusy busy;
    net->set_client(&rec);
    net->add_observer(&busy);
    net->send(0, 1, Bytes{1'000'000'000}, 1);
    net->send(0, 1, Bytes{500'000'000}, 2);
    net->schedule_link_capacity(Time::ms(5), 0, Bandwidth{50 * GB});
    sim.run();
    CHECK(rec.done[2] == Time::ms(15));
    CHECK(rec.done[1] == Time::ms(25));
    CHECK(busy.links[0].busy == Time::ms(25));
    CHECK(busy.links[0].shared == Time::ms(15));
    CHECK(busy.links[1].busy == Time::zero());  // the reverse direction is untouched
}

TEST_CASE("a failed link stalls its transfers until restored; a direct change applies now") {
    // 1 GB at 100 GB/s from t = 0; the link fails (capacity 0) at 2 ms with 0.2 GB sent and comes
    // back at 7 ms: 0.8 GB at 100 GB/s takes 8 ms, end = 15 ms.
    struct Restorer : EventHandler {
        Network* net = nullptr;
        void on_event(Simulation&, const Event&) override {
            net->set_link_capacity(0, Bandwidth{100 * GB});  // from inside another handler
        }
    };
    const Cluster c = pair(100 * GB, Time::zero());
    {
        Simulation sim;
        auto net = make_network(sim, c, flow_config());
        Recorder rec;
        net->set_client(&rec);
        Restorer restorer;
        restorer.net = net.get();
        const auto h = sim.add_handler(restorer);
        net->send(0, 1, Bytes{1'000'000'000}, 1);
        net->schedule_link_capacity(Time::ms(2), 0, Bandwidth{0});
        sim.schedule_at(Time::ms(7), h, 0);
        sim.run();
        CHECK(rec.done[1] == Time::ms(15));
    }
    {
        // Never restored: the transfer never completes and the run ends without an event at the
        // end of time.
        Simulation sim;
        auto net = make_network(sim, c, flow_config());
        Recorder rec;
        net->set_client(&rec);
        net->send(0, 1, Bytes{1'000'000'000}, 1);
        net->schedule_link_capacity(Time::ms(2), 0, Bandwidth{0});
        sim.run();
        CHECK(rec.done.empty());
        // The last event is the completion planned before the failure (10 ms), which finds
        // nothing finished.
        CHECK(sim.now() <= Time::ms(10));
    }
}

TEST_CASE("link capacity changes under the analytical and ideal fidelities") {
    // Analytical: a transfer started after the change uses it (1 GB at 50 GB/s = 20 ms + 1 us);
    // one in flight keeps its time (started at 0 at 100 GB/s: 10 ms + 1 us). Ideal: free.
    const Cluster c = pair(100 * GB, Time::us(1));
    NetworkConfig analytical;
    analytical.fidelity = Fidelity::Analytical;
    Simulation sim;
    auto net = make_network(sim, c, analytical);
    Recorder rec;
    net->set_client(&rec);
    net->send(0, 1, Bytes{1'000'000'000}, 1);
    net->set_link_capacity(0, Bandwidth{50 * GB});
    net->send(0, 1, Bytes{1'000'000'000}, 2);
    sim.run();
    CHECK(rec.done[1] == Time::ms(10) + Time::us(1));
    CHECK(rec.done[2] == Time::ms(20) + Time::us(1));

    NetworkConfig ideal;
    ideal.fidelity = Fidelity::Ideal;
    Simulation sim2;
    auto free_net = make_network(sim2, c, ideal);
    Recorder rec2;
    free_net->set_client(&rec2);
    free_net->set_link_capacity(0, Bandwidth{0});
    free_net->send(0, 1, Bytes{1'000'000'000}, 1);
    sim2.run();
    CHECK(rec2.done[1] == Time::zero());
}

TEST_CASE("capacities kept in a KeptState: a network's change stays its own") {
    // Networks given one KeptState start from the capacities it keeps
    // (KeptState::scaled_capacities); one that halves its link copies them first. By hand: 1 GB
    // over 100 GB/s = 10 ms + 1 us, over 50 GB/s 20 ms + 1 us.
    const Cluster c = pair(100 * GB, Time::us(1));
    KeptState state(c);
    const auto send_time = [&](Fidelity f, bool halve) {
        NetworkConfig cfg;
        cfg.fidelity = f;
        Simulation sim;
        auto net = make_network(sim, c, cfg, &state);
        Recorder rec;
        net->set_client(&rec);
        if (halve) net->set_link_capacity(0, Bandwidth{50 * GB});
        net->send(0, 1, Bytes{1'000'000'000}, 1);
        sim.run();
        return rec.done[1];
    };
    for (Fidelity f : {Fidelity::Flow, Fidelity::Analytical}) {
        CHECK(send_time(f, false) == Time::ms(10) + Time::us(1));
        CHECK(send_time(f, true) == Time::ms(20) + Time::us(1));
        CHECK(send_time(f, false) == Time::ms(10) + Time::us(1));  // the halving was its own
    }
    // The same factors give the kept capacities; other factors their own, and at most
    // kKeptCapacities sets are kept.
    const std::array<double, 5> ones{1, 1, 1, 1, 1};
    const auto kept = state.scaled_capacities(ones, 1.0);
    CHECK(kept == state.scaled_capacities(ones, 1.0));
    REQUIRE(kept->capacity.size() == 2 * c.links().size());
    CHECK(kept->capacity[0] == 100 * GB);
    CHECK(kept->kinds == 1u << static_cast<int>(LinkKind::NvLink));
    const auto half = state.scaled_capacities({0.5, 1, 1, 1, 1}, 0.25);
    CHECK(half->capacity[0] == 50 * GB);                    // nvlink x 0.5
    CHECK(half->capacity[c.links().size()] == 25 * GB);     // its NVLS twin x 0.25
    (void)state.scaled_capacities({0.7, 1, 1, 1, 1}, 1.0);  // pushes the oldest (ones) out
    CHECK(state.scaled_capacities(ones, 1.0) != kept);
    CHECK(state.scaled_capacities(ones, 1.0)->capacity == kept->capacity);
    // A copy with other bandwidths has a state of its own.
    const Cluster slow = c.with_faults({}, {{0, Bandwidth{10 * GB}}});
    KeptState slow_state(slow);
    CHECK(slow_state.scaled_capacities(ones, 1.0)->capacity[0] == 10 * GB);
    CHECK(state.scaled_capacities(ones, 1.0)->capacity[0] == 100 * GB);
    // A network whose efficiency is out of range for a link kind the cluster has (NVLink at 1.5)
    // is refused, and its set is not kept: the two sets kept before it (ones, then 0.5 with NVLS
    // 0.25) are still found as they were, where a kept refused set would have pushed `ones` out.
    const auto good = state.scaled_capacities(ones, 1.0);
    const auto other = state.scaled_capacities({0.5, 1, 1, 1, 1}, 0.25);
    NetworkConfig bad;
    bad.link_efficiency[static_cast<int>(LinkKind::NvLink)] = 1.5;
    Simulation sim;
    CHECK_THROWS_AS((void)make_network(sim, c, bad, &state), cs::ConfigError);
    CHECK_THROWS_AS((void)make_network(sim, c, bad), cs::ConfigError);  // without: refused too
    CHECK(state.scaled_capacities(ones, 1.0) == good);
    CHECK(state.scaled_capacities({0.5, 1, 1, 1, 1}, 0.25) == other);
    // An efficiency out of range for a kind the cluster does not have (InfiniBand) is not read.
    NetworkConfig unused;
    unused.link_efficiency[static_cast<int>(LinkKind::InfiniBand)] = 1.5;
    CHECK_NOTHROW((void)make_network(sim, c, unused, &state));
}

TEST_CASE("a collective's algorithm, resolved once per (group, operation, algorithm, size)") {
    // Auto all-reduce across nodes is a tree below 64 MiB and a ring from there. One network
    // runs 1 MiB, 128 MiB and 1 MiB again on one group, one after another: each takes what a
    // fresh network takes for it alone, so the second 1 MiB is the tree again, not the ring the
    // resolution of 128 MiB gave.
    const Cluster c = two_nodes(100 * GB, 50 * GB, 25 * GB);
    NetworkConfig cfg;
    cfg.fidelity = Fidelity::Analytical;
    const std::vector<std::int64_t> sizes = {1 << 20, std::int64_t{128} << 20, 1 << 20};
    Simulation sim;
    auto net = make_network(sim, c, cfg);
    Recorder rec;
    net->set_client(&rec);
    const auto g = net->register_group({0, 1, 2, 3});
    Time start = Time::zero();
    for (std::size_t i = 0; i < sizes.size(); ++i) {
        net->collective(CollectiveKind::AllReduce, g, Bytes{sizes[i]}, Algorithm::Auto, i);
        sim.run();
        const Time took = rec.done[i] - start;
        start = rec.done[i];
        CHECK(took == run_collective(c, cfg, CollectiveKind::AllReduce, {0, 1, 2, 3},
                                     Bytes{sizes[i]}, Algorithm::Auto));
    }
    // Auto gave different algorithms for the two sizes (else the check above proves nothing).
    CHECK(run_collective(c, cfg, CollectiveKind::AllReduce, {0, 1, 2, 3}, Bytes{1 << 20},
                         Algorithm::Tree) == run_collective(c, cfg, CollectiveKind::AllReduce,
                                                            {0, 1, 2, 3}, Bytes{1 << 20},
                                                            Algorithm::Auto));
    CHECK(run_collective(c, cfg, CollectiveKind::AllReduce, {0, 1, 2, 3}, Bytes{1 << 20},
                         Algorithm::Ring) != run_collective(c, cfg, CollectiveKind::AllReduce,
                                                            {0, 1, 2, 3}, Bytes{1 << 20},
                                                            Algorithm::Auto));
    // An algorithm that does not apply is refused every time (nothing kept).
    for (int twice = 0; twice < 2; ++twice)
        CHECK_THROWS_AS(
            net->collective(CollectiveKind::AllReduce, g, Bytes{1 << 20}, Algorithm::Nvls, 9),
            ConfigError);
}

TEST_CASE("p2p plans kept in a KeptState: later networks time alike") {
    // Two networks in turn send the same messages, without fast paths and with one KeptState
    // (which keeps the networks' p2p plans); every message takes the same time either way, and
    // the second network with the kept state finds the plans the first made. By hand (no
    // latency, analytical): 1 GB over the 25 GB/s fabric links = 40 ms across nodes, over the
    // 100 GB/s NVLink 10 ms inside one.
    const Cluster c = two_nodes(100 * GB, 50 * GB, 25 * GB);
    KeptState kept(c);
    const auto times = [&c](KeptState* k) {
        NetworkConfig cfg;
        cfg.fidelity = Fidelity::Analytical;
        Simulation sim;
        auto net = make_network(sim, c, cfg, k);
        Recorder rec;
        net->set_client(&rec);
        const std::vector<std::pair<int, int>> pairs = {{0, 2}, {1, 3}, {0, 1}, {3, 0}, {2, 2}};
        for (std::size_t i = 0; i < pairs.size(); ++i)
            net->send(pairs[i].first, pairs[i].second, Bytes{1'000'000'000}, i);
        sim.run();
        return rec.done;
    };
    const auto want = times(nullptr);
    CHECK(want.at(0) == Time::ms(40));
    CHECK(want.at(2) == Time::ms(10));
    CHECK(want.at(4) == Time::zero());  // to itself: no route
    CHECK(kept.plans() == nullptr);     // made by the first network given the state
    CHECK(times(&kept) == want);
    REQUIRE(kept.plans() != nullptr);
    const auto* plans = kept.plans().get();
    CHECK(times(&kept) == want);
    CHECK(kept.plans().get() == plans);  // the second network took the same plans
    // A kept state belongs to one cluster: a copy with other capacities gets none of it.
    const Cluster other = c.with_faults({}, {});
    Simulation sim;
    CHECK_THROWS_AS(make_network(sim, other, NetworkConfig{}, &kept), SimulationError);
}

TEST_CASE("collective plans kept in a KeptState: later networks time alike") {
    // As above for collectives: every collective takes the same time with a KeptState (which
    // keeps the plans and resolved algorithms of its networks) as without, for the first network
    // and for the next ones. Two groups with the same ranks have their own plans (the group's
    // number is the flow id); a network with other operation efficiencies is not given the plans
    // of the first (its rate caps differ).
    const Cluster c = two_nodes(100 * GB, 50 * GB, 25 * GB);
    KeptState kept(c);
    const auto times = [&c](KeptState* k, double all_gather_nvlink_efficiency) {
        NetworkConfig cfg;
        cfg.fidelity = Fidelity::Analytical;
        cfg.op_efficiency[static_cast<int>(CollectiveKind::AllGather)]
                         [static_cast<int>(topology::LinkKind::NvLink)] =
            all_gather_nvlink_efficiency;
        Simulation sim;
        auto net = make_network(sim, c, cfg, k);
        Recorder rec;
        net->set_client(&rec);
        const GroupId all = net->register_group({0, 1, 2, 3});
        const GroupId again = net->register_group({0, 1, 2, 3});
        const GroupId cross = net->register_group({1, 2});
        std::uint64_t token = 0;
        for (const GroupId g : {all, again, cross}) {
            net->collective(CollectiveKind::AllReduce, g, Bytes{1 << 20}, Algorithm::Auto, token++);
            net->collective(CollectiveKind::AllReduce, g, Bytes{1'000'000'000}, Algorithm::Ring,
                            token++);
            net->collective(CollectiveKind::AllGather, g, Bytes{1'000'000'000}, Algorithm::Auto,
                            token++);
        }
        sim.run();
        return rec.done;
    };
    const auto want = times(nullptr, 1.0);
    REQUIRE(want.size() == 9);
    CHECK(times(&kept, 1.0) == want);
    REQUIRE(kept.plans() != nullptr);
    CHECK(times(&kept, 1.0) == want);
    // A tenth of the NVLink rate for all-gathers (10 GB/s, below the 25 GB/s fabric links):
    // the all-gather on 0-3, whose ring crosses NVLink, is slower with and without kept plans.
    const auto slower = times(nullptr, 0.1);
    CHECK(slower.at(2) > want.at(2));
    CHECK(times(&kept, 0.1) == slower);
    CHECK(times(&kept, 1.0) == want);
    // The kept plans are found by the communicator's number (its ranks looked up once, when it
    // is registered); ranks never registered on the cluster are still checked, on a later
    // network as on the first: a GPU it lacks, a GPU listed twice.
    Simulation sim;
    NetworkConfig cfg;
    cfg.fidelity = Fidelity::Analytical;
    auto net = make_network(sim, c, cfg, &kept);
    CHECK_THROWS_WITH_AS(net->register_group({0, 4}),
                         "GPU 4 does not exist (the cluster has 4 GPUs)", cs::ConfigError);
    CHECK_THROWS_WITH_AS(net->register_group({2, 1, 2}), "a communicator lists a GPU twice",
                         cs::ConfigError);
    CHECK_THROWS_AS(net->register_group({}), cs::ConfigError);
    CHECK(net->register_group({1, 2}) == 0);
}

TEST_CASE("send routes: account_sends tells observers what account_send does pair by pair") {
    // A folded replica class's followers are accounted through send_routes/account_sends: the
    // observers must get, in pair order, the very notifications account_send gives for each pair
    // (path, bytes x count, stand-alone time x count), and cost(i) must be p2p_cost. By hand for
    // pair (0, 2), 1 GB across nodes at 25 GB/s: 40 ms; three sends of it: 3 GB and 120 ms.
    const auto notes = [](const Cluster& c, KeptState& kept, bool batch) {
        NetworkConfig cfg;
        cfg.fidelity = Fidelity::Analytical;
        Simulation sim;
        auto made = make_network(sim, c, cfg, &kept);
        Accelerator* net = made->accelerator();
        REQUIRE(net != nullptr);
        struct BulkLog final : SummingObserver {  // as FlowLog, and sums alone: bulk allowed
            FlowLog log;
            void on_flow_start(const FlowStart& f) override { log.on_flow_start(f); }
        } bulk;
        auto& log = bulk.log;
        made->add_observer(&bulk);
        REQUIRE(net->accounts_in_bulk());
        const std::vector<std::pair<int, int>> pairs = {{0, 2}, {1, 3}, {2, 2}, {0, 1}, {3, 0}};
        if (batch) {
            const auto routes = net->send_routes(pairs);
            REQUIRE(routes->size() == pairs.size());
            for (std::size_t i = 0; i < pairs.size(); ++i)
                CHECK(routes->cost(i) == net->p2p_cost(pairs[i].first, pairs[i].second));
            net->account_sends(*routes, Bytes{1'000'000'000}, 3);
        } else {
            for (const auto& [a, b] : pairs)
                net->account_send(a, b, Bytes{1'000'000'000}, 3);
        }
        return log.seen;
    };
    const Cluster plain = two_nodes(100 * GB, 50 * GB, 25 * GB);
    KeptState fresh(plain), fresh2(plain);
    const auto want = notes(plain, fresh, false);
    REQUIRE(want.size() == 4);  // no flow from GPU 2 to itself
    CHECK(want[0].bytes == 3e9);
    CHECK(want[0].holds == Time::ms(120));
    const auto same = [&](const std::vector<FlowLog::Entry>& got) {
        REQUIRE(got.size() == want.size());
        for (std::size_t i = 0; i < got.size(); ++i) {
            CHECK(got[i].path == want[i].path);
            CHECK(got[i].bytes == want[i].bytes);
            CHECK(got[i].holds == want[i].holds);
            CHECK(got[i].shared == want[i].shared);
        }
    };
    same(notes(plain, fresh2, true));
    // Kept in the state: the second network takes the first's send routes.
    same(notes(plain, fresh2, true));
}

TEST_CASE(
    "send_together: one completion at the last pair's arrival; under flow when the parts start "
    "together") {
    // Two nodes (two_nodes: NVLink 100 GB/s, PCIe 50 GB/s, IB 25 GB/s), 1 GB from GPU 0 to GPU 1
    // (NVLink: 10 ms) and from GPU 1 to GPU 3 (PCIe, IB, IB, PCIe: the IB links the slowest,
    // 40 ms). Outside `flow` the pair costs are their own: the client hears of token 5 once, at
    // 40 ms, and the observers get the flows send() gives pair by pair (the same log). Under
    // `flow` a flow starts after steps x (step_overhead + route latency), one step for a send:
    // with a step overhead of 5 us and no latency both parts start at 5 us, so their flows start
    // from one event and the client is told once, at the later part's end, 40 ms + 5 us (the two
    // share no link), with the flows (and their times) of two send()s. With no step overhead and
    // 1 us on each IB link the first part starts at once and the second after its two IB links,
    // 2 us: one send() per pair, two completions, at 10 ms and 40 ms + 2 us.
    const auto run = [&](const Cluster& c, Fidelity fidelity, bool together, Time step) {
        const std::vector<int> srcs = {0, 1}, dsts = {1, 3};
        NetworkConfig cfg;
        cfg.fidelity = fidelity;
        cfg.step_overhead = step;
        Simulation sim;
        KeptState kept(c);  // send_together is a fast path: an accelerator's
        auto net = make_network(sim, c, cfg, together ? &kept : nullptr);
        struct Calls : TransferClient {
            std::vector<Time> at;
            void on_transfer_done(Simulation& s, std::uint64_t token) override {
                CHECK(token == 5);
                at.push_back(s.now());
            }
        } calls;
        net->set_client(&calls);
        FlowLog log;
        net->add_observer(&log);
        int told = 2;
        if (together)
            told = net->accelerator()->send_together(srcs, dsts, Bytes{1'000'000'000}, 5);
        else
            for (std::size_t i = 0; i < srcs.size(); ++i)
                net->send(srcs[i], dsts[i], Bytes{1'000'000'000}, 5);
        sim.run();
        CHECK(static_cast<int>(calls.at.size()) == told);
        return std::make_pair(calls.at, log.seen);
    };
    const auto same_flows = [](const auto& a, const auto& b) {
        REQUIRE(a.size() == b.size());
        for (std::size_t i = 0; i < a.size(); ++i) {
            CHECK(a[i].start == b[i].start);
            CHECK(a[i].at == b[i].at);
            CHECK(a[i].path == b[i].path);
            CHECK(a[i].bytes == b[i].bytes);
            CHECK(a[i].shared == b[i].shared);
            CHECK(a[i].holds == b[i].holds);
        }
    };
    const Cluster c = two_nodes(100 * GB, 50 * GB, 25 * GB);
    const Time step = Time::us(5);
    for (const auto fidelity : {Fidelity::Analytical, Fidelity::Ideal, Fidelity::Flow}) {
        CAPTURE(static_cast<int>(fidelity));
        const auto [apart_at, apart_log] = run(c, fidelity, false, step);
        const auto [together_at, together_log] = run(c, fidelity, true, step);
        REQUIRE(apart_at.size() == 2);
        REQUIRE(together_at.size() == 1);
        CHECK(together_at[0] == apart_at.back());
        if (fidelity == Fidelity::Flow) {
            CHECK(apart_at[0] == Time::ms(10) + step);
            CHECK(together_at[0] == Time::ms(40) + step);
        }
        same_flows(together_log, apart_log);
    }
    const Cluster late = two_nodes(100 * GB, 50 * GB, 25 * GB, Time::us(1));
    const auto [apart_at, apart_log] = run(late, Fidelity::Flow, false, Time::zero());
    const auto [together_at, together_log] = run(late, Fidelity::Flow, true, Time::zero());
    REQUIRE(together_at.size() == 2);
    CHECK(together_at == apart_at);
    CHECK(apart_at[0] == Time::ms(10));
    CHECK(apart_at[1] == Time::ms(40) + Time::us(2));
    same_flows(together_log, apart_log);
}

TEST_CASE(
    "send_together under flow: grouped parts end at one send per part's times, whatever the order "
    "of same-time events") {
    // two_nodes (NVLink 200 GB/s, PCIe 300 GB/s, IB 50 GB/s, no latency), a 2 us step overhead:
    // four messages of two parts each between the nodes, sent at once with a ring all-reduce of
    // GPUs 0 and 2, so that the parts share NIC and IB links with each other and with the
    // all-reduce (GPU 0 sends on three of them) and each rate depends on the others'. Sent part
    // by part (no fast paths) a message completes once per part; grouped (a KeptState) once, at
    // its last part's time, which is the same: the same flows join at the same instants. With
    // same-time events shuffled the grouped times are the same again (max-min rates do not
    // depend on the order in which flows join at one instant).
    const Cluster c = two_nodes(200 * GB, 300 * GB, 50 * GB);
    struct Outcome {
        std::map<std::uint64_t, Time> last;
        std::map<std::uint64_t, int> told;
    };
    const auto run = [&](bool grouped, bool shuffle) {
        Simulation sim;
        if (shuffle) sim.set_tie_shuffle(777);
        KeptState kept(c);
        auto net = make_network(sim, c, flow_config(Time::us(2)), grouped ? &kept : nullptr);
        struct Counting : TransferClient {
            Outcome out;
            void on_transfer_done(Simulation& s, std::uint64_t token) override {
                out.last[token] = s.now();
                ++out.told[token];
            }
        } calls;
        net->set_client(&calls);
        const std::vector<std::vector<int>> srcs = {{0, 1}, {0, 1}, {2, 3}, {1, 0}};
        const std::vector<std::vector<int>> dsts = {{2, 3}, {3, 2}, {0, 1}, {2, 3}};
        net->collective(CollectiveKind::AllReduce, net->register_group({0, 2}), Bytes{400'000'000},
                        Algorithm::Ring, 1);
        for (std::size_t m = 0; m < srcs.size(); ++m) {
            const Bytes size{100'000'000 * static_cast<std::int64_t>(m + 1)};
            const std::uint64_t token = 10 + m;
            if (grouped)
                CHECK(net->accelerator()->send_together(srcs[m], dsts[m], size, token) == 1);
            else
                for (std::size_t i = 0; i < srcs[m].size(); ++i)
                    net->send(srcs[m][i], dsts[m][i], size, token);
        }
        sim.run();
        return calls.out;
    };
    const Outcome apart = run(false, false), grouped = run(true, false), shuffled = run(true, true);
    REQUIRE(apart.last.size() == 5);
    CHECK(grouped.last == apart.last);
    CHECK(shuffled.last == apart.last);
    for (std::uint64_t token = 10; token < 14; ++token) {
        CHECK(apart.told.at(token) == 2);
        CHECK(grouped.told.at(token) == 1);
        CHECK(shuffled.told.at(token) == 1);
    }
    // The parts did contend: the first message's two parts alone would take 100 MB / 50 GB/s =
    // 2 ms after the 2 us step; sharing GPU 0's NIC with the all-reduce and the second message
    // makes it later.
    CHECK(apart.last.at(10) > Time::ms(2) + Time::us(2));
}

TEST_CASE("send_together: a part to a GPU that does not exist throws, every time") {
    // The analytical network keeps a message's time once worked out (nothing observes it here):
    // a message that failed must not be kept, or the same parts again would complete as if
    // they had cost nothing. Two nodes of two GPUs: GPU 9 does not exist.
    const Cluster c = two_nodes(100 * GB, 50 * GB, 25 * GB);
    NetworkConfig cfg;
    cfg.fidelity = Fidelity::Analytical;
    Simulation sim;
    KeptState kept(c);
    auto net = make_network(sim, c, cfg, &kept);
    Accelerator* fast = net->accelerator();
    REQUIRE(fast != nullptr);
    const std::vector<int> srcs = {0, 1}, dsts = {1, 9};
    CHECK_THROWS(fast->send_together(srcs, dsts, Bytes{1000}, 1));
    CHECK_THROWS(fast->send_together(srcs, dsts, Bytes{1000}, 2));
}

TEST_CASE("link capacity changes: bad input") {
    const Cluster c = pair(100 * GB, Time::us(1));
    Simulation sim;
    auto net = make_network(sim, c, flow_config());
    CHECK_THROWS_AS(net->set_link_capacity(2, Bandwidth{GB}), SimulationError);  // 2 links
    CHECK_THROWS_AS(net->set_link_capacity(0, Bandwidth{-1}), SimulationError);
    CHECK_THROWS_AS(net->schedule_link_capacity(Time::ms(1), 5, Bandwidth{GB}), SimulationError);
    net->schedule_link_capacity(Time::ms(2), 0, Bandwidth{GB});
    sim.run();
    CHECK_THROWS_AS(net->schedule_link_capacity(Time::ms(1), 0, Bandwidth{GB}), SimulationError);
}

TEST_CASE(
    "fold: member 0's transfer stands for its copies; links shared by some members, or "
    "capacity changes, refuse") {
    // Four GPUs on one NVSwitch (100 GB/s per GPU link). Member m of the "workers" {0, 1} and
    // {2, 3} sends GPU m -> GPU m + 2: routes gpu0 -> sw -> gpu2 and gpu1 -> sw -> gpu3, images of
    // each other on disjoint links, so the fold is accepted. 1 GB at 100 GB/s takes 10 ms alone.
    const Cluster c = switch_node(4, 100 * GB, Time::zero());
    FoldClass p2p;
    p2p.src = {0, 1};
    p2p.dst = {2, 3};
    KeptState kept(c);  // folding is a fast path: an accelerator's
    // Member 0's 1 GB send with the class folded, or both members' sends unfolded: member 0's
    // finish time and the paths of the flow starts an observer heard, sorted.
    const auto run_pair = [&](const FoldClass& cls, bool fold) {
        Simulation sim;
        auto net = make_network(sim, c, NetworkConfig{}, &kept);
        Recorder rec;
        net->set_client(&rec);
        FlowLog log;
        net->add_observer(&log);
        std::string why;
        if (fold) {
            REQUIRE(net->accelerator()->fold(2, {cls}, why));
            CHECK(net->accelerator()->fold_copies() == 2);
        } else {
            net->send(cls.src[1], cls.dst[1], Bytes{1'000'000'000}, 2);
        }
        net->send(cls.src[0], cls.dst[0], Bytes{1'000'000'000}, 1);
        sim.run();
        CHECK(log.seen.size() == 4);  // two starts, two ends
        std::vector<std::vector<topology::LinkId>> starts;
        for (const auto& e : log.seen)
            if (e.start) starts.push_back(e.path);
        std::sort(starts.begin(), starts.end());
        return std::pair{rec.done[1], starts};
    };
    const auto routes = [&](int a, int b) {
        std::vector<topology::LinkId> r0, r1;
        c.route(0, a, static_cast<std::uint64_t>(0) << 32 | static_cast<std::uint64_t>(a), r0);
        c.route(1, b, static_cast<std::uint64_t>(1) << 32 | static_cast<std::uint64_t>(b), r1);
        std::vector<std::vector<topology::LinkId>> both{r0, r1};
        std::sort(both.begin(), both.end());
        return both;
    };
    // Observers see both members' flows either way: member 1's start has member 1's links.
    for (const bool fold : {true, false}) {
        const auto [done, starts] = run_pair(p2p, fold);
        CHECK(done == Time::ms(10));
        CHECK(starts == routes(2, 3));
    }
    {
        // Member 1 sends 1 -> 2: both members cross sw -> gpu2 at the same hop and share its
        // 100 GB/s, 50 GB/s each: 1 GB in 20 ms. Swapping the members' own links maps the
        // network onto itself, so member 0's flow, counted twice on the shared link, is exact:
        // folded, it also takes 20 ms, and an observer still hears of both members' flows as
        // they are (sw -> gpu2 in each).
        FoldClass shared = p2p;
        shared.dst = {2, 2};
        REQUIRE(routes(2, 2)[0].back() == routes(2, 2)[1].back());
        for (const bool fold : {true, false}) {
            const auto [done, starts] = run_pair(shared, fold);
            CHECK(done == Time::ms(20));
            CHECK(starts == routes(2, 2));
        }
        // A message's ready record (network/ready_p2p.hpp) made before the fold has the unfolded
        // solver path; the fold must forget it. Member 0's 1 GB alone before the fold takes
        // 10 ms; the same send after it stands for both members on sw -> gpu2, 20 ms more: done
        // at 30 ms (a stale record, without the shared link repeated, would end it at 20 ms).
        {
            Simulation sim;
            auto net = make_network(sim, c, NetworkConfig{}, &kept);
            Recorder rec;
            net->set_client(&rec);
            net->send(0, 2, Bytes{1'000'000'000}, 1);
            sim.run();
            CHECK(rec.done[1] == Time::ms(10));
            std::string why;
            REQUIRE(net->accelerator()->fold(2, {shared}, why));
            net->send(0, 2, Bytes{1'000'000'000}, 2);
            sim.run();
            CHECK(rec.done[2] == Time::ms(30));
        }
        // A link that members 0 and 1 share but member 2 does not (3 -> 1 crosses sw -> gpu1):
        // member 0's flow cannot stand for a number of flows there. Refused.
        Simulation sim;
        auto net = make_network(sim, c, NetworkConfig{}, &kept);
        FoldClass partly;
        partly.src = {0, 1, 3};
        partly.dst = {2, 2, 1};
        std::string why;
        CHECK_FALSE(net->accelerator()->fold(3, {partly}, why));
        CHECK(why.find("some members, not all") != std::string::npos);
        CHECK(net->accelerator()->fold_copies() == 1);
    }
    {
        // Eight GPUs on one switch. Member 0 sends 0 -> 2 and 1 -> 3 (four links of its own);
        // member 1 sends 5 -> 7 and 6 -> 7, both into sw -> gpu7: its map would carry two of
        // member 0's links onto one, and its two flows would share 100 GB/s where member 0's
        // run at 100 each. Refused.
        const Cluster eight = switch_node(8, 100 * GB, Time::zero());
        KeptState kept_eight(eight);
        Simulation sim;
        auto net = make_network(sim, eight, NetworkConfig{}, &kept_eight);
        FoldClass a, b;
        a.src = {0, 5};
        a.dst = {2, 7};
        b.src = {1, 6};
        b.dst = {3, 7};
        std::string why;
        CHECK_FALSE(net->accelerator()->fold(2, {a, b}, why));
        CHECK(why.find("one to one") != std::string::npos);
    }
    {
        // A capacity changed before the fold: refused; after an accepted fold: an error.
        Simulation sim;
        auto net = make_network(sim, c, NetworkConfig{}, &kept);
        net->schedule_link_capacity(Time::ms(1), 0, Bandwidth{50 * GB});
        std::string why;
        CHECK_FALSE(net->accelerator()->fold(2, {p2p}, why));
        CHECK(why == "a link capacity was changed");
        Simulation sim2;
        auto folded = make_network(sim2, c, NetworkConfig{}, &kept);
        REQUIRE(folded->accelerator()->fold(2, {p2p}, why));
        CHECK_THROWS_AS(folded->set_link_capacity(0, Bandwidth{50 * GB}), SimulationError);
    }
}

TEST_CASE("link totals: a kept plan's flows told per link, in whole bytes, as flow by flow") {
    // Observers that only sum per link (SummingObserver) are told by a network with fast paths
    // a transfer on a kept plan as per-link totals (on_link_totals), held to flush_link_totals
    // when the network is asked to; by a network without, flow by flow. Both must give the same
    // sums, and every flow counts whole bytes: a ring all-reduce of S = 1,000,000,001 bytes on 3
    // GPUs moves S/3 = 333,333,333.67 bytes per flow and step, counted as 333,333,334 (S is not a
    // multiple of 3, so the rounding is exercised). Each transfer is run twice and a p2p send
    // three times, so the held totals are told multiplied.
    struct Sums final : SummingObserver {
        std::map<topology::LinkId, std::pair<double, Time>> per_link;
        std::size_t totals_calls = 0;
        void on_flow_start(const FlowStart& f) override {
            for (auto l : f.path) {
                per_link[l].first += f.bytes;
                per_link[l].second += f.holds;
            }
        }
        void on_link_totals(Time at, std::span<const LinkTotal> totals,
                            std::int64_t count) override {
            ++totals_calls;
            SummingObserver::on_link_totals(at, totals, count);  // as one-link flows
        }
    };
    const auto sums = [](const Cluster& c, KeptState* kept, bool hold, Sums& s) {
        NetworkConfig cfg;
        cfg.fidelity = Fidelity::Analytical;
        Simulation sim;
        auto net = make_network(sim, c, cfg, kept);
        Recorder rec;
        net->set_client(&rec);
        net->add_observer(&s);
        if (hold) net->accelerator()->hold_link_totals();
        const GroupId g = net->register_group({0, 1, 2});
        std::uint64_t token = 0;
        for (int i = 0; i < 2; ++i) {
            net->collective(CollectiveKind::AllReduce, g, Bytes{1'000'000'001}, Algorithm::Ring,
                            token++);
            net->collective(CollectiveKind::AllGather, g, Bytes{999'999'999}, Algorithm::Ring,
                            token++);
        }
        for (int i = 0; i < 3; ++i)
            net->send(0, 3, Bytes{12'345}, token++);
        sim.run();
        if (Accelerator* a = net->accelerator()) a->flush_link_totals();
        return rec.done;
    };
    const Cluster plain = two_nodes(100 * GB, 50 * GB, 25 * GB);
    Sums flow_by_flow;
    const auto want = sums(plain, nullptr, false, flow_by_flow);
    CHECK(flow_by_flow.totals_calls == 0);  // no fast paths: told flow by flow
    REQUIRE_FALSE(flow_by_flow.per_link.empty());
    for (const auto& [link, sum] : flow_by_flow.per_link)
        CHECK(sum.first == std::floor(sum.first));
    for (const bool hold : {false, true}) {
        CAPTURE(hold);
        KeptState kept(plain);
        Sums totals;
        CHECK(sums(plain, &kept, hold, totals) == want);  // the same times
        CHECK(totals.totals_calls > 0);
        CHECK(totals.per_link == flow_by_flow.per_link);
        Sums again;  // a second network: the costs found kept, nothing computed
        CHECK(sums(plain, &kept, hold, again) == want);
        CHECK(again.per_link == flow_by_flow.per_link);
        // Held: each distinct (plan, size) told once at the flush, however often it ran.
        if (hold) CHECK(again.totals_calls <= 3);
    }
    // By hand, for the GPU 0 -> GPU 1 NVLink (link 0, the first one built), an edge of the ring
    // (GPUs 0, 1 and 2 are on two nodes, two and one: a single ring in group order). A ring
    // plan's edge is one flow over all its steps: the all-reduce's carries 2(n-1)/n x S =
    // 4/3 x 1,000,000,001 = 1,333,333,334.67 bytes, counted 1,333,333,335; the all-gather's
    // 2/3 x 999,999,999 = 666,666,666 exactly; both run twice: 2 x (1,333,333,335 + 666,666,666)
    // = 4,000,000,002 bytes (the shares themselves sum to 4,000,000,001.33). The p2p send from
    // GPU 0 to GPU 3 crosses four links (PCIe, IB, IB, PCIe), each carrying 3 x 12,345 = 37,035.
    CHECK(flow_by_flow.per_link.at(0).first == 4'000'000'002.0);
    std::size_t p2p_links = 0;
    for (const auto& [link, sum] : flow_by_flow.per_link)
        if (sum.first == 37'035.0) ++p2p_links;
    CHECK(p2p_links == 4);
}

TEST_CASE("NCCL protocols: LL, LL128 or Simple chosen by size as NCCL's tuning picks") {
    // Eight GPUs on one NVSwitch (450 GB/s ports, 1 us each), Simple's step overhead 8.6 us and
    // NCCL's LL/LL128 constants (docs/network.md, "Protocols"). A ring all_reduce has 2(n-1) = 14
    // steps and one edge flow of 2(n-1)/n x S = 1.75 S per edge (its route: two 1 us links).
    //   Simple: 14 x (8.6 + 2) us + 1.75 S / 450 GB/s
    //   LL128:  14 us + 14 x 1.9 us + 1.75 S / min(0.92 x 450, 16 x 36.7) GB/s = 414 GB/s
    //   LL:     6.6 us + 14 x 0.6 us + 1.75 S / min(450 / 4, 87.7) GB/s = 87.7 GB/s
    // S = 1 KiB:  Simple 148.40 us, LL128 40.60 us, LL 15.02 us       -> LL
    // S = 16 MiB: Simple 213.64 us, LL128 111.52 us, LL 349.78 us     -> LL128
    // S = 1 GiB:  Simple 4.324 ms, LL128 4.579 ms, LL 21.44 ms         -> Simple
    const Cluster c = switch_node(8, 450 * GB, Time::us(1));
    NetworkConfig config = flow_config(Time::ns(8600));
    config.protocols = nccl_protocols();
    const std::vector<int> all{0, 1, 2, 3, 4, 5, 6, 7};
    const auto protocol = [&](CollectiveKind kind, std::int64_t bytes) {
        return collective_choice(c, config, kind, all, Bytes{bytes}, Algorithm::Ring).second;
    };
    CHECK(protocol(CollectiveKind::AllReduce, 1024) == Protocol::Ll);
    CHECK(protocol(CollectiveKind::AllReduce, 16 << 20) == Protocol::Ll128);
    CHECK(protocol(CollectiveKind::AllReduce, 1 << 30) == Protocol::Simple);
    // The 1 KiB all_reduce run on the network: LL's 15.0 us plus 1792 B at 87.7 GB/s = 20.43 ns
    // (the 134 us of issue #37 was Simple's 14 steps).
    const Time ll =
        run_collective(c, config, CollectiveKind::AllReduce, all, Bytes{1024}, Algorithm::Ring);
    CHECK(std::abs((ll - Time::us(15) - Time::ps(20433)).count_ps()) <= 2);
    // all_to_all runs as NCCL's point-to-point operations: LL up to 16 KiB per peer. 64 KiB per
    // rank is 8 KiB per peer (LL); 1 MiB is 128 KiB per peer (Simple).
    CHECK(collective_choice(c, config, CollectiveKind::AllToAll, all, Bytes{64 << 10}).second ==
          Protocol::Ll);
    CHECK(collective_choice(c, config, CollectiveKind::AllToAll, all, Bytes{1 << 20}).second ==
          Protocol::Simple);
    // Forced per operation (network.protocols): LL128 even where LL is faster.
    config.protocol[static_cast<std::size_t>(CollectiveKind::AllReduce)] = Protocol::Ll128;
    CHECK(protocol(CollectiveKind::AllReduce, 1024) == Protocol::Ll128);
    // The nominal configuration has no protocol enabled: Auto runs Simple at every size.
    NetworkConfig nominal = flow_config(Time::ns(8600));
    CHECK(
        collective_choice(c, nominal, CollectiveKind::AllReduce, all, Bytes{1024}, Algorithm::Ring)
            .second == Protocol::Simple);
}

TEST_CASE("link chains: a NIC's two links carried as one solver link, with the same results") {
    // two_nodes with PCIe 40 GB/s below IB 50 GB/s: each NIC joins one GPU and the leaf, one
    // link each way, so gpu->nic is always followed by nic->leaf (and leaf->nic by nic->gpu):
    // merge_link_chains keeps the PCIe link of each chain (the least capacity, the link the
    // filling saturated first anyway). A send 0 -> 3 of 1 GB alone: 1 GB / 40 GB/s = 25 ms.
    // Then a mix (a ring all-reduce across the nodes, three sends, one inside a node) run
    // merged, with a KeptState but not merged, and without fast paths: completion times, flow
    // notifications and each link's busy and shared times (from the rate notifications, which
    // the merged network repeats for the dropped link of each chain) are equal.
    const Cluster c = two_nodes(200 * GB, 40 * GB, 50 * GB);
    KeptState kept(c);
    struct Outcome {
        std::map<std::uint64_t, Time> done;
        std::vector<FlowLog::Entry> flows;
        std::vector<LinkBusy::Link> busy;
        bool merged = false;
    };
    const auto run = [&c](KeptState* k, bool merge, bool mix) {
        Simulation sim;
        auto net = make_network(sim, c, flow_config(), k);
        Recorder rec;
        FlowLog log;
        LinkBusy busy;
        busy.links.resize(c.links().size());
        net->set_client(&rec);
        net->add_observer(&log);
        net->add_observer(&busy);
        Outcome out;
        if (merge) out.merged = net->accelerator()->merge_link_chains();
        if (mix) {
            const auto dp = net->register_group({0, 2});
            net->collective(CollectiveKind::AllReduce, dp, Bytes{1'000'000'000}, Algorithm::Ring,
                            1);
            net->send(0, 3, Bytes{500'000'000}, 2);
            net->send(1, 2, Bytes{700'000'000}, 3);
            net->send(0, 1, Bytes{300'000'000}, 4);
        } else {
            net->send(0, 3, Bytes{1'000'000'000}, 1);
        }
        sim.run();
        out.done = rec.done;
        out.flows = log.seen;
        out.busy = busy.links;
        return out;
    };
    const auto alone = run(&kept, true, false);
    CHECK(alone.merged);
    CHECK(alone.done.at(1) == Time::ms(25));
    // Every link of the route is told of the flow and of its rate (4 links: gpu0->nic0,
    // nic0->leaf, leaf->nic3, nic3->gpu3), busy the 25 ms.
    int busy_links = 0;
    for (const auto& l : alone.busy)
        if (l.busy == Time::ms(25)) ++busy_links;
    CHECK(busy_links == 4);

    const auto merged = run(&kept, true, true);
    const auto unmerged = run(&kept, false, true);
    const auto plain = run(nullptr, false, true);
    CHECK(merged.merged);
    CHECK(merged.done == unmerged.done);
    CHECK(merged.done == plain.done);
    REQUIRE(merged.flows.size() == plain.flows.size());
    for (std::size_t i = 0; i < merged.flows.size(); ++i) {
        CHECK(merged.flows[i].at == plain.flows[i].at);
        CHECK(merged.flows[i].path == plain.flows[i].path);
        CHECK(merged.flows[i].bytes == plain.flows[i].bytes);
    }
    REQUIRE(merged.busy.size() == plain.busy.size());
    bool shared = false;
    for (std::size_t l = 0; l < merged.busy.size(); ++l) {
        CHECK(merged.busy[l].busy == plain.busy[l].busy);
        CHECK(merged.busy[l].shared == plain.busy[l].shared);
        shared = shared || merged.busy[l].shared > Time::zero();
    }
    CHECK(shared);  // the mix does contend somewhere

    // A network without fast paths has no accelerator; a merged one refuses capacity changes,
    // and merging after a flow started is refused.
    Simulation sim;
    auto net = make_network(sim, c, flow_config(), &kept);
    REQUIRE(net->accelerator()->merge_link_chains());
    CHECK_THROWS_AS(net->set_link_capacity(0, Bandwidth{GB}), SimulationError);
    Simulation sim2;
    auto late = make_network(sim2, c, flow_config(), &kept);
    late->send(0, 3, Bytes{1'000'000'000}, 1);
    sim2.run_until(Time::ms(1));
    CHECK_FALSE(late->accelerator()->merge_link_chains());
}

TEST_CASE("the network's (plan, size) memo keeps every key apart through its growth") {
    // 50 plans x 40 sizes = 2,000 keys, inserted in an order that interleaves plans and sizes;
    // the table starts at 64 slots and doubles at half full, so it grows six times on the way
    // (64 -> 4,096 slots). Each key gets a value of its own (plan index x 1,000 + size); a second
    // pass finds every value as inserted (not fresh), so no growth lost or mixed a key, and the
    // same plan at two sizes, or two plans at one size, are different keys.
    std::vector<network::Plan> plans(50);
    network::detail::PlanSizeMap<std::int64_t> memo;
    for (std::int64_t size = 0; size < 40; ++size)
        for (std::size_t p = 0; p < plans.size(); ++p) {
            const auto [value, fresh] = memo.try_emplace(&plans[p], size);
            CHECK(fresh);
            CHECK(*value == 0);
            *value = static_cast<std::int64_t>(p) * 1000 + size;
        }
    CHECK(memo.size() == 2000);
    bool all = true;
    for (std::size_t p = 0; p < plans.size(); ++p)
        for (std::int64_t size = 0; size < 40; ++size) {
            const auto [value, fresh] = memo.try_emplace(&plans[p], size);
            all = all && !fresh && *value == static_cast<std::int64_t>(p) * 1000 + size;
        }
    CHECK(all);
    CHECK(memo.size() == 2000);
}

TEST_CASE("the network's word-keyed memo: find, insert after, clear") {
    // PlanBook's collective answers are kept by a word (never 0) and a size, found before they
    // are made and inserted after (a throw in between leaves nothing). 300 words x 3 sizes; find
    // misses each before its insertion and finds its value after; a word at another size is
    // another key; clear() forgets every key and the map fills again from empty.
    network::detail::PlanSizeMap<int, std::uint64_t> memo;
    CHECK(memo.find(1, 0) == nullptr);  // empty: no table yet
    for (std::uint64_t w = 1; w <= 300; ++w)
        for (std::int64_t size = 0; size < 3; ++size) {
            CHECK(memo.find(w, size) == nullptr);
            *memo.try_emplace(w, size).first = static_cast<int>(w) * 10 + static_cast<int>(size);
        }
    bool all = true;
    for (std::uint64_t w = 1; w <= 300; ++w)
        for (std::int64_t size = 0; size < 3; ++size) {
            const int* v = memo.find(w, size);
            all = all && v != nullptr && *v == static_cast<int>(w) * 10 + static_cast<int>(size);
        }
    CHECK(all);
    CHECK(memo.find(7, 3) == nullptr);
    CHECK(memo.size() == 900);
    memo.clear();
    CHECK(memo.size() == 0);
    CHECK(memo.find(7, 1) == nullptr);
    CHECK(memo.try_emplace(7, 1).second);
}

TEST_CASE("send_together's memo keys a message by its parts' contents") {
    // Keyed by (sources, destinations, size) as contents, whoever holds the lists: the same
    // parts in another vector find the first's value; one destination changed, the size
    // changed, or the parts a prefix of the others' are other keys. 2,000 messages (two parts
    // each, made from their number) grow the table from 64 slots past 4,096 without losing or
    // mixing one; clear() forgets them all.
    network::detail::GroupSendMap<int> memo;
    const std::vector<int> a = {0, 1, 2}, b = {8, 9, 10};
    *memo.try_emplace(a, b, 100).first = 1;
    const std::vector<int> a2 = a, b2 = b;
    auto [v, fresh] = memo.try_emplace(a2, b2, 100);
    CHECK_FALSE(fresh);
    CHECK(*v == 1);
    const std::vector<int> b3 = {8, 9, 11};
    CHECK(memo.try_emplace(a, b3, 100).second);
    CHECK(memo.try_emplace(a, b, 101).second);
    CHECK(memo.try_emplace(std::span(a).first(2), std::span(b).first(2), 100).second);
    CHECK(memo.size() == 4);
    memo.clear();
    CHECK(memo.size() == 0);
    for (int m = 0; m < 2000; ++m) {
        const std::vector<int> s = {m, m + 1}, d = {m + 2, 3 * m};
        const auto [value, made] = memo.try_emplace(s, d, m % 7);
        CHECK(made);
        *value = m;
    }
    bool all = true;
    for (int m = 0; m < 2000; ++m) {
        const std::vector<int> s = {m, m + 1}, d = {m + 2, 3 * m};
        const auto [value, made] = memo.try_emplace(s, d, m % 7);
        all = all && !made && *value == m;
    }
    CHECK(all);
    CHECK(memo.size() == 2000);
}

TEST_CASE("adaptive routing: a flow spreads over its leaf's spine links, and flows share them") {
    // 4 nodes of 1 GPU with one 400 Gbps NIC (50 GB/s; GPU to NIC over 64 GB/s of PCIe), 2 nodes
    // per leaf, each leaf with 2 up-links of 100 Gbps (12.5 GB/s) to 2 spines: between leaves
    // the up-links bind (efficiencies 1 here). A 2-rank ring all-reduce {0, 2} sends S / 2 twice
    // each way, one flow per direction, so its time is fixed costs + S / rate and the slope over
    // two sizes is 1 / rate. Under d_mod_k (one path per flow) a flow crosses one up-link:
    // 12.5 GB/s. Under adaptive it spreads over both, the bundle's 25 GB/s (the NIC's 50 does
    // not bind): the slopes differ by 2 exactly.
    // The ring {0, 2, 1, 3} puts two flows up each leaf (0 -> 2 and 1 -> 3 up leaf0): d_mod_k
    // sends them over spines 2 mod 2 = 0 and 3 mod 2 = 1, 12.5 GB/s each; adaptive shares the
    // 25 GB/s bundle between them, 12.5 GB/s each. Spreading adds no capacity: equal times.
    const std::string fabric =
        "node: {gpus: 1, gpu_model: H100, nics: {count: 1, bandwidth: 400Gbps}}\n"
        "nodes: 4\n"
        "fabric: {kind: leaf_spine, leaf: {down: 2, up: 2, bandwidth: 100Gbps}}\n";
    auto load = [&](const char* routing) {
        return topology::load_cluster(
            config::parse_document(fabric + "routing: " + routing + "\n", "adaptive.yaml"));
    };
    const Cluster single = load("d_mod_k"), spread = load("adaptive");
    NetworkConfig config;
    auto time = [&](const Cluster& c, const std::vector<int>& ring, std::int64_t bytes) {
        return isolated_collective_time(c, config, CollectiveKind::AllReduce, ring, Bytes{bytes},
                                        Algorithm::Ring)
            .seconds();
    };
    const std::int64_t s1 = 1'000'000'000, s2 = 2'000'000'000;
    auto slope = [&](const Cluster& c, const std::vector<int>& ring) {
        return (time(c, ring, s2) - time(c, ring, s1)) / static_cast<double>(s2 - s1);
    };
    CHECK(slope(single, {0, 2}) == doctest::Approx(1 / 12.5e9).epsilon(1e-6));
    CHECK(slope(spread, {0, 2}) == doctest::Approx(1 / 25e9).epsilon(1e-6));
    // ring of 4: 2 (n - 1) / n x S = 1.5 S per flow at 12.5 GB/s.
    CHECK(slope(single, {0, 2, 1, 3}) == doctest::Approx(1.5 / 12.5e9).epsilon(1e-6));
    CHECK(slope(spread, {0, 2, 1, 3}) == doctest::Approx(1.5 / 12.5e9).epsilon(1e-6));
}
