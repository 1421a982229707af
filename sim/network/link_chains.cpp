#include "network/link_chains.hpp"

#include <algorithm>

namespace cs::network::detail {

using topology::LinkId;

LinkChains find_link_chains(const topology::Cluster& cluster, const double* capacity) {
    const auto& links = cluster.links();
    const auto& devices = cluster.devices();
    const std::size_t n = links.size();
    // Per device: its in- and out-links while there are at most two of each.
    constexpr LinkId kNoLink = ~LinkId{0};
    struct Ends {
        LinkId in[2] = {kNoLink, kNoLink}, out[2] = {kNoLink, kNoLink};
        int ins = 0, outs = 0;
    };
    std::vector<Ends> ends(devices.size());
    for (LinkId l = 0; l < n; ++l) {
        Ends& from = ends[links[l].from];
        if (from.outs < 2) from.out[from.outs] = l;
        ++from.outs;
        Ends& to = ends[links[l].to];
        if (to.ins < 2) to.in[to.ins] = l;
        ++to.ins;
    }
    // Union-find over the links; a chain pair (in from u, out to w != u) joins two.
    std::vector<LinkId> parent(n);
    for (LinkId l = 0; l < n; ++l)
        parent[l] = l;
    const auto root = [&](LinkId l) {
        while (parent[l] != l)
            l = parent[l] = parent[parent[l]];
        return l;
    };
    bool any = false;
    for (std::size_t v = 0; v < devices.size(); ++v) {
        const Ends& e = ends[v];
        if (devices[v].gpu >= 0 || e.ins != 2 || e.outs != 2) continue;
        const auto far = [&](LinkId out) { return links[out].to; };
        const auto near = [&](LinkId in) { return links[in].from; };
        if (far(e.out[0]) == far(e.out[1]) || near(e.in[0]) == near(e.in[1])) continue;
        for (LinkId in : e.in)
            for (LinkId out : e.out)
                if (far(out) != near(in)) {
                    const LinkId a = root(in), b = root(out);
                    if (a != b) parent[std::max(a, b)] = std::min(a, b);
                    any = true;
                }
    }
    if (!any) return {};
    LinkChains chains;
    // Each group's solver link: its least capacity, ties to the lowest id; the others point
    // to it. twin: the group as a circular list (itself when alone).
    chains.chain_of.assign(n, kNoLink);
    chains.twin.assign(n, kNoLink);
    std::vector<LinkId> last(n, kNoLink);
    for (LinkId l = 0; l < n; ++l) {
        const LinkId r = root(l);
        const LinkId best = chains.chain_of[r];
        if (best == kNoLink || capacity[l] < capacity[best]) chains.chain_of[r] = l;
        // Link into the circular list of r's group, in increasing order.
        if (last[r] == kNoLink) {
            chains.twin[l] = l;
        } else {
            chains.twin[l] = chains.twin[last[r]];
            chains.twin[last[r]] = l;
        }
        last[r] = l;
    }
    for (LinkId l = 0; l < n; ++l)
        chains.chain_of[l] = chains.chain_of[root(l)];
    std::vector<std::size_t> size(n, 0);
    for (LinkId l = 0; l < n; ++l)
        chains.longest = std::max(chains.longest, ++size[root(l)]);
    return chains;
}

}  // namespace cs::network::detail
