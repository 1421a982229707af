#include "topology/cluster.hpp"

#include <algorithm>
#include <deque>

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

void Cluster::route(int src, int dst, std::uint64_t flow_id, std::vector<LinkId>& out) const {
    if (src == dst) return;
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
        const LinkId pick = candidates[hash3(static_cast<std::uint64_t>(src) << 32 |
                                                 static_cast<std::uint32_t>(dst),
                                             flow_id, cur) %
                                       candidates.size()];
        out.push_back(pick);
        cur = links_[pick].to;
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
    for (std::size_t v = 0; v < c.devices_.size(); ++v)
        c.graph_[v].device = static_cast<DeviceIndex>(v);
    for (std::size_t l = 0; l < c.links_.size(); ++l) {
        boost::add_edge(c.links_[l].from, c.links_[l].to, EdgeProps{static_cast<LinkId>(l)},
                        c.graph_);
        c.out_links_[c.links_[l].from].push_back(static_cast<LinkId>(l));
    }
    return c;
}

}  // namespace cs::topology
