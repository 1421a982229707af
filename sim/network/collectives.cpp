#include "network/collectives.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <string>

#include "core/errors.hpp"

namespace cs::network {

using topology::Cluster;
using topology::DeviceKind;
using topology::LinkId;

std::vector<LinkId> switch_uplinks(const Cluster& cluster, int gpu) {
    std::vector<LinkId> out;
    const auto dev = cluster.gpu_device(gpu);
    const auto& g = cluster.graph();
    for (auto [e, end] = boost::out_edges(dev, g); e != end; ++e) {
        const LinkId l = g[*e].link;
        if (cluster.devices()[cluster.links()[l].to].kind == DeviceKind::NvSwitch) out.push_back(l);
    }
    std::sort(out.begin(), out.end());
    return out;
}

namespace {

std::uint64_t mix(std::uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

// Ranks of the group per node, in group order; nodes in order of first appearance.
std::vector<std::vector<int>> ranks_by_node(const Cluster& cluster, const std::vector<int>& ranks) {
    std::vector<std::vector<int>> out;
    std::map<int, std::size_t> index;
    for (int r : ranks) {
        const int node = cluster.node_of_gpu(r);
        auto [it, fresh] = index.emplace(node, out.size());
        if (fresh) out.emplace_back();
        out[it->second].push_back(r);
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
        if (cluster.node_of_gpu(r) != node || switch_uplinks(cluster, r).empty()) return false;
    return true;
}

class Builder {
  public:
    Builder(const Cluster& cluster, std::uint64_t salt) : cluster_(cluster), salt_(salt) {}

    Phase& phase(int steps) {
        plan.phases.emplace_back();
        plan.phases.back().steps = steps;
        return plan.phases.back();
    }
    void flow(Phase& p, int src, int dst, double bytes_per_size) {
        if (src == dst || bytes_per_size <= 0) return;
        FlowTemplate t;
        cluster_.route(src, dst, mix(salt_ ^ mix(++counter_)), t.path);
        add(p, std::move(t), bytes_per_size);
    }
    // A flow over one link; `cap`, when given, is a virtual link (no latency) the flow also
    // passes through.
    void link_flow(Phase& p, LinkId link, double bytes_per_size,
                   std::optional<LinkId> cap = std::nullopt) {
        FlowTemplate t;
        t.path.push_back(link);
        add(p, std::move(t), bytes_per_size);
        if (cap) p.flows.back().path.push_back(*cap);
    }
    // Every edge of a ring over `ring` carries `per_edge` bytes per byte of size.
    void ring(Phase& p, const std::vector<int>& ring, double per_edge) {
        const std::size_t n = ring.size();
        if (n < 2) return;
        for (std::size_t i = 0; i < n; ++i)
            flow(p, ring[i], ring[(i + 1) % n], per_edge);
    }

    Plan plan;

  private:
    void add(Phase& p, FlowTemplate t, double bytes_per_size) {
        t.bytes_per_size = bytes_per_size;
        p.latency = std::max(p.latency, cluster_.route_latency(t.path));
        p.flows.push_back(std::move(t));
    }
    const Cluster& cluster_;
    std::uint64_t salt_;
    std::uint64_t counter_ = 0;
};

int ceil_log2(std::size_t m) {
    int d = 0;
    while ((std::size_t{1} << d) < m)
        ++d;
    return d;
}

// Intra-node ring reduce-scatter / all-gather of the whole buffer on every node at once.
void intra_ring(Builder& b, const std::vector<std::vector<int>>& nodes) {
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
void multi_ring(Builder& b, Phase& p, const Cluster& cluster, const std::vector<int>& ranks,
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

}  // namespace

Algorithm resolve_algorithm(const Cluster& cluster, CollectiveKind kind,
                            const std::vector<int>& ranks, Bytes size, Algorithm algo) {
    const auto nodes = ranks_by_node(cluster, ranks);
    const bool multi_node = nodes.size() > 1;
    std::vector<Algorithm> valid;
    Algorithm fallback = Algorithm::Ring;
    switch (kind) {
        case CollectiveKind::AllReduce:
            valid.push_back(Algorithm::Ring);
            if (multi_node && uniform_nodes(nodes)) valid.push_back(Algorithm::Tree);
            if (uniform_nodes(nodes)) valid.push_back(Algorithm::Hierarchical);
            if (nvls_applies(cluster, ranks)) valid.push_back(Algorithm::Nvls);
            break;
        case CollectiveKind::AllGather:
        case CollectiveKind::ReduceScatter:
        case CollectiveKind::Broadcast:
            valid.push_back(Algorithm::Ring);
            break;
        case CollectiveKind::AllToAll:
            valid.push_back(Algorithm::Pairwise);
            valid.push_back(Algorithm::Direct);
            fallback = Algorithm::Pairwise;
            break;
        case CollectiveKind::SendRecv:
            valid.push_back(Algorithm::Direct);
            fallback = Algorithm::Direct;
            break;
    }
    auto has = [&](Algorithm a) { return std::find(valid.begin(), valid.end(), a) != valid.end(); };
    if (algo == Algorithm::Auto) {
        if (kind != CollectiveKind::AllReduce) return fallback;
        if (!multi_node)
            return ranks.size() > 4 && has(Algorithm::Nvls) ? Algorithm::Nvls : Algorithm::Ring;
        constexpr std::int64_t kTreeBelow = std::int64_t{64} << 20;
        return size.value < kTreeBelow && has(Algorithm::Tree) ? Algorithm::Tree : Algorithm::Ring;
    }
    if (has(algo)) return algo;
    std::string names;
    for (std::size_t i = 0; i < valid.size(); ++i)
        names += (i == 0 ? "" : (i + 1 == valid.size() ? " or " : ", ")) +
                 std::string(algorithm_name(valid[i]));
    std::string why;
    if (algo == Algorithm::Nvls) why = " (nvls needs a single node whose GPUs link to NVSwitches)";
    if (algo == Algorithm::Tree || algo == Algorithm::Hierarchical)
        why =
            " (tree and hierarchical need the same number of ranks on every node; tree needs "
            "several nodes)";
    throw ConfigError("algorithm '" + std::string(algorithm_name(algo)) + "' does not apply to " +
                      collective_name(kind) + " on these " + std::to_string(ranks.size()) +
                      " ranks" + why + "; use " + names);
}

Plan build_plan(const Cluster& cluster, CollectiveKind kind, Algorithm algo,
                const std::vector<int>& ranks, std::uint64_t salt) {
    Builder b(cluster, salt);
    b.plan.algorithm = algo;
    const std::size_t n = ranks.size();
    if (n < 2) return b.plan;
    const double nd = static_cast<double>(n);
    switch (kind) {
        case CollectiveKind::AllReduce:
            if (algo == Algorithm::Ring) {
                Phase& p = b.phase(2 * static_cast<int>(n - 1));
                multi_ring(b, p, cluster, ranks, 2 * (nd - 1) / nd);
            } else if (algo == Algorithm::Nvls) {
                // Reduce-scatter with multimem loads (the switch reads every GPU's whole buffer
                // and returns each GPU its reduced S/n) then all-gather with multimem stores
                // (each GPU writes its S/n, the switch multicasts it): every GPU sends and
                // receives S + S/n, spread over its NVSwitch ports by capacity.
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
                        b.link_flow(p, back, (nd + 1) / nd * share,
                                    nvls_virtual_link(cluster, back));
                    }
                }
            } else {
                const auto nodes = ranks_by_node(cluster, ranks);
                const std::size_t local = nodes.front().size();
                const std::size_t m = nodes.size();
                const double md = static_cast<double>(m);
                const double per_rail = 1.0 / static_cast<double>(local);
                intra_ring(b, nodes);
                if (m > 1) {
                    if (algo == Algorithm::Hierarchical) {
                        Phase& p = b.phase(2 * static_cast<int>(m - 1));
                        for (std::size_t l = 0; l < local; ++l) {
                            std::vector<int> rail;
                            for (const auto& node : nodes)
                                rail.push_back(node[l]);
                            b.ring(p, rail, 2 * (md - 1) / md * per_rail);
                        }
                    } else {
                        // Double binary tree per rail: two trees, each carrying half of the
                        // rail's data up (reduce) and down (broadcast); a node that is interior
                        // in one tree is a leaf in the other.
                        Phase& p = b.phase(2 * std::max(1, ceil_log2(m)));
                        for (std::size_t l = 0; l < local; ++l) {
                            for (int tree = 0; tree < 2; ++tree) {
                                auto at = [&](std::size_t pos) {
                                    return nodes[tree == 0 ? pos : m - 1 - pos][l];
                                };
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
            break;
        case CollectiveKind::AllGather:
        case CollectiveKind::ReduceScatter: {
            Phase& p = b.phase(static_cast<int>(n - 1));
            multi_ring(b, p, cluster, ranks, (nd - 1) / nd);
            break;
        }
        case CollectiveKind::Broadcast: {
            // A pipelined chain from the first rank: every edge carries the whole buffer.
            Phase& p = b.phase(static_cast<int>(n - 1));
            for (std::size_t i = 0; i + 1 < n; ++i)
                b.flow(p, ranks[i], ranks[i + 1], 1.0);
            break;
        }
        case CollectiveKind::AllToAll:
            if (algo == Algorithm::Pairwise) {
                // Step k: rank i sends its chunk for rank i+k and receives from rank i-k.
                for (std::size_t k = 1; k < n; ++k) {
                    Phase& p = b.phase(1);
                    for (std::size_t i = 0; i < n; ++i)
                        b.flow(p, ranks[i], ranks[(i + k) % n], 1.0 / nd);
                }
            } else {
                Phase& p = b.phase(1);
                for (std::size_t i = 0; i < n; ++i)
                    for (std::size_t k = 1; k < n; ++k)
                        b.flow(p, ranks[i], ranks[(i + k) % n], 1.0 / nd);
            }
            break;
        case CollectiveKind::SendRecv: {
            // nccl-tests' sendrecv: every rank sends its buffer to the next and receives from the
            // previous one.
            Phase& p = b.phase(1);
            for (std::size_t i = 0; i < n; ++i)
                b.flow(p, ranks[i], ranks[(i + 1) % n], 1.0);
            break;
        }
    }
    return b.plan;
}

}  // namespace cs::network
