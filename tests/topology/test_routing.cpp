#include <doctest/doctest.h>

#include <map>
#include <set>
#include <string>

#include "config/document.hpp"
#include "topology/topology_yaml.hpp"

using namespace cs;
using namespace cs::topology;

namespace {
Cluster load_text(const std::string& text) {
    return load_cluster(config::parse_document(text, "route.yaml"));
}
std::vector<LinkId> route_of(const Cluster& c, int src, int dst, std::uint64_t flow) {
    std::vector<LinkId> r;
    c.route(src, dst, flow, r);
    return r;
}
// The devices a route visits after the source.
std::vector<std::string> hops_of(const Cluster& c, const std::vector<LinkId>& r) {
    std::vector<std::string> out;
    for (LinkId l : r)
        out.push_back(c.devices()[c.links()[l].to].id);
    return out;
}
}  // namespace

TEST_CASE("ECMP: a leaf-spine route spreads over every spine") {
    // 4 nodes per leaf (4 down ports, 1 NIC per node), leaf up = 4 -> 4 spines; nodes 0 and 4
    // sit on different leaves, so every path is gpu, nic, leaf0, spine j, leaf1, nic, gpu.
    const Cluster c = load_text(
        "node: {gpus: 2, gpu_model: H100, intra: {kind: nvswitch, bandwidth: 450GB/s},\n"
        "       nics: {count: 1, bandwidth: 400Gbps}}\n"
        "nodes: 8\n"
        "fabric: {kind: leaf_spine, leaf: {down: 4}}\n");
    std::map<std::string, int> per_spine;
    for (std::uint64_t flow = 0; flow < 400; ++flow) {
        const auto r = route_of(c, 0, 8, flow);
        REQUIRE(r.size() == 6);
        // Links of a path are consecutive: each starts where the previous ended.
        for (std::size_t i = 1; i < r.size(); ++i)
            CHECK(c.links()[r[i]].from == c.links()[r[i - 1]].to);
        ++per_spine[hops_of(c, r)[2]];
    }
    // All 4 equal-cost paths are used; a uniform hash puts about 100 flows on each.
    REQUIRE(per_spine.size() == 4);
    for (const auto& [spine, n] : per_spine)
        CHECK(n > 50);
    // The same (src, dst, flow) always takes the same path.
    CHECK(route_of(c, 0, 8, 17) == route_of(c, 0, 8, 17));
}

TEST_CASE("ECMP: across pods a fat tree uses every spine x core combination") {
    // 1 node per leaf (1 NIC, leaf down 1, up 2 with bandwidth given), 2 leaves per pod, spine up
    // 2: from a pod, 2 spines x 2 cores in each spine's plane = 4 equal-cost paths up; the way
    // down is then fixed by the plane. Nodes 0 and 2 are in pods 0 and 1.
    const Cluster c = load_text(
        "node: {gpus: 1, gpu_model: H100, nics: {count: 1, bandwidth: 400Gbps}}\n"
        "nodes: 4\n"
        "fabric: {kind: fat_tree, leaf: {down: 1, up: 2, bandwidth: 200Gbps},\n"
        "         spine: {down: 2, up: 2, bandwidth: 200Gbps}}\n");
    std::set<std::pair<std::string, std::string>> seen;
    for (std::uint64_t flow = 0; flow < 200; ++flow) {
        const auto r = route_of(c, 0, 2, flow);
        // gpu, nic, leaf, spine, core, spine, leaf, nic, gpu
        REQUIRE(r.size() == 8);
        const auto h = hops_of(c, r);
        seen.emplace(h[2], h[3]);
    }
    CHECK(seen.size() == 4);
    // Inside one pod no core is used: gpu, nic, leaf0, spine, leaf1, nic, gpu.
    CHECK(route_of(c, 0, 1, 0).size() == 6);
}

TEST_CASE("intra-node traffic stays on the node's fabric; inter-node goes through NICs") {
    const Cluster c = load_text(
        "node: {gpus: 8, gpu_model: H100, intra: {kind: nvswitch, bandwidth: 450GB/s},\n"
        "       nics: {count: 8, bandwidth: 400Gbps, rail_optimized: true}}\n"
        "nodes: 4\n"
        "fabric: {kind: leaf_spine, leaf: {down: 4}}\n");
    for (int b = 1; b < 8; ++b) {
        const auto r = route_of(c, 0, b, 3);
        REQUIRE(r.size() == 2);
        CHECK(c.links()[r[0]].kind == LinkKind::NvSwitch);
    }
    // GPU 3 of node 0 to GPU 3 of node 2: its own rail-3 NIC, the shared rail-3 leaf, NIC, GPU.
    const auto h = hops_of(c, route_of(c, 3, 19, 0));
    CHECK(h == std::vector<std::string>{"n0.nic3", "leaf3", "n2.nic3", "n2.gpu3"});
}

TEST_CASE("explicit clusters with direct cables between nodes use the general router") {
    // Two nodes of two GPUs on NVLink, joined by two direct IB cables (no fabric switch).
    const Cluster c = load_text(
        "devices:\n"
        "  - {id: a0, type: gpu, model: H100, node: 0}\n"
        "  - {id: a1, type: gpu, model: H100, node: 0}\n"
        "  - {id: b0, type: gpu, model: H100, node: 1}\n"
        "  - {id: b1, type: gpu, model: H100, node: 1}\n"
        "  - {id: na, type: nic, node: 0}\n"
        "  - {id: nb, type: nic, node: 1}\n"
        "links:\n"
        "  - {from: a0, to: a1, kind: nvlink, bandwidth: 450GB/s}\n"
        "  - {from: b0, to: b1, kind: nvlink, bandwidth: 450GB/s}\n"
        "  - {from: a0, to: na, kind: pcie, bandwidth: 64GB/s}\n"
        "  - {from: a1, to: na, kind: pcie, bandwidth: 64GB/s}\n"
        "  - {from: b0, to: nb, kind: pcie, bandwidth: 64GB/s}\n"
        "  - {from: b1, to: nb, kind: pcie, bandwidth: 64GB/s}\n"
        "  - {from: na, to: nb, kind: infiniband, bandwidth: 400Gbps, count: 2}\n");
    CHECK(c.node_count() == 2);
    // a1 -> na -> nb -> b0: 3 hops, 2 x 50 GB/s bonded on the cable.
    const auto r = route_of(c, 1, 2, 0);
    CHECK(hops_of(c, r) == std::vector<std::string>{"na", "nb", "b0"});
    CHECK(c.route_bandwidth(r).bytes_per_s == doctest::Approx(64e9));
}
