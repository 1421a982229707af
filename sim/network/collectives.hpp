// Decomposition of collectives into phases of concurrent flows, the way NCCL runs them.
//
// NCCL pipelines every algorithm: a ring all-reduce's 2(n-1) steps of S/n stream through each
// ring edge back to back, so in bandwidth terms each edge carries one continuous transfer of
// 2(n-1)/n x S. A Phase therefore holds one flow per edge with the total bytes that edge carries
// and the number of pipeline steps, each of which costs one step overhead plus the edge latency
// (NetworkConfig::step_overhead). Phases run one after the other (hierarchical all-reduce has
// three; pairwise all-to-all has n-1).
#pragma once

#include <cstdint>
#include <vector>

#include "core/units.hpp"
#include "network/network.hpp"
#include "topology/cluster.hpp"

namespace cs::network {

struct FlowTemplate {
    std::vector<topology::LinkId> path;  // directed links, GPU (or switch port) to GPU
    double bytes_per_size = 0;           // bytes of this flow per byte of the collective's size
    // The flow's own rate limit in bytes per second below its route's bottleneck, 0 = none
    // (NetworkConfig::op_efficiency; set by the network, not by build_plan).
    double rate_cap = 0;
};

struct Phase {
    int steps = 1;  // pipeline steps (each pays step_overhead + latency)
    Time latency;   // the largest route latency among the phase's flows
    std::vector<FlowTemplate> flows;
};

struct Plan {
    Algorithm algorithm = Algorithm::Ring;
    // Paid once before the first phase (NetworkConfig::op_latency; set by the network).
    Time fixed_latency;
    std::vector<Phase> phases;
};

// NVLS multimem traffic on a GPU-NVSwitch link (either direction) also passes through that
// link's virtual twin, whose capacity caps it at NetworkConfig::nvls_efficiency x the link's
// nominal bandwidth (the rate the GPU's SMs issue multimem operations at). Virtual links are
// numbered after the cluster's links, one per link; they are never reported as links.
inline topology::LinkId nvls_virtual_link(const topology::Cluster& cluster, topology::LinkId link) {
    return static_cast<topology::LinkId>(cluster.links().size() + link);
}

// The GPU's links to NVSwitches (empty when it has none), in link order.
std::vector<topology::LinkId> switch_uplinks(const topology::Cluster& cluster, int gpu);

// Checks that `algo` applies to `kind` on `ranks` (resolving Auto) and returns the concrete
// algorithm. Throws ConfigError naming the algorithms that would apply.
Algorithm resolve_algorithm(const topology::Cluster& cluster, CollectiveKind kind,
                            const std::vector<int>& ranks, Bytes size, Algorithm algo);

// Builds the plan of a collective with a concrete algorithm. `salt` varies ECMP choices between
// groups deterministically.
Plan build_plan(const topology::Cluster& cluster, CollectiveKind kind, Algorithm algo,
                const std::vector<int>& ranks, std::uint64_t salt);

}  // namespace cs::network
