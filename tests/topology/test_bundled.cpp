// Every bundled cluster in topologies/ loads, with counts derived by hand from its comments.
#include <doctest/doctest.h>

#include <map>
#include <string>

#include "bundled.hpp"
#include "config/document.hpp"
#include "topology/topology_yaml.hpp"

using namespace cs;
using namespace cs::topology;

namespace {

using cs::test::load_bundled;

struct Counts {
    std::map<DeviceKind, int> devices;
    std::map<int, int> switches_by_tier;
    std::size_t links = 0;  // physical (both directions count once)
};

Counts count(const Cluster& c) {
    Counts out;
    for (const auto& d : c.devices()) {
        ++out.devices[d.kind];
        if (d.kind == DeviceKind::Switch) ++out.switches_by_tier[d.tier];
    }
    out.links = c.links().size() / 2;
    return out;
}
}  // namespace

TEST_CASE("dgx-a100-superpod: 140 nodes, rail-optimised 3-tier fat tree") {
    const Cluster c = load_bundled("dgx-a100-superpod.yaml");
    Counts n = count(c);
    // 140 nodes x 8 = 1120 GPUs and 1120 NICs, 140 NVSwitch vertices.
    CHECK(c.gpu_count() == 1120);
    CHECK(n.devices[DeviceKind::Nic] == 1120);
    CHECK(n.devices[DeviceKind::NvSwitch] == 140);
    // Leaves: ceil(140 / 20) = 7 SUs x 8 rails = 56. Pods of 8 leaves: 7 pods x 20 spines = 140.
    // Cores: 20 planes x spine up 8 (8 down / oversubscription 1) = 160.
    CHECK(n.switches_by_tier[1] == 56);
    CHECK(n.switches_by_tier[2] == 140);
    CHECK(n.switches_by_tier[3] == 160);
    // Links: 140 x (8 GPU-NVSwitch + 8 GPU-NIC + 8 NIC-leaf) = 3360; 56 x 20 leaf-spine = 1120;
    // 140 x 8 spine-core = 1120. Total 5600.
    CHECK(n.links == 5600);
    CHECK(c.gpu_model(0).name == "A100-SXM4-80GB");
}

TEST_CASE("dgx-h100-superpod: 32 nodes in one pod, no core tier") {
    const Cluster c = load_bundled("dgx-h100-superpod.yaml");
    Counts n = count(c);
    CHECK(c.gpu_count() == 256);
    // 32 nodes fit one leaf per rail: 8 leaves; one pod of 32 spines; no cores.
    CHECK(n.switches_by_tier[1] == 8);
    CHECK(n.switches_by_tier[2] == 32);
    CHECK(n.switches_by_tier.count(3) == 0);
    // 32 x 24 node links + 8 x 32 leaf-spine = 768 + 256 = 1024.
    CHECK(n.links == 1024);
    // 256 nodes = 8 SUs: 64 leaves in 2 pods of 32 -> 64 spines and 32 x 32 = 1024 cores.
    Counts big = count(load_bundled("dgx-h100-superpod.yaml", "256"));
    CHECK(big.switches_by_tier[1] == 64);
    CHECK(big.switches_by_tier[2] == 64);
    CHECK(big.switches_by_tier[3] == 1024);
}

TEST_CASE("roce-h100-clos: 24,576 GPUs, 8 pods, 1:7 above the pods") {
    const Cluster c = load_bundled("roce-h100-clos.yaml");
    Counts n = count(c);
    CHECK(c.gpu_count() == 24576);
    CHECK(c.node_count() == 3072);
    // Racks of 2 servers: 1536 leaves; pods of 192 racks: 8 pods x 16 spines = 128; cores: 16
    // planes x 24 = 384.
    CHECK(n.switches_by_tier[1] == 1536);
    CHECK(n.switches_by_tier[2] == 128);
    CHECK(n.switches_by_tier[3] == 384);
    // Links: 3072 x 24 = 73728 node links; 1536 x 16 = 24576 leaf-spine; 128 x 24 = 3072
    // spine-core. Total 101376.
    CHECK(n.links == 101376);
    // Spine up-link: 192 x 50 GB/s / (24 x 7) = 57.142857 GB/s, i.e. 1:7.
    for (const auto& l : c.links())
        if (c.devices()[l.from].tier == 2 && c.devices()[l.to].tier == 3) {
            CHECK(l.bandwidth.bytes_per_s == doctest::Approx(192 * 50e9 / (24 * 7)));
            break;
        }
    // A route between pods: gpu, nic, leaf, spine, core, spine, leaf, nic, gpu = 8 hops.
    std::vector<LinkId> r;
    c.route(0, 24575, 1, r);
    CHECK(r.size() == 8);
}

TEST_CASE("roce-h100-clos: a partly filled pod, and too many nodes") {
    // 1000 nodes: 500 racks -> ceil(500 / 192) = 3 pods (192, 192, 116 racks).
    Counts n = count(load_bundled("roce-h100-clos.yaml", "1000"));
    CHECK(n.switches_by_tier[1] == 500);
    CHECK(n.switches_by_tier[2] == 48);
    CHECK_THROWS_AS(load_bundled("roce-h100-clos.yaml", "3073"), ConfigError);
}

TEST_CASE("ethernet-a100-pcie: PCIe servers with 2 x 100 GbE") {
    const Cluster c = load_bundled("ethernet-a100-pcie.yaml");
    Counts n = count(c);
    CHECK(c.gpu_count() == 128);
    // Per node: 8 GPUs, 2 PCIe switches + CPU root (3 pcie_switch), 2 NICs. 16 nodes x 2 NICs fit
    // one 32-port leaf: no spines.
    CHECK(n.devices[DeviceKind::PcieSwitch] == 48);
    CHECK(n.switches_by_tier[1] == 1);
    CHECK(n.switches_by_tier.count(2) == 0);
    // 16 x (8 GPU-switch + 2 switch-CPU + 2 NIC-switch + 2 NIC-leaf) = 224.
    CHECK(n.links == 224);
    // Between servers a GPU gets at most one 100 Gb/s NIC: 12.5 GB/s.
    std::vector<LinkId> r;
    c.route(0, 8, 0, r);
    CHECK(c.route_bandwidth(r).bytes_per_s == doctest::Approx(12.5e9));
    // 40 nodes: ceil(40 / 16) = 3 leaves, 32 spines.
    Counts big = count(load_bundled("ethernet-a100-pcie.yaml", "40"));
    CHECK(big.switches_by_tier[1] == 3);
    CHECK(big.switches_by_tier[2] == 32);
}

TEST_CASE("every bundled cluster accepts any node count") {
    for (const char* name : {"dgx-a100-superpod.yaml", "dgx-h100-superpod.yaml",
                             "roce-h100-clos.yaml", "ethernet-a100-pcie.yaml"})
        for (int nodes : {1, 2, 7, 129}) {
            CAPTURE(name);
            CAPTURE(nodes);
            const Cluster c = load_bundled(name, std::to_string(nodes));
            CHECK(c.node_count() == nodes);
            std::vector<LinkId> r;
            c.route(0, c.gpu_count() - 1, 0, r);
            CHECK(!r.empty());
        }
}
