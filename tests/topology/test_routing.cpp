#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "bundled.hpp"
#include "config/document.hpp"
#include "core/errors.hpp"
#include "topology/summary.hpp"
#include "topology/topology_spec.hpp"
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

namespace {
// route_lengths(src, every GPU) against the length of route(src, d, flow) for flows 0 and 7
// (route lengths are shortest-path lengths, the same for every flow), for the given sources.
void check_lengths(const Cluster& c, const std::vector<int>& sources) {
    std::vector<int> all(static_cast<std::size_t>(c.gpu_count()));
    for (int d = 0; d < c.gpu_count(); ++d)
        all[static_cast<std::size_t>(d)] = d;
    std::vector<int> lengths;
    for (int s : sources) {
        c.route_lengths(s, all, lengths);
        REQUIRE(lengths.size() == all.size());
        for (int d = 0; d < c.gpu_count(); ++d) {
            CAPTURE(s);
            CAPTURE(d);
            const auto len = static_cast<int>(route_of(c, s, d, 0).size());
            CHECK(lengths[static_cast<std::size_t>(d)] == len);
            CHECK(static_cast<int>(route_of(c, s, d, 7).size()) == len);
        }
    }
}
}  // namespace

TEST_CASE("route_lengths: the lengths route() takes, from one fabric search per source") {
    SUBCASE("by hand: rail-optimised leaf-spine") {
        // 4 nodes of 8 GPUs, one leaf per rail, spines above. From n0.gpu0: itself 0; n0.gpu3 via
        // the NVSwitch 2; n1.gpu0 and n2.gpu0 on rail 0 (nic, leaf0, nic, gpu) 4; n2.gpu3 on rail
        // 3 (nic0, leaf0, a spine, leaf3, n2.nic3, gpu) 6.
        const Cluster c = load_text(
            "node: {gpus: 8, gpu_model: H100, intra: {kind: nvswitch, bandwidth: 450GB/s},\n"
            "       nics: {count: 8, bandwidth: 400Gbps, rail_optimized: true}}\n"
            "nodes: 4\n"
            "fabric: {kind: leaf_spine, leaf: {down: 4}}\n");
        std::vector<int> lengths;
        c.route_lengths(0, {0, 3, 8, 16, 19}, lengths);
        CHECK(lengths == std::vector<int>{0, 2, 4, 4, 6});
        check_lengths(c, {0, 5, 31});
    }
    SUBCASE("three-tier fat tree across pods, oversubscribed") {
        const Cluster c = load_text(
            "node: {gpus: 2, gpu_model: H100, intra: {kind: nvswitch, bandwidth: 450GB/s},\n"
            "       nics: {count: 2, bandwidth: 400Gbps, rail_optimized: true}}\n"
            "nodes: 10\n"
            "fabric: {kind: fat_tree, leaf: {down: 2, up: 2, bandwidth: 200Gbps},\n"
            "         spine: {down: 2, up: 1, bandwidth: 200Gbps}}\n");
        check_lengths(c, {0, 1, 7, 19});
    }
    SUBCASE("bundled fabrics: PCIe servers, an oversubscribed pod, a 3-tier SuperPOD") {
        check_lengths(cs::test::load_bundled("ethernet-a100-pcie.yaml"), {0, 3, 9, 63});
        check_lengths(cs::test::load_bundled("h100-4node-oversubscribed.yaml"), {0, 9, 15});
        check_lengths(cs::test::load_bundled("dgx-a100-superpod.yaml", "40"), {0, 7, 100, 319});
        check_lengths(cs::test::load_bundled("h200-2gpu-nvlink.yaml"), {0, 1});
    }
    SUBCASE("failed links: the search avoids them as route() does") {
        // Every leaf0 - spine link but one fails (both directions): rail 0's way up is the
        // surviving spine, lengths unchanged. With that one failed too, rail 0 reaches other
        // rails by no path (NICs serve only their own GPU, routes never transit a GPU): route()
        // throws, and so does route_lengths; rail 0 and the node's own GPUs stay reachable.
        const Cluster base = load_text(
            "node: {gpus: 8, gpu_model: H100, intra: {kind: nvswitch, bandwidth: 450GB/s},\n"
            "       nics: {count: 8, bandwidth: 400Gbps, rail_optimized: true}}\n"
            "nodes: 4\n"
            "fabric: {kind: leaf_spine, leaf: {down: 4}}\n");
        std::vector<LinkId> up;  // leaf0 <-> spine links, both directions
        for (LinkId l = 0; l < base.links().size(); ++l) {
            const auto& from = base.devices()[base.links()[l].from].id;
            const auto& to = base.devices()[base.links()[l].to].id;
            if ((from == "leaf0" && to.starts_with("spine")) ||
                (to == "leaf0" && from.starts_with("spine")))
                up.push_back(l);
        }
        REQUIRE(up.size() > 2);
        const std::vector<LinkId> all_but_one(up.begin() + 2, up.end());
        const Cluster some = base.with_faults(all_but_one, {});
        check_lengths(some, {0, 3, 8});
        std::vector<int> lengths;
        some.route_lengths(0, {19}, lengths);
        CHECK(lengths == std::vector<int>{6});
        const Cluster none = base.with_faults(up, {});
        CHECK_THROWS_AS(none.route_lengths(0, {19}, lengths), NoPathError);
        CHECK_THROWS_AS(route_of(none, 0, 19, 0), NoPathError);
        none.route_lengths(0, {8, 1}, lengths);  // rail 0 and in-node still reachable
        CHECK(lengths == std::vector<int>{4, 2});
    }
    SUBCASE("direct cables between nodes: route() throughout") {
        const Cluster c = load_text(
            "devices:\n"
            "  - {id: a0, type: gpu, model: H100, node: 0}\n"
            "  - {id: a1, type: gpu, model: H100, node: 0}\n"
            "  - {id: b0, type: gpu, model: H100, node: 1}\n"
            "  - {id: na, type: nic, node: 0}\n"
            "  - {id: nb, type: nic, node: 1}\n"
            "links:\n"
            "  - {from: a0, to: a1, kind: nvlink, bandwidth: 450GB/s}\n"
            "  - {from: a0, to: na, kind: pcie, bandwidth: 64GB/s}\n"
            "  - {from: a1, to: na, kind: pcie, bandwidth: 64GB/s}\n"
            "  - {from: b0, to: nb, kind: pcie, bandwidth: 64GB/s}\n"
            "  - {from: na, to: nb, kind: infiniband, bandwidth: 400Gbps}\n");
        std::vector<int> lengths;
        c.route_lengths(1, {0, 1, 2}, lengths);
        CHECK(lengths == std::vector<int>{1, 0, 3});  // a1-a0 cable; a1, na, nb, b0
        check_lengths(c, {0, 1, 2});
    }
}

TEST_CASE("with_faults after routing: the copy routes as a fresh cluster's copy does") {
    // A rail-optimised leaf-spine cluster: pairs inside a node, across leaves (ECMP over the
    // spines, so the flow id matters) and to the same GPU. `used` has routed every pair first
    // (its hop tables made); its copy with failed links must not route on them.
    const std::string text =
        "node: {gpus: 8, gpu_model: H100, intra: {kind: nvswitch, bandwidth: 450GB/s},\n"
        "       nics: {count: 8, bandwidth: 400Gbps, rail_optimized: true}}\n"
        "nodes: 8\n"
        "fabric: {kind: leaf_spine, leaf: {down: 4}}\n";
    const Cluster plain = load_text(text);
    const Cluster used = load_text(text);
    std::vector<std::tuple<int, int, std::uint64_t>> asked;
    for (int src = 0; src < 64; src += 5)
        for (int dst = 0; dst < 64; dst += 7)
            for (std::uint64_t flow : {0u, 1u, 99u})
                asked.emplace_back(src, dst, flow);
    // Each route twice, appended after what `out` already holds: the same as a fresh cluster's.
    for (int pass = 0; pass < 2; ++pass)
        for (const auto& [src, dst, flow] : asked) {
            std::vector<LinkId> out{7};
            used.route(src, dst, flow, out);
            std::vector<LinkId> want{7};
            plain.route(src, dst, flow, want);
            CHECK(out == want);
        }
    // A copy with failed links: rail 0's leaf loses all but one spine, so its routes across
    // leaves change; the copy routes as the copy of a cluster that never routed does.
    std::vector<LinkId> up;  // leaf0 <-> spine links but the first spine's, both directions
    for (LinkId l = 0; l < plain.links().size(); ++l) {
        const auto& from = plain.devices()[plain.links()[l].from].id;
        const auto& to = plain.devices()[plain.links()[l].to].id;
        if ((from == "leaf0" && to.starts_with("spine") && to != "spine0") ||
            (to == "leaf0" && from.starts_with("spine") && from != "spine0"))
            up.push_back(l);
    }
    REQUIRE(!up.empty());
    const Cluster faulted = used.with_faults(up, {});
    const Cluster fresh = load_text(text).with_faults(up, {});
    int changed = 0;
    for (const auto& [src, dst, flow] : asked) {
        const auto r = route_of(faulted, src, dst, flow);
        CHECK(r == route_of(fresh, src, dst, flow));
        changed += r != route_of(plain, src, dst, flow) ? 1 : 0;
    }
    CHECK(changed > 0);  // the faults did change some of the routes asked for
}

TEST_CASE("d_mod_k: the destination's digits choose the spine and the core, whatever the flow") {
    // The fat tree of the ECMP test above (1 GPU per node, 2 leaves of 1 node per pod, 2 spines
    // per pod, 2 cores per spine plane), routed destination-mod-k. Up from a leaf the route
    // meets 2 spines (links in spine order), then 2 cores of the spine's plane; down it has no
    // choice. So for destination d: spine d mod 2, then core (d / 2) mod 2 of that plane, whose
    // name is core<plane x 2 + index>.
    //   0 -> 2: spine 0, core (2 / 2) mod 2 = 1 of plane 0 = core1, pod1.spine0.
    //   0 -> 3: spine 1, core (3 / 2) mod 2 = 1 of plane 1 = core3, pod1.spine1.
    //   1 -> 2: the same spine index and core as 0 -> 2 (the destination alone decides).
    const std::string yaml =
        "node: {gpus: 1, gpu_model: H100, nics: {count: 1, bandwidth: 400Gbps}}\n"
        "nodes: 4\n"
        "routing: d_mod_k\n"
        "fabric: {kind: fat_tree, leaf: {down: 1, up: 2, bandwidth: 200Gbps},\n"
        "         spine: {down: 2, up: 2, bandwidth: 200Gbps}}\n";
    const Cluster c = load_text(yaml);
    CHECK(c.routing() == Routing::DModK);
    for (std::uint64_t flow : {0u, 1u, 77u}) {
        const auto h02 = hops_of(c, route_of(c, 0, 2, flow));
        REQUIRE(h02.size() == 8);  // nic, leaf, spine, core, spine, leaf, nic, gpu
        CHECK(h02[2] == "pod0.spine0");
        CHECK(h02[3] == "core1");
        CHECK(h02[4] == "pod1.spine0");
        const auto h03 = hops_of(c, route_of(c, 0, 3, flow));
        CHECK(h03[2] == "pod0.spine1");
        CHECK(h03[3] == "core3");
        CHECK(h03[4] == "pod1.spine1");
        const auto h12 = hops_of(c, route_of(c, 1, 2, flow));
        CHECK(h12[2] == "pod0.spine0");
        CHECK(h12[3] == "core1");
    }
    // The default is hashed ECMP, and an unknown policy is refused with the accepted ones.
    CHECK(load_text("node: {gpus: 1, gpu_model: H100}\nnodes: 1\n").routing() == Routing::Ecmp);
    try {
        (void)load_text("node: {gpus: 1, gpu_model: H100}\nnodes: 1\nrouting: random\n");
        FAIL("an unknown routing was accepted");
    } catch (const ConfigError& e) {
        const std::string what = e.what();
        CHECK(what.find("ecmp") != std::string::npos);
        CHECK(what.find("d_mod_k") != std::string::npos);
        CHECK(what.find("adaptive") != std::string::npos);
    }
}

TEST_CASE("d_mod_k: GPUs that differ only in their rail take images of each other's routes") {
    // 8 GPUs and 8 rail NICs per node, 64 nodes: two leaves per rail (32 nodes each) joined by
    // 32 spines. GPU g = 8 x node + rail. From node 0 to node 40 (the other leaf group), rail r:
    // the leaf's spine is (8 x 40 + r) mod 32 = r, so rails take spines 0..7, one each, and the
    // links of two rails' routes are disjoint: what lets the network fold a worker's members.
    const Cluster c = load_text(
        "node: {gpus: 8, gpu_model: H100, intra: {kind: nvswitch, bandwidth: 450GB/s},\n"
        "       nics: {count: 8, bandwidth: 400Gbps, rail_optimized: true}}\n"
        "nodes: 64\n"
        "routing: d_mod_k\n"
        "fabric: {kind: leaf_spine, leaf: {down: 32, up: 32}}\n");
    std::set<LinkId> used;
    for (int r = 0; r < 8; ++r) {
        const auto route = route_of(c, r, 8 * 40 + r, 0);
        const auto h = hops_of(c, route);
        REQUIRE(h.size() == 6);  // nic, leaf, spine, leaf, nic, gpu
        CHECK(h[2] == "spine" + std::to_string(r));
        for (LinkId l : route)
            CHECK(used.insert(l).second);
    }
}

TEST_CASE("adaptive: each tier above the leaves is one switch per pod, its links bundles") {
    // The fat tree of the d_mod_k test above (4 nodes of 1 GPU, one node per leaf, 2 leaves per
    // pod, 2 spines per pod with 2 up-links each at 200 Gbps = 25 GB/s). Under adaptive routing
    // a flow leaving leaf0 spreads over both its spine links, and one leaving pod 0 over all
    // 2 x 2 spine-to-core links, so the spines of a pod are one switch standing for 2, the cores
    // one standing for 4, a leaf's link up a bundle of 2 (50 GB/s) and a pod's link to the
    // cores a bundle of 4 (100 GB/s). Routes keep their hops: nic, leaf, spines, cores, spines,
    // leaf, nic, gpu.
    const std::string fabric =
        "node: {gpus: 1, gpu_model: H100, nics: {count: 1, bandwidth: 400Gbps}}\n"
        "nodes: 4\n"
        "fabric: {kind: fat_tree, leaf: {down: 1, up: 2, bandwidth: 200Gbps},\n"
        "         spine: {down: 2, up: 2, bandwidth: 200Gbps}}\n";
    const Cluster c = load_text(fabric + "routing: adaptive\n");
    CHECK(c.routing() == Routing::Adaptive);
    for (std::uint64_t flow : {0u, 1u, 77u}) {
        const auto r = route_of(c, 0, 2, flow);
        const auto h = hops_of(c, r);
        REQUIRE(h.size() == 8);
        CHECK(h[1] == "leaf0");
        CHECK(h[2] == "pod0.spines");
        CHECK(h[3] == "cores");
        CHECK(h[4] == "pod1.spines");
        CHECK(h[5] == "leaf2");
        const Link& up = c.links()[r[2]];
        CHECK(up.count == 2);
        CHECK(up.bandwidth.bytes_per_s == doctest::Approx(50e9));
        const Link& pod_up = c.links()[r[3]];
        CHECK(pod_up.count == 4);
        CHECK(pod_up.bandwidth.bytes_per_s == doctest::Approx(100e9));
        // Inside the pod: leaf0 -> pod0.spines -> leaf1, no core.
        CHECK(hops_of(c, route_of(c, 0, 1, flow))[2] == "pod0.spines");
        CHECK(hops_of(c, route_of(c, 0, 1, flow)).size() == 6);
    }
    const auto& devices = c.devices();
    const auto spines = std::find_if(devices.begin(), devices.end(),
                                     [](const Device& d) { return d.id == "pod0.spines"; });
    REQUIRE(spines != devices.end());
    CHECK(spines->stands_for == 2);
    // `clustersim topology` describes the physical cluster: the same switches, links,
    // bandwidths and diameter as the fabric routed by ECMP; only the routing differs.
    const TopologySummary merged = summarize(c);
    const TopologySummary physical = summarize(load_text(fabric));
    CHECK(merged.switches_by_tier == physical.switches_by_tier);
    CHECK(merged.switches_by_tier.at(3) == 4);
    CHECK(merged.devices_by_kind == physical.devices_by_kind);
    CHECK(merged.links_by_kind == physical.links_by_kind);
    CHECK(merged.diameter_hops == physical.diameter_hops);
    CHECK(merged.inter_node_bandwidth_per_gpu.bytes_per_s ==
          physical.inter_node_bandwidth_per_gpu.bytes_per_s);
    CHECK(merged.routing == "adaptive");
    CHECK(physical.routing == "ecmp");
    // The memory estimate counts what is built. Its fabric term (estimate_size): leaves =
    // ceil(4 NIC ports / 1 down) + 1 NIC per node = 5, u1 = 2 spines per pod, pods = ceil(5 / 2)
    // = 3, u2 = 2 cores per spine plane. Physical: 3 x 2 + 2 x 2 = 10 switches and 5 x 2 + 3 x 2
    // x 2 = 22 links; adaptive: 3 pods' spines + the cores = 4 switches, 5 + 3 = 8 links. So 6
    // devices and 2 x 14 = 28 directed links fewer.
    const auto estimate = [](const std::string& text) {
        return estimate_size(parse_topology(config::parse_document(text, "route.yaml")));
    };
    const TopologySize ecmp = estimate(fabric), adaptive = estimate(fabric + "routing: adaptive\n");
    CHECK(ecmp.devices - adaptive.devices == doctest::Approx(6));
    CHECK(ecmp.directed_links - adaptive.directed_links == doctest::Approx(28));
}

TEST_CASE("adaptive: a leaf-spine's spines are one switch; a hand-written fabric is refused") {
    // leaf_spine, 64 nodes of 8 rails, leaf down 32 up 32: 32 spines, joined as "spines" with a
    // 32-link bundle from every leaf (2 leaf groups x 8 rails = 16 leaves).
    const Cluster c = load_text(
        "node: {gpus: 8, gpu_model: H100, intra: {kind: nvswitch, bandwidth: 450GB/s},\n"
        "       nics: {count: 8, bandwidth: 400Gbps, rail_optimized: true}}\n"
        "nodes: 64\n"
        "routing: adaptive\n"
        "fabric: {kind: leaf_spine, leaf: {down: 32, up: 32}}\n");
    const auto h = hops_of(c, route_of(c, 3, 8 * 40 + 3, 0));
    REQUIRE(h.size() == 6);  // nic, leaf, spines, leaf, nic, gpu
    CHECK(h[2] == "spines");
    CHECK(summarize(c).switches_by_tier.at(2) == 32);
    CHECK(summarize(c).switches_by_tier.at(1) == 16);
    // Switches outside the nodes or cables between nodes written by hand have no tiers to
    // spread over: refused at the routing key naming the switch, or at the link, also when the
    // link names generated devices (a cable between two generated nodes, or into the merged
    // spines).
    const std::string generated =
        "node: {gpus: 1, gpu_model: H100, nics: {count: 1, bandwidth: 400Gbps}}\n"
        "nodes: 4\n"
        "routing: adaptive\n"
        "fabric: {kind: leaf_spine, leaf: {down: 2, up: 2}}\n";
    const std::string nodes =
        "devices:\n"
        "  - {id: a, type: gpu, model: H100, node: 0}\n"
        "  - {id: b, type: gpu, model: H100, node: 1}\n";
    for (const auto& [text, named] : std::vector<std::pair<std::string, std::string>>{
             {nodes + "  - {id: sw, type: switch}\n"
                      "links:\n"
                      "  - {from: a, to: sw, kind: infiniband, bandwidth: 400Gbps}\n"
                      "  - {from: b, to: sw, kind: infiniband, bandwidth: 400Gbps}\n"
                      "routing: adaptive\n",
              "switch 'sw'"},
             {nodes + "links:\n  - {from: a, to: b, kind: infiniband, bandwidth: 400Gbps}\n"
                      "routing: adaptive\n",
              "the link a - b joins two nodes"},
             {generated + "links:\n  - {from: n1.nic0, to: n3.nic0, kind: infiniband, "
                          "bandwidth: 400Gbps}\n",
              "the link n1.nic0 - n3.nic0 joins two nodes"},
             {generated + "links:\n  - {from: n0.nic0, to: spines, kind: infiniband, "
                          "bandwidth: 400Gbps}\n",
              "the link n0.nic0 - spines reaches the fabric"}}) {
        try {
            (void)load_text(text);
            FAIL("adaptive routing over a hand-written fabric was accepted");
        } catch (const ConfigError& e) {
            const std::string what = e.what();
            CHECK(what.find("route.yaml:") != std::string::npos);
            CHECK(what.find(named) != std::string::npos);
            CHECK(what.find("ecmp or d_mod_k") != std::string::npos);
        }
    }
}
