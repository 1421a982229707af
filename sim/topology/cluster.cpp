#include "topology/cluster.hpp"

#include <algorithm>
#include <deque>
#include <limits>

#include "core/errors.hpp"

namespace cs::topology {

const char* device_kind_name(DeviceKind k) {
    switch (k) {
        case DeviceKind::Gpu:
            return "gpu";
        case DeviceKind::NvSwitch:
            return "nvswitch";
        case DeviceKind::Nic:
            return "nic";
        case DeviceKind::PcieSwitch:
            return "pcie_switch";
        case DeviceKind::Switch:
            return "switch";
    }
    return "?";
}

const char* link_kind_name(LinkKind k) {
    switch (k) {
        case LinkKind::NvLink:
            return "nvlink";
        case LinkKind::NvSwitch:
            return "nvswitch";
        case LinkKind::Pcie:
            return "pcie";
        case LinkKind::InfiniBand:
            return "infiniband";
        case LinkKind::Ethernet:
            return "ethernet";
    }
    return "?";
}

DeviceIndex Cluster::find_device(const std::string& id) const {
    auto it = by_id_.find(id);
    return it == by_id_.end() ? kNone : it->second;
}

const std::vector<std::int32_t>& Cluster::hops_to(DeviceIndex dst) const {
    auto it = hops_cache_.find(dst);
    if (it != hops_cache_.end()) return it->second;
    // Reverse BFS over incoming links; GPUs other than the destination are not expanded, so no
    // path transits a GPU.
    std::vector<std::int32_t> hops(devices_.size(), -1);
    std::deque<DeviceIndex> queue{dst};
    hops[dst] = 0;
    while (!queue.empty()) {
        const DeviceIndex v = queue.front();
        queue.pop_front();
        if (v != dst && devices_[v].kind == DeviceKind::Gpu) continue;
        for (auto [e, end] = boost::in_edges(v, graph_); e != end; ++e) {
            const DeviceIndex u = static_cast<DeviceIndex>(boost::source(*e, graph_));
            if (hops[u] >= 0) continue;
            hops[u] = hops[v] + 1;
            queue.push_back(u);
        }
    }
    return hops_cache_.emplace(dst, std::move(hops)).first->second;
}

namespace {
std::uint64_t hash3(std::uint64_t a, std::uint64_t b, std::uint64_t c) {
    std::uint64_t x = a * 0x9e3779b97f4a7c15ULL ^
                      (b + 0x632be59bd9b4e019ULL) * 0xbf58476d1ce4e5b9ULL ^
                      (c + 0x94d049bb133111ebULL);
    x ^= x >> 31;
    x *= 0xd6e8feb86659fd93ULL;
    x ^= x >> 32;
    return x;
}
}  // namespace

namespace {
constexpr std::int32_t kFar = std::numeric_limits<std::int32_t>::max() / 4;

LinkId pick(const std::vector<LinkId>& candidates, int src, int dst, std::uint64_t flow_id,
            DeviceIndex at) {
    const std::uint64_t pair = static_cast<std::uint64_t>(static_cast<std::uint32_t>(src)) << 32 |
                               static_cast<std::uint32_t>(dst);
    return candidates[hash3(pair, flow_id, at) % candidates.size()];
}
}  // namespace

void Cluster::route(int src, int dst, std::uint64_t flow_id, std::vector<LinkId>& out) const {
    if (src == dst) return;
    const int a = node_of_gpu(src), b = node_of_gpu(dst);
    if (a >= 0 && a == b) {
        if (route_in_node(src, dst, flow_id, out)) return;
    } else if (two_level_ && a >= 0 && b >= 0) {
        route_two_level(src, dst, flow_id, out);
        return;
    }
    route_general(src, dst, flow_id, out);
}

void Cluster::route_general(int src, int dst, std::uint64_t flow_id,
                            std::vector<LinkId>& out) const {
    const DeviceIndex s = gpu_device(src), d = gpu_device(dst);
    const auto& hops = hops_to(d);
    if (hops[s] < 0)
        throw SimulationError("topology", "no path from GPU " + std::to_string(src) + " to GPU " +
                                              std::to_string(dst));
    DeviceIndex cur = s;
    std::vector<LinkId> candidates;
    while (cur != d) {
        candidates.clear();
        for (LinkId l : out_links_[cur]) {
            const DeviceIndex next = links_[l].to;
            if (hops[next] == hops[cur] - 1) candidates.push_back(l);
        }
        const LinkId chosen = pick(candidates, src, dst, flow_id, cur);
        out.push_back(chosen);
        cur = links_[chosen].to;
    }
}

namespace {
// Reverse BFS inside one node towards `target`: dist[local index] in hops, kFar if unreachable.
// GPUs other than the target are reached but never expanded (no path transits a GPU).
void node_bfs(const std::vector<Device>& devices, const std::vector<Link>& links,
              const std::vector<std::vector<LinkId>>& in_links,
              const std::vector<std::int32_t>& local, int node, DeviceIndex target,
              std::vector<std::int32_t>& dist, std::vector<DeviceIndex>& queue) {
    queue.clear();
    dist[static_cast<std::size_t>(local[target])] = 0;
    queue.push_back(target);
    for (std::size_t head = 0; head < queue.size(); ++head) {
        const DeviceIndex v = queue[head];
        if (v != target && devices[v].kind == DeviceKind::Gpu) continue;
        const std::int32_t dv = dist[static_cast<std::size_t>(local[v])];
        for (LinkId l : in_links[v]) {
            const DeviceIndex u = links[l].from;
            if (devices[u].node != node) continue;
            auto& du = dist[static_cast<std::size_t>(local[u])];
            if (du != kFar) continue;
            du = dv + 1;
            queue.push_back(u);
        }
    }
}
}  // namespace

bool Cluster::route_in_node(int src, int dst, std::uint64_t flow_id,
                            std::vector<LinkId>& out) const {
    const DeviceIndex s = gpu_device(src), d = gpu_device(dst);
    const int node = devices_[s].node;
    std::vector<std::int32_t> dist(node_devices_[static_cast<std::size_t>(node)].size(), kFar);
    std::vector<DeviceIndex> queue;
    node_bfs(devices_, links_, in_links_, local_index_, node, d, dist, queue);
    auto dist_of = [&](DeviceIndex v) { return dist[static_cast<std::size_t>(local_index_[v])]; };
    if (dist_of(s) == kFar) return false;
    std::vector<LinkId> candidates;
    for (DeviceIndex cur = s; cur != d;) {
        candidates.clear();
        for (LinkId l : out_links_[cur]) {
            const DeviceIndex next = links_[l].to;
            if (devices_[next].node == node && dist_of(next) == dist_of(cur) - 1 &&
                (next == d || devices_[next].kind != DeviceKind::Gpu))
                candidates.push_back(l);
        }
        const LinkId chosen = pick(candidates, src, dst, flow_id, cur);
        out.push_back(chosen);
        cur = links_[chosen].to;
    }
    return true;
}

const std::vector<std::int32_t>& Cluster::fabric_hops_to(DeviceIndex target) const {
    auto it = fabric_hops_cache_.find(target);
    if (it != fabric_hops_cache_.end()) return it->second;
    std::vector<std::int32_t> hops(fabric_devices_.size(), kFar);
    std::vector<DeviceIndex> queue{target};
    hops[static_cast<std::size_t>(local_index_[target])] = 0;
    for (std::size_t head = 0; head < queue.size(); ++head) {
        const DeviceIndex v = queue[head];
        const std::int32_t dv = hops[static_cast<std::size_t>(local_index_[v])];
        for (LinkId l : in_links_[v]) {
            const DeviceIndex u = links_[l].from;
            if (devices_[u].node >= 0) continue;
            auto& du = hops[static_cast<std::size_t>(local_index_[u])];
            if (du != kFar) continue;
            du = dv + 1;
            queue.push_back(u);
        }
    }
    return fabric_hops_cache_.emplace(target, std::move(hops)).first->second;
}

void Cluster::route_two_level(int src, int dst, std::uint64_t flow_id,
                              std::vector<LinkId>& out) const {
    const DeviceIndex s = gpu_device(src), d = gpu_device(dst);
    const int na = devices_[s].node, nb = devices_[d].node;
    const auto& devs_a = node_devices_[static_cast<std::size_t>(na)];
    // Destination side: hops inside node B to the destination GPU.
    std::vector<std::int32_t> dist_b(node_devices_[static_cast<std::size_t>(nb)].size(), kFar);
    std::vector<DeviceIndex> queue;
    node_bfs(devices_, links_, in_links_, local_index_, nb, d, dist_b, queue);
    // Fabric switches where traffic may enter node B, with the remaining hops from there.
    struct Entry {
        const std::vector<std::int32_t>* hops;
        std::int32_t cost;
    };
    std::vector<std::pair<DeviceIndex, std::int32_t>> entry_cost;
    for (LinkId l : node_entries_[static_cast<std::size_t>(nb)]) {
        const DeviceIndex f = links_[l].to;
        if (f != d && devices_[f].kind == DeviceKind::Gpu) continue;
        const std::int32_t c = dist_b[static_cast<std::size_t>(local_index_[f])];
        if (c == kFar) continue;
        entry_cost.emplace_back(links_[l].from, c + 1);
    }
    std::sort(entry_cost.begin(), entry_cost.end());
    std::vector<Entry> entries;
    for (std::size_t i = 0; i < entry_cost.size(); ++i)
        if (i == 0 || entry_cost[i].first != entry_cost[i - 1].first)
            entries.push_back({&fabric_hops_to(entry_cost[i].first), entry_cost[i].second});
    auto fabric_dist = [&](DeviceIndex v) {
        std::int32_t best = kFar;
        const auto idx = static_cast<std::size_t>(local_index_[v]);
        for (const Entry& e : entries)
            best = std::min(best, (*e.hops)[idx] + e.cost);
        return best;
    };
    // Source side: hops from each device of node A to the destination, leaving through its exits.
    // Nodes are small, so relax to a fixed point.
    std::vector<std::int32_t> dist_a(devs_a.size(), kFar);
    for (LinkId l : node_exits_[static_cast<std::size_t>(na)]) {
        const DeviceIndex u = links_[l].from;
        auto& du = dist_a[static_cast<std::size_t>(local_index_[u])];
        du = std::min(du, fabric_dist(links_[l].to) + 1);
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (DeviceIndex v : devs_a) {
            if (v != s && devices_[v].kind == DeviceKind::Gpu) continue;
            auto& dv = dist_a[static_cast<std::size_t>(local_index_[v])];
            for (LinkId l : out_links_[v]) {
                const DeviceIndex w = links_[l].to;
                if (devices_[w].node != na || devices_[w].kind == DeviceKind::Gpu) continue;
                const std::int32_t via = dist_a[static_cast<std::size_t>(local_index_[w])] + 1;
                if (via < dv) {
                    dv = via;
                    changed = true;
                }
            }
        }
    }
    auto dist_of = [&](DeviceIndex v) -> std::int32_t {
        const int n = devices_[v].node;
        if (n < 0) return fabric_dist(v);
        if (v != s && v != d && devices_[v].kind == DeviceKind::Gpu) return kFar;
        if (n == na) return dist_a[static_cast<std::size_t>(local_index_[v])];
        if (n == nb) return dist_b[static_cast<std::size_t>(local_index_[v])];
        return kFar;
    };
    std::int32_t remaining = dist_of(s);
    if (remaining >= kFar)
        throw SimulationError("topology", "no path from GPU " + std::to_string(src) + " to GPU " +
                                              std::to_string(dst));
    std::vector<LinkId> candidates;
    for (DeviceIndex cur = s; cur != d; --remaining) {
        candidates.clear();
        for (LinkId l : out_links_[cur])
            if (dist_of(links_[l].to) == remaining - 1) candidates.push_back(l);
        const LinkId chosen = pick(candidates, src, dst, flow_id, cur);
        out.push_back(chosen);
        cur = links_[chosen].to;
    }
}

Time Cluster::route_latency(const std::vector<LinkId>& route) const {
    Time t = Time::zero();
    for (LinkId l : route)
        t += links_[l].latency;
    return t;
}

Bandwidth Cluster::route_bandwidth(const std::vector<LinkId>& route) const {
    if (route.empty()) return Bandwidth{0};
    double bw = links_[route.front()].bandwidth.bytes_per_s;
    for (LinkId l : route)
        bw = std::min(bw, links_[l].bandwidth.bytes_per_s);
    return Bandwidth{bw};
}

int ClusterBuilder::add_gpu_model(const GpuModel& model) {
    for (std::size_t i = 0; i < c_.models_.size(); ++i)
        if (c_.models_[i].name == model.name) return static_cast<int>(i);
    c_.models_.push_back(model);
    return static_cast<int>(c_.models_.size() - 1);
}

DeviceIndex ClusterBuilder::add_device(Device device) {
    const auto idx = static_cast<DeviceIndex>(c_.devices_.size());
    c_.by_id_.emplace(device.id, idx);
    if (device.kind == DeviceKind::Gpu) {
        device.gpu = static_cast<std::int32_t>(c_.gpu_devices_.size());
        c_.gpu_devices_.push_back(idx);
    }
    if (device.node >= c_.node_count_) c_.node_count_ = device.node + 1;
    c_.devices_.push_back(std::move(device));
    return idx;
}

LinkId ClusterBuilder::add_link(DeviceIndex from, DeviceIndex to, LinkKind kind, Bandwidth per_link,
                                Time latency, int count) {
    const auto id = static_cast<LinkId>(c_.links_.size());
    const bool inter = c_.devices_[from].node != c_.devices_[to].node ||
                       c_.devices_[from].node < 0 || c_.devices_[to].node < 0;
    const Bandwidth total{per_link.bytes_per_s * count};
    Link fwd{from,   to,      kind,
             total,  latency, count,
             id + 1, inter,   c_.devices_[from].id + "->" + c_.devices_[to].id};
    Link rev{to,    from,    kind,
             total, latency, count,
             id,    inter,   c_.devices_[to].id + "->" + c_.devices_[from].id};
    c_.links_.push_back(std::move(fwd));
    c_.links_.push_back(std::move(rev));
    return id;
}

Cluster ClusterBuilder::build() {
    Cluster c = std::move(c_);
    c_ = Cluster{};
    c.graph_ = Graph(c.devices_.size());
    c.out_links_.assign(c.devices_.size(), {});
    c.in_links_.assign(c.devices_.size(), {});
    for (std::size_t v = 0; v < c.devices_.size(); ++v)
        c.graph_[v].device = static_cast<DeviceIndex>(v);
    for (std::size_t l = 0; l < c.links_.size(); ++l) {
        boost::add_edge(c.links_[l].from, c.links_[l].to, EdgeProps{static_cast<LinkId>(l)},
                        c.graph_);
        c.out_links_[c.links_[l].from].push_back(static_cast<LinkId>(l));
        c.in_links_[c.links_[l].to].push_back(static_cast<LinkId>(l));
    }
    c.index_structure();
    return c;
}

}  // namespace cs::topology

namespace cs::topology {

void Cluster::index_structure() {
    node_devices_.assign(static_cast<std::size_t>(node_count_), {});
    local_index_.assign(devices_.size(), -1);
    fabric_devices_.clear();
    for (std::size_t v = 0; v < devices_.size(); ++v) {
        const int n = devices_[v].node;
        auto& group = n < 0 ? fabric_devices_ : node_devices_[static_cast<std::size_t>(n)];
        local_index_[v] = static_cast<std::int32_t>(group.size());
        group.push_back(static_cast<DeviceIndex>(v));
    }
    node_entries_.assign(static_cast<std::size_t>(node_count_), {});
    node_exits_.assign(static_cast<std::size_t>(node_count_), {});
    two_level_ = true;
    for (std::size_t l = 0; l < links_.size(); ++l) {
        const int from = devices_[links_[l].from].node, to = devices_[links_[l].to].node;
        if (from == to) continue;
        if (from >= 0 && to >= 0) two_level_ = false;  // a direct cable between two nodes
        if (from < 0) node_entries_[static_cast<std::size_t>(to)].push_back(static_cast<LinkId>(l));
        if (to < 0) node_exits_[static_cast<std::size_t>(from)].push_back(static_cast<LinkId>(l));
    }
}

}  // namespace cs::topology
