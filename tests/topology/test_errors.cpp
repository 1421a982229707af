// Every topology error names file:line:column and says what would be accepted.
#include <doctest/doctest.h>

#include <string>

#include "config/document.hpp"
#include "topology/topology_yaml.hpp"

using namespace cs;
using namespace cs::topology;

namespace {
std::string error_of(const std::string& text) {
    try {
        load_cluster(config::parse_document(text, "bad.yaml"));
    } catch (const ConfigError& e) {
        return e.what();
    }
    return "(no error)";
}
const char* kTwoGpus =
    "devices:\n"
    "  - {id: gpu0, type: gpu, model: H200}\n"
    "  - {id: gpu1, type: gpu, model: H200}\n";
const char* kNode =
    "node: {gpus: 8, gpu_model: H100, intra: {kind: nvswitch, bandwidth: 450GB/s},\n"
    "       nics: {count: 8, bandwidth: 400Gbps}}\n";
}  // namespace

TEST_CASE("a link to an unknown device lists the valid names") {
    // 'gpu2' is the value of 'to' on line 5, column 22.
    CHECK(error_of(std::string(kTwoGpus) +
                   "links:\n"
                   "  - {from: gpu0, to: gpu2, kind: nvlink, bandwidth: 25GB/s}\n") ==
          "bad.yaml:5:22: unknown device 'gpu2'; devices: gpu0 or gpu1");
}

TEST_CASE("duplicate device ids name both places") {
    CHECK(error_of("devices:\n"
                   "  - {id: gpu0, type: gpu, model: H200}\n"
                   "  - {id: gpu0, type: gpu, model: H200}\n") ==
          "bad.yaml:3:5: duplicate device id 'gpu0' (first defined at bad.yaml:2:5)");
}

TEST_CASE("GPU islands are named") {
    CHECK(error_of("devices:\n"
                   "  - {id: a0, type: gpu, model: H200}\n"
                   "  - {id: a1, type: gpu, model: H200}\n"
                   "  - {id: b0, type: gpu, model: H200}\n"
                   "links:\n"
                   "  - {from: a0, to: a1, kind: nvlink, bandwidth: 25GB/s}\n") ==
          "bad.yaml:1:1: the GPUs are not all connected; 2 islands: {a0, a1} and {b0} (add "
          "links between them, or NICs and a fabric)");
}

TEST_CASE("a GPU reachable only through another GPU is an error") {
    CHECK(error_of("devices:\n"
                   "  - {id: a, type: gpu, model: H200}\n"
                   "  - {id: b, type: gpu, model: H200}\n"
                   "  - {id: c, type: gpu, model: H200}\n"
                   "links:\n"
                   "  - {from: a, to: b, kind: nvlink, bandwidth: 25GB/s}\n"
                   "  - {from: b, to: c, kind: nvlink, bandwidth: 25GB/s}\n") ==
          "bad.yaml:1:1: GPU a cannot reach GPU c without passing through another GPU; routes "
          "never transit a GPU (link them directly or through a switch or NIC)");
}

TEST_CASE("zero, negative and unit-less bandwidths") {
    const std::string links = std::string(kTwoGpus) + "links:\n  - {from: gpu0, to: gpu1, ";
    CHECK(error_of(links + "kind: nvlink, bandwidth: 0GB/s}\n") ==
          "bad.yaml:5:53: 'links.0.bandwidth': a bandwidth must be greater than zero");
    CHECK(error_of(links + "kind: nvlink, bandwidth: -5GB/s}\n")
              .find("bad.yaml:5:53: 'links.0.bandwidth': \"-5GB/s\" is negative, and a bandwidth "
                    "cannot be") == 0);
    // A unit it does not know is named as such.
    CHECK(error_of(links + "kind: nvlink, bandwidth: 5GB/h}\n")
              .find("bad.yaml:5:53: 'links.0.bandwidth': cannot read \"5GB/h\" as a bandwidth; "
                    "accepted units: ") == 0);
    CHECK(error_of(links + "kind: nvlink, bandwidth: 25}\n")
              .find("bad.yaml:5:53: 'links.0.bandwidth': missing unit in \"25\"") == 0);
    CHECK(error_of(links + "kind: nvlink, bandwidth: 25GB/s, latency: 3}\n")
              .find("bad.yaml:5:70: 'links.0.latency': missing unit in \"3\"") == 0);
}

TEST_CASE("unknown keys, kinds and GPU models") {
    CHECK(error_of(std::string(kTwoGpus) +
                   "links:\n"
                   "  - {from: gpu0, to: gpu1, kind: nvlnk, bandwidth: 25GB/s}\n") ==
          "bad.yaml:5:34: 'links.0.kind': unknown value \"nvlnk\"; expected nvlink, nvswitch, "
          "pcie, infiniband or ethernet");
    CHECK(error_of("devices:\n  - {id: g, type: gpu, model: V100}\n")
              .find("bad.yaml:2:31: unknown GPU model 'V100'; known models: A100-SXM4-80GB, "
                    "A100-PCIE-80GB, H100-SXM, H200-SXM, H800-SXM, A100, ") == 0);
    CHECK(error_of(std::string(kNode) + "nodes: 2\nfabric: {kind: single_switch, port: 64}\n") ==
          "bad.yaml:4:31: unknown key 'fabric.port'; accepted keys here: kind, latency or ports");
}

TEST_CASE("fabric port counts that do not add up") {
    // 20 down ports do not hold whole nodes of 8 NICs (not rail-optimised).
    CHECK(
        error_of(std::string(kNode) + "nodes: 4\nfabric: {kind: leaf_spine, leaf: {down: 20}}\n") ==
        "bad.yaml:4:41: fabric port counts do not add up: a leaf's 20 down ports do not hold "
        "whole nodes of 8 NICs; use a multiple of 8 or rail_optimized: true");
    // 16 down / oversubscription 3 = 5.33 up ports.
    CHECK(
        error_of(std::string(kNode) +
                 "nodes: 4\nfabric: {kind: leaf_spine, leaf: {down: 16, oversubscription: 3}}\n") ==
        "bad.yaml:4:34: fabric port counts do not add up: the leaf's 16 down ports / "
        "oversubscription 3 = 5.33333 up ports, not a whole number; give `up` (and the up-link "
        "`bandwidth` is derived)");
    // 32 down + 32 up > radix 48.
    CHECK(error_of(std::string(kNode) +
                   "nodes: 4\nfabric: {kind: leaf_spine, leaf: {down: 32, radix: 48}}\n") ==
          "bad.yaml:4:34: fabric port counts do not add up: the leaf uses 32 down + 32 up = 64 "
          "ports, more than its radix 48");
    // A 16-port switch for 4 x 8 NICs.
    CHECK(error_of(std::string(kNode) + "nodes: 4\nfabric: {kind: single_switch, ports: 16}\n") ==
          "bad.yaml:4:38: fabric port counts do not add up: the switch has 16 ports but 4 nodes x "
          "8 NICs need 32; use leaf_spine or fat_tree, or fewer nodes");
    // Up-links given in full but contradicting the oversubscription: 16 x 50 GB/s down vs
    // 8 x 50 GB/s up is 2:1, not 1:1.
    CHECK(error_of(std::string(kNode) +
                   "nodes: 4\nfabric: {kind: leaf_spine, leaf: {down: 16, up: 8, bandwidth: "
                   "400Gbps, oversubscription: 1}}\n") ==
          "bad.yaml:4:34: fabric port counts do not add up: the leaf has 16 x 50 GB/s down and "
          "8 x 50 GB/s up, oversubscription 2, not 1; drop one of up, bandwidth or "
          "oversubscription");
    // More pods than core ports.
    CHECK(error_of(std::string(kNode) +
                   "nodes: 9\nfabric: {kind: fat_tree, leaf: {down: 8}, spine: {down: 4}, core: "
                   "{down: 2}}\n") ==
          "bad.yaml:4:74: fabric port counts do not add up: 9 nodes fill 3 pods but a core switch "
          "has 2 down ports, one per pod; at most 8 nodes fit");
}

TEST_CASE("generated nodes need what they use") {
    CHECK(error_of("node: {gpus: 8, gpu_model: H100, intra: {kind: nvswitch, bandwidth: "
                   "450GB/s}}\nnodes: 2\nfabric: {kind: single_switch}\n") ==
          "bad.yaml:1:7: the nodes have no NICs to connect to the fabric; add nics: {count: 8, "
          "kind: infiniband, bandwidth: 400Gbps}");
    // Two nodes with NICs but no fabric are two islands.
    CHECK(error_of(std::string(kNode) + "nodes: 2\n")
              .find("bad.yaml:1:1: the GPUs are not all connected; 2 islands: {n0.gpu0, n0.gpu1, "
                    "n0.gpu2, n0.gpu3, ... (8 GPUs)} and {n1.gpu0,") == 0);
    CHECK(error_of(std::string(kNode) + "nodes: 0\n") ==
          "bad.yaml:3:8: 'nodes': must be at least 1, found 0");
    CHECK(error_of("nodes: 4\n") ==
          "bad.yaml:1:8: 'nodes': needs a node template: node: {gpus: 8, gpu_model: H100-SXM, "
          "...}");
}

TEST_CASE("a leaf-spine's spines have no up-links") {
    // The 'spine' mapping opens at line 4, column 52.
    CHECK(error_of(std::string(kNode) +
                   "nodes: 4\nfabric: {kind: leaf_spine, leaf: {down: 8}, spine: {up: 4}}\n") ==
          "bad.yaml:4:52: a leaf_spine's spines are its top tier: they take only down and radix; "
          "for up-links above the spines use fat_tree");
}
