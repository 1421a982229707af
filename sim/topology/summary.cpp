#include "topology/summary.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

namespace cs::topology {

namespace {

bool is_intra_kind(LinkKind k) {
    return k == LinkKind::NvLink || k == LinkKind::NvSwitch || k == LinkKind::Pcie;
}

Bandwidth times(Bandwidth b, double n) {
    return Bandwidth{b.bytes_per_s * n};
}

std::optional<Bandwidth> structural_bisection(const GeneratedShape& s, int total_nodes) {
    if (total_nodes != s.nodes || s.first_node != 0) return std::nullopt;  // mixed forms
    if (s.nodes == 1) {
        const int g = s.gpus_per_node;
        if (!s.intra) return std::nullopt;
        switch (*s.intra) {
            case IntraKind::NvSwitch:
                return times(s.intra_bandwidth, g / 2);
            case IntraKind::NvLinkMesh:
                return times(s.intra_bandwidth, (g / 2) * ((g + 1) / 2));
            case IntraKind::Pcie:
                return times(s.intra_bandwidth, s.pcie_switches > 1 ? s.pcie_switches / 2 : g / 2);
        }
        return std::nullopt;
    }
    if (!s.fabric) return std::nullopt;
    // Half of the NIC capacity, and half of the up-link capacity of every tier the cut crosses.
    Bandwidth best = times(s.nic_bandwidth, 0.5 * s.nodes * s.nics_per_node);
    if (s.leaf_groups >= 2 && s.leaf_up > 0)
        best = std::min(best, times(s.leaf_up_bandwidth, 0.5 * s.leaves * s.leaf_up));
    if (s.pods >= 2 && s.spine_up > 0)
        best = std::min(best,
                        times(s.spine_up_bandwidth, 0.5 * s.pods * s.spines_per_pod * s.spine_up));
    return best;
}

int diameter(const Cluster& c) {
    const int n = c.gpu_count();
    // Route lengths are shortest-path lengths (the same for every flow id); route_lengths()
    // finds them for one source and many destinations with one search of the fabric.
    std::vector<int> lengths;
    int longest = 0;
    auto visit = [&](int a, const std::vector<int>& targets) {
        c.route_lengths(a, targets, lengths);
        for (int len : lengths)
            longest = std::max(longest, len);
    };
    if (n <= 128) {
        std::vector<int> all(static_cast<std::size_t>(n));
        for (int b = 0; b < n; ++b)
            all[static_cast<std::size_t>(b)] = b;
        for (int a = 0; a < n; ++a)
            visit(a, all);
        return longest;
    }
    // Sources: the GPUs of the first GPU's node. Destinations: every GPU of the next node and of
    // the last node, and GPU (k mod per-node) of every other node.
    std::vector<int> sources, targets;
    const int first_node = c.node_of_gpu(0);
    const int last_node = c.node_of_gpu(n - 1);
    for (int g = 0; g < n && c.node_of_gpu(g) == first_node; ++g)
        sources.push_back(g);
    const int per_node = static_cast<int>(sources.size());
    int second_node = -1;
    int local = 0;
    for (int g = 0; g < n; ++g) {
        const int node = c.node_of_gpu(g);
        local = (g > 0 && node == c.node_of_gpu(g - 1)) ? local + 1 : 0;
        if (node != first_node && second_node < 0) second_node = node;
        if (node == first_node || node == second_node || node == last_node ||
            local == (node < 0 ? 0 : node % per_node))
            targets.push_back(g);
    }
    // A node of thousands of GPUs (a hand-written NVSwitch star, an NVLink mesh) would search
    // from each of them to each of them (4,096 took minutes): 64 of them, evenly spaced, the
    // first and last included, on both ends.
    constexpr std::size_t kMost = 64;
    const auto spaced = [](const std::vector<int>& all) {
        if (all.size() <= kMost) return all;
        std::vector<int> some;
        for (std::size_t k = 0; k < kMost; ++k)
            some.push_back(all[k * (all.size() - 1) / (kMost - 1)]);
        return some;
    };
    if (sources.size() > kMost) {
        std::vector<int> others;
        for (int g : targets)
            if (c.node_of_gpu(g) != first_node) others.push_back(g);
        targets = spaced(sources);
        targets.insert(targets.end(), others.begin(), others.end());
        sources = spaced(sources);
    }
    for (int a : sources)
        visit(a, targets);
    return longest;
}

}  // namespace

TopologySummary summarize(const Cluster& c) {
    TopologySummary s;
    s.gpus = c.gpu_count();
    s.nodes = c.node_count();
    const auto& devs = c.devices();
    for (const auto& d : devs) {
        // A switch that stands for its tier's parallel switches (routing: adaptive) counts as
        // them, and so do its links: the report describes the physical cluster.
        s.devices_by_kind[device_kind_name(d.kind)] += d.stands_for;
        if (d.kind == DeviceKind::Switch) s.switches_by_tier[d.tier] += d.stands_for;
    }
    std::vector<double> intra(static_cast<std::size_t>(s.gpus), 0.0);
    std::vector<double> exits(static_cast<std::size_t>(std::max(s.nodes, 1)), 0.0);
    for (std::size_t i = 0; i < c.links().size(); ++i) {
        const Link& l = c.links()[i];
        if (i < l.reverse)
            s.links_by_kind[link_kind_name(l.kind)] +=
                devs[l.from].stands_for > 1 || devs[l.to].stands_for > 1 ? l.count : 1;
        const Device& from = devs[l.from];
        const Device& to = devs[l.to];
        if (from.kind == DeviceKind::Gpu && to.kind != DeviceKind::Nic && from.node == to.node &&
            is_intra_kind(l.kind))
            intra[static_cast<std::size_t>(from.gpu)] += l.bandwidth.bytes_per_s;
        if (from.node >= 0 && to.node != from.node)
            exits[static_cast<std::size_t>(from.node)] += l.bandwidth.bytes_per_s;
    }
    if (s.gpus > 0)
        s.intra_node_bandwidth_per_gpu = Bandwidth{*std::min_element(intra.begin(), intra.end())};
    if (s.nodes > 1) {
        std::vector<int> gpus_in_node(static_cast<std::size_t>(s.nodes), 0);
        for (int g = 0; g < s.gpus; ++g)
            if (c.node_of_gpu(g) >= 0) ++gpus_in_node[static_cast<std::size_t>(c.node_of_gpu(g))];
        double best = std::numeric_limits<double>::infinity();
        for (int n = 0; n < s.nodes; ++n)
            if (gpus_in_node[static_cast<std::size_t>(n)] > 0)
                best = std::min(best, exits[static_cast<std::size_t>(n)] /
                                          gpus_in_node[static_cast<std::size_t>(n)]);
        s.inter_node_bandwidth_per_gpu = Bandwidth{std::isinf(best) ? 0.0 : best};
    }
    if (const auto& shape = c.generated_shape()) {
        s.fabric = shape->fabric ? std::string(name_of(kFabricNames, *shape->fabric)) : "none";
        s.bisection_bandwidth = structural_bisection(*shape, s.nodes);
    }
    s.diameter_hops = diameter(c);
    s.routing = std::string(name_of(kRoutingNames, c.routing()));
    return s;
}

std::string to_dot(const Cluster& c) {
    std::ostringstream out;
    out << "graph cluster {\n  node [fontsize=10];\n";
    const auto& devs = c.devices();
    for (std::size_t v = 0; v < devs.size(); ++v) {
        const Device& d = devs[v];
        const char* shape = d.kind == DeviceKind::Gpu   ? "box"
                            : d.kind == DeviceKind::Nic ? "ellipse"
                                                        : "diamond";
        out << "  d" << v << " [label=\"" << d.id << "\", shape=" << shape << "];\n";
    }
    for (std::size_t i = 0; i < c.links().size(); ++i) {
        const Link& l = c.links()[i];
        if (i > l.reverse) continue;
        out << "  d" << l.from << " -- d" << l.to << " [label=\"" << link_kind_name(l.kind) << " "
            << format_bandwidth(l.bandwidth) << "\"];\n";
    }
    out << "}\n";
    return out.str();
}

}  // namespace cs::topology
