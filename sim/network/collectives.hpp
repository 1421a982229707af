// Collective operations and their algorithms: the decomposition of a collective into phases of
// concurrent flows, the way NCCL runs them.
//
// NCCL pipelines every algorithm: a ring all-reduce's 2(n-1) steps of S/n stream through each
// ring edge back to back, so in bandwidth terms each edge carries one continuous transfer of
// 2(n-1)/n x S. A Phase therefore holds one flow per edge with the total bytes that edge carries
// and the number of pipeline steps, each of which costs one step overhead plus the edge latency
// (NetworkConfig::step_overhead). Phases run one after the other (hierarchical all-reduce has
// three; pairwise all-to-all has n-1).
//
// Algorithms are rows of an AlgorithmRegistry: {name, operations it applies to, a condition on
// the ranks, the decomposition}. The bundled rows are listed in builtin_algorithms.def; a test or
// an embedding program copies AlgorithmRegistry::builtin(), add()s its own rows and hands the
// copy to the network through NetworkConfig::algorithms.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/errors.hpp"
#include "core/name_table.hpp"
#include "core/units.hpp"
#include "topology/cluster.hpp"

namespace cs::network {

enum class CollectiveKind : std::uint8_t {
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
    Broadcast,
    SendRecv
};
inline constexpr int kCollectiveKinds = 6;

// The operation names every command and input file accepts (`--op`, validation cases).
inline constexpr std::array<Named<CollectiveKind>, kCollectiveKinds> kCollectiveNames{{
    {"all_reduce", CollectiveKind::AllReduce},
    {"all_gather", CollectiveKind::AllGather},
    {"reduce_scatter", CollectiveKind::ReduceScatter},
    {"all_to_all", CollectiveKind::AllToAll},
    {"broadcast", CollectiveKind::Broadcast},
    {"sendrecv", CollectiveKind::SendRecv},
}};
const char* collective_name(CollectiveKind k);  // "all_reduce", "all_gather", ...

// An algorithm's row in an AlgorithmRegistry. The bundled rows have the same ids in every
// registry (registries are copies of builtin() that may only grow), so the constants below name
// them anywhere; Auto (id 0) is not a row: it asks the network to choose (choose_algorithm).
struct Algorithm {
    std::uint16_t id = 0;
    constexpr bool operator==(const Algorithm&) const = default;
    static const Algorithm Auto, Ring, Tree, Hierarchical, Nvls, Pairwise, Direct;
};
inline constexpr Algorithm Algorithm::Auto{0};
inline constexpr Algorithm Algorithm::Ring{1};
inline constexpr Algorithm Algorithm::Tree{2};
inline constexpr Algorithm Algorithm::Hierarchical{3};
inline constexpr Algorithm Algorithm::Nvls{4};
inline constexpr Algorithm Algorithm::Pairwise{5};
inline constexpr Algorithm Algorithm::Direct{6};

// NCCL's protocols (docs/network.md, "Protocols"): Simple (large chunks, a flag per chunk),
// LL128 (128-byte lines, 120 bytes of data and an 8-byte flag) and LL (8-byte lines, 4 bytes of
// data and a 4-byte flag). Auto asks the network to pick as NCCL's tuning model does.
enum class Protocol : std::uint8_t { Auto, Simple, Ll128, Ll };
inline constexpr int kProtocols = 4;  // indexable by the enumerator, Auto included
inline constexpr std::array<Named<Protocol>, kProtocols> kProtocolNames{{
    {"auto", Protocol::Auto},
    {"simple", Protocol::Simple},
    {"ll128", Protocol::Ll128},
    {"ll", Protocol::Ll},
}};
const char* protocol_name(Protocol p);  // "auto", "simple", "ll128", "ll"

struct FlowTemplate {
    std::vector<topology::LinkId> path;  // directed links, GPU (or switch port) to GPU
    double bytes_per_size = 0;           // bytes of this flow per byte of the collective's size
    // The flow's own rate limit in bytes per second below its route's bottleneck, 0 = none
    // (NetworkConfig::op_efficiency; set by the network, not by build_plan).
    double rate_cap = 0;
};
// A flow's stand-alone rate: the least capacity along its route (`capacity`: bytes per second by
// link), or its own rate cap if lower.
inline double flow_rate(const FlowTemplate& f, const double* capacity) {
    double bw = capacity[f.path.front()];
    for (const topology::LinkId l : f.path)
        bw = std::min(bw, capacity[l]);
    return f.rate_cap > 0 ? std::min(f.rate_cap, bw) : bw;
}

struct Phase {
    int steps = 1;  // pipeline steps (each pays step_overhead + latency)
    Time latency;   // the largest route latency among the phase's flows
    std::vector<FlowTemplate> flows;
};

struct Plan {
    Algorithm algorithm = Algorithm::Ring;
    // The protocol it runs (set by the network). Simple pays NetworkConfig::step_overhead per
    // step; LL and LL128 pay `protocol_step` instead (their per-step latency on the plan's
    // route kind).
    Protocol protocol = Protocol::Simple;
    Time protocol_step;
    // Paid once before the first phase (Simple: NetworkConfig::op_latency; LL and LL128: their
    // base latency; set by the network).
    Time fixed_latency;
    std::vector<Phase> phases;
};

// What a decomposition writes its phases and flows with.
class PlanBuilder {
  public:
    // `salt` varies ECMP route choices between groups deterministically.
    PlanBuilder(const topology::Cluster& cluster, std::uint64_t salt);

    const topology::Cluster& cluster() const { return cluster_; }
    // Appends a phase of `steps` pipeline steps. The reference is valid until the next phase().
    Phase& phase(int steps);
    // A flow from GPU src to GPU dst on the cluster's route between them, carrying
    // `bytes_per_size` bytes per byte of the collective's size. Nothing for src == dst or no bytes.
    void flow(Phase& p, int src, int dst, double bytes_per_size);
    // A flow over one link; `cap`, when given, is a virtual link (no latency) it also passes
    // through (nvls_virtual_link).
    void link_flow(Phase& p, topology::LinkId link, double bytes_per_size,
                   std::optional<topology::LinkId> cap = std::nullopt);
    // Every edge of a ring over `ring` (GPU numbers, in ring order) carries `per_edge` bytes per
    // byte of size.
    void ring(Phase& p, const std::vector<int>& ring, double per_edge);

    Plan plan;

  private:
    void add(Phase& p, FlowTemplate t, double bytes_per_size);
    const topology::Cluster& cluster_;
    std::uint64_t salt_;
    std::uint64_t counter_ = 0;
};

struct AlgorithmEntry {
    std::string name;                        // as users write it after --algo
    std::vector<CollectiveKind> operations;  // the collectives it implements
    // Empty if the algorithm can run on `ranks` (GPU numbers, at least two); otherwise why not,
    // for messages ("nvls needs a single node whose GPUs link to NVSwitches"). Unset: always.
    std::function<std::string(const topology::Cluster&, const std::vector<int>& ranks)> condition;
    // Writes the phases of `kind` on `ranks` (at least two) into the builder.
    std::function<void(PlanBuilder&, CollectiveKind kind, const std::vector<int>& ranks)> decompose;
    std::string description;  // one line, for --help and docs
};

class AlgorithmRegistry {
  public:
    // The bundled algorithms (builtin_algorithms.def), built once, immutable.
    static const AlgorithmRegistry& builtin();

    // Appends an algorithm and returns its id. Throws std::invalid_argument for an empty or taken
    // name ("auto" included), no operations or no decomposition.
    Algorithm add(AlgorithmEntry entry);

    // "auto" -> Algorithm::Auto; nullopt if unknown.
    std::optional<Algorithm> find(std::string_view name) const;
    // Throws std::out_of_range for an id this registry does not have; Auto has no entry.
    const AlgorithmEntry& entry(Algorithm algorithm) const;
    std::string name(Algorithm algorithm) const;  // "auto" for Auto
    // Every name a user can give, "auto" first, for --algo and messages.
    std::vector<std::string> names() const;
    const std::vector<AlgorithmEntry>& entries() const { return entries_; }

  private:
    AlgorithmRegistry() = default;         // registries start as copies of builtin()
    std::vector<AlgorithmEntry> entries_;  // entries_[i] has id i + 1
};

// Name of a bundled algorithm ("auto", "ring", ...); registries with more use their name().
std::string algorithm_name(Algorithm a);

// Parses a name given after `option` (e.g. "--algo ring") against the registry; throws
// ConfigError listing every accepted name otherwise.
Algorithm parse_algorithm(std::string_view name, const SourceLocation& where,
                          const AlgorithmRegistry& registry = AlgorithmRegistry::builtin());

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
                            const std::vector<int>& ranks, Bytes size, Algorithm algo,
                            const AlgorithmRegistry& registry = AlgorithmRegistry::builtin());

// The algorithm Algorithm::Auto resolves to, as NCCL would choose by size and topology:
//   all_reduce   one node: NVLS when the node's GPUs hang off NVSwitches and n > 4, else ring;
//                several nodes: tree below 64 MiB, ring from 64 MiB up;
//   all_gather, reduce_scatter, broadcast: ring; all_to_all: pairwise; sendrecv: direct.
Algorithm choose_algorithm(const topology::Cluster& cluster, CollectiveKind kind,
                           const std::vector<int>& ranks, Bytes size,
                           const AlgorithmRegistry& registry = AlgorithmRegistry::builtin());

// Builds the plan of a collective with a concrete algorithm of `registry`. `salt` varies ECMP
// choices between groups deterministically.
Plan build_plan(const topology::Cluster& cluster, CollectiveKind kind, Algorithm algo,
                const std::vector<int>& ranks, std::uint64_t salt,
                const AlgorithmRegistry& registry = AlgorithmRegistry::builtin());

}  // namespace cs::network
