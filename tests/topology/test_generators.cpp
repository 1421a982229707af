#include <doctest/doctest.h>

#include <map>
#include <string>

#include "config/document.hpp"
#include "topology/topology_yaml.hpp"

using namespace cs;
using namespace cs::topology;

namespace {
Cluster load_text(const std::string& text) {
    return load_cluster(config::parse_document(text, "gen.yaml"));
}
std::map<DeviceKind, int> devices_by_kind(const Cluster& c) {
    std::map<DeviceKind, int> out;
    for (const auto& d : c.devices())
        ++out[d.kind];
    return out;
}
std::size_t physical_links(const Cluster& c) {
    return c.links().size() / 2;
}
}  // namespace

TEST_CASE("one node on an NVSwitch, no NICs") {
    const Cluster c = load_text(
        "node: {gpus: 8, gpu_model: H100, intra: {kind: nvswitch, bandwidth: 450GB/s}}\n"
        "nodes: 1\n");
    // 8 GPUs + 1 logical NVSwitch; one GPU-NVSwitch link per GPU.
    CHECK(c.gpu_count() == 8);
    CHECK(c.devices().size() == 9);
    CHECK(physical_links(c) == 8);
    CHECK(c.gpu_model(0).name == "H100-SXM");
    std::vector<LinkId> r;
    c.route(2, 5, 0, r);
    // gpu2 -> nvswitch -> gpu5, each hop 450 GB/s, 0.5 us by default.
    REQUIRE(r.size() == 2);
    CHECK(c.links()[r[0]].kind == LinkKind::NvSwitch);
    CHECK(c.route_bandwidth(r).bytes_per_s == doctest::Approx(450e9));
    CHECK(c.route_latency(r) == Time::us(1));
}

TEST_CASE("single switch: 4 nodes x (8 GPUs, 8 rail NICs)") {
    const Cluster c = load_text(
        "node: {gpus: 8, gpu_model: A100, intra: {kind: nvswitch, bandwidth: 300GB/s},\n"
        "       nics: {count: 8, kind: infiniband, bandwidth: 200Gbps}}\n"
        "nodes: 4\n"
        "fabric: {kind: single_switch, ports: 32}\n");
    // per node 8 GPUs + 1 NVSwitch + 8 NICs = 17; 4 nodes = 68; + 1 switch = 69.
    CHECK(c.gpu_count() == 32);
    CHECK(c.devices().size() == 69);
    // per node 8 GPU-NVSwitch + 8 GPU-NIC + 8 NIC-switch = 24; x 4 = 96.
    CHECK(physical_links(c) == 96);
    CHECK(c.node_count() == 4);
    // node-major numbering: GPU g of node n is n x 8 + g.
    CHECK(c.node_of_gpu(13) == 1);
    CHECK(c.devices()[c.gpu_device(13)].id == "n1.gpu5");
    std::vector<LinkId> r;
    c.route(0, 9, 0, r);
    // gpu -> nic -> switch -> nic -> gpu
    REQUIRE(r.size() == 4);
    CHECK(c.devices()[c.links()[r[0]].to].kind == DeviceKind::Nic);
    CHECK(c.devices()[c.links()[r[1]].to].id == "switch");
    // 200 Gbps = 25 GB/s is the narrowest hop.
    CHECK(c.route_bandwidth(r).bytes_per_s == doctest::Approx(25e9));
}

TEST_CASE("leaf-spine: 5 nodes, NVLink mesh, 2 NICs per node, partial last leaf") {
    const Cluster c = load_text(
        "node: {gpus: 4, gpu_model: H100-SXM, intra: {kind: nvlink, bandwidth: 50GB/s, count: 6},\n"
        "       nics: {count: 2, kind: ethernet, bandwidth: 400Gbps, serves: [[0, 1], [2, 3]]}}\n"
        "nodes: 5\n"
        "fabric: {kind: leaf_spine, leaf: {down: 4}}\n");
    // Leaves hold 4 / 2 = 2 nodes: ceil(5 / 2) = 3 leaves; spines = leaf up = 4 / 1 = 4.
    // Devices: 5 x (4 GPUs + 2 NICs) + 3 + 4 = 37.
    CHECK(c.devices().size() == 37);
    const auto kinds = devices_by_kind(c);
    CHECK(kinds.at(DeviceKind::Switch) == 7);
    // Links per node: 6 mesh pairs + 4 GPU-NIC + 2 NIC-leaf = 12 -> 60; leaf-spine 3 x 4 = 12.
    CHECK(physical_links(c) == 72);
    // Mesh pair: 6 x 50 GB/s bonded.
    std::vector<LinkId> r;
    c.route(0, 3, 0, r);
    REQUIRE(r.size() == 1);
    CHECK(c.links()[r[0]].bandwidth.bytes_per_s == doctest::Approx(300e9));
}

TEST_CASE("fat tree: rail-optimised, 10 nodes in 3 pods, oversubscribed spine") {
    const Cluster c = load_text(
        "node: {gpus: 8, gpu_model: H100, intra: {kind: nvswitch, bandwidth: 450GB/s},\n"
        "       nics: {count: 8, bandwidth: 400Gbps, rail_optimized: true}}\n"
        "nodes: 10\n"
        "fabric: {kind: fat_tree, leaf: {down: 4}, spine: {down: 8, up: 4, oversubscription: "
        "4}}\n");
    // Rail-optimised: a leaf serves one rail of 4 nodes: ceil(10 / 4) = 3 groups x 8 rails = 24
    // leaves; leaf up = 4 (1:1). Pods of 8 leaves: 3 pods x 4 spines = 12 spines. Cores: 4 planes
    // x spine up 4 = 16.
    const auto kinds = devices_by_kind(c);
    CHECK(kinds.at(DeviceKind::Gpu) == 80);
    CHECK(kinds.at(DeviceKind::Nic) == 80);
    CHECK(kinds.at(DeviceKind::NvSwitch) == 10);
    CHECK(kinds.at(DeviceKind::Switch) == 24 + 12 + 16);
    // Links: 10 x 24 node links + 24 x 4 leaf-spine + 12 x 4 spine-core = 240 + 96 + 48 = 384.
    CHECK(physical_links(c) == 384);
    // Spine up-link bandwidth: 8 down x 50 GB/s / (4 up x oversubscription 4) = 25 GB/s.
    int spine_core = 0;
    for (const auto& l : c.links())
        if (c.devices()[l.from].tier == 2 && c.devices()[l.to].tier == 3) {
            ++spine_core;
            CHECK(l.bandwidth.bytes_per_s == doctest::Approx(25e9));
        }
    CHECK(spine_core == 48);
    // Same rail, other pod (node 0 -> node 8, GPU 0 on both): gpu, nic, leaf, spine, core, spine,
    // leaf, nic, gpu = 8 hops.
    std::vector<LinkId> r;
    c.route(0, 64, 7, r);
    CHECK(r.size() == 8);
    // Same leaf group, other rail (GPU 0 -> GPU 9 on node 1): gpu, nic, leaf(rail 0), spine,
    // leaf(rail 1), nic, gpu = 6 hops.
    r.clear();
    c.route(0, 9, 7, r);
    CHECK(r.size() == 6);
}

TEST_CASE("PCIe node: two switches under a CPU, NICs on the switches") {
    const Cluster c = load_text(
        "node: {gpus: 8, gpu_model: A100-PCIE-80GB, intra: {kind: pcie, bandwidth: 32GB/s, "
        "switches: 2},\n"
        "       nics: {count: 2, kind: ethernet, bandwidth: 100Gbps}}\n"
        "nodes: 3\n"
        "fabric: {kind: single_switch}\n");
    // Per node: 8 GPUs + 2 PCIe switches + 1 CPU root + 2 NICs = 13; x 3 + 1 switch = 40.
    CHECK(c.devices().size() == 40);
    // Per node: 8 GPU-switch + 2 switch-CPU + 2 NIC-switch + 2 NIC-fabric = 14; x 3 = 42.
    CHECK(physical_links(c) == 42);
    std::vector<LinkId> r;
    c.route(0, 7, 0, r);
    // gpu0 on pcie0, gpu7 on pcie1: gpu, pcie0, cpu, pcie1, gpu = 4 hops.
    CHECK(r.size() == 4);
    r.clear();
    c.route(0, 8, 0, r);
    // gpu0 -> pcie0 -> nic0 -> switch -> nic0 -> pcie0 -> gpu0 of node 1 = 6 hops; 100 Gbps.
    CHECK(r.size() == 6);
    CHECK(c.route_bandwidth(r).bytes_per_s == doctest::Approx(12.5e9));
}

TEST_CASE("explicit and generated forms mix") {
    const Cluster c = load_text(
        "devices:\n"
        "  - {id: head, type: gpu, model: H200}\n"
        "  - {id: head.nic, type: nic}\n"
        "links:\n"
        "  - {from: head, to: head.nic, kind: pcie, bandwidth: 64GB/s}\n"
        "  - {from: head.nic, to: switch, kind: infiniband, bandwidth: 400Gbps}\n"
        "node: {gpus: 2, gpu_model: H100, intra: {kind: nvswitch, bandwidth: 450GB/s},\n"
        "       nics: {count: 1, bandwidth: 400Gbps}}\n"
        "nodes: 2\n"
        "fabric: {kind: single_switch}\n");
    // Explicit GPUs come first (node 0), generated nodes follow as nodes 1 and 2.
    CHECK(c.gpu_count() == 5);
    CHECK(c.devices()[c.gpu_device(0)].id == "head");
    CHECK(c.node_of_gpu(1) == 1);
    CHECK(c.devices()[c.gpu_device(1)].id == "n1.gpu0");
    std::vector<LinkId> r;
    c.route(0, 4, 0, r);
    // head -> head.nic -> switch -> n2.nic0 -> n2.gpu1
    CHECK(r.size() == 4);
}

TEST_CASE("--set nodes: any node count") {
    auto doc = config::parse_document(
        "node: {gpus: 8, gpu_model: H100, intra: {kind: nvswitch, bandwidth: 450GB/s},\n"
        "       nics: {count: 8, bandwidth: 400Gbps, rail_optimized: true}}\n"
        "nodes: 32\n"
        "fabric: {kind: fat_tree, leaf: {down: 32}, spine: {down: 64}}\n",
        "gen.yaml");
    for (int n : {1, 3, 33, 65}) {
        config::apply_override(doc, "nodes", std::to_string(n));
        const Cluster c = load_cluster(doc);
        CHECK(c.gpu_count() == 8 * n);
        CHECK(c.node_count() == n);
    }
}
