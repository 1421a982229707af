#include <doctest/doctest.h>

#include <string>

#include "bundled.hpp"
#include "config/document.hpp"
#include "topology/summary.hpp"
#include "topology/topology_yaml.hpp"

using namespace cs;
using namespace cs::topology;

namespace {
using cs::test::load_bundled;
}  // namespace

TEST_CASE("summary of the two-GPU H200 box") {
    const TopologySummary s = summarize(load_bundled("h200-2gpu-nvlink.yaml"));
    CHECK(s.gpus == 2);
    CHECK(s.nodes == 1);
    CHECK(s.devices_by_kind.at("gpu") == 2);
    CHECK(s.links_by_kind.at("nvlink") == 1);
    CHECK(s.fabric == "explicit");
    // 18 x 25 GB/s to the other GPU.
    CHECK(s.intra_node_bandwidth_per_gpu.bytes_per_s == doctest::Approx(450e9));
    CHECK(s.inter_node_bandwidth_per_gpu.bytes_per_s == 0);
    CHECK(!s.bisection_bandwidth);
    CHECK(s.diameter_hops == 1);
}

TEST_CASE("summary of one node of 4,096 GPUs: every GPU two hops from every other") {
    // GPU -> NVSwitch -> GPU. The diameter searched from each of the 4,096 GPUs to each (minutes,
    // issue 40's second audit); it now searches from 64 of them, evenly spaced, to 64 and the
    // other nodes' targets, and finds the same 2 hops (any two GPUs are two hops apart here).
    const auto doc = config::parse_document(
        "node: {gpus: 4096, gpu_model: H100-SXM, intra: {kind: nvswitch, bandwidth: 450GB/s}}\n"
        "nodes: 1\n",
        "big-node.yaml");
    const TopologySummary s = summarize(topology::load_cluster(doc));
    CHECK(s.gpus == 4096);
    CHECK(s.diameter_hops == 2);
}

TEST_CASE("summary of the DGX H100 SuperPOD") {
    const TopologySummary s = summarize(load_bundled("dgx-h100-superpod.yaml"));
    CHECK(s.gpus == 256);
    CHECK(s.fabric == "fat_tree");
    // Links by kind: 256 GPU-NVSwitch; 256 GPU-NIC (pcie); 256 NIC-leaf + 8 x 32 leaf-spine
    // infiniband.
    CHECK(s.links_by_kind.at("nvswitch") == 256);
    CHECK(s.links_by_kind.at("pcie") == 256);
    CHECK(s.links_by_kind.at("infiniband") == 512);
    CHECK(s.switches_by_tier.at(1) == 8);
    CHECK(s.intra_node_bandwidth_per_gpu.bytes_per_s == doctest::Approx(450e9));
    // 8 NICs x 50 GB/s per 8 GPUs.
    CHECK(s.inter_node_bandwidth_per_gpu.bytes_per_s == doctest::Approx(50e9));
    // 16 nodes x 8 NICs x 50 GB/s = 6.4 TB/s; one leaf group, so no leaf-uplink bound.
    REQUIRE(s.bisection_bandwidth);
    CHECK(s.bisection_bandwidth->bytes_per_s == doctest::Approx(6.4e12));
    // Other rail: gpu, nic, leaf, spine, leaf, nic, gpu = 6.
    CHECK(s.diameter_hops == 6);
    // The bundled file sets no routing: hashed ECMP.
    CHECK(s.routing == "ecmp");
}

TEST_CASE("the summary names the routing a topology file gives") {
    const auto doc = config::parse_document(
        "node: {gpus: 2, gpu_model: H100, intra: {kind: nvswitch, bandwidth: 450GB/s}}\n"
        "nodes: 1\nrouting: d_mod_k\n",
        "r.yaml");
    CHECK(summarize(load_cluster(doc)).routing == "d_mod_k");
}

TEST_CASE("summary of the 24,576-GPU RoCE cluster: 1:7 above the pods") {
    const TopologySummary s = summarize(load_bundled("roce-h100-clos.yaml"));
    CHECK(s.gpus == 24576);
    // Half the cluster: 1536 nodes x 8 x 50 GB/s = 614.4 TB/s at the NICs and at the racks
    // (768 racks x 16 x 50 GB/s); above the pods 4 pods x 16 spines x 24 up-links x 57.14 GB/s
    // = 614.4 / 7 = 87.77 TB/s.
    REQUIRE(s.bisection_bandwidth);
    CHECK(s.bisection_bandwidth->bytes_per_s == doctest::Approx(614.4e12 / 7));
    // gpu, nic, leaf, spine, core, spine, leaf, nic, gpu = 8.
    CHECK(s.diameter_hops == 8);
    CHECK(s.devices_by_kind.at("switch") == 1536 + 128 + 384);
}

TEST_CASE("single-node bisection and PCIe summary") {
    const TopologySummary s = summarize(load_bundled("ethernet-a100-pcie.yaml", "1"));
    // One node: 2 PCIe switches under the CPU: the cut crosses one 32 GB/s switch up-link.
    REQUIRE(s.bisection_bandwidth);
    CHECK(s.bisection_bandwidth->bytes_per_s == doctest::Approx(32e9));
    // gpu, pcie0, cpu, pcie1, gpu = 4.
    CHECK(s.diameter_hops == 4);
    CHECK(s.intra_node_bandwidth_per_gpu.bytes_per_s == doctest::Approx(32e9));
}

TEST_CASE("dot output names every device and physical link") {
    const Cluster c = load_bundled("h200-2gpu-nvlink.yaml");
    const std::string dot = to_dot(c);
    CHECK(dot.find("d0 [label=\"gpu0\", shape=box]") != std::string::npos);
    CHECK(dot.find("d0 -- d1 [label=\"nvlink 450 GB/s\"]") != std::string::npos);
}

TEST_CASE("bisection of an odd number of pods is half the up-link capacity") {
    // DGX A100 SuperPOD, 140 nodes: half the NICs = 70 x 8 x 25 GB/s = 14 TB/s; half the leaf
    // up-links = 56 x 20 x 25 / 2 = 14 TB/s; half the spine up-links = 7 x 20 x 8 x 25 / 2 =
    // 14 TB/s: full bisection.
    const TopologySummary s = summarize(load_bundled("dgx-a100-superpod.yaml"));
    REQUIRE(s.bisection_bandwidth);
    CHECK(s.bisection_bandwidth->bytes_per_s == doctest::Approx(14e12));
    CHECK(s.inter_node_bandwidth_per_gpu.bytes_per_s == doctest::Approx(25e9));
}
