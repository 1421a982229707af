#include "network/collectives.hpp"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>

#include "core/errors.hpp"
#include "core/hash.hpp"
#include "topology/graph.hpp"

namespace cs::network {

using topology::Cluster;
using topology::DeviceKind;
using topology::LinkId;

std::vector<LinkId> switch_uplinks(const Cluster& cluster, int gpu) {
    std::vector<LinkId> out;
    const auto dev = cluster.gpu_device(gpu);
    const auto& g = cluster.graph().g;
    for (auto [e, end] = boost::out_edges(dev, g); e != end; ++e) {
        const LinkId l = g[*e].link;
        if (cluster.devices()[cluster.links()[l].to].kind == DeviceKind::NvSwitch) out.push_back(l);
    }
    std::sort(out.begin(), out.end());
    return out;
}

// One factory per row of builtin_algorithms.def, each defined in its own .cpp or below.
namespace detail {
#define CS_ALGORITHM(factory) AlgorithmEntry factory();
#include "network/builtin_algorithms.def"
#undef CS_ALGORITHM
}  // namespace detail

namespace {

// Ranks of the group per node, in group order; nodes in order of first appearance.
// (A DP group at 16,384 GPUs spans hundreds of nodes: a node's slot is found by sorting the
// (node, position) pairs, not in a tree map with one allocation per node.)
std::vector<std::vector<int>> ranks_by_node(const Cluster& cluster, const std::vector<int>& ranks) {
    std::vector<std::pair<int, std::size_t>> at;  // (node, position in the group)
    at.reserve(ranks.size());
    for (std::size_t i = 0; i < ranks.size(); ++i)
        at.emplace_back(cluster.node_of_gpu(ranks[i]), i);
    std::sort(at.begin(), at.end());
    // Each node's first position (the first of its run), then the nodes in that order.
    std::vector<std::pair<std::size_t, std::size_t>> first;  // (first position, run start)
    for (std::size_t i = 0; i < at.size(); ++i)
        if (i == 0 || at[i].first != at[i - 1].first) first.emplace_back(at[i].second, i);
    std::sort(first.begin(), first.end());
    std::vector<std::vector<int>> out(first.size());
    for (std::size_t n = 0; n < first.size(); ++n) {
        const std::size_t start = first[n].second;
        std::size_t end = start;
        while (end < at.size() && at[end].first == at[start].first)
            ++end;
        auto& node = out[n];
        node.reserve(end - start);
        for (std::size_t i = start; i < end; ++i)  // positions ascending: group order
            node.push_back(ranks[at[i].second]);
    }
    return out;
}

bool uniform_nodes(const std::vector<std::vector<int>>& nodes) {
    for (const auto& n : nodes)
        if (n.size() != nodes.front().size()) return false;
    return true;
}

bool nvls_applies(const Cluster& cluster, const std::vector<int>& ranks) {
    if (ranks.size() < 2) return false;
    const int node = cluster.node_of_gpu(ranks.front());
    for (int r : ranks)
        if (cluster.node_of_gpu(r) != node || switch_uplinks(cluster, r).empty() ||
            !cluster.gpu_model(r).nvls)
            return false;
    return true;
}

int ceil_log2(std::size_t m) {
    int d = 0;
    while ((std::size_t{1} << d) < m)
        ++d;
    return d;
}

// Intra-node ring reduce-scatter / all-gather of the whole buffer on every node at once.
void intra_ring(PlanBuilder& b, const std::vector<std::vector<int>>& nodes) {
    const auto local = static_cast<double>(nodes.front().size());
    if (local < 2) return;
    Phase& p = b.phase(static_cast<int>(local) - 1);
    for (const auto& n : nodes)
        b.ring(p, n, (local - 1) / local);
}

// NCCL's rings over several nodes: one ring per channel, C = ranks per node, each carrying 1/C
// of the data. Channel c enters node i at local rank e_i = (c + i) mod C, visits the node's other
// ranks and leaves from local rank e_i + 1, so the crossing to node i+1 (entered at e_i + 1)
// stays on one rail, and every NIC carries exactly one channel each way. One node, or nodes with
// unequal rank counts: a single ring in group order.
void multi_ring(PlanBuilder& b, Phase& p, const Cluster& cluster, const std::vector<int>& ranks,
                double per_edge) {
    const auto nodes = ranks_by_node(cluster, ranks);
    const std::size_t local = nodes.front().size();
    if (nodes.size() == 1 || local == 1 || !uniform_nodes(nodes)) {
        b.ring(p, ranks, per_edge);
        return;
    }
    for (std::size_t c = 0; c < local; ++c) {
        std::vector<int> ring;
        for (std::size_t i = 0; i < nodes.size(); ++i) {
            const std::size_t enter = (c + i) % local;
            // enter, enter + 2, ..., enter + local - 1, then enter + 1 (all mod local)
            ring.push_back(nodes[i][enter]);
            for (std::size_t k = 2; k < local; ++k)
                ring.push_back(nodes[i][(enter + k) % local]);
            ring.push_back(nodes[i][(enter + 1) % local]);
        }
        b.ring(p, ring, per_edge / static_cast<double>(local));
    }
}

std::string join_names(const std::vector<std::string>& names) {
    std::string out;
    for (std::size_t i = 0; i < names.size(); ++i)
        out += (i == 0 ? "" : (i + 1 == names.size() ? " or " : ", ")) + names[i];
    return out;
}

bool runs(const AlgorithmEntry& e, CollectiveKind kind) {
    return std::find(e.operations.begin(), e.operations.end(), kind) != e.operations.end();
}

// Empty if `e` runs `kind` on `ranks`; otherwise why not.
std::string unsuitable(const AlgorithmEntry& e, const Cluster& cluster, CollectiveKind kind,
                       const std::vector<int>& ranks) {
    if (!runs(e, kind)) {
        std::vector<std::string> ops;
        for (CollectiveKind k : e.operations)
            ops.emplace_back(collective_name(k));
        return e.name + " runs " + join_names(ops) + " only";
    }
    return e.condition ? e.condition(cluster, ranks) : std::string{};
}

}  // namespace

PlanBuilder::PlanBuilder(const Cluster& cluster, std::uint64_t salt)
    : cluster_(cluster), salt_(salt) {}

Phase& PlanBuilder::phase(int steps) {
    plan.phases.emplace_back();
    plan.phases.back().steps = steps;
    return plan.phases.back();
}

void PlanBuilder::flow(Phase& p, int src, int dst, double bytes_per_size) {
    if (src == dst || bytes_per_size <= 0) return;
    FlowTemplate t;
    cluster_.route(src, dst, splitmix64(salt_ ^ splitmix64(++counter_)), t.path);
    add(p, std::move(t), bytes_per_size);
}

void PlanBuilder::link_flow(Phase& p, LinkId link, double bytes_per_size,
                            std::optional<LinkId> cap) {
    FlowTemplate t;
    t.path.push_back(link);
    add(p, std::move(t), bytes_per_size);
    if (cap) p.flows.back().path.push_back(*cap);
}

void PlanBuilder::ring(Phase& p, const std::vector<int>& ring, double per_edge) {
    const std::size_t n = ring.size();
    if (n < 2) return;
    for (std::size_t i = 0; i < n; ++i)
        flow(p, ring[i], ring[(i + 1) % n], per_edge);
}

void PlanBuilder::add(Phase& p, FlowTemplate t, double bytes_per_size) {
    t.bytes_per_size = bytes_per_size;
    p.latency = std::max(p.latency, cluster_.route_latency(t.path));
    p.flows.push_back(std::move(t));
}

// The bundled algorithms, one function per row of builtin_algorithms.def.
namespace detail {

AlgorithmEntry ring_algorithm() {
    AlgorithmEntry e;
    e.name = "ring";
    e.operations = {CollectiveKind::AllReduce, CollectiveKind::AllGather,
                    CollectiveKind::ReduceScatter, CollectiveKind::Broadcast};
    e.description = "NCCL's rings (one per channel, rail-aligned across nodes); broadcast: a chain";
    e.decompose = [](PlanBuilder& b, CollectiveKind kind, const std::vector<int>& ranks) {
        const std::size_t n = ranks.size();
        const double nd = static_cast<double>(n);
        switch (kind) {
            case CollectiveKind::AllReduce: {
                Phase& p = b.phase(2 * static_cast<int>(n - 1));
                multi_ring(b, p, b.cluster(), ranks, 2 * (nd - 1) / nd);
                break;
            }
            case CollectiveKind::Broadcast: {
                // A pipelined chain from the first rank: every edge carries the whole buffer.
                Phase& p = b.phase(static_cast<int>(n - 1));
                for (std::size_t i = 0; i + 1 < n; ++i)
                    b.flow(p, ranks[i], ranks[i + 1], 1.0);
                break;
            }
            default: {  // all_gather, reduce_scatter
                Phase& p = b.phase(static_cast<int>(n - 1));
                multi_ring(b, p, b.cluster(), ranks, (nd - 1) / nd);
                break;
            }
        }
    };
    return e;
}

// Intra-node rings around an inter-node stage on each rail (`tree`: double binary trees,
// otherwise rings).
void two_level_all_reduce(PlanBuilder& b, const std::vector<int>& ranks, bool tree) {
    const auto nodes = ranks_by_node(b.cluster(), ranks);
    const std::size_t local = nodes.front().size();
    const std::size_t m = nodes.size();
    const double md = static_cast<double>(m);
    const double per_rail = 1.0 / static_cast<double>(local);
    intra_ring(b, nodes);
    if (m > 1) {
        if (!tree) {
            Phase& p = b.phase(2 * static_cast<int>(m - 1));
            for (std::size_t l = 0; l < local; ++l) {
                std::vector<int> rail;
                for (const auto& node : nodes)
                    rail.push_back(node[l]);
                b.ring(p, rail, 2 * (md - 1) / md * per_rail);
            }
        } else {
            // Double binary tree per rail: two trees, each carrying half of the rail's data up
            // (reduce) and down (broadcast); a node that is interior in one tree is a leaf in
            // the other.
            Phase& p = b.phase(2 * std::max(1, ceil_log2(m)));
            for (std::size_t l = 0; l < local; ++l) {
                for (int t = 0; t < 2; ++t) {
                    auto at = [&](std::size_t pos) { return nodes[t == 0 ? pos : m - 1 - pos][l]; };
                    for (std::size_t pos = 1; pos < m; ++pos) {
                        const int child = at(pos), parent = at((pos - 1) / 2);
                        b.flow(p, child, parent, per_rail / 2);
                        b.flow(p, parent, child, per_rail / 2);
                    }
                }
            }
        }
    }
    intra_ring(b, nodes);
}

AlgorithmEntry tree_algorithm() {
    AlgorithmEntry e;
    e.name = "tree";
    e.operations = {CollectiveKind::AllReduce};
    e.description = "intra-node rings around double binary trees across nodes, per rail";
    e.condition = [](const Cluster& cluster, const std::vector<int>& ranks) -> std::string {
        const auto nodes = ranks_by_node(cluster, ranks);
        if (nodes.size() > 1 && uniform_nodes(nodes)) return {};
        return "tree needs several nodes with the same number of ranks on each";
    };
    e.decompose = [](PlanBuilder& b, CollectiveKind, const std::vector<int>& ranks) {
        two_level_all_reduce(b, ranks, true);
    };
    return e;
}

AlgorithmEntry hierarchical_algorithm() {
    AlgorithmEntry e;
    e.name = "hierarchical";
    e.operations = {CollectiveKind::AllReduce};
    e.description = "intra-node reduce-scatter, inter-node ring per rail, intra-node all-gather";
    e.condition = [](const Cluster& cluster, const std::vector<int>& ranks) -> std::string {
        if (uniform_nodes(ranks_by_node(cluster, ranks))) return {};
        return "hierarchical needs the same number of ranks on every node";
    };
    e.decompose = [](PlanBuilder& b, CollectiveKind, const std::vector<int>& ranks) {
        two_level_all_reduce(b, ranks, false);
    };
    return e;
}

AlgorithmEntry nvls_algorithm() {
    AlgorithmEntry e;
    e.name = "nvls";
    e.operations = {CollectiveKind::AllReduce};
    e.description = "NVLink SHARP: multimem reduce-scatter and all-gather in the NVSwitches";
    e.condition = [](const Cluster& cluster, const std::vector<int>& ranks) -> std::string {
        if (nvls_applies(cluster, ranks)) return {};
        return "nvls needs a single node whose GPUs link to NVSwitches and support NVLink SHARP "
               "(gpu_models.<name>.nvls; not the A100s)";
    };
    e.decompose = [](PlanBuilder& b, CollectiveKind, const std::vector<int>& ranks) {
        // Reduce-scatter with multimem loads (the switch reads every GPU's whole buffer and
        // returns each GPU its reduced S/n) then all-gather with multimem stores (each GPU writes
        // its S/n, the switch multicasts it): every GPU sends and receives S + S/n, spread over
        // its NVSwitch ports by capacity.
        const Cluster& cluster = b.cluster();
        const double nd = static_cast<double>(ranks.size());
        Phase& p = b.phase(2);
        for (int r : ranks) {
            const auto ups = switch_uplinks(cluster, r);
            double total = 0;
            for (LinkId l : ups)
                total += cluster.links()[l].bandwidth.bytes_per_s;
            for (LinkId l : ups) {
                const double share = cluster.links()[l].bandwidth.bytes_per_s / total;
                const LinkId back = cluster.links()[l].reverse;
                b.link_flow(p, l, (nd + 1) / nd * share, nvls_virtual_link(cluster, l));
                b.link_flow(p, back, (nd + 1) / nd * share, nvls_virtual_link(cluster, back));
            }
        }
    };
    return e;
}

AlgorithmEntry pairwise_algorithm() {
    AlgorithmEntry e;
    e.name = "pairwise";
    e.operations = {CollectiveKind::AllToAll};
    e.description = "n-1 steps; in step k rank i sends its chunk for rank i+k";
    e.decompose = [](PlanBuilder& b, CollectiveKind, const std::vector<int>& ranks) {
        const std::size_t n = ranks.size();
        for (std::size_t k = 1; k < n; ++k) {
            Phase& p = b.phase(1);
            for (std::size_t i = 0; i < n; ++i)
                b.flow(p, ranks[i], ranks[(i + k) % n], 1.0 / static_cast<double>(n));
        }
    };
    return e;
}

AlgorithmEntry direct_algorithm() {
    AlgorithmEntry e;
    e.name = "direct";
    e.operations = {CollectiveKind::AllToAll, CollectiveKind::SendRecv};
    e.description = "every message at once; sendrecv: each rank to the next";
    e.decompose = [](PlanBuilder& b, CollectiveKind kind, const std::vector<int>& ranks) {
        const std::size_t n = ranks.size();
        Phase& p = b.phase(1);
        if (kind == CollectiveKind::SendRecv) {
            // nccl-tests' sendrecv: every rank sends its buffer to the next and receives from
            // the previous one.
            for (std::size_t i = 0; i < n; ++i)
                b.flow(p, ranks[i], ranks[(i + 1) % n], 1.0);
            return;
        }
        for (std::size_t i = 0; i < n; ++i)
            for (std::size_t k = 1; k < n; ++k)
                b.flow(p, ranks[i], ranks[(i + k) % n], 1.0 / static_cast<double>(n));
    };
    return e;
}

}  // namespace detail

const AlgorithmRegistry& AlgorithmRegistry::builtin() {
    static const AlgorithmRegistry registry = [] {
        AlgorithmRegistry r;
#define CS_ALGORITHM(factory) r.add(detail::factory());
#include "network/builtin_algorithms.def"
#undef CS_ALGORITHM
        // Algorithm::Ring ... Algorithm::Direct name the first rows.
        const std::pair<Algorithm, const char*> fixed[] = {
            {Algorithm::Ring, "ring"},
            {Algorithm::Tree, "tree"},
            {Algorithm::Hierarchical, "hierarchical"},
            {Algorithm::Nvls, "nvls"},
            {Algorithm::Pairwise, "pairwise"},
            {Algorithm::Direct, "direct"}};
        for (const auto& [id, name] : fixed)
            if (r.name(id) != name)
                throw std::logic_error(
                    "builtin_algorithms.def must list ring, tree, "
                    "hierarchical, nvls, pairwise and direct first, in order");
        return r;
    }();
    return registry;
}

Algorithm AlgorithmRegistry::add(AlgorithmEntry entry) {
    if (entry.name.empty()) throw std::invalid_argument("a collective algorithm needs a name");
    if (find(entry.name))
        throw std::invalid_argument("collective algorithm '" + entry.name +
                                    "' is already registered");
    if (entry.operations.empty())
        throw std::invalid_argument("collective algorithm '" + entry.name + "' names no operation");
    if (!entry.decompose)
        throw std::invalid_argument("collective algorithm '" + entry.name +
                                    "' has no decomposition");
    if (entries_.size() + 1 > 0xffff) throw std::invalid_argument("too many collective algorithms");
    entries_.push_back(std::move(entry));
    return Algorithm{static_cast<std::uint16_t>(entries_.size())};
}

std::optional<Algorithm> AlgorithmRegistry::find(std::string_view name) const {
    if (name == "auto") return Algorithm::Auto;
    for (std::size_t i = 0; i < entries_.size(); ++i)
        if (entries_[i].name == name) return Algorithm{static_cast<std::uint16_t>(i + 1)};
    return std::nullopt;
}

const AlgorithmEntry& AlgorithmRegistry::entry(Algorithm algorithm) const {
    if (algorithm.id == 0 || algorithm.id > entries_.size())
        throw std::out_of_range("no collective algorithm with id " + std::to_string(algorithm.id));
    return entries_[algorithm.id - 1u];
}

std::string AlgorithmRegistry::name(Algorithm algorithm) const {
    return algorithm == Algorithm::Auto ? "auto" : entry(algorithm).name;
}

std::vector<std::string> AlgorithmRegistry::names() const {
    std::vector<std::string> out{"auto"};
    for (const AlgorithmEntry& e : entries_)
        out.push_back(e.name);
    return out;
}

std::string algorithm_name(Algorithm a) {
    return AlgorithmRegistry::builtin().name(a);
}

Algorithm parse_algorithm(std::string_view name, const SourceLocation& where,
                          const AlgorithmRegistry& registry) {
    if (auto a = registry.find(name)) return *a;
    throw ConfigError(where, "unknown algorithm \"" + std::string(name) + "\"; expected " +
                                 join_names(registry.names()));
}

Algorithm resolve_algorithm(const Cluster& cluster, CollectiveKind kind,
                            const std::vector<int>& ranks, Bytes size, Algorithm algo,
                            const AlgorithmRegistry& registry) {
    if (algo == Algorithm::Auto) {
        const auto nodes = ranks_by_node(cluster, ranks);
        const auto fits = [&](Algorithm a) {
            return unsuitable(registry.entry(a), cluster, kind, ranks).empty();
        };
        switch (kind) {
            case CollectiveKind::AllToAll:
                return Algorithm::Pairwise;
            case CollectiveKind::SendRecv:
                return Algorithm::Direct;
            case CollectiveKind::AllReduce:
                break;
            default:
                return Algorithm::Ring;
        }
        if (nodes.size() == 1)
            return ranks.size() > 4 && fits(Algorithm::Nvls) ? Algorithm::Nvls : Algorithm::Ring;
        constexpr std::int64_t kTreeBelow = std::int64_t{64} << 20;
        return size.value < kTreeBelow && fits(Algorithm::Tree) ? Algorithm::Tree : Algorithm::Ring;
    }
    const AlgorithmEntry& chosen = registry.entry(algo);
    const std::string why = unsuitable(chosen, cluster, kind, ranks);
    if (why.empty()) return algo;
    std::vector<std::string> valid;
    for (const AlgorithmEntry& e : registry.entries())
        if (unsuitable(e, cluster, kind, ranks).empty()) valid.push_back(e.name);
    throw ConfigError("algorithm '" + chosen.name + "' does not apply to " + collective_name(kind) +
                      " on these " + std::to_string(ranks.size()) + " ranks (" + why + "); use " +
                      (valid.empty() ? std::string("auto") : join_names(valid)));
}

Algorithm choose_algorithm(const Cluster& cluster, CollectiveKind kind,
                           const std::vector<int>& ranks, Bytes size,
                           const AlgorithmRegistry& registry) {
    return resolve_algorithm(cluster, kind, ranks, size, Algorithm::Auto, registry);
}

Plan build_plan(const Cluster& cluster, CollectiveKind kind, Algorithm algo,
                const std::vector<int>& ranks, std::uint64_t salt,
                const AlgorithmRegistry& registry) {
    const AlgorithmEntry& entry = registry.entry(algo);
    PlanBuilder b(cluster, salt);
    b.plan.algorithm = algo;
    if (ranks.size() < 2) return b.plan;
    entry.decompose(b, kind, ranks);
    return b.plan;
}

}  // namespace cs::network
