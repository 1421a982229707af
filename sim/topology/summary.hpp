// A description of a built cluster for people and scripts: what `clustersim topology` prints.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "topology/cluster.hpp"

namespace cs::topology {

struct TopologySummary {
    int gpus = 0;
    int nodes = 0;
    std::map<std::string, std::int64_t> devices_by_kind;  // device_kind_name -> count
    // link_kind_name -> physical links (bonded = 1; a bundle of routing: adaptive's tiers counts
    // its links)
    std::map<std::string, std::int64_t> links_by_kind;
    std::map<int, std::int64_t> switches_by_tier;  // fabric tier (1 = leaf) -> switches
    std::string fabric = "explicit";               // explicit | none | single_switch | leaf_spine |
                                                   // fat_tree
    // Smallest over GPUs of the capacity (one direction) of a GPU's links to its own node's
    // NVLink/NVSwitch/PCIe devices (NICs excluded).
    Bandwidth intra_node_bandwidth_per_gpu;
    // Smallest over nodes of (capacity of the links leaving the node) / (GPUs in the node); zero
    // when there is only one node.
    Bandwidth inter_node_bandwidth_per_gpu;
    // One direction across a cut of the cluster into two halves of nodes: the smallest of half
    // the NIC capacity and half the up-link capacity of each fabric tier the cut crosses (leaves
    // when there are several leaf groups, spines when there are several pods); inside a single
    // node, the node fabric's. Only for generated clusters, derived from their structure.
    std::optional<Bandwidth> bisection_bandwidth;
    // Longest route in hops between two GPUs: over all pairs for up to 128 GPUs; otherwise from
    // every GPU of the first node to every GPU of the second and the last node and to one GPU of
    // each node (exact for generated clusters, whose nodes are alike).
    int diameter_hops = 0;
    std::string routing = "ecmp";  // the `routing` key: ecmp | d_mod_k | adaptive
};

TopologySummary summarize(const Cluster& cluster);

// Graphviz text of the whole graph: one vertex per device, one edge per physical link labelled
// with its kind and capacity. Meant for small graphs.
std::string to_dot(const Cluster& cluster);

}  // namespace cs::topology
