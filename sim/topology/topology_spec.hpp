// Plain description of a cluster as a topology document gives it, before anything is built.
//
// parse_topology() (topology_yaml.cpp) fills a TopologySpec from YAML; build_cluster() (build.cpp)
// turns it into a frozen Cluster. Every item keeps the SourceLocation it came from so that errors
// found while building (unknown device names, disconnected GPUs, fabric port counts) still name
// file:line:column.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/document.hpp"
#include "core/errors.hpp"
#include "topology/cluster.hpp"

namespace cs::topology {

struct GpuModelSpec {
    GpuModel model;
    SourceLocation where;
};

struct DeviceSpec {
    std::string id;
    DeviceKind kind = DeviceKind::Gpu;
    std::string model;  // GPUs only: a name in gpu_models or the bundled catalogue
    int node = 0;       // server index; -1 for fabric switches
    SourceLocation where;
    SourceLocation model_where;
};

struct LinkSpec {
    std::string from;
    std::string to;
    LinkKind kind = LinkKind::NvLink;
    Bandwidth bandwidth;  // per link and per direction
    Time latency;         // per hop
    int count = 1;        // bonded links: capacity = count x bandwidth
    SourceLocation where;
    SourceLocation from_where;
    SourceLocation to_where;
};

struct IntraSpec {
    IntraKind kind = IntraKind::NvSwitch;
    Bandwidth bandwidth;  // nvswitch: per GPU; nvlink: per GPU pair; pcie: per GPU to its switch
    Time latency;         // per hop
    int count = 1;        // nvlink mesh: bonded links per pair
    int pcie_switches = 1;
    SourceLocation where;
};

struct NicSpec {
    int count = 0;  // per node; 0 = no NICs
    LinkKind kind = LinkKind::InfiniBand;
    Bandwidth bandwidth;       // per NIC, per direction
    Time latency;              // NIC to its fabric switch, per hop
    Bandwidth pcie_bandwidth;  // GPU (or PCIe switch) to NIC, per direction
    Time pcie_latency;
    bool rail_optimized = false;
    std::vector<std::vector<int>> serves;  // per NIC: local GPU indices it serves
    SourceLocation where;
};

struct NodeSpec {
    int gpus = 8;
    std::string gpu_model;
    SourceLocation gpu_model_where;
    IntraSpec intra;
    NicSpec nics;
    SourceLocation where;
};

// One tier of a generated fabric. `down` ports face the tier below (NICs for leaves), `up` ports
// the tier above; oversubscription = down capacity / up capacity.
struct TierSpec {
    bool present = false;
    std::optional<int> down;
    std::optional<int> up;
    std::optional<double> oversubscription;
    std::optional<Bandwidth> bandwidth;  // of each up-link
    std::optional<int> radix;            // total ports, checked against down + up
    SourceLocation where;
    SourceLocation down_where;
    SourceLocation up_where;
};

struct FabricSpec {
    FabricKind kind = FabricKind::SingleSwitch;
    Time latency;              // per switch-to-switch hop
    std::optional<int> ports;  // single_switch: port count, checked against the NICs
    TierSpec leaf;
    TierSpec spine;
    TierSpec core;
    SourceLocation where;
    SourceLocation ports_where;
};

struct TopologySpec {
    std::string name;
    std::vector<GpuModelSpec> gpu_models;
    std::vector<DeviceSpec> devices;
    std::vector<LinkSpec> links;
    std::optional<NodeSpec> node;
    int nodes = 0;  // generated nodes
    SourceLocation nodes_where;
    std::optional<FabricSpec> fabric;
    Routing routing = Routing::Ecmp;  // `routing`: how routes choose among equal-cost paths
    SourceLocation where;             // the document
};

// The memory a run may take unless the user allows more (`--max-memory`): 16 GiB, about ten
// times what a 131,072-GPU run of the bundled default experiment needs (docs/limits.md).
inline constexpr std::int64_t kDefaultMaxMemory = std::int64_t{16} << 30;

// What building a spec's cluster costs, counted from the spec before anything is built. The
// counts are upper bounds (fabric switches are counted generously); bytes uses per-object costs
// measured on the Release build (docs/limits.md). Doubles, so that absurd inputs cannot wrap.
struct TopologySize {
    double devices = 0;
    double directed_links = 0;
    double bytes = 0;
    // The bytes of the fabric tiers' spines, cores and the links between them, and the `up` that
    // multiplies them most: an estimate they dominate is located there, not at `nodes`.
    double fabric_tier_bytes = 0;
    SourceLocation fabric_tier_where;
};
TopologySize estimate_size(const TopologySpec& spec);
// Throws ConfigError, located at the spec's node count (or the document; at a fabric tier's `up`
// when the tiers' spines and cores take most of it), when estimate_size's
// bytes exceed `max_memory`, naming both and the option that raises the limit.
void check_size(const TopologySpec& spec, std::int64_t max_memory);

// YAML -> spec. Strict: unknown keys, wrong types, missing units are ConfigErrors.
TopologySpec parse_topology(const config::Document& doc);
// spec -> frozen cluster. Checks names, duplicates, port counts and GPU connectivity.
Cluster build_cluster(const TopologySpec& spec);

}  // namespace cs::topology
