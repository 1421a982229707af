// A collective algorithm added by a test, the way a new algorithm is added to clustersim: one
// AlgorithmEntry (name, operations, condition, decomposition) registered on a copy of the bundled
// registry and handed to the network through NetworkConfig::algorithms.
//
// The toy "star" all-reduce reduces everything into the group's first rank, then sends the result
// back: two phases of n-1 flows that all cross the first rank's switch port, so the time is
// hand-computable.
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "network/network.hpp"

using namespace cs;
using namespace cs::network;
using topology::Cluster;

namespace {

constexpr double GB = 1e9;

// n GPUs on one NVSwitch; every GPU-switch link has `bw` bytes/s each way and latency `lat`.
Cluster switch_node(int n, double bw, Time lat) {
    topology::ClusterBuilder b;
    b.add_gpu_model({"test", {1e12}, {1e12}, {1e12}, {1e12}, {80'000'000'000}, {1e12}, {}, {}});
    topology::Device sw;
    sw.id = "nvswitch";
    sw.kind = topology::DeviceKind::NvSwitch;
    std::vector<topology::DeviceIndex> gpus;
    for (int i = 0; i < n; ++i) {
        topology::Device d;
        d.id = "gpu" + std::to_string(i);
        d.kind = topology::DeviceKind::Gpu;
        d.model = 0;
        gpus.push_back(b.add_device(d));
    }
    const auto s = b.add_device(sw);
    for (auto g : gpus)
        b.add_link(g, s, topology::LinkKind::NvSwitch, Bandwidth{bw}, lat);
    return b.build();
}

AlgorithmEntry star() {
    AlgorithmEntry e;
    e.name = "star";
    e.operations = {CollectiveKind::AllReduce};
    e.description = "reduce into the first rank, then send the result back";
    e.condition = [](const Cluster& cluster, const std::vector<int>& ranks) -> std::string {
        for (int r : ranks)
            if (cluster.node_of_gpu(r) != cluster.node_of_gpu(ranks.front()))
                return "star needs all ranks on one node";
        return {};
    };
    e.decompose = [](PlanBuilder& b, CollectiveKind, const std::vector<int>& ranks) {
        Phase& gather = b.phase(1);
        for (std::size_t i = 1; i < ranks.size(); ++i)
            b.flow(gather, ranks[i], ranks.front(), 1.0);
        Phase& scatter = b.phase(1);
        for (std::size_t i = 1; i < ranks.size(); ++i)
            b.flow(scatter, ranks.front(), ranks[i], 1.0);
    };
    return e;
}

struct WithStar {
    AlgorithmRegistry registry = AlgorithmRegistry::builtin();
    Algorithm id = registry.add(star());
};

Time run(const Cluster& c, const WithStar& algorithms, Fidelity fidelity, Bytes size) {
    struct Client : TransferClient {
        Time done = Time::max();
        void on_transfer_done(Simulation& sim, std::uint64_t) override { done = sim.now(); }
    };
    NetworkConfig config;  // nominal links, no step overhead
    config.fidelity = fidelity;
    config.algorithms = &algorithms.registry;
    Simulation sim;
    auto net = make_network(sim, c, config);
    Client client;
    net->set_client(&client);
    const GroupId g = net->register_group({0, 1, 2, 3, 4});
    net->collective(CollectiveKind::AllReduce, g, size, algorithms.id, 1);
    sim.run();
    REQUIRE(client.done != Time::max());
    return client.done;
}

}  // namespace

TEST_CASE("a registered algorithm is named, listed and parsed; the bundled registry is unchanged") {
    const WithStar s;
    // Appended after the six bundled rows, whose ids stay the constants.
    CHECK(s.id == Algorithm{7});
    CHECK(s.registry.name(s.id) == "star");
    CHECK(s.registry.name(Algorithm::Nvls) == "nvls");
    CHECK(s.registry.names().back() == "star");
    CHECK(parse_algorithm("star", SourceLocation{"--algo star"}, s.registry) == s.id);
    CHECK_THROWS_AS(parse_algorithm("star", SourceLocation{"--algo star"}), ConfigError);
    CHECK(!AlgorithmRegistry::builtin().find("star"));
    try {
        parse_algorithm("stra", SourceLocation{"--algo stra"}, s.registry);
        FAIL("no error for an unknown algorithm");
    } catch (const ConfigError& e) {
        CHECK(std::string(e.what()).find("expected auto, ring, tree, hierarchical, nvls, "
                                         "pairwise, direct or star") != std::string::npos);
    }
}

TEST_CASE("registering a taken name, auto, no operation or no decomposition is refused") {
    AlgorithmRegistry registry = AlgorithmRegistry::builtin();
    registry.add(star());
    CHECK_THROWS_AS(registry.add(star()), std::invalid_argument);
    AlgorithmEntry e = star();
    e.name = "auto";
    CHECK_THROWS_AS(registry.add(e), std::invalid_argument);
    e.name = "ring";
    CHECK_THROWS_AS(registry.add(e), std::invalid_argument);
    e = star();
    e.name = "star2";
    e.operations.clear();
    CHECK_THROWS_AS(registry.add(e), std::invalid_argument);
    e = star();
    e.name = "star3";
    e.decompose = nullptr;
    CHECK_THROWS_AS(registry.add(e), std::invalid_argument);
}

TEST_CASE("star all-reduce on 5 GPUs: 2 (n-1) S / B + 2 phases x 2 hops of latency") {
    // 5 GPUs on one switch, 100 GB/s and 1 us per GPU-switch link, S = 1 GB.
    // Flow: the 4 gathers all end on link switch->gpu0 and share it (25 GB/s each):
    // 4 x 1 GB / 100 GB/s = 40 ms, after the phase's step latency gpu->switch->gpu = 2 us.
    // The 4 scatters share gpu0->switch the same way: another 2 us + 40 ms. Total 80 ms + 4 us.
    const Cluster c = switch_node(5, 100 * GB, Time::us(1));
    const WithStar s;
    CHECK(run(c, s, Fidelity::Flow, Bytes{1'000'000'000}) == Time::ms(80) + Time::us(4));
    // Analytical: no sharing, each flow alone takes 1 GB / 100 GB/s = 10 ms per phase:
    // 2 x (2 us + 10 ms) = 20 ms + 4 us.
    CHECK(run(c, s, Fidelity::Analytical, Bytes{1'000'000'000}) == Time::ms(20) + Time::us(4));
    CHECK(run(c, s, Fidelity::Ideal, Bytes{1'000'000'000}) == Time::zero());
}

TEST_CASE("the registry's operations and condition decide where the toy applies") {
    const Cluster c = switch_node(5, 100 * GB, Time::us(1));
    const WithStar s;
    const std::vector<int> ranks{0, 1, 2, 3, 4};
    CHECK(resolve_algorithm(c, CollectiveKind::AllReduce, ranks, Bytes{1}, s.id, s.registry) ==
          s.id);
    // all_gather is not among its operations: the message says what it runs and what would.
    try {
        resolve_algorithm(c, CollectiveKind::AllGather, ranks, Bytes{1}, s.id, s.registry);
        FAIL("star accepted for all_gather");
    } catch (const ConfigError& e) {
        const std::string m = e.what();
        CHECK(m.find("star runs all_reduce only") != std::string::npos);
        CHECK(m.find("; use ring") != std::string::npos);
    }
    // For all_reduce on one NVSwitch node every bundled all-reduce algorithm but tree applies,
    // and so does star: the alternatives listed for a refused tree end with it.
    try {
        resolve_algorithm(c, CollectiveKind::AllReduce, ranks, Bytes{1}, Algorithm::Tree,
                          s.registry);
        FAIL("tree accepted on one node");
    } catch (const ConfigError& e) {
        CHECK(std::string(e.what()).find("use ring, hierarchical, nvls or star") !=
              std::string::npos);
    }
    // Auto never picks a registered algorithm: it follows NCCL's choice among the bundled ones
    // (one node, n = 5 > 4 GPUs on NVSwitches: nvls).
    CHECK(choose_algorithm(c, CollectiveKind::AllReduce, ranks, Bytes{1}, s.registry) ==
          Algorithm::Nvls);
}
